"""Where the copy of a partition stands, written into the copied batches themselves.

The mirror forwards each stored source batch to the target as it is, changing only its
producer fields (``header.with_producer``: the payload CRC is recomputed, nothing is
re-encoded). Those fields say which source offsets the batch holds::

    producer id     MIRROR_ID_BIT | run_start      run_start: a source offset (< 2**62)
    producer epoch  MIRROR_EPOCH
    base sequence   first source offset - run_start

A *run* is a stretch of source offsets the mirror copied without a gap, one producer id
for all of it; its batches hold consecutive sequences, as any idempotent producer's do. So
the last batch of a target partition tells where the copy stopped: at source offset
``run_start + base_sequence + record_count`` (:func:`source_next_offset`). A mirror that
restarts reads that and goes on from there; nothing is kept anywhere else.

A run ends where the source has a gap (retention moved the log start, compaction removed
whole batches, a batch holds explicit offsets) or its sequences would pass 2**31 - 1. The
next batch starts a new run with sequence 0 and a producer id chosen so that the formula
above still gives the source offset after it: ``run_start = source end - records``, which
only grows, so producer ids never repeat within a partition.

The numbering is a function of the source batches and of where the copy stood: a restarted
mirror numbers a batch it may already have sent exactly as before, and the target's leader,
which keeps every producer's last sequences (the idempotent producer's rules), answers a
batch it already holds with its first answer instead of appending it twice. Together: each
source record lands on the target once, in order, across crashes of the mirror and of the
target's brokers.

Plain Python: no Ray, no Arrow.
"""

from __future__ import annotations

import dataclasses

from raylog.errors import MirrorPositionError
from raylog.records.header import MAX_SEQUENCE, BatchHeader

MIRROR_ID_BIT = 1 << 62
MIRROR_EPOCH = 0x6D72  # "mr": with the id bit, tells a mirror's batch from a producer's
MAX_RUN_START = MIRROR_ID_BIT - 1


def is_mirror_batch(header: BatchHeader) -> bool:
    return header.producer_id >= MIRROR_ID_BIT and header.producer_epoch == MIRROR_EPOCH


def source_next_offset(header: BatchHeader) -> int:
    """The source offset right after the records of a mirrored target batch."""
    if not is_mirror_batch(header):
        raise MirrorPositionError(
            f"the batch at target offset {header.base_offset} was not written by a mirror "
            f"(producer id {header.producer_id}, epoch {header.producer_epoch}); a remote "
            f"topic must only be written by its mirror")
    return header.producer_id - MIRROR_ID_BIT + header.base_sequence + header.record_count


def source_range(header: BatchHeader) -> tuple[int, int, bool]:
    """(first, end, exact) of a mirrored target batch: its records came from source offsets
    [first, end). ``exact``: one record per offset (a batch that continues a run); else
    (the first batch of a run) its records may be spread below ``first`` too."""
    end = source_next_offset(header)
    return end - header.record_count, end, header.base_sequence > 0


def resume_offset(header: BatchHeader, source_offset: int) -> int:
    """The target offset a consumer resumes at whose next source record is
    ``source_offset``, given ``header``: the last target batch whose source records start
    at or below it. Exact inside a batch that continues a run; otherwise that batch's
    start (its records are read again), never past a record not read."""
    first, end, exact = source_range(header)
    if source_offset >= end:
        return header.next_offset
    return header.base_offset + (source_offset - first if exact else 0)


@dataclasses.dataclass(frozen=True)
class Stamp:
    """The producer fields of one forwarded batch; ``new_run``: the first of a new producer
    id, sent only once every batch before it was acknowledged (the leader keeps order per
    producer id, not across them)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    new_run: bool


class PartitionPosition:
    """The numbering state of one mirrored partition: the next source offset to copy, and
    the current run (None before the first batch). Not safe for concurrent use.

    >>> position = PartitionPosition.fresh(0)
    >>> position.stamp(0, 10, 10).base_sequence, position.stamp(10, 25, 15).base_sequence
    (0, 10)
    >>> position.next_source
    25
    """

    def __init__(self, next_source: int, run_start: int | None = None,
                 next_sequence: int = 0) -> None:
        self.next_source = next_source
        self.run_start = run_start
        self.next_sequence = next_sequence

    @classmethod
    def fresh(cls, start: int) -> PartitionPosition:
        """Nothing copied yet: start at source offset ``start``."""
        return cls(start)

    @classmethod
    def after(cls, header: BatchHeader) -> PartitionPosition:
        """Go on after ``header``, the last batch of the target partition."""
        next_source = source_next_offset(header)
        run_start = header.producer_id - MIRROR_ID_BIT
        return cls(next_source, run_start, next_source - run_start)

    def skip(self, source_end: int) -> None:
        """Source offsets below ``source_end`` hold nothing more to copy (compaction left a
        batch whose remaining records were all copied): move past them. The next batch
        starts a new run, since its sequence would no longer say its offset."""
        if source_end > self.next_source:
            self.next_source, self.run_start, self.next_sequence = source_end, None, 0

    def stamp(self, source_start: int, source_end: int, records: int) -> Stamp:
        """Number the next forwarded batch: ``records`` records taken from source offsets
        [source_start, source_end) (fewer records than offsets: a compacted range), at or
        after :attr:`next_source`; the position moves past it."""
        if source_start < self.next_source or not 0 < records <= source_end - source_start:
            raise ValueError(f"batch [{source_start}, {source_end}) of {records} records does "
                             f"not follow source offset {self.next_source}")
        dense = source_end - source_start == records
        if self.run_start is not None and dense and source_start == self.next_source and \
                self.next_sequence + records <= MAX_SEQUENCE:
            sequence, new_run = self.next_sequence, False
        else:
            run_start = source_end - records
            if run_start > MAX_RUN_START:
                raise MirrorPositionError(f"source offset {run_start} is beyond what a "
                                          f"mirrored batch can carry (2**62)")
            self.run_start, sequence, new_run = run_start, 0, True
        self.next_source = source_end
        self.next_sequence = sequence + records
        return Stamp(MIRROR_ID_BIT | self.run_start, MIRROR_EPOCH, sequence, new_run)
