"""A replica host's produce socket: producers' produce calls over TCP, served on the host's
event loop by the same ``produce_batches`` a Ray call runs (docs/architecture.md, "The produce
socket"; the frames: raylog/util/produce_frames.py).

Calls start in the order their frames arrive on a connection (a task each, created in that
order, as Ray starts an async actor's calls in the order they arrive), and each answer goes
back on the connection its request came by, in whatever order the calls end. A malformed
frame closes its connection; a caller that goes away leaves its calls running, as a Ray
caller's death does. Not thread-safe: everything here runs on the host's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from raylog.errors import InternalError, RaylogError
from raylog.util.produce_frames import (
    HELLO_BYTES,
    FrameError,
    FrameSplitter,
    answer_frame,
    check_hello,
    new_token,
    parse_request,
)

logger = logging.getLogger(__name__)

# produce_batches(items, acks, timeout_ms, client_id=...)
Serve = Callable[..., Awaitable[Any]]


class ProduceSocket:
    """The listening socket of one host process, bound to its node's address on a port the
    system picks; :meth:`address` says where, once it listens, and ``token`` what a
    client's hello must carry (both go to callers over Ray only)."""

    def __init__(self, serve: Serve) -> None:
        self._serve = serve
        self.token = new_token()
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()

    async def start(self, host: str) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self._serve, self.token, self._connections), host, 0)
        return self.address()

    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("the produce socket is not listening")
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
    """One producer process's connection: checks its hello, then cuts frames and starts a
    call for each."""

    def __init__(self, serve: Serve, token: bytes, registry: set[_Connection]) -> None:
        self._serve = serve
        self._token = token
        self._hello: bytearray | None = bytearray(HELLO_BYTES)  # None once checked
        self._hello_got = 0
        self._registry = registry
        self._splitter = FrameSplitter()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._registry.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._registry.discard(self)
        self._transport = None

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
                request = parse_request(frame)
                asyncio.get_running_loop().create_task(self._call(request))
        except FrameError as e:
            logger.warning("closing a produce connection from %s: %s",
                           self._peer(), e)
            self.close()

    async def _call(self, request: Any) -> None:
        try:
            value = await self._serve(request.items, request.acks, request.timeout_ms,
                                      client_id=request.client_id)
            answer = answer_frame(request.call_id, True, value)
        except RaylogError as e:
            answer = answer_frame(request.call_id, False, e)
        except Exception as e:  # a bug: the caller gets it as Ray would give it, typed
            logger.exception("a produce call over the socket failed")
            answer = answer_frame(request.call_id, False, InternalError(
                f"{type(e).__name__} inside the cluster: {e}"))
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(answer)

    def _peer(self) -> Any:
        return None if self._transport is None else self._transport.get_extra_info("peername")

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
