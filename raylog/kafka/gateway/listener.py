"""The Kafka protocol listener: asyncio, one task per connection.

A connection carries frames, each a 4-byte big-endian length and that many bytes of request
(header and body, raylog/kafka/gateway/protocol.py). For each connection the listener:

- reads a frame's length, refuses (closes the connection) a length below a request header's
  or above ``request_max_bytes`` before reading the body, then reads the body;
- answers an ApiVersions request of an unsupported version at once, in the v0 format with
  UNSUPPORTED_VERSION and the served ranges (so a newer client learns what to ask);
- closes the connection on an API key it does not serve, a version outside the served range,
  or a body that does not decode: Kafka's brokers do the same, as the client could not read
  any answer to such a request;
- otherwise starts the API's handler (raylog/kafka/gateway/dispatch.py) as a task, at most
  ``max_in_flight`` at once (it stops reading until one is answered), and writes the answers
  in request order, whatever order the handlers finish in;
- closes the connection when nothing arrived and nothing was in flight for
  ``connections_max_idle_ms``, and when the client closes its end.

With security settings (raylog/kafka/gateway/security.py; docs/security.md) it serves TLS
(the handshake done by asyncio before a connection is handed over; a client that does not
speak TLS never gets further), gives each connection its principal (a client certificate's
subject, or ``User:ANONYMOUS``), and on a SASL listener serves a connection nothing but
ApiVersions and the login's APIs until it logged in (raylog/kafka/gateway/sasl.py; with
SaslHandshake v0 the tokens come as raw frames, passed to the connection's SaslSession).
Connections beyond ``max_connections_per_ip`` from one address are closed as accepted.
With client quotas (raylog/kafka/gateway/quotas.py), an answer over its client's quota
carries its throttle time, and the connection reads nothing more for that long.
When a user's credential is deleted (the credentials' follower reads its tombstone), the
connections that logged in with it are closed at once: Kafka's brokers keep them until they
re-authenticate (KIP-368), raylog does not wait; their clients' reconnection is a new login,
refused.

Whatever one connection sends, only that connection is closed: no other connection sees it,
the listener goes on accepting, and nothing reaches the cluster from a request that was not
decoded whole. All of it runs on one event loop; nothing here blocks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import struct
import threading
import time
from collections.abc import Awaitable, Callable

from raylog.errors import AuthenticationError, SecurityConfigError
from raylog.kafka import records
from raylog.kafka.auth.credentials import CredentialStore
from raylog.kafka.auth.principal import from_certificate
from raylog.kafka.auth.scram import Mechanism
from raylog.kafka.auth.throttle import ConnectionLimit, FailureThrottle
from raylog.kafka.gateway import produce_frame, versions
from raylog.kafka.gateway.access import Access
from raylog.kafka.gateway.backend import Backend
from raylog.kafka.gateway.dispatch import Api, Connection, Context, Dispatch, default_dispatch
from raylog.kafka.gateway.protocol import (
    FIXED_HEADER,
    MalformedRequest,
    Request,
    decode_request,
    encode_response,
    frame_size,
    peek_header,
)
from raylog.kafka.gateway.quotas import ListenerQuotas
from raylog.kafka.gateway.sasl import ALLOWED_BEFORE_LOGIN, SaslSession, Stage
from raylog.kafka.gateway.scram_users import Records, UserAdmin
from raylog.kafka.gateway.security import ListenerSecurity
from raylog.kafka.gateway.settings import GatewaySettings

logger = logging.getLogger(__name__)

_LENGTH_BYTES = 4
Buffer = bytes | bytearray | memoryview


class _Closing(Exception):
    """This connection is to be closed: said why, at debug level (a client's doing)."""


class KafkaListener:
    """Serves Kafka's protocol on ``host:port`` over ``backend`` until :meth:`close`.

    ``port`` 0 takes a free port: :attr:`port` tells which, once :meth:`start` returned.
    ``security`` (default PLAINTEXT) says whether it speaks TLS and asks for logins;
    ``credentials`` are what logins are checked against (needed with SASL);
    ``write_users`` writes records to ``__raylog_users`` (AlterUserScramCredentials).
    ``access``: its authorizer (ACLs; raylog/kafka/gateway/access.py), None for none.
    ``quotas``: the client quotas it enforces, following the controller's from
    :meth:`start` on (raylog/kafka/gateway/quotas.py), None for none.
    Counters (read from any thread): ``connections`` open now, ``accepted`` in all,
    ``answered`` requests, ``refused`` connections closed for bad input or idleness,
    ``authentication_failures``, ``revoked`` connections closed as their user's credential
    was deleted, ``throttled`` requests taken only once a quota's throttle time had passed.
    Its coroutines run on the event loop that called :meth:`start`.
    """

    def __init__(self, backend: Backend, settings: GatewaySettings | None = None,
                 dispatch: Dispatch | None = None, host: str = "127.0.0.1",
                 port: int = 9092, security: ListenerSecurity | None = None,
                 credentials: CredentialStore | None = None,
                 write_users: Callable[[Records], None] | None = None,
                 access: Access | None = None, quotas: ListenerQuotas | None = None) -> None:
        self.backend = backend
        self.settings = settings or GatewaySettings()
        self.dispatch = dispatch or default_dispatch()
        self.host = host
        self.port = port
        self.security = security or ListenerSecurity()
        if self.security.uses_sasl and credentials is None:
            raise SecurityConfigError(f"a {self.security.security_protocol} listener needs "
                                      f"the users' credentials to check logins against")
        self.credentials = credentials
        self.access = access
        self.quotas = quotas
        self.users = None if credentials is None else UserAdmin(
            credentials, write_users, frozenset(self.security.super_users))
        self.throttle = FailureThrottle(self.security.failed_authentication_delay_ms,
                                        self.security.failed_authentication_max_delay_ms)
        self._per_address = ConnectionLimit(self.settings.max_connections_per_ip)
        # made-up SCRAM salts for unknown users come from it (raylog/kafka/auth/scram.py)
        self._secret = secrets.token_bytes(32)
        self.authentication_failures = 0
        self.connections = 0
        self.accepted = 0
        self.answered = 0
        self.refused = 0
        self.revoked = 0
        self.throttled = 0
        self._server: asyncio.base_events.Server | None = None
        self._serving: set[asyncio.Task] = set()
        self._open: dict[asyncio.Task, Connection] = {}  # by the task serving it
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> tuple[str, int]:
        """Listen; returns (host, port) listened on. Warns when the records' translation is
        the pure-Python one: measured, it made the listener the bound of a produce (4 CPU
        µs per record, against 1.3 with the compiled one) and of a consume."""
        if not records.compiled():
            logger.warning("raylog.kafka's compiled record translation (_records.c) is not "
                           "built here: Kafka clients will be several times slower; build it "
                           "with `python -m raylog.kafka.build` (or `pip install -e .`)")
        self._server = await asyncio.start_server(self._accept, self.host, self.port,
                                                  backlog=1024,
                                                  ssl=self.security.ssl_context())
        self.port = self._server.sockets[0].getsockname()[1]
        if self.quotas is not None:
            self.quotas.start(self.backend)
        if self.credentials is not None:
            self._loop = asyncio.get_running_loop()
            self.credentials.watch(self._credential_deleted)
        return self.host, self.port

    async def close(self) -> None:
        """Stop accepting and close every connection (their handlers are cancelled)."""
        if self.quotas is not None:
            self.quotas.stop()
        if self._loop is not None:
            self.credentials.unwatch(self._credential_deleted)
            self._loop = None
        if self._server is not None:
            self._server.close()
        for task in list(self._serving):
            task.cancel()
        if self._serving:
            await asyncio.wait(self._serving)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        peer = writer.get_extra_info("peername")
        address = peer[0] if peer else "?"
        if not self._per_address.acquire(address):
            self.refused += 1
            logger.warning("closing a Kafka connection from %s: it has %d open already "
                           "(max_connections_per_ip)", address, self._per_address.open(address))
            writer.close()
            return
        self._serving.add(task)
        self.connections += 1
        self.accepted += 1
        conn = self._connection(address, peer, writer)
        self._open[task] = conn
        try:
            await self._serve(reader, writer, conn)
        except asyncio.CancelledError:
            # close() ends this connection: the task ends here, not cancelled. asyncio's
            # streams (Python 3.11) ask the finished task for its exception, which a
            # cancelled task raises, and print a traceback for a clean stop.
            return
        except Exception:  # a bug: this connection ends, the listener goes on
            logger.exception("Kafka connection from %s failed", conn.peer)
        finally:
            self.connections -= 1
            self._per_address.release(address)
            if conn.sasl is not None and conn.sasl.stage is Stage.FAILED:
                self.authentication_failures += 1
            self._serving.discard(task)
            self._open.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):  # the peer may be gone already
                await writer.wait_closed()

    def _credential_deleted(self, user: str, mechanism: Mechanism) -> None:
        """The credentials' watcher (the follower's thread): the revocation runs on the
        listener's loop."""
        loop = self._loop
        if loop is None:
            return
        # a loop already stopped has no connections left to close
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._revoke, user, mechanism)

    def _revoke(self, user: str, mechanism: Mechanism) -> None:
        """Close the connections that logged in as ``user`` with the deleted credential:
        their serving tasks are cancelled, which closes the socket (as close() does)."""
        for task, conn in list(self._open.items()):
            if conn.sasl is not None and conn.sasl.revoked_by(user, mechanism):
                logger.info("closing Kafka connection from %s: the %s credential of %s "
                            "was deleted", conn.peer, mechanism.sasl_name, conn.principal)
                self.revoked += 1
                task.cancel()

    def _connection(self, address: str, peer: tuple | None,
                    writer: asyncio.StreamWriter) -> Connection:
        """A new connection's record: its principal from its client certificate, if any,
        and its login to run on a SASL listener."""
        conn = Connection(peer=f"{peer[0]}:{peer[1]}" if peer else "?")
        if self.security.uses_tls:
            conn.principal = from_certificate(writer.get_extra_info("peercert"))
        if self.security.uses_sasl:
            conn.authenticated = False
            conn.sasl = SaslSession(self.security.mechanisms, self.credentials, self.throttle,
                                    address, self._secret)
        return conn

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     conn: Connection) -> None:
        answers: asyncio.Queue[Awaitable[list[Buffer] | None] | None] = asyncio.Queue(
            self.settings.max_in_flight)
        state = _ConnectionState()
        reading = asyncio.create_task(self._read(reader, conn, answers, state))
        writing = asyncio.create_task(self._write(writer, conn, answers, state))
        try:
            await asyncio.wait({reading, writing}, return_when=asyncio.FIRST_COMPLETED)
            if reading.done() and not writing.done():
                # What was asked before the end goes out (a client may send its last
                # requests and half-close), then the connection closes.
                await answers.put(None)
                await writing
        finally:
            for task in (reading, writing, *state.handlers):
                task.cancel()
            for task in (reading, writing):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _read(self, reader: asyncio.StreamReader, conn: Connection,
                    answers: asyncio.Queue, state: _ConnectionState) -> None:
        try:
            while True:
                size = frame_size(await self._read_exactly(reader, _LENGTH_BYTES, state))
                smallest = 1 if _raw_tokens(conn) else FIXED_HEADER.size
                if size < smallest or size > self.settings.request_max_bytes:
                    raise _Closing(f"a frame of {size} bytes (at most "
                                   f"{self.settings.request_max_bytes})")
                frame = await self._read_exactly(reader, size, state)
                # A quota holds this client back (raylog/kafka/gateway/quotas.py): its next
                # request is taken once the throttle time of the last answer has passed.
                held = conn.throttled_until - time.monotonic()
                if held > 0:
                    self.throttled += 1
                    await asyncio.sleep(held)
                answer = self._start(frame, conn, state)
                state.in_flight += 1
                await answers.put(answer)  # waits while max_in_flight are unanswered
        except asyncio.IncompleteReadError:
            return  # the client closed its end (perhaps mid-frame)
        except ConnectionError:
            return
        except (_Closing, MalformedRequest) as e:
            self.refused += 1
            logger.debug("closing Kafka connection from %s: %s", conn.peer, e)

    async def _read_exactly(self, reader: asyncio.StreamReader, n: int,
                            state: _ConnectionState) -> bytes:
        """``n`` bytes, or _Closing once the connection was idle for too long: nothing
        received and nothing in flight for connections_max_idle_ms."""
        idle_s = self.settings.connections_max_idle_ms / 1000
        while True:
            wait = state.last_active + idle_s - time.monotonic()
            if wait <= 0 and state.in_flight == 0:
                raise _Closing(f"idle for {idle_s:g} s")
            try:
                # readexactly consumes nothing until all n bytes are there: a timeout
                # loses none of them
                data = await asyncio.wait_for(reader.readexactly(n), max(wait, 0.05))
            except TimeoutError:
                continue
            state.last_active = time.monotonic()
            return data

    def _start(self, frame: bytes, conn: Connection,
               state: _ConnectionState) -> Awaitable[list[Buffer] | None]:
        """The answer to one frame, to be awaited in order: the handler's task, or a done
        future; raises MalformedRequest to close the connection."""
        if _raw_tokens(conn):
            return self._track(self._raw_token(conn, frame), state)
        api_key, api_version, correlation_id = peek_header(frame)
        api = self.dispatch.get(api_key)
        if api is None:
            raise MalformedRequest(f"API key {api_key} is not served")
        if not conn.authenticated and api_key not in ALLOWED_BEFORE_LOGIN:
            raise MalformedRequest(f"unexpected Kafka request of API key {api_key} during "
                                   f"SASL authentication")
        if not api.serves(api_version):
            if api_key != versions.API_KEY:
                raise MalformedRequest(f"API key {api_key} is not served at version "
                                       f"{api_version} (served: {api.min_version}-"
                                       f"{api.max_version})")
            done = asyncio.get_running_loop().create_future()
            done.set_result(versions.unsupported_answer(self.dispatch, correlation_id))
            return done
        if produce_frame.decodes(api_key, api_version):  # records stay in the frame
            request = produce_frame.decode(frame)
        else:
            request = decode_request(frame)
        ctx = Context(self.backend, self.settings, self.dispatch, conn, request.client_id,
                      correlation_id, self.users, self.access)
        return self._track(self._handle(api, ctx, request, len(frame)), state)

    @staticmethod
    def _track(coroutine: Awaitable[list[Buffer] | None],
               state: _ConnectionState) -> asyncio.Task:
        task = asyncio.create_task(coroutine)
        state.handlers.add(task)
        task.add_done_callback(state.handlers.discard)
        return task

    @staticmethod
    async def _raw_token(conn: Connection, token: bytes) -> list[Buffer] | None:
        """The answer to a raw SASL token (after SaslHandshake v0): the server's token as a
        raw frame; none, and the connection closed, when the login failed (the raw
        exchange has no way to say so)."""
        try:
            answer = await conn.sasl.token(token)
        except AuthenticationError:
            conn.close_after_answer = True
            return None
        if conn.sasl.principal is not None:
            conn.login(conn.sasl.principal)
        return [_SIZE.pack(len(answer)) + answer]

    async def _handle(self, api: Api, ctx: Context, request: Request,
                      size: int) -> list[Buffer] | None:
        started = time.monotonic()
        body = await api.handler(ctx, request.api_version, request.body)
        if self.quotas is not None:
            conn = ctx.connection
            delay = self.quotas.charge(api.key, conn.principal.name, request.client_id, size,
                                       body, time.monotonic() - started)
            if delay:  # the connection reads nothing more until then (module docstring)
                conn.throttled_until = max(conn.throttled_until, time.monotonic() + delay)
        if body is None:
            return None
        return encode_response(body, request.api_version, request.correlation_id)

    async def _write(self, writer: asyncio.StreamWriter, conn: Connection,
                     answers: asyncio.Queue, state: _ConnectionState) -> None:
        while True:
            pending = await answers.get()
            if pending is None:
                return
            try:
                frame = await pending
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("a handler failed on a request from %s: closing its "
                                 "connection", conn.peer)
                self.refused += 1
                return
            state.in_flight -= 1
            state.last_active = time.monotonic()
            self.answered += 1
            if frame is not None:
                # piece by piece: writelines would join them (Python 3.11), a copy of
                # every byte of a Fetch answer
                try:
                    for piece in frame:
                        writer.write(piece)
                    await writer.drain()
                except ConnectionError:  # the client went away (TLS says so on write)
                    return
            if conn.close_after_answer:  # a failed login: its answer out, then closed
                self.refused += 1
                return


_SIZE = struct.Struct(">i")


def _raw_tokens(conn: Connection) -> bool:
    """Whether the connection's next frames are raw SASL tokens (SaslHandshake v0)."""
    return conn.sasl is not None and conn.sasl.raw and conn.sasl.stage is Stage.TOKENS


class _ConnectionState:
    """The listener's bookkeeping of one connection (its event loop only)."""

    __slots__ = ("handlers", "in_flight", "last_active")

    def __init__(self) -> None:
        self.handlers: set[asyncio.Task] = set()
        self.in_flight = 0  # requests read and not answered
        self.last_active = time.monotonic()


class ListenerThread:
    """A :class:`KafkaListener` on an event loop of its own thread: for a foreground
    command (whose main thread waits for a signal) and for tests that talk to it from the
    outside. ``start`` returns (host, port) once it listens; ``stop`` closes it and ends the
    thread. Both are called from one outside thread."""

    def __init__(self, listener: KafkaListener) -> None:
        self.listener = listener
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="raylog-kafka-listener")

    def start(self) -> tuple[str, int]:
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self.listener.start(), self._loop).result()

    def stop(self, timeout: float = 10.0) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._loop.close()

    async def _close(self) -> None:
        """Close the listener, then end what its handlers left running (a metadata
        refresh a closed connection had asked for)."""
        await self.listener.close()
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    def __enter__(self) -> ListenerThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
