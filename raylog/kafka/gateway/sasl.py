"""SaslHandshake (key 17, v0-1) and SaslAuthenticate (key 36, v0-2): logging in on a SASL
listener, with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (raylog/kafka/auth/).

A connection of a SASL listener starts unauthenticated: the listener reads nothing from it
but ApiVersions, SaslHandshake and SaslAuthenticate until it has logged in, and closes it on
any other request (as Kafka's SaslServerAuthenticator does: "Unexpected Kafka request of
type ... during SASL handshake"). The exchange, as Kafka's:

1. SaslHandshake names a mechanism. One not enabled: UNSUPPORTED_SASL_MECHANISM with the
   enabled ones, then the connection closes. v1: the tokens then come in SaslAuthenticate
   requests; v0: they come as raw frames (a length and the token, answered the same way),
   which the listener passes to :meth:`SaslSession.raw_token`.
2. The mechanism's tokens (PLAIN: one; SCRAM: client-first, then client-final), each
   answered with the server's. Once they check out, the connection's principal is
   ``User:<name>`` and every API is served.
3. A failure (a wrong password, an unknown user, a malformed message) is logged with the
   client's address and why, answered after the throttle's delay for that address with
   SASL_AUTHENTICATION_FAILED (58) and a message that does not say which part was wrong, and
   the connection closes after the answer.

On a listener without SASL both APIs answer ILLEGAL_SASL_STATE (as Kafka's KafkaApis does).
Re-authentication (KIP-368) is not offered: ``session_lifetime_ms`` is 0.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import Any

from raylog.errors import AuthenticationError
from raylog.kafka.auth import plain
from raylog.kafka.auth.credentials import PLAIN_CHECKED_WITH, CredentialStore
from raylog.kafka.auth.principal import Principal
from raylog.kafka.auth.scram import Mechanism, ScramServer
from raylog.kafka.auth.throttle import FailureThrottle
from raylog.kafka.gateway import versions
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.protocol import response_class

logger = logging.getLogger(__name__)

HANDSHAKE_KEY = 17
AUTHENTICATE_KEY = 36
# What an unauthenticated connection of a SASL listener may ask
ALLOWED_BEFORE_LOGIN = frozenset({versions.API_KEY, HANDSHAKE_KEY, AUTHENTICATE_KEY})


class Stage(enum.Enum):
    HANDSHAKE = "waiting for SaslHandshake"
    TOKENS = "waiting for the mechanism's tokens"
    DONE = "authenticated"
    FAILED = "failed"


class SaslSession:
    """One connection's login: its stage, mechanism and exchange. Created by the listener
    for each connection of a SASL listener; used from the event loop only, by one request at
    a time (a client waits for each answer before its next token)."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: CredentialStore,
                 throttle: FailureThrottle, address: str, secret: bytes) -> None:
        self.mechanisms = mechanisms
        self.credentials = credentials
        self.throttle = throttle
        self.address = address  # the client's host, which failures are throttled by
        self._secret = secret
        self.stage = Stage.HANDSHAKE
        self.mechanism: str | None = None
        self.raw = False  # SaslHandshake v0: the tokens come as raw frames
        self.principal: Principal | None = None
        self._scram: ScramServer | None = None

    def handshake(self, mechanism: str, version: int) -> int:
        """The error code answering a SaslHandshake for ``mechanism``."""
        if self.stage is not Stage.HANDSHAKE:
            self.stage = Stage.FAILED
            return Code.ILLEGAL_SASL_STATE
        if mechanism not in self.mechanisms:
            self.stage = Stage.FAILED
            return Code.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self.raw = version == 0
        self.stage = Stage.TOKENS
        if mechanism != "PLAIN":
            self._scram = ScramServer(Mechanism.named(mechanism),
                                      lambda user: self.credentials.get(user,
                                                                        Mechanism.named(mechanism)),
                                      self._secret)
        return Code.NONE

    async def token(self, token: bytes) -> bytes:
        """The server's answer to one of the client's tokens; raises AuthenticationError
        (after the throttle's delay, the failure logged) when the login fails. Sets
        :attr:`principal` once it succeeded."""
        try:
            return await self._step(bytes(token))
        except AuthenticationError as e:
            self.stage = Stage.FAILED
            delay = self.throttle.failed(self.address)
            logger.warning("Kafka SASL/%s authentication from %s failed (%s); answering in "
                           "%.2f s", self.mechanism, self.address, e, delay)
            await asyncio.sleep(delay)
            raise

    async def _step(self, token: bytes) -> bytes:
        if self.stage is not Stage.TOKENS:
            raise AuthenticationError(f"a SASL token while {self.stage.value}")
        if self._scram is None:  # PLAIN: one message, the password checked off the loop
            user, password = plain.parse(token)
            if not await asyncio.to_thread(self.credentials.check_password, user, password):
                raise AuthenticationError(f"wrong password or unknown user {user!r}")
            still = any(self.credentials.get(user, m) for m in PLAIN_CHECKED_WITH)
            return self._logged_in(user, b"", still)
        if self._scram.user is None:
            return self._scram.first(token)
        answer = self._scram.final(token)
        user = self._scram.user
        return self._logged_in(user, answer,
                               self.credentials.get(user, self._scram.mechanism) is not None)

    def _logged_in(self, user: str, answer: bytes, still_there: bool) -> bytes:
        """The login succeeds, unless the credential it was checked against was deleted
        meanwhile (``still_there`` False): the listener closes a logged-in connection on
        such a deletion (revoked_by), so one completing after it is refused. Checked and
        done with no await between, on the loop the listener's revocation runs on."""
        if not still_there:
            raise AuthenticationError(f"the credential of {user!r} was deleted during "
                                      f"the login")

        self.stage = Stage.DONE
        self.principal = Principal.user(user)
        logger.info("Kafka client %s authenticated as %s (SASL/%s)", self.address,
                    self.principal, self.mechanism)
        return answer

    def revoked_by(self, user: str, mechanism: Mechanism) -> bool:
        """Whether deleting ``user``'s ``mechanism`` credential revokes this connection's
        login: one of that user with that mechanism, or with PLAIN (checked against either
        SCRAM credential; a deletion of either closes it)."""
        return (self.stage is Stage.DONE and self.principal == Principal.user(user)
                and self.mechanism in (mechanism.sasl_name, "PLAIN"))

    def failure_message(self) -> str:
        """What a client is told of a failed login (Kafka's words, which do not say
        whether the user or the password was wrong)."""
        return (f"Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}")


async def handle_handshake(ctx: Context, version: int, request: Any) -> Any:
    session: SaslSession | None = ctx.connection.sasl
    cls = response_class(HANDSHAKE_KEY, version)
    if session is None:
        return cls(error_code=Code.ILLEGAL_SASL_STATE, mechanisms=[])
    code = session.handshake(request.mechanism, version)
    if code != Code.NONE:
        logger.info("Kafka client %s asked for SASL mechanism %r (enabled: %s): closing",
                    ctx.connection.peer, request.mechanism, ", ".join(session.mechanisms))
        ctx.connection.close_after_answer = True
    return cls(error_code=code, mechanisms=list(session.mechanisms))


async def handle_authenticate(ctx: Context, version: int, request: Any) -> Any:
    session: SaslSession | None = ctx.connection.sasl
    cls = response_class(AUTHENTICATE_KEY, version)
    if session is None or session.raw or session.stage is not Stage.TOKENS:
        ctx.connection.close_after_answer = session is not None
        return cls(error_code=Code.ILLEGAL_SASL_STATE,
                   error_message="SaslAuthenticate is not expected now", auth_bytes=b"",
                   session_lifetime_ms=0)
    try:
        answer = await session.token(request.auth_bytes)
    except AuthenticationError:
        ctx.connection.close_after_answer = True
        return cls(error_code=Code.SASL_AUTHENTICATION_FAILED,
                   error_message=session.failure_message(), auth_bytes=b"",
                   session_lifetime_ms=0)
    if session.principal is not None:
        ctx.connection.login(session.principal)
    return cls(error_code=Code.NONE, error_message=None, auth_bytes=answer,
               session_lifetime_ms=0)


def register(dispatch: Dispatch) -> None:
    dispatch.add(HANDSHAKE_KEY, 0, 1, handle_handshake)
    dispatch.add(AUTHENTICATE_KEY, 0, 2, handle_authenticate)
