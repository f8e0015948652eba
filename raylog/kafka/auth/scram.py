"""SCRAM (RFC 5802) with SHA-256 and SHA-512 (RFC 7677), the server's side, as Kafka's
SCRAM-SHA-256 and SCRAM-SHA-512 SASL mechanisms speak it. Plain Python, no I/O.

A credential is what the server keeps of a password (RFC 5802, section 3)::

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey = HMAC(SaltedPassword, "Client Key")   StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")

The server keeps salt, iterations, StoredKey and ServerKey: never the password nor
SaltedPassword, so a stolen credential does not log anyone in. The exchange::

    client-first  n,,n=<user>,r=<client nonce>
    server-first  r=<client nonce + server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=biws,r=<both nonces>,p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

with AuthMessage = client-first-bare "," server-first "," client-final-without-proof,
ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage) (the server recovers ClientKey and
checks H(ClientKey) == StoredKey) and ServerSignature = HMAC(ServerKey, AuthMessage).
Channel binding is not supported: a client asking for it ("p=") is refused, one that could
but thinks the server cannot ("y") is served as "n". An authorization id other than the
user name is refused (as Kafka does). User names are taken as sent (no SASLprep).
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable

from raylog.errors import AuthenticationError, InvalidArgumentError

# Kafka's bounds on a SCRAM credential's iterations (ScramMechanism.java)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 32  # Kafka's ScramFormatter makes salts of this many random bytes


class Mechanism(enum.Enum):
    """A SCRAM mechanism: its SASL name, hash and Kafka's type number (the ``mechanism``
    field of DescribeUserScramCredentials / AlterUserScramCredentials)."""

    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 2)

    def __init__(self, sasl_name: str, hash_name: str, kafka_type: int) -> None:
        self.sasl_name = sasl_name
        self.hash_name = hash_name
        self.kafka_type = kafka_type

    @classmethod
    def named(cls, name: str) -> Mechanism:
        """The mechanism of a SASL name (``SCRAM-SHA-256``); InvalidArgumentError if none."""
        for mechanism in cls:
            if mechanism.sasl_name == name:
                return mechanism
        raise InvalidArgumentError(f"unknown SCRAM mechanism {name!r} (known: "
                                   f"{', '.join(m.sasl_name for m in cls)})")

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)


@dataclasses.dataclass(frozen=True)
class Credential:
    """What the server keeps of one user's password for one mechanism."""

    mechanism: Mechanism
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(cls, mechanism: Mechanism, salted: bytes, salt: bytes,
                             iterations: int) -> Credential:
        """The credential of a SaltedPassword (AlterUserScramCredentials sends one)."""
        client_key = mechanism.hmac(salted, b"Client Key")
        return cls(mechanism, salt, iterations, mechanism.hash(client_key),
                   mechanism.hmac(salted, b"Server Key"))

    def matches(self, password: str) -> bool:
        """Whether ``password`` is the one this credential was made of (SASL/PLAIN's check)."""
        again = make_credential(password, self.mechanism, self.iterations, self.salt)
        return hmac.compare_digest(again.stored_key, self.stored_key)


def check_iterations(iterations: int) -> int:
    if type(iterations) is not int or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidArgumentError(f"SCRAM iterations must be an integer in "
                                   f"[{MIN_ITERATIONS}, {MAX_ITERATIONS}], got {iterations!r}")
    return iterations


def make_credential(password: str, mechanism: Mechanism,
                    iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
                    ) -> Credential:
    """A credential of ``password`` (a fresh random salt unless given)."""
    check_iterations(iterations)
    if not password:
        raise InvalidArgumentError("a SCRAM password must not be empty")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    return Credential.from_salted_password(
        mechanism, mechanism.salted_password(password, salt, iterations), salt, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _attributes(message: str) -> dict[str, str]:
    """``a=1,b=2`` -> {"a": "1", "b": "2"}; AuthenticationError if malformed."""
    found = {}
    for part in message.split(","):
        name, sep, value = part.partition("=")
        if not sep or len(name) != 1:
            raise AuthenticationError(f"malformed SCRAM message attribute {part!r}")
        found.setdefault(name, value)
    return found


def _unescape_name(name: str) -> str:
    """RFC 5802's saslname: "=2C" is ",", "=3D" is "="; any other "=" is malformed."""
    text = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationError(f"malformed SCRAM user name {name!r}")
    return text


class ScramServer:
    """One SCRAM exchange, the server's side: :meth:`first` answers the client-first
    message, :meth:`final` the client-final one. ``lookup(user)`` gives the user's
    credential for this mechanism, or None: an unknown user gets a made-up salt (the same
    for the same name, from ``secret``) and fails at the proof, as a wrong password does, so
    the exchange does not tell which names exist. Raises AuthenticationError (with what went
    wrong, for the log; the client is told less) on any bad message or proof. Not safe to
    share between connections; one exchange per object."""

    def __init__(self, mechanism: Mechanism, lookup: Callable[[str], Credential | None],
                 secret: bytes, nonce: Callable[[], str] | None = None) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._secret = secret
        self._nonce = nonce or (lambda: secrets.token_urlsafe(24))
        self.user: str | None = None
        self._credential: Credential | None = None
        self._first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self._nonce_sent = ""
        self.done = False

    def first(self, message: bytes) -> bytes:
        """The server-first message answering ``message`` (client-first)."""
        if self._server_first:
            raise AuthenticationError("a second SCRAM client-first message")
        text = _decode(message)
        flag, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep and sep2) or flag not in ("n", "y"):
            if flag.startswith("p="):
                raise AuthenticationError("SCRAM channel binding is not supported")
            raise AuthenticationError(f"malformed SCRAM client-first message {text!r}")
        attributes = _attributes(bare)
        if "m" in attributes:
            raise AuthenticationError("SCRAM mandatory extensions are not supported")
        if "n" not in attributes or not attributes.get("r"):
            raise AuthenticationError("a SCRAM client-first message without user or nonce")
        user = _unescape_name(attributes["n"])
        if authzid and _unescape_name(authzid.removeprefix("a=")) != user:
            raise AuthenticationError(f"authorization id {authzid!r} is not the user "
                                      f"{user!r}")
        self.user = user
        self._gs2_header = f"{flag},{authzid},"
        self._first_bare = bare
        self._credential = self._lookup(user)
        salt, iterations = ((self._credential.salt, self._credential.iterations)
                            if self._credential is not None else self._made_up_salt(user))
        self._nonce_sent = attributes["r"] + self._nonce()
        self._server_first = f"r={self._nonce_sent},s={_b64(salt)},i={iterations}"
        return self._server_first.encode()

    def _made_up_salt(self, user: str) -> tuple[bytes, int]:
        salt = self.mechanism.hmac(self._secret, user.encode())[:SALT_BYTES]
        return salt, DEFAULT_ITERATIONS

    def final(self, message: bytes) -> bytes:
        """The server-final message answering ``message`` (client-final), once the proof
        is right; AuthenticationError otherwise."""
        if not self._server_first or self.done:
            raise AuthenticationError("a SCRAM client-final message out of turn")
        text = _decode(message)
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise AuthenticationError("a SCRAM client-final message without a proof")
        attributes = _attributes(without_proof)
        if attributes.get("c") != _b64(self._gs2_header.encode()):
            raise AuthenticationError("SCRAM channel binding data does not match the "
                                      "client-first message")
        # Kafka checks that the nonce ends with the server's, not that it equals it:
        # librdkafka 2.0 (Debian's kcat) sends its own nonce again in front of it. The
        # server's part, fresh per exchange, is what a replay could not have.
        if not attributes.get("r", "").endswith(self._nonce_sent):
            raise AuthenticationError("the SCRAM nonce does not match the server's")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError as e:
            raise AuthenticationError("a SCRAM proof that is not base64") from e
        credential = self._credential
        if credential is None:
            raise AuthenticationError(f"unknown user {self.user!r}")
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = self.mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationError(f"invalid SCRAM proof for user {self.user!r}")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self.mechanism.hash(client_key), credential.stored_key):
            raise AuthenticationError(f"invalid SCRAM proof for user {self.user!r}")
        self.done = True
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode()


def _decode(message: bytes) -> str:
    try:
        return bytes(message).decode()
    except UnicodeDecodeError as e:
        raise AuthenticationError("a SCRAM message that is not UTF-8") from e
