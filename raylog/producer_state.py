"""Per-producer sequence state of one partition: appends in send order, retries once.

Every batch a Producer sends carries its producer id and a per-partition sequence number
(the sequence of its first record; each record takes one). Ray starts the calls an actor
receives from one caller in order, but an async actor may begin them out of order when their
arguments arrive out of order, and a retried batch may come back after later ones. The
replica therefore appends a producer's batch only when its sequence is the next one expected;
a batch from further ahead waits for the gap to fill, and a batch it has already appended (a
retry whose first answer was lost) gets the first answer again instead of a second copy.

A producer that gave up on a batch (its delivery timeout passed, or it failed for good)
bumps its epoch and numbers its next batches from 0. A batch of a newer epoch starts the
producer over; one of an older epoch than the newest seen is refused
(InvalidProducerEpochError): a late copy must not land after the batches that followed it.

Plain Python; the replica actor owns one per partition and does the waiting.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable

from raylog.errors import InvalidProducerEpochError
from raylog.records.header import BatchHeader
from raylog.storage import AppendInfo

RECENT_BATCHES = 5  # remembered per producer for retries, as Kafka's brokers do


class SequenceGap(Exception):
    """The batch is ahead of the next sequence expected from its producer."""

    def __init__(self, expected: int) -> None:
        super().__init__(expected)
        self.expected = expected


@dataclasses.dataclass
class _Producer:
    epoch: int
    next_sequence: int
    recent: collections.deque  # (epoch, first sequence, AppendInfo), newest last


class ProducerStates:
    """Sequence state per producer id. Not safe for concurrent use."""

    def __init__(self, max_producers: int = 10_000) -> None:
        self._producers: collections.OrderedDict[int, _Producer] = collections.OrderedDict()
        self._max_producers = max_producers

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, header: BatchHeader, accept_unknown: bool = False) -> AppendInfo | None:
        """Before an append: None to go ahead, the earlier AppendInfo for a duplicate, or
        SequenceGap when earlier batches of the producer are missing.

        A producer (or producer epoch) this replica does not know starts at sequence 0; a
        first batch from it with a later sequence waits, unless ``accept_unknown`` (the wait
        is over: its earlier batches were appended before what this replica remembers).
        Raises InvalidProducerEpochError for an epoch older than the newest seen.
        """
        if header.producer_id < 0:
            return None
        state = self._producers.get(header.producer_id)
        sequence = header.base_sequence
        if state is not None and header.producer_epoch < state.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} sent a batch of epoch {header.producer_epoch} "
                f"after one of epoch {state.epoch}; it was given up on and is not appended")
        if state is None or header.producer_epoch > state.epoch:
            if sequence == 0 or accept_unknown:
                return None
            raise SequenceGap(0)
        if sequence == state.next_sequence:
            return None
        if sequence > state.next_sequence:
            raise SequenceGap(state.next_sequence)
        for epoch, first, info in state.recent:
            if (epoch, first) == (header.producer_epoch, sequence):
                return info
        # Older than anything remembered: it was appended long ago; do not append it again.
        return AppendInfo(-1, -1, header.max_timestamp, header.record_count)

    def accept(self, header: BatchHeader, info: AppendInfo) -> None:
        """Record an appended batch."""
        if header.producer_id < 0:
            return
        state = self._producers.get(header.producer_id)
        if state is None:
            state = self._producers[header.producer_id] = _Producer(
                header.producer_epoch, 0, collections.deque(maxlen=RECENT_BATCHES))
            if len(self._producers) > self._max_producers:
                self._producers.popitem(last=False)  # forget the least recently used
        else:
            self._producers.move_to_end(header.producer_id)
        state.epoch = header.producer_epoch
        state.next_sequence = header.base_sequence + header.record_count
        state.recent.append((header.producer_epoch, header.base_sequence, info))

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Restore the state from the headers of stored batches, in offset order."""
        for header in headers:
            self.accept(header, AppendInfo(header.base_offset, header.last_offset,
                                           header.max_timestamp, header.record_count))
