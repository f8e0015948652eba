"""Per-producer sequence state of one partition: appends in send order, retries once.

Every batch a Producer sends carries its producer id and a per-partition sequence number
(the sequence of its first record; each record takes one). Ray starts the calls an actor
receives from one caller in order, but an async actor may begin them out of order when their
arguments arrive out of order, and a retried batch may come back after later ones. The
replica therefore appends a producer's batch only when its sequence is the next one expected.
A batch from further ahead is a :class:`SequenceGap`: the replica may wait a moment for the
gap to fill, but a gap is never accepted by waiting; when the wait ends the batch fails with
OutOfOrderSequenceError, or UnknownProducerIdError when the replica has no state at all for
its producer id (both retriable: the producer retries in place while an earlier batch of its
own is unresolved, else it bumps its epoch, KIP-360). A batch it has already appended (a
retry whose first answer was lost) gets that first answer again, real offsets included,
instead of a second copy; a batch it refused for good (too large, invalid) is refused again
with the same error. An earlier sequence than the last RECENT_BATCHES it remembers is
OutOfOrderSequenceError: whether it was appended, and where, is no longer known here, and
no answer but a real one may look like an acknowledgement.

A producer that gave up on a batch (its delivery timeout passed, or it failed for good)
bumps its epoch and numbers its next batches from 0. A batch of a newer epoch starts the
producer over (at sequence 0 only); one of an older epoch than the newest seen is refused
(InvalidProducerEpochError): a late copy must not land after the batches that followed it.

Transactions (docs/storage.md, "Transactions in the log"): a producer's transactional batch
opens its ongoing transaction in the partition if none is open (its first offset is kept);
a marker (commit or abort, written by the transaction coordinator) closes it. A marker's
producer epoch must be at least the producer's (else ProducerFencedError) and its
coordinator epoch at least the last one seen for the producer (else
TransactionCoordinatorFencedError); a marker of a newer producer epoch fences: the
producer's later data batches of an older epoch are refused with ProducerFencedError. A
marker for a producer known here at the same epoch with nothing open (a coordinator's retry
of a marker already written) is not written again. Each abort yields an
:class:`~raylog.storage.txn_index.AbortedTxn` for the aborted-transaction index; the
earliest ongoing transaction bounds the last stable offset.

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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import crc32c

from raylog.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RaylogError,
    RecordTooLargeError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from raylog.records.control import Marker, MarkerType
from raylog.records.header import BatchHeader
from raylog.storage import AppendInfo, files
from raylog.storage.formats import check_version
from raylog.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

RECENT_BATCHES = 5  # remembered per producer for retries, as Kafka's brokers do


class SequenceGap(Exception):
    """The batch is ahead of what its producer's state here allows: batches before it (of
    its producer, or of its producer epoch) are missing. ``expected`` is the sequence the
    replica waits for; ``known`` says whether it has any state for the producer id. The
    caller may wait for the gap to fill; when it stops, the batch fails with :meth:`error`."""

    def __init__(self, header: BatchHeader, expected: int, known: bool) -> None:
        super().__init__(expected)
        self.header = header
        self.expected = expected
        self.known = known

    def error(self, partition: str, waited_s: float) -> OutOfOrderSequenceError:
        """What the batch fails with once nobody waits for the gap any more."""
        h = self.header
        if not self.known:
            return UnknownProducerIdError(
                f"{partition}: no state for producer {h.producer_id}, whose batch (epoch "
                f"{h.producer_epoch}) starts at sequence {h.base_sequence}, not 0, and its "
                f"earlier batches did not come within {waited_s} s; not appended")
        return OutOfOrderSequenceError(
            f"{partition}: producer {h.producer_id} epoch {h.producer_epoch} sent sequence "
            f"{h.base_sequence}, expected {self.expected}, and the batches between did not "
            f"come within {waited_s} s; not appended")


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A batch refused for good, remembered so that a retry of it is refused the same way:
    the class name of its error (one of REFUSALS) and the message."""

    error: str
    message: str

    @classmethod
    def of(cls, error: RaylogError) -> Refusal:
        return cls(type(error).__name__, str(error))

    def again(self) -> RaylogError:
        kind = REFUSALS.get(self.error, InvalidRecordError)
        return kind(f"{self.message} (a retry of a batch refused when first sent)")


# The errors that refuse a batch for good while spending its sequence (Partition.append).
REFUSED_FOR_GOOD = (RecordTooLargeError, InvalidRecordError, CorruptRecordError)
REFUSALS = {kind.__name__: kind for kind in REFUSED_FOR_GOOD}

Outcome = AppendInfo | Refusal


NO_TXN = -1  # in a snapshot, the first offset of a producer with no ongoing transaction


@dataclasses.dataclass
class _Producer:
    epoch: int
    next_sequence: int
    recent: collections.deque  # (epoch, first sequence, Outcome), newest last
    coordinator_epoch: int = -1  # of the last marker written for it


class ProducerStates:
    """Sequence state per producer id. Not safe for concurrent use.

    Invariants: within an epoch, every sequence below a producer's ``next_sequence`` was
    appended or refused here (or by the leaders before, whose log this replica holds):
    batches are taken only in sequence order, never across a gap. ``_ongoing`` maps each
    producer with an open transaction to its first offset, in the order the transactions
    opened (so in first-offset order), and is the only record of them; a producer with an
    open transaction is never forgotten to make room.
    """

    def __init__(self, max_producers: int = 10_000) -> None:
        self._producers: collections.OrderedDict[int, _Producer] = collections.OrderedDict()
        self._max_producers = max_producers
        self._ongoing: dict[int, int] = {}

    @property
    def ongoing(self) -> dict[int, int]:
        """Producer id -> first offset of each ongoing transaction, earliest first."""
        return dict(self._ongoing)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest ongoing transaction, None if none is open: the
        last stable offset is at most this."""
        return next(iter(self._ongoing.values()), None)

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, header: BatchHeader) -> AppendInfo | None:
        """Before an append: None to go ahead, or the first answer of a batch appended
        already (a retry).

        Raises SequenceGap for a batch ahead of the next sequence expected (a producer or
        producer epoch this replica does not know starts at sequence 0), the batch's first
        error again for a batch refused already, OutOfOrderSequenceError for an earlier
        sequence not among the last RECENT_BATCHES remembered, InvalidProducerEpochError for
        an epoch older than the newest seen.
        """
        if header.producer_id < 0:
            return None
        state = self._producers.get(header.producer_id)
        epoch, sequence = header.producer_epoch, header.base_sequence
        if state is None:
            if sequence == 0:
                return None
            raise SequenceGap(header, 0, known=False)
        if epoch < state.epoch:
            if header.transactional:
                raise ProducerFencedError(
                    f"producer {header.producer_id} sent a transactional batch of epoch "
                    f"{epoch}, but epoch {state.epoch} fenced it: not appended")
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} sent a batch of epoch {epoch} after one of "
                f"epoch {state.epoch}; it was given up on and is not appended")
        if epoch > state.epoch:
            if sequence == 0:
                return None
            raise SequenceGap(header, 0, known=True)
        if sequence == state.next_sequence:
            return None
        if sequence > state.next_sequence:
            raise SequenceGap(header, state.next_sequence, known=True)
        for e, first, outcome in state.recent:
            if (e, first) == (epoch, sequence):
                if isinstance(outcome, Refusal):
                    raise outcome.again()
                return outcome
        raise OutOfOrderSequenceError(
            f"producer {header.producer_id} epoch {epoch} sent sequence {sequence}, older "
            f"than the last {RECENT_BATCHES} batches remembered of it (the next expected is "
            f"{state.next_sequence}): not appended again, and where it was is not known here")

    def check_marker(self, producer_id: int, producer_epoch: int, marker: Marker) -> bool:
        """Before a marker is appended: whether to append it. False for a producer known at
        ``producer_epoch`` with nothing open (the transaction was ended here already: a
        retry). Raises ProducerFencedError for an older producer epoch than the producer's,
        TransactionCoordinatorFencedError for an older coordinator epoch than its last
        marker's."""
        state = self._producers.get(producer_id)
        if state is None:
            return True  # it wrote nothing here: the marker still fences its older epochs
        if producer_epoch < state.epoch:
            raise ProducerFencedError(
                f"marker of producer {producer_id} at epoch {producer_epoch}, older than its "
                f"epoch {state.epoch} here: not written")
        if marker.coordinator_epoch < state.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {producer_id} from coordinator epoch "
                f"{marker.coordinator_epoch}, older than {state.coordinator_epoch} whose "
                f"marker was written here: not written")
        return producer_id in self._ongoing or producer_epoch > state.epoch

    def accept(self, header: BatchHeader, info: AppendInfo, marker: Marker | None = None
               ) -> AbortedTxn | None:
        """Record an appended batch: a data batch (a transactional one opens its
        producer's transaction if none is open) or a marker (``marker``: what the control
        batch says), which closes it. Returns the aborted transaction an abort marker
        ended, for the aborted-transaction index."""
        if header.control:
            if marker is None:
                raise CorruptRecordError(f"control batch at offset {header.base_offset} "
                                         f"taken without its marker")
            return self._end_transaction(header, info, marker)
        self._remember(header, info)
        if header.transactional and header.producer_id not in self._ongoing:
            self._ongoing[header.producer_id] = info.base_offset
        return None

    def _end_transaction(self, header: BatchHeader, info: AppendInfo, marker: Marker
                         ) -> AbortedTxn | None:
        pid = header.producer_id
        state = self._producers.get(pid)
        if state is None:
            state = self._add(pid, header.producer_epoch)
        else:
            self._producers.move_to_end(pid)
        if header.producer_epoch > state.epoch:
            # A newer epoch fences the older one: its sequences start over at 0.
            state.epoch, state.next_sequence = header.producer_epoch, 0
            state.recent.clear()
        state.coordinator_epoch = max(state.coordinator_epoch, marker.coordinator_epoch)
        first = self._ongoing.pop(pid, None)
        if first is None:
            return None
        if marker.type is not MarkerType.ABORT:
            return None
        stable = self.first_unstable_offset()
        return AbortedTxn(pid, first, info.base_offset,
                          info.base_offset + 1 if stable is None else stable)

    def refuse(self, header: BatchHeader, error: RaylogError) -> None:
        """Record a batch refused for good: its sequences are spent (the producer's batches
        after it do not wait for it), and a retry of it gets ``error`` again."""
        self._remember(header, Refusal.of(error))

    def _remember(self, header: BatchHeader, outcome: Outcome) -> None:
        if header.producer_id < 0:
            return
        state = self._producers.get(header.producer_id)
        if state is None:
            state = self._add(header.producer_id, header.producer_epoch)
        else:
            self._producers.move_to_end(header.producer_id)
        state.epoch = header.producer_epoch
        state.next_sequence = header.base_sequence + header.record_count
        state.recent.append((header.producer_epoch, header.base_sequence, outcome))

    def _add(self, producer_id: int, epoch: int) -> _Producer:
        state = self._producers[producer_id] = _Producer(
            epoch, 0, collections.deque(maxlen=RECENT_BATCHES))
        if len(self._producers) > self._max_producers:
            # Forget the least recently used, unless it has a transaction open.
            for pid in self._producers:
                if pid not in self._ongoing and pid != producer_id:
                    del self._producers[pid]
                    break
        return state

    def rebuild(self, batches: Iterable[BatchHeader | tuple[BatchHeader, Marker | None]]
                ) -> list[AbortedTxn]:
        """Restore the state from stored batches, in offset order: their headers, or
        (header, marker) pairs where a control batch's marker comes with it (see
        ``PartitionLog.replay``). Returns the aborted transactions the abort markers
        ended, in order."""
        aborted = []
        for item in batches:
            header, marker = (item, None) if isinstance(item, BatchHeader) else item
            entry = self.accept(header, AppendInfo(header.base_offset, header.last_offset,
                                                   header.max_timestamp, header.record_count),
                                marker)
            if entry is not None:
                aborted.append(entry)
        return aborted

    # A snapshot's JSON, version 3: {"version": 3, "producers": [[id, epoch, next sequence,
    # [[epoch, first sequence, outcome], ...], first offset of the ongoing transaction (-1:
    # none), coordinator epoch of its last marker (-1: none)], ...]}, an outcome being
    # [base offset, last offset, max timestamp, record count] or {"refused": error class,
    # "message": text}. Version 2 had no transaction fields; version 1 was the bare list,
    # with [epoch, first, base, last, max timestamp, count] per batch and a refusal stored
    # as base offset -1.

    def to_json(self) -> dict[str, Any]:
        return {"version": SNAPSHOT_VERSION, "producers": [
            [pid, s.epoch, s.next_sequence, [[e, q, _outcome_to_json(o)] for e, q, o in s.recent],
             self._ongoing.get(pid, NO_TXN), s.coordinator_epoch]
            for pid, s in self._producers.items()]}

    @classmethod
    def from_json(cls, data: Any, max_producers: int = 10_000) -> ProducerStates:
        """The state a snapshot holds, of version 3, 2 or 1. ValueError (or TypeError,
        KeyError) for anything else: the caller rebuilds the state from the log instead."""
        if isinstance(data, list):
            producers, read = data, _outcome_v1
        elif isinstance(data, dict) and data.get("version") in (2, SNAPSHOT_VERSION):
            producers, read = data["producers"], _outcome_v2
        else:
            raise ValueError(f"not a producer snapshot this version reads: "
                             f"{str(data)[:80]}")
        states = cls(max_producers)
        opened = []
        for pid, epoch, next_sequence, recent, *txn in producers:
            txn_first, coordinator_epoch = txn or (NO_TXN, -1)
            states._producers[pid] = _Producer(epoch, next_sequence, collections.deque(
                ((entry[0], entry[1], read(entry[2:])) for entry in recent),
                maxlen=RECENT_BATCHES), int(coordinator_epoch))
            if txn_first != NO_TXN:
                opened.append((int(txn_first), pid))
        states._ongoing = {pid: first for first, pid in sorted(opened)}
        return states


SNAPSHOT_VERSION = 3
_V1_REFUSAL = Refusal(InvalidRecordError.__name__, "refused when first sent (the reason was "
                      "not kept by the raylog version that snapshotted it)")


def _outcome_to_json(outcome: Outcome) -> list | dict:
    if isinstance(outcome, Refusal):
        return {"refused": outcome.error, "message": outcome.message}
    return list(outcome)


def _outcome_v2(fields: list) -> Outcome:
    (outcome,) = fields
    if isinstance(outcome, dict):
        return Refusal(str(outcome["refused"]), str(outcome["message"]))
    return AppendInfo(*outcome)


def _outcome_v1(fields: list) -> Outcome:
    """Version 1 stored a refusal as an answer at offset -1, which must never be read back
    as an acknowledgement."""
    info = AppendInfo(*fields)
    return _V1_REFUSAL if info.base_offset < 0 else info


def snapshot_bytes(states: ProducerStates) -> bytes:
    """A snapshot's bytes: a CRC32C line (8 hex digits) and the state's JSON line. The one
    format of ``<offset>.snapshot`` files and of tiered segments' ``producer.snapshot``."""
    body = json.dumps(states.to_json(), separators=(",", ":")).encode()
    return b"%08x\n" % crc32c.crc32c(body) + body


def snapshot_json(data: bytes, name: str | Path) -> Any:
    """The JSON of a snapshot's bytes (:func:`snapshot_bytes`), for
    :meth:`ProducerStates.from_json`. ValueError if it is torn or damaged;
    UnsupportedFormatVersionError (naming ``name``) if a newer raylog wrote it."""
    crc, _, body = data.partition(b"\n")
    if int(crc, 16) != crc32c.crc32c(body):
        raise ValueError("checksum mismatch")
    parsed = json.loads(body)
    if isinstance(parsed, dict) and type(parsed.get("version")) is int:
        check_version(name, parsed["version"], SNAPSHOT_VERSION)
    return parsed


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
        # The directory is synced once, after the older snapshots' deletions too.
        files.write_atomic(self._path(offset), snapshot_bytes(states), sync_dir=False)
        for old in self.offsets()[:-KEEP_SNAPSHOTS]:
            files.remove(self._path(old))
        files.fsync_dir(self.directory)

    def load(self, max_offset: int) -> tuple[int, ProducerStates] | None:
        """The newest intact snapshot at or below ``max_offset``: (offset, states). Raises
        UnsupportedFormatVersionError if that one is of a version newer than
        SNAPSHOT_VERSION."""
        for offset in reversed(self.offsets()):
            if offset > max_offset:
                continue
            try:
                return offset, ProducerStates.from_json(self._read(offset))
            except (OSError, ValueError, TypeError, KeyError) as e:
                logger.warning("skipping unreadable producer snapshot %s: %s",
                               self._path(offset), e)
        return None

    def _read(self, offset: int) -> Any:
        """The JSON of the snapshot at ``offset``. OSError or ValueError if it is torn or
        damaged; UnsupportedFormatVersionError if a newer raylog wrote it (refused, not
        skipped: this raylog would write its own snapshots over the newer one's)."""
        path = self._path(offset)
        return snapshot_json(path.read_bytes(), path)

    def check_versions(self) -> None:
        """Raise UnsupportedFormatVersionError if any snapshot is of a newer version: called
        before the log opens, so that nothing in the directory changes before a refusal."""
        for offset in self.offsets():
            try:
                self._read(offset)
            except (OSError, ValueError):
                continue  # damaged: load() skips it and says so

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
