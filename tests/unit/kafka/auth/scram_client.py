"""SCRAM's client side, for tests (raylog serves only the server's): RFC 5802's
client-first and client-final messages and the check of the server's signature."""

from __future__ import annotations

import base64
import hmac

from raylog.kafka.auth.scram import Mechanism


class ScramClient:
    def __init__(self, mechanism: Mechanism, user: str, password: str,
                 nonce: str = "fyko+d2lbbFgONRv9qkxdawL") -> None:
        self.mechanism, self.user, self.password, self.nonce = mechanism, user, password, nonce
        self._bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes, repeat_nonce: bool = False) -> bytes:
        """The client-final message; ``repeat_nonce``: with its own nonce again before the
        server's, as librdkafka 2.0 sends it."""
        fields = dict(part.split("=", 1) for part in server_first.decode().split(","))
        m = self.mechanism
        self._salted = m.salted_password(self.password, base64.b64decode(fields["s"]),
                                         int(fields["i"]))
        nonce = (self.nonce if repeat_nonce else "") + fields["r"]
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._bare},{server_first.decode()},{without_proof}".encode()
        client_key = m.hmac(self._salted, b"Client Key")
        signature = m.hmac(m.hash(client_key), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        server_key = self.mechanism.hmac(self._salted, b"Server Key")
        expected = self.mechanism.hmac(server_key, self._auth_message)
        return hmac.compare_digest(server_final, b"v=" + base64.b64encode(expected))
