"""The leader's side of tiered storage, as plain rules: which segment to copy next, how a
copy is made and recorded, what retention deletes remotely, how far the local log may shrink.

A copy (:meth:`Uploader.copy`), in this order, so that a crash at any step leaves either a
readable segment or an orphan its successor deletes (docs/tiered.md):

1. record COPY_STARTED (a fresh segment id, so attempts never share a folder);
2. put every object of the segment's folder (layout.py's names, size and sha256 of each in
   the record);
3. put ``manifest.json`` last (what a reader without the metadata topic trusts);
4. record COPY_FINISHED: from then on the segment is readable, and the local copy may go.
   If the record is ignored (a newer leader fenced this one, or deleted the attempt as a
   deposed leader's orphan, while it was being put), the folder is deleted again: objects
   put after that deletion would otherwise be an orphan no record names.

A new leader first records a fence (:meth:`Uploader.fence`), then reads the metadata and
deletes the orphans it finds: a deposed leader's COPY_FINISHED recorded after the fence is
refused (raylog/tiered/metadata.py), so what the new leader found unfinished stays so.

What is copied: whole batches from the one that starts at the partition's next offset to
copy (the end of the remote log + 1) to the end of the local segment holding it. Replicas
roll segments at different offsets, so a new leader's segment may begin below that offset;
batches are the same on every replica, so the copy starts at that batch and the remote log
stays without gap or overlap. Only closed segments wholly below the high watermark are
copied.

With each copy goes the producer state as of its end (``producer.snapshot``): the state at
the end of the previous remote segment (its own ``producer.snapshot``), or, when there is
none (the partition's first copy, or the previous upload is of before snapshots or its
snapshot is damaged), the state rebuilt from the local log below the copy (its newest local
snapshot at or below, then the batches after); then the copy's own batch headers (and
markers) applied by ProducerStates.rebuild, the replica's own rules. No payload is
decompressed.

Plain Python; the store and the record writer are injected (tests use a file:// store and
a list), as is the clock. One Uploader is used by one thread.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from raylog.errors import RemoteObjectError
from raylog.records.control import Marker, read_marker
from raylog.records.header import BatchHeader, iter_headers
from raylog.replica.producer_state import ProducerSnapshots, ProducerStates, snapshot_bytes
from raylog.storage.config import LogConfig
from raylog.storage.log import PartitionLog
from raylog.storage.txn_index import AbortedTxn
from raylog.tiered.layout import (
    COPY_FINISHED,
    COPY_STARTED,
    DELETE_FINISHED,
    DELETE_STARTED,
    LEADER_EPOCHS,
    MANIFEST,
    OFFSET_INDEX,
    PRODUCER_SNAPSHOT,
    SEGMENT,
    TIME_INDEX,
    TXN_INDEX,
    RemoteFile,
    RemoteSegment,
    digest,
    fence_record,
)
from raylog.tiered.metadata import RemoteLogState
from raylog.tiered.reader import load_producer_snapshot
from raylog.tiered.store import ObjectStore
from raylog.util import faults
from raylog.util.clocks import wall_clock_ms

logger = logging.getLogger(__name__)

# The formats of storage/index.py's offset and time indexes and storage/txn_index.py's
# entries, relative to the remote segment's base offset and positions in its segment.log.
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
_TXN_ENTRY = struct.Struct(">qqqq")

# Returns once the record is in the topic, whether it took effect: False when the attempt
# had already gone further (RemoteLogState.apply ignored it).
WriteRecord = Callable[[RemoteSegment], bool]


@dataclass(frozen=True)
class LocalSegment:
    """A closed local segment as the leader's event loop saw it (read on another thread:
    closed segments below the high watermark do not change; only retention removes them,
    and only once copied)."""

    base_offset: int
    next_offset: int
    path: str
    size: int


def closed_segments(log: PartitionLog) -> list[LocalSegment]:
    """The log's segments but the active one, as an upload plan sees them."""
    return [LocalSegment(s.base_offset, s.next_offset, str(s.path), s.size)
            for s in log.segments[:-1]]


@dataclass(frozen=True)
class PartitionRef:
    topic: str
    topic_id: str
    partition: int


@dataclass(frozen=True)
class ProducersBefore:
    """Where a copy's producer state before its first offset comes from: ``previous``, the
    readable remote segment ending just below it (its snapshot, if its upload has one), else
    the local log: ``earlier``, its closed segments starting below the copy's first offset
    (the copied one too, when the copy starts inside it), from ``log_start`` on, and the
    producer snapshots in ``directory``."""

    previous: RemoteSegment | None = None
    earlier: tuple[LocalSegment, ...] = ()
    log_start: int = 0
    directory: str | None = None


@dataclass(frozen=True)
class CopyPlan:
    """One copy to make: ``segment`` from the batch at ``from_offset`` on, by the leader
    ``broker_id`` at ``leader_epoch``, with the leader epochs and aborted transactions of
    those offsets, and where the producer state before them is (the default: none, a log
    that starts at ``from_offset``)."""

    ref: PartitionRef
    segment: LocalSegment
    from_offset: int
    leader_epoch: int
    broker_id: int
    leader_epochs: dict[int, int]
    aborted: tuple[AbortedTxn, ...] = ()
    producers: ProducersBefore = ProducersBefore()


def next_offset_to_copy(state: RemoteLogState, ref: PartitionRef, local_log_start: int) -> int:
    """The first offset the remote log lacks: after its last readable offset, or the local
    log start when it has none (or when local records past it are gone: the remote log
    cannot have what no replica holds)."""
    end = state.end_offset(ref.topic_id, ref.partition)
    return max(local_log_start, -1 if end is None else end + 1)


def plan_copy(state: RemoteLogState, ref: PartitionRef, segments: Sequence[LocalSegment],
              high_watermark: int, local_log_start: int, leader_epoch: int, broker_id: int,
              epochs: Sequence[tuple[int, int]],
              aborted: Callable[[int, int], list[AbortedTxn]] = lambda s, e: [],
              directory: str | Path | None = None) -> CopyPlan | None:
    """The next copy, or None: the closed segment (``segments``: every closed one, in
    order) that holds the next offset to copy, if it lies wholly below the high watermark.
    ``epochs``: the leader-epoch cache's (epoch, start offset) entries; ``directory``: the
    local log's, for its producer snapshots."""
    start = next_offset_to_copy(state, ref, local_log_start)
    for segment in segments:
        if segment.base_offset <= start < segment.next_offset:
            if segment.next_offset > high_watermark:
                return None
            end = segment.next_offset - 1
            previous = state.segment_for(ref.topic_id, ref.partition, start - 1) \
                if start > 0 else None
            before = ProducersBefore(
                previous, tuple(s for s in segments if s.base_offset < start),
                local_log_start, None if directory is None else str(directory))
            return CopyPlan(ref, segment, start, leader_epoch, broker_id,
                            {e: s for e, s in epochs if s <= end},
                            tuple(aborted(start, segment.next_offset)), before)
    return None


def segment_objects(data: bytes, base_offset: int, leader_epochs: dict[int, int],
                    aborted: Sequence[AbortedTxn], index_interval_bytes: int = 4096
                    ) -> tuple[dict[str, bytes], int, int]:
    """The objects of a remote segment holding the whole batches ``data`` (the first at
    ``base_offset``), its end offset and its largest timestamp."""
    offset_index, time_index = bytearray(), bytearray()
    since_entry, max_ts, end = index_interval_bytes, -1, base_offset - 1
    for position, header in iter_headers(data, verify=True):
        relative = header.base_offset - base_offset
        if since_entry >= index_interval_bytes:
            offset_index += _OFFSET_ENTRY.pack(relative, position)
            if header.max_timestamp > max_ts:
                time_index += _TIME_ENTRY.pack(header.max_timestamp,
                                               header.last_offset - base_offset)
            since_entry = 0
        since_entry += header.size
        max_ts = max(max_ts, header.max_timestamp)
        end = header.last_offset
    objects = {SEGMENT: data, OFFSET_INDEX: bytes(offset_index), TIME_INDEX: bytes(time_index),
               LEADER_EPOCHS: "".join(f"{e} {s}\n" for e, s in sorted(leader_epochs.items()))
               .encode()}
    if aborted:
        objects[TXN_INDEX] = b"".join(_TXN_ENTRY.pack(*entry) for entry in aborted)
    return objects, end, max_ts


def stored_batches(data: bytes, start: int, end: int | None = None, verify: bool = True
                   ) -> Iterator[tuple[BatchHeader, Marker | None]]:
    """The batches of ``data`` (whole stored batches) holding offsets from ``start`` and
    starting below ``end``: each header with its marker if it is a control batch, as
    ProducerStates.rebuild takes them (PartitionLog.replay's answer, from bytes). CRCs are
    checked unless ``verify`` is False (bytes checked already)."""
    for position, header in iter_headers(data, verify=verify):
        if end is not None and header.base_offset >= end:
            return
        if header.next_offset > start:
            yield header, read_marker(header, data, position) if header.control else None


def producers_before(store: ObjectStore, plan: CopyPlan) -> ProducerStates:
    """The producer state after every batch below ``plan.from_offset`` (see the module
    docstring). Reads the local files on the caller's thread: the closed segments below
    the high watermark do not change, and a snapshot file removed meanwhile is skipped."""
    before = plan.producers
    previous = before.previous
    if previous is not None:
        try:
            states = load_producer_snapshot(store, previous)
        except RemoteObjectError as e:
            logger.warning("%s: rebuilding producer state from the local log instead", e)
        else:
            if states is not None:
                return states
    states, start = ProducerStates(), before.log_start
    if before.directory is not None:
        found = ProducerSnapshots(Path(before.directory)).load(plan.from_offset)
        if found is not None and found[0] >= start:
            start, states = found
    for segment in before.earlier:
        if segment.next_offset <= start:
            continue
        with open(segment.path, "rb") as f:
            states.rebuild(stored_batches(f.read(), start, plan.from_offset))
    return states


def read_from(path: str, from_offset: int) -> bytes:
    """A segment file's bytes from the batch starting at ``from_offset`` to its end."""
    with open(path, "rb") as f:
        data = f.read()
    for position, header in iter_headers(data, verify=False):
        if header.base_offset == from_offset:
            return data[position:]
        if header.base_offset > from_offset:
            break
    raise ValueError(f"{path} has no batch starting at offset {from_offset}")


class Uploader:
    """Copies and deletes remote segments of a cluster's store, recording each step with
    ``write`` (which returns once the record is in the metadata topic)."""

    def __init__(self, store: ObjectStore, write: WriteRecord,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        self.store = store
        self.write = write
        self.clock = clock

    def copy(self, plan: CopyPlan) -> RemoteSegment | None:
        """Make one copy (the module docstring's four steps); returns its COPY_FINISHED
        record, or None when a newer leader deleted the attempt meanwhile. Raises OSError
        when the store fails, ValueError when the local segment is not what the plan says;
        the attempt is then an orphan for a later cleanup."""
        data = read_from(plan.segment.path, plan.from_offset)
        objects, end, max_ts = segment_objects(data, plan.from_offset, plan.leader_epochs,
                                               plan.aborted)
        producers = producers_before(self.store, plan)
        # segment_objects checked the batches' CRCs already.
        producers.rebuild(stored_batches(data, plan.from_offset, verify=False))
        objects[PRODUCER_SNAPSHOT] = snapshot_bytes(producers)
        ref = plan.ref
        started = RemoteSegment(
            topic=ref.topic, topic_id=ref.topic_id, partition=ref.partition,
            segment_id=uuid.uuid4().hex, base_offset=plan.from_offset, end_offset=end,
            max_timestamp=max_ts, size_bytes=len(data), leader_epoch=plan.leader_epoch,
            broker_id=plan.broker_id, state=COPY_STARTED, leader_epochs=plan.leader_epochs,
            files={name: RemoteFile(len(body), digest(body)) for name, body in objects.items()},
            event_time_ms=self.clock())
        self.write(started)
        folder = started.folder(self.store.prefix)
        for name, body in objects.items():
            self.store.put(f"{folder}/{name}", body)
            faults.point("tiered.copy.object_put")  # a leader dying mid-copy (tests)
        finished = started.with_state(COPY_FINISHED, self.clock())
        self.store.put(f"{folder}/{MANIFEST}", finished.to_json())
        if not self.write(finished):
            self.store.delete_folder(folder)
            return None
        return finished

    def fence(self, ref: PartitionRef, leader_epoch: int, broker_id: int) -> None:
        """Record a new leader's fence (layout.fence_record): from it on, copies of older
        leaders finish nothing. Written before the leader reads the metadata to find what
        is in flight and what to delete."""
        self.write(fence_record(ref.topic, ref.topic_id, ref.partition, leader_epoch,
                                broker_id, self.clock()))

    def delete(self, segment: RemoteSegment, leader_epoch: int) -> None:
        """DELETE_STARTED, remove the folder, DELETE_FINISHED (a crash between leaves a
        DELETE_STARTED: an orphan a later leader deletes again)."""
        if segment.state != DELETE_STARTED:
            self.write(segment.with_state(DELETE_STARTED, self.clock(),
                                          leader_epoch=max(leader_epoch, segment.leader_epoch)))
        self.store.delete_folder(segment.folder(self.store.prefix))
        self.write(segment.with_state(DELETE_FINISHED, self.clock(),
                                      leader_epoch=max(leader_epoch, segment.leader_epoch)))


def expired_remote(readable: Sequence[RemoteSegment], config: LogConfig, now_ms: int,
                   local_only_bytes: int) -> list[RemoteSegment]:
    """The oldest remote segments whole-log retention deletes: ``retention_ms`` past their
    newest record, or while the whole log (remote plus ``local_only_bytes``, the local
    records not copied yet) is larger than ``retention_bytes`` without them."""
    remaining = sum(s.size_bytes for s in readable) + local_only_bytes
    doomed = []
    for segment in readable:
        expired = config.retention_ms is not None and \
            now_ms - segment.max_timestamp > config.retention_ms
        oversized = config.retention_bytes is not None and \
            remaining - segment.size_bytes >= config.retention_bytes
        if not (expired or oversized):
            break
        doomed.append(segment)
        remaining -= segment.size_bytes
    return doomed


def local_deletable_below(state: RemoteLogState, ref: PartitionRef) -> int | None:
    """Local segments ending below this offset are copied (their copy recorded finished),
    so local retention may delete them; None: nothing is copied."""
    end = state.end_offset(ref.topic_id, ref.partition)
    return None if end is None else end + 1
