"""The produce socket's frames (raylog/util/socket_frames.py): round trips, the splitter over
any cut of the stream, and every malformed request refused."""

from __future__ import annotations

import json
import random
import struct

import pytest

from raylog.errors import NotLeaderError
from raylog.storage import AppendInfo
from raylog.util.socket_frames import (
    END,
    ERROR,
    HELLO_BYTES,
    LENGTH,
    SMALL_FRAME_BYTES,
    VALUE,
    FrameError,
    FrameSplitter,
    StreamControl,
    StreamRequest,
    answer_frame,
    check_hello,
    control_frame,
    hello,
    new_token,
    parse_answer,
    parse_request,
    request_frame,
    stream_frame,
)


def joined(pieces: list) -> bytes:
    return b"".join(bytes(memoryview(p)) for p in pieces)


def body(frame: bytes) -> memoryview:
    (length,) = LENGTH.unpack_from(frame)
    assert length == len(frame) - LENGTH.size
    return memoryview(frame)[LENGTH.size:]


def test_a_request_round_trips_with_its_batches_as_views():
    items = [("t", 0, 3, b"first batch"), ("t", 5, 7, bytearray(b"second")), ("u", 1, 0, b"")]
    request = parse_request(body(joined(request_frame(42, items, "all", 1500, "client-1"))))
    assert request.call_id == 42 and request.acks == "all" and request.timeout_ms == 1500
    assert request.client_id == "client-1"
    assert [(t, p, e, bytes(d)) for t, p, e, d in request.items] == \
        [("t", 0, 3, b"first batch"), ("t", 5, 7, b"second"), ("u", 1, 0, b"")]
    assert all(isinstance(d, memoryview) for *_, d in request.items)


def test_an_answer_round_trips_values_errors_and_ends():
    info = AppendInfo(10, 12, 1234, 3)
    assert parse_answer(body(joined(answer_frame(7, VALUE, [info])))) == (7, VALUE, [info])
    call_id, kind, error = parse_answer(
        body(joined(answer_frame(8, ERROR, NotLeaderError("not me")))))
    assert (call_id, kind, type(error), str(error)) == (8, ERROR, NotLeaderError, "not me")
    assert parse_answer(body(joined(answer_frame(9, END)))) == (9, END, None)
    with pytest.raises(FrameError, match="kind"):
        parse_answer(bytes(body(joined(answer_frame(9, END))))[:-1] + b"\x07")


def test_a_stream_and_its_controls_round_trip():
    reads = [("t", 0, 3, 100, 1 << 20), ("u", 2, 0, 0, 10)]
    request = parse_request(body(stream_frame(5, reads, 50 << 20, 500, 1, "read_committed",
                                              None, 2)))
    assert request == StreamRequest(5, reads, 50 << 20, 500, 1, "read_committed", None, 2)
    assert parse_request(body(control_frame(5, "take"))) == StreamControl(5, "take")
    assert parse_request(body(control_frame(5, "cancel"))) == StreamControl(5, "cancel")


STREAM = {"op": "stream", "id": 1, "reads": [["t", 0, 0, 0, 10]], "max_bytes": 10,
          "max_wait_ms": 500, "min_bytes": 1, "isolation": "read_uncommitted",
          "client_id": None, "ahead": 2}


@pytest.mark.parametrize(("change", "message"), [
    ({"op": "steal"}, "op must be"),
    ({"reads": []}, "non-empty list"),
    ({"reads": [["t", 0, 0, 0]]}, "read must be"),
    ({"reads": [["t", 0, "0", 0, 10]]}, "read must be"),
    ({"max_wait_ms": 0}, "max_wait_ms must be an int >= 1"),
    ({"ahead": 0}, "ahead must be an int >= 1"),
    ({"isolation": 1}, "isolation must be a str"),
    ({"id": None}, "id must be a u64"),
    ({"max_bytes": None}, "max_bytes must be an int"),
])
def test_a_malformed_stream_request_is_refused(change, message):
    with pytest.raises(FrameError, match=message):
        parse_request(request_with_head({**STREAM, **change}))
    with pytest.raises(FrameError, match="bytes after its head"):
        parse_request(request_with_head(STREAM, b"x"))


def request_with_head(head: object, batches: bytes = b"") -> memoryview:
    data = json.dumps(head).encode()
    return memoryview(struct.pack(">I", len(data)) + data + batches)


GOOD = {"id": 1, "acks": 1, "timeout_ms": 10, "client_id": None, "items": [["t", 0, 0, 3]]}


@pytest.mark.parametrize(("change", "message"), [
    ({"id": -1}, "id must be a u64"),
    ({"id": "1"}, "id must be a u64"),
    ({"acks": 2}, "acks must be 0, 1 or 'all'"),
    ({"acks": True}, "acks must be 0, 1 or 'all'"),
    ({"timeout_ms": -5}, "timeout_ms must be an int >= 0"),
    ({"client_id": 5}, "client_id must be a str or null"),
    ({"items": {}}, "items must be a list"),
    ({"items": [["t", 0, 0]]}, "item must be"),
    ({"items": [["t", "0", 0, 3]]}, "item must be"),
    ({"items": [["t", 0, 0, -3]]}, "item must be"),
    ({"items": [["t", 0, 0, 4]]}, "run past"),
    ({"items": [["t", 0, 0, 2]]}, "bytes after its batches"),
])
def test_a_malformed_request_is_refused_naming_what_is_wrong(change, message):
    with pytest.raises(FrameError, match=message):
        parse_request(request_with_head({**GOOD, **change}, b"abc"))


@pytest.mark.parametrize("frame", [b"", b"\x00\x00", struct.pack(">I", 99) + b"{}",
                                   struct.pack(">I", 2) + b"{]", struct.pack(">I", 2) + b"[]",
                                   struct.pack(">I", 4) + b"\xff\xfe{}"])
def test_a_request_without_a_readable_head_is_refused(frame):
    with pytest.raises(FrameError):
        parse_request(memoryview(frame))
    assert parse_request(request_with_head(GOOD, b"abc")).call_id == 1  # the good one passes


def test_a_call_above_the_frame_limit_is_refused_before_anything_is_sent(monkeypatch):
    monkeypatch.setattr("raylog.util.socket_frames.MAX_FRAME_BYTES", 100)
    with pytest.raises(FrameError, match="above the socket's limit"):
        request_frame(1, [("t", 0, 0, b"x" * 200)], 1, 10, None)


def frames_of(sizes: list[int]) -> tuple[list[bytes], bytes]:
    rng = random.Random(len(sizes))
    payloads = [rng.randbytes(n) for n in sizes]
    stream = b"".join(LENGTH.pack(len(p)) + p for p in payloads)
    return payloads, stream


def feed(splitter: FrameSplitter, stream: bytes, cuts: list[int]) -> list[bytes]:
    """Write ``stream`` into the splitter as a socket would: at most what its buffer takes,
    cut at ``cuts`` too."""
    out: list[bytes] = []
    pos = 0
    cuts = [*sorted(set(cuts)), len(stream)]
    while pos < len(stream):
        target = splitter.buffer()
        end = min(next(c for c in cuts if c > pos), pos + len(target))
        n = end - pos
        target[:n] = stream[pos:end]
        out.extend(bytes(frame) for frame in splitter.filled(n))
        pos = end
    return out


@pytest.mark.parametrize("seed", range(20))
def test_the_splitter_gives_every_frame_whatever_the_cuts(seed):
    rng = random.Random(seed)
    sizes = [rng.choice([0, 1, 7, 100, 5000, SMALL_FRAME_BYTES - 4, SMALL_FRAME_BYTES,
                         SMALL_FRAME_BYTES + 1, 300_000]) for _ in range(12)]
    payloads, stream = frames_of(sizes)
    cuts = [rng.randrange(len(stream)) for _ in range(rng.randrange(0, 40))]
    assert feed(FrameSplitter(), stream, cuts) == payloads


def test_a_large_frame_comes_as_a_view_of_its_own_buffer():
    payloads, stream = frames_of([SMALL_FRAME_BYTES + 10, 5])
    splitter = FrameSplitter()
    frames = []
    pos = 0
    while pos < len(stream):
        target = splitter.buffer()
        n = min(len(target), len(stream) - pos)
        target[:n] = stream[pos:pos + n]
        frames.extend(splitter.filled(n))
        pos += n
    assert [bytes(f) for f in frames] == payloads
    assert isinstance(frames[0].obj, bytearray)  # read in place, never reused
    frames[0].obj[:4] = b"XXXX"  # ... so writing it changes nothing the splitter holds
    assert bytes(frames[1]) == payloads[1]


def test_a_frame_above_the_limit_is_refused():
    splitter = FrameSplitter(limit=1000)
    target = splitter.buffer()
    target[:4] = LENGTH.pack(1001)
    with pytest.raises(FrameError, match="above the limit of 1000"):
        list(splitter.filled(4))


def test_only_the_hosts_token_opens_a_connection():
    token = new_token()
    check_hello(hello(token), token)
    with pytest.raises(FrameError, match="not this host's"):
        check_hello(hello(new_token()), token)
    with pytest.raises(FrameError, match="did not start"):
        check_hello(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[:HELLO_BYTES], token)
    with pytest.raises(FrameError, match="32 bytes"):
        hello(b"short")
