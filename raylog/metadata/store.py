"""The controller's metadata log: events persisted on local disk before they count, and
snapshots of the state they build, so that a restart costs the state's size, not its
history.

The log is a :class:`PartitionLog` like any partition's (one JSON event per record), flushed
on every append, so an acknowledged change survives a crash of the controller's process or
machine. An event's offset is its position in the cluster's history, counted from the
cluster's first event and never reused: a broker's epoch is such a position (see
``MetadataState.broker_epochs``), so positions keep counting across snapshots and
truncation (the log's start moves up, its offsets do not restart).

Snapshots (``raylog/metadata/snapshot.py``) are taken once the log since the last one holds
enough events or bytes (:class:`SnapshotPolicy`). The store keeps the two newest snapshots
and the log back to the older of them: a damaged newest snapshot falls back to the one
before and replays more of the log. In order, each step durable before the next:

1. the new snapshot at position P (temporary file, fsync, rename, directory fsync);
2. the log start moves up to the previous snapshot's position (a checkpoint), and the log
   segments wholly below it are deleted;
3. older snapshots are deleted;
4. the log rolls a new segment at P, so that the next snapshot's step 2 deletes whole
   segments.

A crash anywhere leaves a store that opens with every event appended: a snapshot is either
whole or absent, and the log is never cut below a snapshot that is not durable.

Format versions (docs/formats.md): the events' (METADATA_LOG_VERSION, in the directory's
``metadata-format`` file, absent for version 0; raised by the first event of a newer
format, EVENT_VERSIONS), the log directory's (``log-format``), the
snapshots' (snapshot.VERSION, in each header). A store holding any of a newer version is
refused with UnsupportedFormatVersionError before anything in its directory changes.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raylog.errors import CorruptSnapshotError, StorageError
from raylog.metadata.snapshot import (
    CORRUPT_SUFFIX,
    SnapshotPolicy,
    check_snapshot_versions,
    read_snapshot,
    remove_temporary,
    snapshot_path,
    snapshot_positions,
    write_snapshot,
)
from raylog.metadata.state import MetadataState
from raylog.records import BatchBuilder, Codec, read_records
from raylog.storage import LogConfig, PartitionLog, files
from raylog.storage.formats import read_format_file, write_format_file
from raylog.util.clocks import wall_clock_ms

logger = logging.getLogger(__name__)

METADATA_LOG_CONFIG = LogConfig(
    segment_bytes=64 << 20,
    flush_messages=1,          # fsync every append before acknowledging it
    retention_ms=None,
    cleanup_policy="delete",
)
METADATA_FORMAT_FILE = "metadata-format"
# The format of the events (one JSON object per record, as MetadataState.apply reads them):
# the version that first has each event type an older raylog cannot apply (any other: 0).
# The store raises METADATA_FORMAT_FILE to it before the first such event goes in
# (docs/formats.md); absent: version 0. A directory stays at the lowest version its events
# need, so a raylog that never wrote such an event can still be downgraded.
EVENT_VERSIONS = {"quotas_altered": 1}
METADATA_LOG_VERSION = 1  # the newest this raylog reads
BATCH_BYTES = 1 << 20  # events of one commit per batch (one write, one fsync), at most


class MetadataStore:
    """Appends events durably, replays them in order, and snapshots the state.

    Owns its directory (log segments and snapshot files). Invariants: offsets are dense and
    never reused; some usable snapshot, or the log from offset 0, covers every event below
    the log start. Not safe for concurrent use: the controller commits one change at a time.
    """

    def __init__(self, directory: str | os.PathLike,
                 policy: SnapshotPolicy | None = None) -> None:
        self.format_version = 0  # of the events, as METADATA_FORMAT_FILE says
        if os.path.isdir(directory):  # refused before anything in it changes
            self.format_version = read_format_file(Path(directory) / METADATA_FORMAT_FILE,
                                                   METADATA_LOG_VERSION)
            check_snapshot_versions(Path(directory))
        self.log = PartitionLog(directory, METADATA_LOG_CONFIG)
        self.directory = self.log.directory
        self.policy = policy or SnapshotPolicy()
        remove_temporary(self.directory)
        positions = snapshot_positions(self.directory)
        self.snapshot_position = positions[0] if positions else 0  # of the newest snapshot
        self._bytes_since_snapshot = sum(s.size for s in self.log.segments
                                         if s.base_offset >= self.snapshot_position)

    # -- writing ---------------------------------------------------------------------------------

    def append(self, event: dict[str, Any]) -> int:
        """Persist one event (fsynced when this returns); return its offset."""
        return self.append_all([event])

    def append_all(self, events: list[dict[str, Any]]) -> int:
        """Persist ``events`` in order, all of them fsynced when this returns, at the cost of
        one write and one fsync (one per megabyte of events); return the first one's offset.
        All or nothing: if it raises (StorageError), none of them is in the log.

        After a crash: the events of one batch (a CRC over them all; recovery cuts a torn
        batch whole) are all there or none is. A list longer than one batch (BATCH_BYTES:
        thousands of partition changes) may come back as a prefix of whole batches, so a
        list is either one whose every prefix is a state of its own (each event stands
        alone, as one partition's change does), or short enough for one batch."""
        needed = max((EVENT_VERSIONS.get(e["type"], 0) for e in events), default=0)
        if needed > self.format_version:  # durably, before the first event of that format
            write_format_file(self.directory / METADATA_FORMAT_FILE, needed)
            self.format_version = needed
        first = self.log.log_end_offset
        now = wall_clock_ms()
        builder = BatchBuilder(BATCH_BYTES, codec=Codec.NONE)
        try:
            for event in events:
                value = json.dumps(event, sort_keys=True).encode()
                if not builder.append(now, None, value):  # full: it goes in the next batch
                    self._append_batch(builder.build())
                    builder = BatchBuilder(BATCH_BYTES, codec=Codec.NONE)
                    builder.append(now, None, value)
            if len(builder):
                self._append_batch(builder.build())
        except (StorageError, OSError):
            if self.log.log_end_offset > first:  # earlier batches of these events went in
                self.log.truncate_to(first)
            raise
        return first

    def _append_batch(self, batch: bytes) -> None:
        self.log.append(batch, verify_payload=False)
        self._bytes_since_snapshot += len(batch)

    def commit(self, state: MetadataState, events: list[dict[str, Any]]) -> None:
        """Persist ``events`` (one fsync, see :meth:`append_all` for what a crash keeps of
        them), then apply them to ``state``, then take a snapshot
        if one is due. ``state`` is the one :meth:`load` gave, with every event appended
        since applied; the caller checked that the events fit it. If persisting raises
        (StorageError), nothing was kept or applied."""
        self.append_all(events)
        for event in events:
            state.apply(event)
        self.maybe_snapshot(state)

    # -- snapshots -------------------------------------------------------------------------------

    def snapshot_due(self) -> bool:
        return self.policy.due(self.log.log_end_offset - self.snapshot_position,
                               self._bytes_since_snapshot)

    def maybe_snapshot(self, state: MetadataState) -> bool:
        """Take a snapshot of ``state`` if the policy says it is due; whether it did. A
        snapshot that fails is logged, not raised: the events it would hold are committed
        (the log keeps them), and the next commit tries again."""
        if not self.snapshot_due():
            return False
        try:
            self.take_snapshot(state)
        except (StorageError, OSError) as e:
            logger.error("metadata snapshot at %d failed, the log keeps every event: %r",
                         state.applied, e)
            return False
        return True

    def take_snapshot(self, state: MetadataState) -> None:
        """Snapshot ``state``, which must hold exactly the events of the log, then drop what
        the store no longer needs (see the module's docstring for the order)."""
        end = self.log.log_end_offset
        if state.applied != end:
            raise ValueError(f"a snapshot must hold every event of the log: the state applied "
                             f"{state.applied}, the log ends at {end}")
        if end == self.snapshot_position and snapshot_path(self.directory, end).exists():
            return
        previous = self.snapshot_position
        write_snapshot(self.directory, state)
        self.snapshot_position = end
        self._bytes_since_snapshot = 0
        self.log.advance_log_start(previous)
        older = [p for p in snapshot_positions(self.directory) if p < previous]
        for position in older:
            files.remove(snapshot_path(self.directory, position))
        if older:
            files.fsync_dir(self.directory)
        self.log.roll()

    # -- reading ---------------------------------------------------------------------------------

    def load(self) -> MetadataState:
        """The state after every event in the store: the newest usable snapshot, then the
        events after it. A snapshot that cannot be read (CorruptSnapshotError) is logged and
        the one before it is tried; raises CorruptSnapshotError if none covers the events
        below the log start (never an empty state for a store that had events)."""
        start, end = self.log.log_start_offset, self.log.log_end_offset
        state = None
        for position in snapshot_positions(self.directory):
            if position < start:
                break  # the events between it and the log start are gone
            try:
                state = read_snapshot(self.directory, position)
                break
            except CorruptSnapshotError as e:
                logger.error("metadata snapshot at %d unusable, trying an older one: %s",
                             position, e)
                self._set_aside(position)
        self.snapshot_position = 0 if state is None else state.applied
        if state is None:
            if start > 0:
                raise CorruptSnapshotError(
                    f"{self.directory}: the metadata log starts at offset {start} and no "
                    f"usable snapshot holds the events before it")
            state = MetadataState()
        if state.applied > end:
            # The log lost events the snapshot holds (it never should: events are synced
            # before a snapshot is taken): go on after the snapshot, so offsets are not reused.
            logger.error("metadata log ends at %d, below its snapshot at %d: restarting the "
                         "log there", end, state.applied)
            self.log.restart_at(state.applied)
        for offset, event in self.events(state.applied):
            if offset != state.applied:
                raise CorruptSnapshotError(f"{self.directory}: event at offset {offset} "
                                           f"follows a state of {state.applied} events")
            state.apply(event)
        return state

    def _set_aside(self, position: int) -> None:
        """Rename an unusable snapshot out of the way (kept for a look, never loaded), so
        that the snapshots kept are the usable ones."""
        path = snapshot_path(self.directory, position)
        files.replace(path, path.with_name(path.name + CORRUPT_SUFFIX))
        files.fsync_dir(self.directory)

    def events(self, start: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """(offset, event) for every event in the log from ``start`` (default: the log
        start) on."""
        start = self.log.log_start_offset if start is None else start
        for chunk in self.log.read_range(start, self.log.log_end_offset):
            for record in read_records(chunk):
                if record.offset >= start:
                    yield record.offset, json.loads(record.value)

    def replay(self) -> Iterator[dict[str, Any]]:
        """Every event of the cluster's history, from offset 0. Raises StorageError once a
        snapshot let the log drop its beginning: rebuild a state with :meth:`load`."""
        if self.log.log_start_offset > 0:
            raise StorageError(f"{self.directory}: the metadata log starts at offset "
                               f"{self.log.log_start_offset} (the events before it are in a "
                               f"snapshot): load() rebuilds the state, replay() cannot")
        for _, event in self.events(0):
            yield event

    def close(self) -> None:
        self.log.close()
