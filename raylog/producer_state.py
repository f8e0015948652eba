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

A replica rebuilds this state when it opens its log, and after a follower truncated it,
from the batch headers. So that this does not mean reading every header of a large log,
:class:`ProducerSnapshots` writes the state to ``<offset>.snapshot`` beside the segments
whenever the log rolls a segment and when it closes: a reopen loads the newest snapshot at
or below the log end and replays only the batches after it.

Plain Python; the replica owns one per partition and does the waiting.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import crc32c

from raylog.errors import InvalidProducerEpochError
from raylog.records.header import BatchHeader
from raylog.storage import AppendInfo, files

logger = logging.getLogger(__name__)

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

    def to_json(self) -> list:
        return [[pid, s.epoch, s.next_sequence, [[e, q, *info] for e, q, info in s.recent]]
                for pid, s in self._producers.items()]

    @classmethod
    def from_json(cls, data: list, max_producers: int = 10_000) -> ProducerStates:
        states = cls(max_producers)
        for pid, epoch, next_sequence, recent in data:
            states._producers[pid] = _Producer(epoch, next_sequence, collections.deque(
                ((e, q, AppendInfo(*info)) for e, q, *info in recent), maxlen=RECENT_BATCHES))
        return states


SNAPSHOT_SUFFIX = ".snapshot"
KEEP_SNAPSHOTS = 2


class ProducerSnapshots:
    """The producer-state snapshots of one log directory: ``<offset, 20 digits>.snapshot``,
    each the state after every batch below ``offset``.

    A file is a CRC32C line and a JSON line, written to a temporary name, fsynced, renamed
    and the directory fsynced; one that fails its checksum is skipped (and the state
    rebuilt from an older one or from the log). Not safe for concurrent use.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def offsets(self) -> list[int]:
        out = []
        for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def _path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def write(self, offset: int, states: ProducerStates) -> None:
        """Snapshot ``states`` as of ``offset``; keep the newest KEEP_SNAPSHOTS."""
        body = json.dumps(states.to_json(), separators=(",", ":")).encode()
        path = self._path(offset)
        tmp = path.with_name(path.name + ".tmp")
        fd = files.create(tmp, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, b"%08x\n" % crc32c.crc32c(body) + body)
            os.fsync(fd)
        finally:
            os.close(fd)
        files.replace(tmp, path)
        for old in self.offsets()[:-KEEP_SNAPSHOTS]:
            files.remove(self._path(old))
        files.fsync_dir(self.directory)

    def load(self, max_offset: int) -> tuple[int, ProducerStates] | None:
        """The newest intact snapshot at or below ``max_offset``: (offset, states)."""
        for offset in reversed(self.offsets()):
            if offset > max_offset:
                continue
            try:
                raw = self._path(offset).read_bytes()
                crc, _, body = raw.partition(b"\n")
                if int(crc, 16) != crc32c.crc32c(body):
                    raise ValueError("checksum mismatch")
                return offset, ProducerStates.from_json(json.loads(body))
            except (OSError, ValueError, TypeError) as e:
                logger.warning("skipping damaged producer snapshot %s: %s",
                               self._path(offset), e)
        return None

    def remove_above(self, offset: int) -> None:
        """Remove the snapshots past ``offset`` (before the log is truncated to it), durably:
        a crash then must not find a snapshot of records the log no longer has."""
        doomed = [o for o in self.offsets() if o > offset]
        for o in doomed:
            files.remove(self._path(o))
        if doomed:
            files.fsync_dir(self.directory)

    def remove_all(self) -> None:
        self.remove_above(-1)
