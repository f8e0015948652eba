"""The frames of a replica host's produce socket (docs/architecture.md, "The produce socket").

A producer's produce call to a host (its ``produce_batches``) can go over a TCP connection to
the host's own listener instead of a Ray actor call: a Ray call costs about half a
millisecond of CPU on each side on this project's machines, a frame on a socket tens of
microseconds (docs/performance.md, "The produce socket"). Plain Python, no Ray and no
sockets: the client (raylog/client/host_socket.py) and the host (actors/produce_socket.py)
both use it.

A connection starts with the client's hello: ``RLP1`` and the 32-byte token the host gave
with its address (over Ray, which authenticates its callers). A host closes a connection
whose hello is anything else, before reading a frame of it: its port is no wider a door than
Ray's own. Then request frames, client to host::

    length       u32   bytes after this field
    head_length  u32   bytes of the head
    head         JSON  {"id": call id, "acks": 0 | 1 | "all", "timeout_ms": int,
                        "client_id": str | null, "items": [[topic, partition, leader_epoch,
                        batch bytes], ...]}
    batches            the items' batches, one after the other, as the producer encoded them

The head is JSON, never pickle: a host runs nothing a peer sends it. An answer frame, host
to client::

    length       u32   bytes after this field
    id           u64   the request's call id
    ok           u8    1: the value of produce_batches; 0: the error it raised
    body               pickle of that value (a list of AppendInfo or RaylogError, perhaps in
                       a Throttled) or of that error

A client reads answers from the host it connected to, as a Ray caller reads an actor's.
Any malformed request is a FrameError, and the host closes that connection.
"""

from __future__ import annotations

import hmac
import json
import pickle
import secrets
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

LENGTH = struct.Struct(">I")       # a frame's length, after this field
HEAD_LENGTH = struct.Struct(">I")  # a request's head's length
ANSWER = struct.Struct(">QB")      # an answer's call id and whether it is a value
# The largest frame either side accepts: a call carries at most the producer's
# max_request_size (8 MiB by default) of batches, and a producer may raise it.
MAX_FRAME_BYTES = 256 << 20
# Frames up to this size share a reading buffer; a larger one is read into one of its own,
# whose batches the host reads in place (no copy after the socket's).
SMALL_FRAME_BYTES = 64 << 10


HELLO_MAGIC = b"RLP1"
TOKEN_BYTES = 32
HELLO_BYTES = len(HELLO_MAGIC) + TOKEN_BYTES


class FrameError(ValueError):
    """A frame that breaks the format above (its connection is closed)."""


def new_token() -> bytes:
    """A host process's token: a caller must know it to send calls."""
    return secrets.token_bytes(TOKEN_BYTES)


def hello(token: bytes) -> bytes:
    """A connection's first bytes, from the client."""
    if len(token) != TOKEN_BYTES:
        raise FrameError(f"a token has {TOKEN_BYTES} bytes, got {len(token)}")
    return HELLO_MAGIC + token


def check_hello(data: bytes | bytearray, token: bytes) -> None:
    """FrameError unless ``data`` is the hello of a client that knows ``token``."""
    if len(data) != HELLO_BYTES or data[:len(HELLO_MAGIC)] != HELLO_MAGIC:
        raise FrameError("the connection did not start with raylog's produce hello")
    if not hmac.compare_digest(bytes(data[len(HELLO_MAGIC):]), token):
        raise FrameError("the connection's token is not this host's")


@dataclass(frozen=True)
class ProduceRequest:
    """A produce call as a host reads it: ``items`` as produce_batches takes them."""

    call_id: int
    items: list[tuple[str, int, int, memoryview]]
    acks: int | str
    timeout_ms: int
    client_id: str | None


def request_frame(call_id: int, items: list[tuple[str, int, int, Any]], acks: int | str,
                  timeout_ms: int, client_id: str | None) -> list[Any]:
    """The pieces of a request frame, to send in order: the length and the head as bytes,
    then each batch as it is (bytes or any buffer: not copied here)."""
    sizes = [memoryview(data).nbytes for *_, data in items]
    head = json.dumps({"id": call_id, "acks": acks, "timeout_ms": timeout_ms,
                       "client_id": client_id,
                       "items": [[topic, partition, epoch, size] for (topic, partition, epoch, _),
                                 size in zip(items, sizes, strict=True)]},
                      separators=(",", ":")).encode()
    length = HEAD_LENGTH.size + len(head) + sum(sizes)
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"a produce call of {length} bytes is above the socket's limit of "
                         f"{MAX_FRAME_BYTES}")
    return [LENGTH.pack(length) + HEAD_LENGTH.pack(len(head)) + head,
            *(data for *_, data in items)]


def parse_request(frame: memoryview) -> ProduceRequest:
    """A request frame's content (after its length), its batches as views of ``frame``."""
    if frame.nbytes < HEAD_LENGTH.size:
        raise FrameError(f"a request of {frame.nbytes} bytes has no head")
    (head_length,) = HEAD_LENGTH.unpack_from(frame)
    end = HEAD_LENGTH.size + head_length
    if end > frame.nbytes:
        raise FrameError(f"a request's head of {head_length} bytes runs past its "
                         f"{frame.nbytes}-byte frame")
    try:
        head = json.loads(bytes(frame[HEAD_LENGTH.size:end]))
        call_id, acks = head["id"], head["acks"]
        timeout_ms, client_id, listed = head["timeout_ms"], head["client_id"], head["items"]
    except (ValueError, TypeError, KeyError) as e:
        raise FrameError(f"a request's head is not the expected JSON: {e}") from e
    if type(call_id) is not int or not 0 <= call_id < 1 << 64:
        raise FrameError(f"a request's id must be a u64, got {call_id!r}")
    if acks not in (0, 1, "all") or type(acks) is bool:
        raise FrameError(f"a request's acks must be 0, 1 or 'all', got {acks!r}")
    if type(timeout_ms) is not int or timeout_ms < 0:
        raise FrameError(f"a request's timeout_ms must be an int >= 0, got {timeout_ms!r}")
    if client_id is not None and type(client_id) is not str:
        raise FrameError(f"a request's client_id must be a str or null, got {client_id!r}")
    if type(listed) is not list:
        raise FrameError(f"a request's items must be a list, got {type(listed).__name__}")
    items = []
    pos = end
    for item in listed:
        if (type(item) is not list or len(item) != 4 or type(item[0]) is not str
                or any(type(n) is not int for n in item[1:]) or item[3] < 0):
            raise FrameError(f"a request's item must be [topic, partition, leader_epoch, "
                             f"size], got {item!r}")
        topic, partition, epoch, size = item
        if pos + size > frame.nbytes:
            raise FrameError(f"a request's batches run past its {frame.nbytes}-byte frame")
        items.append((topic, partition, epoch, frame[pos:pos + size]))
        pos += size
    if pos != frame.nbytes:
        raise FrameError(f"a request's frame has {frame.nbytes - pos} bytes after its batches")
    return ProduceRequest(call_id, items, acks, timeout_ms, client_id)


def answer_frame(call_id: int, ok: bool, body: Any) -> bytes:
    """An answer frame: ``body`` the call's value (``ok``) or the error it raised."""
    data = pickle.dumps(body, protocol=pickle.HIGHEST_PROTOCOL)
    return LENGTH.pack(ANSWER.size + len(data)) + ANSWER.pack(call_id, ok) + data


def parse_answer(frame: bytes | memoryview) -> tuple[int, bool, Any]:
    """An answer frame's content (after its length): the call id, whether the body is the
    call's value, and the body."""
    if len(frame) < ANSWER.size:
        raise FrameError(f"an answer of {len(frame)} bytes has no call id")
    call_id, ok = ANSWER.unpack_from(frame)
    return call_id, bool(ok), pickle.loads(frame[ANSWER.size:])


class FrameSplitter:
    """Cuts a byte stream into frames, for a reader that fills the buffer it is given
    (asyncio's ``BufferedProtocol``): :meth:`buffer` to fill, :meth:`filled` with how much
    was, which answers the frames completed. Small frames come as ``bytes`` copied out of a
    shared buffer; a frame above SMALL_FRAME_BYTES is read into a buffer of its own and
    comes as a view of it, never reused. Not thread-safe (one connection's reader)."""

    def __init__(self, limit: int = MAX_FRAME_BYTES) -> None:
        self._limit = limit
        self._shared = bytearray(SMALL_FRAME_BYTES + LENGTH.size)
        self._start = self._end = 0       # the shared buffer's unread bytes
        self._large: bytearray | None = None
        self._large_got = 0

    def buffer(self) -> memoryview:
        """Where the next bytes go."""
        if self._large is not None:
            return memoryview(self._large)[self._large_got:]
        if self._end == len(self._shared):  # full: move what is unread to the front
            unread = self._end - self._start
            self._shared[:unread] = self._shared[self._start:self._end]
            self._start, self._end = 0, unread
        return memoryview(self._shared)[self._end:]

    def filled(self, n: int) -> Iterator[memoryview]:
        """``n`` bytes were written where :meth:`buffer` said: the frames now complete
        (each without its length). FrameError for a frame above the limit."""
        if self._large is not None:
            self._large_got += n
            if self._large_got == len(self._large):
                frame, self._large = self._large, None
                yield memoryview(frame)
            return
        self._end += n
        while self._end - self._start >= LENGTH.size:
            (length,) = LENGTH.unpack_from(self._shared, self._start)
            if length > self._limit:
                raise FrameError(f"a frame of {length} bytes is above the limit of "
                                 f"{self._limit}")
            begin = self._start + LENGTH.size
            if length > SMALL_FRAME_BYTES:
                got = self._end - begin
                self._large = bytearray(length)
                self._large[:got] = self._shared[begin:self._end]
                self._large_got = got
                self._start = self._end = 0
                if got == length:  # (a buffer ends where a frame does)
                    frame, self._large = self._large, None
                    yield memoryview(frame)
                return
            if self._end - begin < length:
                return
            self._start = begin + length
            yield memoryview(bytes(self._shared[begin:self._start]))
        if self._start == self._end:
            self._start = self._end = 0
