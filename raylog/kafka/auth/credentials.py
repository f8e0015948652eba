"""SCRAM credentials by user and mechanism: their records in the compacted internal topic
``__raylog_users``, and the in-memory map a Kafka listener checks logins against.

One record per (mechanism, user), so adding one mechanism's credential never rewrites
another's and compaction keeps the latest of each::

    key    b"SCRAM-SHA-256:alice"     (the mechanism's SASL name, ":", the user name)
    value  {"salt": base64, "iterations": 4096, "stored_key": base64, "server_key": base64}
           as UTF-8 JSON; None (a tombstone) deletes the credential

Never the password, nor the salted password: a reader of the topic cannot log in with what
it reads (raylog/kafka/auth/scram.py). Plain Python, no I/O.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable

from raylog.errors import CorruptRecordError
from raylog.kafka.auth.scram import Credential, Mechanism

USERS_TOPIC = "__raylog_users"
# compacted: the last record per (mechanism, user) is the credential; one partition keeps
# every change in one order
USERS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
# PLAIN's password is checked against the first of these the user has
PLAIN_CHECKED_WITH = (Mechanism.SCRAM_SHA_512, Mechanism.SCRAM_SHA_256)


def record_key(user: str, mechanism: Mechanism) -> bytes:
    return f"{mechanism.sasl_name}:{user}".encode()


def encode(user: str, credential: Credential) -> tuple[bytes, bytes]:
    """The (key, value) of the record holding ``credential``."""
    value = {"salt": base64.b64encode(credential.salt).decode(),
             "iterations": credential.iterations,
             "stored_key": base64.b64encode(credential.stored_key).decode(),
             "server_key": base64.b64encode(credential.server_key).decode()}
    return record_key(user, credential.mechanism), json.dumps(value).encode()


def decode(key: bytes, value: bytes | None) -> tuple[str, Mechanism, Credential | None]:
    """(user, mechanism, credential or None for a tombstone) of a record;
    CorruptRecordError if it is not one of :func:`encode`'s."""
    try:
        name, sep, user = bytes(key).decode().partition(":")
        if not sep or not user:
            raise ValueError("no mechanism:user")
        mechanism = Mechanism.named(name)
        if value is None:
            return user, mechanism, None
        fields = json.loads(bytes(value))
        credential = Credential(mechanism, base64.b64decode(fields["salt"]),
                                int(fields["iterations"]),
                                base64.b64decode(fields["stored_key"]),
                                base64.b64decode(fields["server_key"]))
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptRecordError(f"a record of {USERS_TOPIC} that is not a credential "
                                 f"(key {bytes(key)[:64]!r}): {e}") from e
    return user, mechanism, credential


class CredentialStore:
    """The credentials of every user, by (user, mechanism): what a listener checks logins
    against. Fed with :meth:`apply` (records of ``__raylog_users`` in offset order) from one
    thread while others read: every method takes the store's lock. Watchers
    (:meth:`watch`) are told of each credential deleted, on the thread that deleted it,
    outside the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._credentials: dict[tuple[str, Mechanism], Credential] = {}
        self._watchers: list[Callable[[str, Mechanism], None]] = []

    def watch(self, deleted: Callable[[str, Mechanism], None]) -> None:
        """Call ``deleted(user, mechanism)`` after each credential that existed is deleted
        (a listener closing the connections that logged in with it)."""
        with self._lock:
            self._watchers.append(deleted)

    def unwatch(self, deleted: Callable[[str, Mechanism], None]) -> None:
        with self._lock:
            self._watchers.remove(deleted)

    def apply(self, key: bytes, value: bytes | None) -> None:
        user, mechanism, credential = decode(key, value)
        self.put(user, mechanism, credential)

    def put(self, user: str, mechanism: Mechanism, credential: Credential | None) -> None:
        """Set (or with None, delete) one credential."""
        with self._lock:
            if credential is not None:
                self._credentials[(user, mechanism)] = credential
                return
            existed = self._credentials.pop((user, mechanism), None) is not None
            watchers = list(self._watchers)
        for deleted in watchers if existed else ():
            deleted(user, mechanism)

    def get(self, user: str, mechanism: Mechanism) -> Credential | None:
        with self._lock:
            return self._credentials.get((user, mechanism))

    def users(self) -> dict[str, list[Credential]]:
        """user -> its credentials, by user name."""
        with self._lock:
            items = sorted(self._credentials.items(), key=lambda kv: (kv[0][0],
                                                                      kv[0][1].kafka_type))
        found: dict[str, list[Credential]] = {}
        for (user, _), credential in items:
            found.setdefault(user, []).append(credential)
        return found

    def check_password(self, user: str, password: str) -> bool:
        """SASL/PLAIN's check: ``password`` against the user's SCRAM-SHA-512 credential,
        else its SCRAM-SHA-256 one; False for a user without either. Costs the credential's
        PBKDF2 iterations (milliseconds): call it off the event loop."""
        for mechanism in PLAIN_CHECKED_WITH:
            credential = self.get(user, mechanism)
            if credential is not None:
                return credential.matches(password)
        return False
