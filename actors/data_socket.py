"""A replica host's data socket: producers' produce calls and consumers' fetch streams over
TCP, served on the host's event loop by the same ``produce_batches`` and ``fetch_stream`` that
Ray's calls run (docs/architecture.md, "The data socket"; the frames:
raylog/util/socket_frames.py).

Calls and streams start in the order their frames arrive on a connection (a task each,
created in that order, as Ray starts an async actor's calls in the order they arrive), and
each answer goes back on the connection its request came by, in whatever order the calls
end. A stream sends at most its ``ahead`` answers before the client says it took one (Ray's
generator backpressure), and ends at a cancel, at its own end, or when its connection goes
(Ray ends a dead caller's generator too). A malformed frame closes its connection; a caller
that goes away leaves its produce calls running, as a Ray caller's death does. Not
thread-safe: everything here runs on the host's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from raylog.errors import InternalError, RaylogError
from raylog.util.metrics import recorder
from raylog.util.socket_frames import (
    END,
    ERROR,
    HELLO_BYTES,
    VALUE,
    FrameError,
    FrameSplitter,
    ProduceRequest,
    StreamControl,
    StreamRequest,
    answer_frame,
    check_hello,
    new_token,
    parse_request,
)

logger = logging.getLogger(__name__)

# produce_batches(items, acks, timeout_ms, client_id=...)
Produce = Callable[..., Awaitable[Any]]
# fetch_stream(reads, max_bytes, max_wait_ms, min_bytes, isolation, client_id)
Stream = Callable[..., AsyncIterator[Any]]


class DataSocket:
    """The listening socket of one host process, bound to its node's address on a port the
    system picks; :meth:`address` says where, once it listens, and ``token`` what a
    client's hello must carry (both go to callers over Ray only)."""

    def __init__(self, produce: Produce, stream: Stream) -> None:
        self._produce = produce
        self._stream = stream
        self.token = new_token()
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()

    async def start(self, host: str) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self._produce, self._stream, self.token, self._connections),
            host, 0)
        return self.address()

    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("the data socket is not listening")
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def connections(self) -> int:
        return len(self._connections)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close()


class _Connection(asyncio.BufferedProtocol):
    """One client process's connection: checks its hello, then cuts frames and starts a
    call or a stream for each request (a take or a cancel goes to its stream)."""

    def __init__(self, produce: Produce, stream: Stream, token: bytes,
                 registry: set[_Connection]) -> None:
        self._produce = produce
        self._stream = stream
        self._token = token
        self._hello: bytearray | None = bytearray(HELLO_BYTES)  # None once checked
        self._hello_got = 0
        self._registry = registry
        self._splitter = FrameSplitter()
        self._transport: asyncio.Transport | None = None
        self._streams: dict[int, tuple[asyncio.Task, asyncio.Semaphore]] = {}
        self._calls: set[asyncio.Task] = set()  # (the loop keeps tasks weakly only)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._registry.add(self)
        recorder().set("raylog_socket_connections", len(self._registry))

    def connection_lost(self, exc: Exception | None) -> None:
        self._registry.discard(self)
        self._transport = None
        recorder().set("raylog_socket_connections", len(self._registry))
        for task, _ in list(self._streams.values()):
            task.cancel()  # nobody reads them any more

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._hello is not None:
            return memoryview(self._hello)[self._hello_got:]
        return self._splitter.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._hello is not None:
                self._hello_got += nbytes
                if self._hello_got == HELLO_BYTES:
                    check_hello(self._hello, self._token)
                    self._hello = None
                return
            for frame in self._splitter.filled(nbytes):
                self._start(parse_request(frame))
        except FrameError as e:
            logger.warning("closing a data connection from %s: %s", self._peer(), e)
            self.close()

    def _start(self, request: Any) -> None:
        loop = asyncio.get_running_loop()
        if isinstance(request, ProduceRequest):
            call = loop.create_task(self._call(request))
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)
        elif isinstance(request, StreamRequest):
            if request.stream_id in self._streams:
                raise FrameError(f"stream {request.stream_id} is open already")
            credits = asyncio.Semaphore(request.ahead)
            task = loop.create_task(self._serve_stream(request, credits))
            self._streams[request.stream_id] = task, credits
        elif isinstance(request, StreamControl):
            stream = self._streams.get(request.stream_id)
            if stream is None:
                return  # ended meanwhile: its end frame is on its way
            if request.op == "cancel":
                stream[0].cancel()
            else:
                stream[1].release()

    async def _call(self, request: ProduceRequest) -> None:
        try:
            value = await self._produce(request.items, request.acks, request.timeout_ms,
                                        client_id=request.client_id)
            answer = answer_frame(request.call_id, VALUE, value)
        except Exception as e:
            answer = answer_frame(request.call_id, ERROR, _typed(e))
        self._write(answer)

    async def _serve_stream(self, request: StreamRequest, credits: asyncio.Semaphore) -> None:
        answers = self._stream(request.reads, request.max_bytes, request.max_wait_ms,
                               request.min_bytes, request.isolation, request.client_id)
        try:
            async for answer in answers:
                await credits.acquire()  # at most `ahead` answers not taken yet
                self._write(answer_frame(request.stream_id, VALUE, answer))
            self._write(answer_frame(request.stream_id, END))
        except asyncio.CancelledError:
            pass  # cancelled by its client, or its connection went: nobody to tell
        except Exception as e:
            self._write(answer_frame(request.stream_id, ERROR, _typed(e)))
        finally:
            await answers.aclose()
            self._streams.pop(request.stream_id, None)

    def _write(self, frame: list[bytes]) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.writelines(frame)

    def _peer(self) -> Any:
        return None if self._transport is None else self._transport.get_extra_info("peername")

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def _typed(error: Exception) -> RaylogError:
    """The error a caller gets: a raylog error as it is, anything else (a bug) as an
    InternalError, as Ray's wrappers give it."""
    if isinstance(error, RaylogError):
        return error
    logger.error("a call over the data socket failed", exc_info=error)
    return InternalError(f"{type(error).__name__} inside the cluster: {error}")
