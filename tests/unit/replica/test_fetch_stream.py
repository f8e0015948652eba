"""A fetch stream's rules (raylog/replica/fetch_stream.py): the broker moves each partition's
next read past the batches it just answered, as the consumer moves its ``fetch_offset``, and
ends the stream after an error."""

from __future__ import annotations

from raylog.errors import NotLeaderError
from raylog.records import stamp
from raylog.replica.fetch_stream import ends_stream, next_reads
from raylog.replica.partition import FetchResult
from tests.unit.logutil import batch_of


def batches(*spans: tuple[int, int]) -> bytes:
    """Batches back to back, one per (base offset, records)."""
    out = b""
    for base, n in spans:
        batch = bytearray(batch_of([b"v"] * n))
        stamp(batch, base, 0)
        out += bytes(batch)
    return out


def answer(data: bytes) -> FetchResult:
    return FetchResult(data, 100, 0, 100)


def test_each_read_moves_past_the_last_batch_of_its_answer_and_no_further():
    reads = [("t", 0, 3, 10, 1 << 20), ("t", 1, 3, 7, 1 << 20), ("t", 2, 3, 5, 1 << 20)]
    moved = next_reads(reads, [answer(batches((10, 4), (14, 2))), answer(b""), None])
    assert moved == [("t", 0, 3, 16, 1 << 20), ("t", 1, 3, 7, 1 << 20),
                     ("t", 2, 3, 5, 1 << 20)]


def test_a_batch_that_starts_below_the_read_moves_it_to_its_end():
    """A tiered log's remote read answers whole stored batches, the first of which may
    start below the offset asked for; a batch ending before it never moves it back."""
    assert next_reads([("t", 0, 1, 12, 100)], [answer(batches((10, 5)))]) == \
        [("t", 0, 1, 15, 100)]
    assert next_reads([("t", 0, 1, 12, 100)], [answer(batches((5, 3)))]) == \
        [("t", 0, 1, 12, 100)]


def test_a_stream_ends_after_an_answer_with_an_error():
    assert not ends_stream([answer(b""), None])
    assert ends_stream([answer(b""), NotLeaderError("moved")])
