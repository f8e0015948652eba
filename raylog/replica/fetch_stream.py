"""A fetch stream's rules (``fetch_stream`` in actors/serving.py): Kafka's fetch repeated in
one streaming call, each answer yielded as soon as the fetch gives it. Plain Python.

A consumer that reads by fetch calls pays, for every answer, a call back to the broker
before it can get the next one: a record appended while an answer is on its way back, or
the next call on its way there, waits for that round trip, and on a shared machine that
wait has a long tail (docs/performance.md, "The hop to a reader"). A stream takes the
request leg out: the broker goes on reading the same partitions, each from where its last
answer's batches end, and yields the next answer when there is one.

Both sides move a partition's offset by the same rule, so they agree without another
message: past the last batch answered (the consumer's ``fetch_offset`` moves so in
``Consumer._take_in``), and not at all for a partition answered with no batches or not
read. A stream ends after an answer that holds an error (the consumer handles it as for a
fetch, and fetches again) or was held back by the consumer's quota, and after
``STREAM_LIFETIME_S``: a stream whose consumer died ends by then, and a live consumer opens
another.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raylog.errors import RaylogError
from raylog.records.header import iter_headers
from raylog.replica.partition import FetchResult

STREAM_LIFETIME_S = 30.0
# Answers a stream may have ready that its consumer has not taken yet (Ray's generator
# backpressure): one on its way while the next is read.
STREAM_AHEAD = 2

Read = tuple[str, int, int, int, int]  # topic, partition, leader epoch, offset, most bytes


def next_reads(reads: Sequence[Read], answers: Sequence[Any]) -> list[Read]:
    """The reads of a stream's next fetch: each partition's offset moved past the last
    batch of its answer (unchanged where the answer had none, or the partition was not
    read)."""
    out = []
    for read, answer in zip(reads, answers, strict=True):
        if isinstance(answer, FetchResult) and answer.data:
            last = None
            for _, header in iter_headers(answer.data, verify=False):
                last = header
            topic, partition, epoch, offset, most = read
            read = (topic, partition, epoch, max(offset, last.next_offset), most)
        out.append(read)
    return out


def ends_stream(answers: Sequence[Any]) -> bool:
    """Whether a stream ends after these answers: one is an error."""
    return any(isinstance(answer, RaylogError) for answer in answers)
