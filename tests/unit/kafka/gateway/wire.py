"""A raw-socket Kafka client for tests: frames built with kafka-python's messages, or by
hand when a test wants them broken."""

from __future__ import annotations

import socket
import struct
from typing import Any

from raylog.kafka.gateway.protocol import RESPONSES


def frame(request: Any, version: int, correlation_id: int = 1,
          client_id: str = "test") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


def connect(address: tuple[str, int], timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout)
    sock.settimeout(timeout)
    return sock


def read_frame(sock: socket.socket) -> bytes | None:
    """The next response frame's bytes after the length; None if the server closed."""
    head = _read(sock, 4)
    if head is None:
        return None
    body = _read(sock, struct.unpack(">i", head)[0])
    if body is None:
        raise AssertionError("the server closed in the middle of a frame")
    return body


def _read(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def response(sock: socket.socket, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, decoded body) of the next response."""
    data = read_frame(sock)
    assert data is not None, "the server closed the connection"
    body = RESPONSES[api_key].decode(data, version=version, header=True)
    return body.header.correlation_id, body


def closed(sock: socket.socket) -> bool:
    """Whether the server closed the connection (waits up to the socket's timeout)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def call(address: tuple[str, int], request: Any, version: int) -> Any:
    with connect(address) as sock:
        sock.sendall(frame(request, version))
        return response(sock, request.API_KEY, version)[1]
