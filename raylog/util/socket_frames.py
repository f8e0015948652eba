"""The frames of a replica host's data socket (docs/architecture.md, "The data socket").

A producer's produce calls to a host (its ``produce_batches``) and a consumer's fetch stream
from it (its ``fetch_stream``) can go over a TCP connection to the host's own listener
instead of Ray: a Ray call costs about half a millisecond of CPU on each side on this
project's machines, a frame on a socket tens of microseconds (docs/performance.md, "The
produce socket"). Plain Python, no Ray and no sockets: the client
(raylog/client/host_socket.py) and the host (actors/data_socket.py) both use it.

A connection starts with the client's hello: ``RLP1`` and the 32-byte token the host gave
with its address (over Ray, which authenticates its callers). A host closes a connection
whose hello is anything else, before reading a frame of it: its port is no wider a door than
Ray's own. Then request frames, client to host::

    length       u32   bytes after this field
    head_length  u32   bytes of the head
    head         JSON  one of (``op`` missing means "produce"):
                       {"op": "produce", "id": call id, "acks": 0 | 1 | "all",
                        "timeout_ms": int, "client_id": str | null,
                        "items": [[topic, partition, leader_epoch, batch bytes], ...]}
                       {"op": "stream", "id": stream id, "reads": [[topic, partition,
                        leader_epoch, offset, most bytes], ...], "max_bytes": int,
                        "max_wait_ms": int, "min_bytes": int, "isolation": str,
                        "client_id": str | null, "ahead": int}
                       {"op": "take", "id": stream id}: the client took one answer
                       {"op": "cancel", "id": stream id}
    batches            a produce call's batches, one after the other, as encoded

The head is JSON, never pickle: a host runs nothing a peer sends it. A stream sends at most
``ahead`` answers the client has not said it took (Ray's generator backpressure, as a
credit). An answer frame, host to client::

    length       u32   bytes after this field
    id           u64   the call's or the stream's id
    kind         u8    VALUE: the call's value, or a stream's next answer;
                       ERROR: the error the call or the stream raised (a stream ends);
                       END: the stream ended (no body to read)
    body               pickle of that value (a list of AppendInfo or RaylogError, or a
                       stream's fetch answer, perhaps in a Throttled) or of that error

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
ANSWER = struct.Struct(">QB")      # an answer's call (or stream) id and its kind
ERROR, VALUE, END = 0, 1, 2        # an answer's kinds
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


@dataclass(frozen=True)
class StreamRequest:
    """A fetch stream as a host reads it: the arguments of its ``fetch_stream``."""

    stream_id: int
    reads: list[tuple[str, int, int, int, int]]
    max_bytes: int
    max_wait_ms: int
    min_bytes: int
    isolation: str
    client_id: str | None
    ahead: int


@dataclass(frozen=True)
class StreamControl:
    """A client's word on one of its streams: ``op`` is "take" or "cancel"."""

    stream_id: int
    op: str


Request = ProduceRequest | StreamRequest | StreamControl


def _frame(head: dict[str, Any], batches: list[Any], sizes: list[int]) -> list[Any]:
    data = json.dumps(head, separators=(",", ":")).encode()
    length = HEAD_LENGTH.size + len(data) + sum(sizes)
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"a request of {length} bytes is above the socket's limit of "
                         f"{MAX_FRAME_BYTES}")
    return [LENGTH.pack(length) + HEAD_LENGTH.pack(len(data)) + data, *batches]


def stream_frame(stream_id: int, reads: list[tuple[str, int, int, int, int]],
                 max_bytes: int, max_wait_ms: int, min_bytes: int, isolation: str,
                 client_id: str | None, ahead: int) -> bytes:
    """A request frame opening a fetch stream."""
    return _frame({"op": "stream", "id": stream_id, "reads": [list(r) for r in reads],
                   "max_bytes": max_bytes, "max_wait_ms": max_wait_ms,
                   "min_bytes": min_bytes, "isolation": isolation, "client_id": client_id,
                   "ahead": ahead}, [], [])[0]


def control_frame(stream_id: int, op: str) -> bytes:
    """A request frame taking one answer of a stream ("take") or ending it ("cancel")."""
    return _frame({"op": op, "id": stream_id}, [], [])[0]


def request_frame(call_id: int, items: list[tuple[str, int, int, Any]], acks: int | str,
                  timeout_ms: int, client_id: str | None) -> list[Any]:
    """The pieces of a produce call's request frame, to send in order: the length and the
    head as bytes, then each batch as it is (bytes or any buffer: not copied here)."""
    sizes = [memoryview(data).nbytes for *_, data in items]
    return _frame({"id": call_id, "acks": acks, "timeout_ms": timeout_ms,
                   "client_id": client_id,
                   "items": [[topic, partition, epoch, size] for (topic, partition, epoch, _),
                             size in zip(items, sizes, strict=True)]},
                  [data for *_, data in items], sizes)


def _u64(name: str, value: Any) -> int:
    if type(value) is not int or not 0 <= value < 1 << 64:
        raise FrameError(f"a request's {name} must be a u64, got {value!r}")
    return value


def _int(name: str, value: Any, least: int = 0) -> int:
    if type(value) is not int or value < least:
        raise FrameError(f"a request's {name} must be an int >= {least}, got {value!r}")
    return value


def _client_id(value: Any) -> str | None:
    if value is not None and type(value) is not str:
        raise FrameError(f"a request's client_id must be a str or null, got {value!r}")
    return value


def parse_request(frame: memoryview) -> Request:
    """A request frame's content (after its length); a produce call's batches as views of
    ``frame``."""
    if frame.nbytes < HEAD_LENGTH.size:
        raise FrameError(f"a request of {frame.nbytes} bytes has no head")
    (head_length,) = HEAD_LENGTH.unpack_from(frame)
    end = HEAD_LENGTH.size + head_length
    if end > frame.nbytes:
        raise FrameError(f"a request's head of {head_length} bytes runs past its "
                         f"{frame.nbytes}-byte frame")
    try:
        head = json.loads(bytes(frame[HEAD_LENGTH.size:end]))
        op = head.get("op", "produce")
        if op == "produce":
            return _produce(head, frame, end)
        if end != frame.nbytes:
            raise FrameError(f"a request's frame has {frame.nbytes - end} bytes after its "
                             f"head")
        if op == "stream":
            return _stream(head)
        if op in ("take", "cancel"):
            return StreamControl(_u64("id", head["id"]), op)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        if isinstance(e, FrameError):
            raise
        raise FrameError(f"a request's head is not the expected JSON: {e!r}") from e
    raise FrameError(f"a request's op must be produce, stream, take or cancel, got {op!r}")


def _produce(head: dict[str, Any], frame: memoryview, end: int) -> ProduceRequest:
    call_id, acks, timeout_ms = head["id"], head["acks"], head["timeout_ms"]
    client_id, listed = head["client_id"], head["items"]
    if acks not in (0, 1, "all") or type(acks) is bool:
        raise FrameError(f"a request's acks must be 0, 1 or 'all', got {acks!r}")
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
    return ProduceRequest(_u64("id", call_id), items, acks, _int("timeout_ms", timeout_ms),
                          _client_id(client_id))


def _stream(head: dict[str, Any]) -> StreamRequest:
    listed = head["reads"]
    if type(listed) is not list or not listed:
        raise FrameError(f"a stream's reads must be a non-empty list, got {listed!r}")
    reads = []
    for read in listed:
        if (type(read) is not list or len(read) != 5 or type(read[0]) is not str
                or any(type(n) is not int for n in read[1:])):
            raise FrameError(f"a stream's read must be [topic, partition, leader_epoch, "
                             f"offset, most bytes], got {read!r}")
        reads.append(tuple(read))
    isolation = head["isolation"]
    if type(isolation) is not str:
        raise FrameError(f"a stream's isolation must be a str, got {isolation!r}")
    return StreamRequest(_u64("id", head["id"]), reads, _int("max_bytes", head["max_bytes"]),
                         _int("max_wait_ms", head["max_wait_ms"], 1),
                         _int("min_bytes", head["min_bytes"]), isolation,
                         _client_id(head["client_id"]), _int("ahead", head["ahead"], 1))


def answer_frame(call_id: int, kind: int, body: Any = None) -> list[bytes]:
    """An answer frame of ``kind``: VALUE with the call's value (or a stream's answer),
    ERROR with the error it raised, END with nothing; as its head and its body, to write
    one after the other (a fetch answer's megabytes are not copied to join them)."""
    data = b"" if kind == END else pickle.dumps(body, protocol=pickle.HIGHEST_PROTOCOL)
    return [LENGTH.pack(ANSWER.size + len(data)) + ANSWER.pack(call_id, kind), data]


def parse_answer(frame: bytes | memoryview) -> tuple[int, int, Any]:
    """An answer frame's content (after its length): the id, the kind, and the body."""
    if len(frame) < ANSWER.size:
        raise FrameError(f"an answer of {len(frame)} bytes has no call id")
    call_id, kind = ANSWER.unpack_from(frame)
    if kind not in (ERROR, VALUE, END):
        raise FrameError(f"an answer's kind must be 0, 1 or 2, got {kind}")
    return call_id, kind, None if kind == END else \
        pickle.loads(memoryview(frame)[ANSWER.size:])  # (a view: no copy of the answer)


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
