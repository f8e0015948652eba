"""A process's produce calls to a replica host, and its consumers' fetch streams from it,
over the host's data socket once it is connected; by Ray until then (docs/architecture.md,
"The data socket").

A Ray actor call costs about half a millisecond of CPU on each side on this project's
machines; the same call as a frame on a TCP connection costs tens of microseconds
(docs/performance.md, "The produce socket"). On two cores shared by a producer, a broker and
a consumer, that CPU is most of a record's way from ``send`` to a reader. Each host listens
on a port of its own (actors/data_socket.py) and says where when asked (its
``socket_address``); everything else (metadata, single fetches, control) stays on Ray.

One :class:`HostRoute` per host actor and process decides which way each call goes, and one
:class:`HostConnection` per route carries the calls and streams once connected. The frames are in
raylog/util/socket_frames.py.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from raylog.errors import ActorUnavailableError, InternalError
from raylog.util.backoff import backoff_s
from raylog.util.socket_frames import (
    END,
    ERROR,
    LENGTH,
    MAX_FRAME_BYTES,
    VALUE,
    FrameError,
    control_frame,
    hello,
    parse_answer,
    request_frame,
    stream_frame,
)

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 2.0
# A send that makes no progress this long ends the connection (its calls fail as unanswered,
# and are retried): a host that hangs with the socket's buffers full would otherwise hold the
# sending thread (the producer's sender, which also expires batches) for as long as it hangs.
SEND_TIMEOUT_S = 5.0
# After a failure to learn a host's address or to connect, ask again after this long,
# doubling up to RETRY_MAX_S; its calls go by Ray meanwhile.
RETRY_MIN_S, RETRY_MAX_S = 0.5, 10.0
WARN_AFTER_FAILURES = 4  # (about 7 s of tries)
# Writes of up to this many bytes are joined into one send (one system call, one segment).
JOIN_BYTES = 64 << 10


class SocketCall:
    """A produce call made over a host's socket: its answer (the value of the host's
    ``produce_batches``, or the error it raised) completes ``future``. Stands where a Ray
    call's ObjectRef would (raylog/client/remote.py's ``when_done`` and ``discard`` take
    either)."""

    __slots__ = ("future",)

    def __init__(self, future: concurrent.futures.Future) -> None:
        self.future = future


class SocketStream:
    """A fetch stream over a host's socket: its answers, as they come, for :meth:`take`.

    Stands where a Ray stream's ObjectRefGenerator would (the consumer's BrokerStream). The
    host sends at most ``ahead`` answers not taken yet; each :meth:`take` of one lets it
    send the next. ``wake`` is called (on the connection's reader thread) whenever an
    answer or the end comes. Thread-safe."""

    __slots__ = ("_answers", "_connection", "_ended", "_lock", "stream_id", "wake")

    def __init__(self, connection: HostConnection, stream_id: int,
                 wake: Callable[[], None]) -> None:
        self._connection = connection
        self.stream_id = stream_id
        self.wake = wake
        self._lock = threading.Lock()
        self._answers: collections.deque[tuple[int, Any]] = collections.deque()
        self._ended = False  # its end (or error) is among the answers

    def ready(self) -> bool:
        """Whether :meth:`take` has something to give (an answer, an error or the end)."""
        with self._lock:
            return bool(self._answers)

    def take(self) -> Any:
        """The next answer; the error the stream ended with, raised; StopIteration once it
        ended (nothing more comes). Only when :meth:`ready`."""
        with self._lock:
            kind, body = self._answers[0] if self._answers else (END, None)
            if kind == VALUE:
                self._answers.popleft()
            elif kind == ERROR:
                self._answers[0] = (END, None)  # raised once; then ended
        if kind == END:
            raise StopIteration
        if kind == ERROR:
            raise body
        self._connection.send_control(self.stream_id, "take")
        return body

    def cancel(self) -> None:
        """Nobody will take its answers: the host ends it."""
        if not self.ended():
            self._connection.send_control(self.stream_id, "cancel")
        self._connection.forget(self.stream_id)

    def ended(self) -> bool:
        with self._lock:
            return self._ended

    def _put(self, kind: int, body: Any) -> None:
        with self._lock:
            if self._ended:
                return
            self._answers.append((kind, body))
            self._ended = kind != VALUE
        self.wake()


class ConnectionClosedError(ConnectionError):
    """A call on a connection that has closed (the route tries another way)."""


class HostConnection:
    """One TCP connection to a host's data socket, shared by the process's producers and
    consumers.

    :meth:`call` sends a produce call's request frame and :meth:`open_stream` a fetch
    stream's (from any thread; the sends are serialized); a reader thread of its own
    completes each call's future with its answer and hands each stream its answers. When
    the connection fails or the host closes it, every call still waiting fails with
    ActorUnavailableError, whose outcome the producer treats as unknown (as a dead actor's
    call), every open stream ends with that error, and the connection is done:
    ``on_closed`` is called once."""

    def __init__(self, address: tuple[str, int], token: bytes,
                 on_closed: Callable[[HostConnection], None]) -> None:
        self.address = address
        self._sock = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # A send that cannot go on for SEND_TIMEOUT_S (a host stopped, its buffers full)
            # fails the connection, never holds the producer's sender thread.
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                                  struct.pack("ll", int(SEND_TIMEOUT_S),
                                              int(SEND_TIMEOUT_S % 1 * 1e6)))
            self._sock.sendall(hello(token))
        except OSError:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._on_closed = on_closed
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._streams: dict[int, SocketStream] = {}
        self._ids = itertools.count()
        self._closed = False
        threading.Thread(target=self._read, daemon=True,
                         name=f"raylog-data-socket-{address[1]}").start()

    @property
    def closed(self) -> bool:
        return self._closed

    def call(self, items: list[tuple[str, int, int, Any]], acks: int | str, timeout_ms: int,
             client_id: str | None) -> SocketCall:
        """Send one produce call; ConnectionClosedError if the connection had closed, or
        FrameError if the call is above the socket's frame limit (no byte of it was sent
        either way)."""
        call_id = next(self._ids)
        pieces = request_frame(call_id, items, acks, timeout_ms, client_id)
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise ConnectionClosedError(f"the data socket {self.address} is closed")
            self._pending[call_id] = future
        self._send(pieces)
        return SocketCall(future)

    def open_stream(self, reads: list[tuple[str, int, int, int, int]], max_bytes: int,
                    max_wait_ms: int, min_bytes: int, isolation: str, client_id: str | None,
                    ahead: int, wake: Callable[[], None]) -> SocketStream:
        """Start a fetch stream (the host's ``fetch_stream``); ConnectionClosedError if the
        connection had closed."""
        stream = SocketStream(self, next(self._ids), wake)
        frame = stream_frame(stream.stream_id, reads, max_bytes, max_wait_ms, min_bytes,
                             isolation, client_id, ahead)
        with self._lock:
            if self._closed:
                raise ConnectionClosedError(f"the data socket {self.address} is closed")
            self._streams[stream.stream_id] = stream
        self._send([frame])
        return stream

    def send_control(self, stream_id: int, op: str) -> None:
        """Tell the host of a stream's answer taken ("take") or its end ("cancel")."""
        if not self._closed:
            self._send([control_frame(stream_id, op)])

    def forget(self, stream_id: int) -> None:
        """Drop a stream nobody reads: what still comes for it is not kept."""
        with self._lock:
            self._streams.pop(stream_id, None)

    def close(self) -> None:
        self._fail(ConnectionAbortedError("closed by this process"))

    def _send(self, pieces: list[Any]) -> None:
        try:
            with self._send_lock:
                _send_all(self._sock, pieces)
        except OSError as e:  # a part of it may have gone: its outcome is unknown
            self._fail(e)

    def _read(self) -> None:
        try:
            while True:
                (length,) = LENGTH.unpack(self._receive(LENGTH.size))
                if length > MAX_FRAME_BYTES:
                    raise FrameError(f"an answer of {length} bytes is above the limit")
                call_id, kind, body = parse_answer(self._receive(length))
                if kind == ERROR and not isinstance(body, BaseException):
                    body = InternalError(f"a host answered an error that is not one: "
                                         f"{body!r}")
                with self._lock:
                    future = self._pending.pop(call_id, None)
                    stream = self._streams.get(call_id) if future is None else None
                    if stream is not None and kind != VALUE:
                        del self._streams[call_id]
                if stream is not None:
                    stream._put(kind, body)
                elif future is None:
                    continue  # a stream given up
                elif kind == VALUE:
                    future.set_result(body)
                else:
                    future.set_exception(body if kind == ERROR else InternalError(
                        "a host ended a produce call as a stream"))
        except Exception as e:  # the host closed, died or broke the format: end every call
            self._fail(e)

    def _receive(self, n: int) -> bytearray:
        data = bytearray(n)
        view = memoryview(data)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionResetError("the host closed the connection")
            got += k
        return data

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending, self._pending = self._pending, {}
            streams, self._streams = self._streams, {}
        with contextlib.suppress(OSError):  # (not connected any more)
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reader
        self._sock.close()
        if pending:
            logger.info("the data socket %s closed with %d calls waiting: %r",
                        self.address, len(pending), error)
        for stream in streams.values():
            stream._put(ERROR, ActorUnavailableError(
                f"the connection to the host at {self.address[0]}:{self.address[1]} ended "
                f"({type(error).__name__}: {error})"))
        for future in pending.values():
            future.set_exception(ActorUnavailableError(
                f"the connection to the host at {self.address[0]}:{self.address[1]} ended "
                f"before it answered ({type(error).__name__}: {error}): the call may have "
                f"been appended"))
        self._on_closed(self)


def _send_all(sock: socket.socket, pieces: list[Any]) -> None:
    """Send every byte of ``pieces`` (bytes or buffers, not copied when large)."""
    views = [memoryview(piece).cast("B") for piece in pieces]
    if sum(view.nbytes for view in views) <= JOIN_BYTES:
        sock.sendall(b"".join(views))
        return
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= views[0].nbytes:
            sent -= views[0].nbytes
            views.pop(0)
        if sent:
            views[0] = views[0][sent:]


class HostRoute:
    """Which way a process's produce calls (and its consumers' streams) to one host go:
    Ray until the host's data socket is connected, then the socket; Ray again while it is
    not.

    The way changes only once no call is outstanding the other way (a closed connection
    has failed all of its calls before it is let go), so the calls one thread makes to a
    host start there in the order they were made, as they would over one channel. Asking a
    host for its address and connecting happen off the caller's thread; calls go by Ray
    meanwhile. Thread-safe."""

    def __init__(self, handle: ray.actor.ActorHandle) -> None:
        self._handle = handle
        self._lock = threading.Lock()
        self._connection: HostConnection | None = None
        self._connecting = False
        self._failures = 0
        self._next_try = 0.0
        self._by_ray = 0  # Ray calls not answered yet

    @property
    def connection(self) -> HostConnection | None:
        return self._connection

    def produce(self, items: list[tuple[str, int, int, Any]], acks: int | str,
                timeout_ms: int, client_id: str | None,
                by_ray: Callable[[], ray.ObjectRef]) -> ray.ObjectRef | SocketCall:
        """Make one produce call of ``items`` (``(topic, partition, leader_epoch, batch)``
        each), by the socket if it is connected, else by ``by_ray``."""
        with self._lock:
            connection = self._connection if not self._by_ray else None
            connect = self._connection is None and self._may_connect()
        if connect:
            self._connect()
        if connection is not None:
            try:
                return connection.call(items, acks, timeout_ms, client_id)
            except (ConnectionClosedError, FrameError):
                pass  # closed meanwhile (its calls failed), or too large a frame: by Ray
        with self._lock:
            self._by_ray += 1
        try:
            ref = by_ray()
        except BaseException:
            self._ray_answered(None)
            raise
        ref.future().add_done_callback(self._ray_answered)
        return ref

    def connected(self) -> HostConnection | None:
        """The connection to the host, if this process has one; else None, and connecting
        begins (off the caller's thread) unless it is under way or failed lately. For
        streams, which have no order to keep with calls by Ray."""
        with self._lock:
            connection = self._connection
            connect = connection is None and self._may_connect()
        if connect:
            self._connect()
        return connection

    def _ray_answered(self, _: object) -> None:
        with self._lock:
            self._by_ray -= 1

    def _may_connect(self) -> bool:
        """Whether to ask the host where its socket is and connect now: not while that is
        under way, nor soon after it failed (lock held; marks it under way)."""
        if self._connecting or time.monotonic() < self._next_try:
            return False
        self._connecting = True
        return True

    def _connect(self) -> None:
        """Ask the host for its address; connect, on a thread of its own, once it answers
        (never on the caller's thread, nor on Ray's callback thread)."""
        try:
            ref = self._handle.socket_address.remote()
        except Exception as e:  # Ray shut down, or the handle is of no actor any more
            self._gave_up(e)
            return
        ref.future().add_done_callback(self._addressed)

    def _addressed(self, future: concurrent.futures.Future) -> None:
        try:
            host, port, token = future.result()
        except Exception as e:  # dead, restarting, or a host without the socket
            self._gave_up(e)
            return
        threading.Thread(target=self._open, args=((host, port), token), daemon=True,
                         name="raylog-data-socket-connect").start()

    def _open(self, address: tuple[str, int], token: bytes) -> None:
        try:
            connection = HostConnection(address, token, self._closed)
        except (OSError, FrameError) as e:  # refused, unreachable, or a token not 32 bytes
            self._gave_up(e)
            return
        with self._lock:
            self._connecting, self._failures = False, 0
            if not connection.closed:  # (else its end was reported before it was kept)
                self._connection = connection

    def _gave_up(self, error: BaseException) -> None:
        with self._lock:
            self._connecting = False
            self._failures += 1
            failures = self._failures
            wait_s = backoff_s(failures - 1, RETRY_MIN_S, RETRY_MAX_S)
            self._next_try = time.monotonic() + wait_s
        # Once in a row of failures, at WARNING: a host restarting fails a try or two, one
        # that stays unreachable (a firewall that lets only Ray's ports through) slows every
        # produce call to it, and whoever runs the producer should know why.
        logger.log(logging.WARNING if failures == WARN_AFTER_FAILURES else logging.DEBUG,
                   "no data socket to %s (%r, %d tries in a row): its produce calls go "
                   "by Ray (and its streams), and it is tried again in %.1f s", self._handle,
                   error, failures, wait_s)

    def _closed(self, connection: HostConnection) -> None:
        with self._lock:
            if self._connection is connection:
                self._connection = None  # ask again at the next call: it may have restarted


_routes: dict[str, HostRoute] = {}
_routes_lock = threading.Lock()


def route_of(handle: ray.actor.ActorHandle) -> HostRoute:
    """The route of this process's produce calls to the host ``handle`` is."""
    key = handle._actor_id.hex()
    with _routes_lock:
        route = _routes.get(key)
        if route is None:
            route = _routes[key] = HostRoute(handle)
        return route
