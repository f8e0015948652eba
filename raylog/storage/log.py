"""The partition log: an append-only sequence of segments in one directory.

Directory layout::

    00000000000000000000.log        segments, named by base offset (see segment.py)
    00000000000000000000.index      sparse offset index (see index.py)
    00000000000000000000.timeindex  time index
    00000000000000000000.txnindex   aborted transactions whose markers are in the segment
                                    (see txn_index.py; only once there is one)
    log-format                      the directory's format version (see formats.py; absent:
                                    version 0, today's)
    recovery-point-checkpoint       offset below which everything was fsynced
    high-watermark-checkpoint       the replica's last checkpointed high watermark
    .clean-shutdown                 present only while the log is closed cleanly
    cleaner-offset-checkpoint       compaction's clean boundary (see cleaner.py)
    *.cleaned, *.swap               compaction output before and while it replaces segments
    *.deleted                       segments retention took, while a background thread
                                    deletes them (see ``defer_deletions``)

Opening after a crash (no ``.clean-shutdown``) verifies, batch by batch, every segment from the
one holding the recovery point to the end, and always the last one; it cuts a torn or corrupt
tail, drops segments after a cut, and rebuilds their indexes. Other segments are loaded from
their index files, which are checked and rebuilt when they do not match their segment; a bad
batch found then is damage, not a torn write, and is never cut. docs/storage.md has the rules.

Durability: appended records are in the page cache until synced. ``flush_messages`` and
``flush_ms`` sync them (:meth:`PartitionLog.sync`) as appends come; ``flush_messages=1``
(or ``flush_ms=0``) syncs every append before it returns, and then only synced records count
toward the high watermark (:attr:`PartitionLog.committable_end_offset`): acks=all means on
disk at every in-sync replica. docs/replication.md says what each setting promises.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from raylog.errors import (
    InvalidRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from raylog.records.control import Marker, read_marker
from raylog.records.header import NO_LEADER_EPOCH, BatchHeader, iter_headers, validate_batch
from raylog.records.payload import check_payload, decode, offsets_of
from raylog.storage import files
from raylog.storage.checkpoint import Checkpoint, check_checkpoints
from raylog.storage.cleaner import (
    CleanerStats,
    CleaningPass,
    Compactor,
    finish_interrupted_cleaning,
)
from raylog.storage.config import LogConfig
from raylog.storage.formats import read_format_file
from raylog.storage.handoff import (
    FlushJob,
    RecoveryPoint,
    delete_retired,
    remove_retired,
    retire,
)
from raylog.storage.segment import LogSegment, log_bases
from raylog.storage.txn_index import AbortedTxn
from raylog.util.clocks import wall_clock_ms

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
RECOVERY_POINT_FILE = "recovery-point-checkpoint"
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"  # only once records were deleted mid-segment
LOG_FORMAT_FILE = "log-format"
# The format of a log directory's segments (batches of records.header.MAGIC), offset, time
# and transaction indexes. A raylog that changes any of them, or any other file of a
# partition directory, writes a higher version to LOG_FORMAT_FILE first, so that an older
# raylog refuses the directory before it touches anything (docs/formats.md).
LOG_FORMAT_VERSION = 0


def check_log_format(directory: Path, names: set[str]) -> None:
    """Refuse (UnsupportedFormatVersionError) a log directory (whose names are ``names``)
    of a newer format, or holding a checkpoint of a newer format."""
    read_format_file(directory / LOG_FORMAT_FILE, LOG_FORMAT_VERSION)
    check_checkpoints(directory, names)


class AppendInfo(NamedTuple):
    """Where an appended batch landed."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int


class RecoveryInfo(NamedTuple):
    """What opening the log found."""

    clean: bool
    segments_recovered: int
    bytes_truncated: int
    segments_dropped: int


class PartitionLog:
    """The on-disk log of one partition replica.

    Owns its directory. Invariants: segments are sorted by base offset and do not overlap;
    the last one is the active segment, the only one appended to; offsets assigned by
    :meth:`append` are dense and never reused unless :meth:`truncate_to` removed them;
    ``log_start_offset <= high_watermark <= log_end_offset``; records below
    ``synced_end_offset`` are on disk, and when every append is synced (``flush_messages=1``)
    an append returns only once its records are, or raises having written nothing. Time comes
    from ``clock`` (milliseconds), so tests control it.

    Concurrency: not safe for concurrent use: its owner (a replica's event loop) serializes
    calls. Slow work is planned by the owner and handed to another thread as a job that
    touches none of the log's state: a compaction pass (:meth:`start_compaction`, then
    :meth:`finish_compaction` swaps its output in, in one short step on the owner's thread),
    a periodic flush (:meth:`start_flush`, :meth:`finish_flush`), the deletion of segments
    retention took (with ``defer_deletions``: :meth:`take_retired`). The jobs read through
    descriptors of their own, so a segment the owner truncates, deletes or swaps out
    meanwhile is never read closed, and a reader on the owner's thread sees either the old
    segments or the new ones. What stays on the owner's thread: the syncs an append's
    promise needs (``flush_messages``, ``flush_ms`` at an append, every append when
    ``syncs_each_append``) and the sync of the old segment at a roll (its records are
    durable before the next segment's name, so a power loss leaves no hole in the offsets).
    """

    def __init__(self, directory: str | os.PathLike, config: LogConfig | None = None, *,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        self.directory = Path(directory)
        self._config = config or LogConfig()
        self.clock = clock
        files.make_dirs(self.directory)
        self._recovery_checkpoint = RecoveryPoint(self.directory / RECOVERY_POINT_FILE)
        self._hw_checkpoint = Checkpoint(self.directory / HIGH_WATERMARK_FILE)
        self._start_checkpoint = Checkpoint(self.directory / LOG_START_FILE)
        self._segments: list[LogSegment] = []
        self._closed = False
        self._failure: str | None = None  # why the log closed itself, if it did
        self._unflushed_records = 0
        self._last_flush_ms = clock()
        self._compactor = Compactor(self.directory, self.config, clock)
        # Set by an owner that deletes the segments retention takes on another thread.
        self.defer_deletions = False
        self._retired: list[LogSegment] = []
        self._flush_job: FlushJob | None = None
        self.recovery = self._open()
        self._compactor.opened(self._segments[0].base_offset, self.log_end_offset)
        # Records below this were deleted (delete_records) though their segment stays.
        self._start_floor = self._start_checkpoint.read_offset() or 0
        self.recovery_point = self.log_end_offset
        self._synced_end = self.log_end_offset  # opening synced what it checked
        hw = self._hw_checkpointed = self._hw_checkpoint.read_offset()
        self.high_watermark = min(max(hw or 0, self.log_start_offset), self.log_end_offset)

    # -- opening -----------------------------------------------------------------------------

    def _open(self) -> RecoveryInfo:
        # The directory is listed once: each step below keeps the listing true.
        names = set(os.listdir(self.directory))
        check_log_format(self.directory, names)  # before anything in it changes
        clean = CLEAN_SHUTDOWN_FILE in names
        if clean:
            # Gone for good before anything changes: a crash from here on, during this open
            # or after appends, must not find a marker vouching for unchecked segments.
            files.remove(self.directory / CLEAN_SHUTDOWN_FILE)
            files.fsync_dir(self.directory)
            names.discard(CLEAN_SHUTDOWN_FILE)
        remove_retired(self.directory, names)
        finish_interrupted_cleaning(self.directory, self.config.index_interval_bytes, names)
        bases = log_bases(names)
        recovery_point = (self._recovery_checkpoint.read() or 0) if not clean else None
        recovered = truncated = dropped = 0
        previous_end = 0
        for i, base in enumerate(bases):
            segment = LogSegment(self.directory, base, self.config.index_interval_bytes)
            last = i == len(bases) - 1
            must_verify = recovery_point is not None and (
                last or (i + 1 < len(bases) and bases[i + 1] > recovery_point))
            cut = 0
            if base < previous_end:
                # Overlaps the previous segment: it cannot be trusted; drop it and the rest.
                segment.delete()
                dropped += len(bases) - i
                break
            if must_verify:
                cut = segment.recover(min_offset=previous_end)
            elif not segment.load():
                # Flushed, so a bad batch here is damage, not a torn write: cut nothing and
                # drop nothing after it; the damaged part raises CorruptRecordError if read.
                segment.recover(min_offset=previous_end, cut=False)
                if segment.damaged_at is not None:
                    if not last:
                        segment.next_offset = bases[i + 1]
                    # Its newest timestamp is unknown: retention must not take it early.
                    segment.max_timestamp = max(segment.max_timestamp, self.clock())
            if must_verify or segment.dirty:
                segment.flush()
                recovered += 1
                truncated += cut
            self._segments.append(segment)
            previous_end = segment.next_offset
            if cut and not last:
                for later in bases[i + 1:]:
                    LogSegment(self.directory, later, self.config.index_interval_bytes).delete()
                dropped += len(bases) - i - 1
                break
        if not self._segments:
            self._segments.append(
                LogSegment(self.directory, 0, self.config.index_interval_bytes, create=True))
        # Entries past a cut tail go; a corrupt file is emptied, and the log's owner, which
        # knows where each transaction began, rebuilds the entries from the batches.
        self.txn_index_damaged = not all([s.load_txn_index() for s in self._segments])
        self._recovery_checkpoint.write(self.log_end_offset)
        return RecoveryInfo(clean, recovered, truncated, dropped)

    # -- state -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset readable: the first segment's base, or above it where records
        were deleted (never beyond the log end)."""
        return max(self._segments[0].base_offset, min(self._start_floor, self.log_end_offset))

    def _set_start_floor(self, offset: int) -> None:
        """Make ``offset`` the lowest readable offset, durably, before anything relies on
        it."""
        if offset != self._start_floor:
            self._start_checkpoint.write_offset(offset)
            self._start_floor = offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def synced_end_offset(self) -> int:
        """Every record below this offset is on disk (fsynced); a power loss can take back
        records at or above it."""
        return self._synced_end

    @property
    def committable_end_offset(self) -> int:
        """How far this replica's log counts toward the high watermark: its log end, or when
        every append is synced, the end of what is synced, so that acks=all means on disk at
        every in-sync replica. The two differ only after a sync failed and could not be
        undone (the log then closed itself: see :meth:`append`)."""
        return self._synced_end if self.config.syncs_each_append else self.log_end_offset

    @property
    def config(self) -> LogConfig:
        """The log's settings. Setting new ones (a topic's altered configs) takes effect
        from the next operation on; if they sync every append and records are not synced
        yet, those are synced first (StorageError, settings unchanged, if that fails), so
        that from then on the log end is synced whenever a call returns."""
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        if config.syncs_each_append and self._synced_end < self.log_end_offset:
            self.sync()
        self._config = config
        self._compactor.config = config

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed"
                                 + (f": {self._failure}" if self._failure else ""))

    # -- appending ---------------------------------------------------------------------------

    def append(self, batch: bytes | memoryview, leader_epoch: int = NO_LEADER_EPOCH, *,
               verify_payload: bool = True,
               checked: pa.Table | Exception | None = None) -> AppendInfo:
        """Append one producer batch, assigning it the next offsets; return where it landed.

        Raises CorruptRecordError (bad framing or checksum, or, with ``verify_payload``, a
        payload that does not decode or disagrees with its header: see
        :func:`~raylog.records.payload.check_payload`), RecordTooLargeError (larger than
        ``max_message_bytes``) or InvalidRecordError (explicit offsets from a producer, or a
        record without a key in a compacted log), or StorageError (the disk refused the write,
        or the sync the flush settings ask for). Nothing is written when it raises.
        ``verify_payload=False`` skips the payload check (it costs one decompression) for a
        writer that built the batch itself; a leader appending a producer's batch keeps it.
        ``checked``: what :func:`~raylog.records.payload.check_ahead` gave for this very batch
        (computed on another thread while the append waited its turn), taken in place of
        checking it again: its payload, or the error it raises here.
        """
        self._check_open()
        header = validate_batch(batch)
        if header.size > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max_message_bytes="
                f"{self.config.max_message_bytes}"
            )
        if header.explicit_offsets:
            raise InvalidRecordError("a producer batch cannot carry explicit offsets")
        if verify_payload or self.config.compact:
            if not verify_payload:
                payload = decode(header, batch)
            elif checked is None:
                payload = check_payload(header, batch)
            elif isinstance(checked, Exception):
                raise checked
            else:
                payload = checked
            if self.config.compact and payload.column(1).null_count:
                raise InvalidRecordError("a compacted log refuses records without a key")
        now = self.clock()
        base_offset = self.log_end_offset
        self._segment_for(header, base_offset, now).append(header, batch, base_offset,
                                                           leader_epoch)
        self._appended(base_offset, header.record_count, now)
        return AppendInfo(base_offset, base_offset + header.last_offset_delta,
                          header.max_timestamp, header.record_count)

    def append_stored(self, data: bytes | memoryview,
                      batches: list[tuple[int, BatchHeader]] | None = None
                      ) -> AppendInfo | None:
        """Append batches that already carry their offsets (a follower copying its leader).

        Every batch is verified before any is written (``batches``: the positions and
        headers of ``data`` when the caller verified them already, with
        ``iter_headers(data, verify=True)``); each must start at or after the log end
        offset. Returns where the last one landed, or None for empty ``data``. The flush
        settings apply as to :meth:`append`, once for all the batches: with
        ``flush_messages=1`` they are on disk when it returns (one fsync), and a follower's
        next fetch, which tells its leader its log end, reports only synced records.
        """
        self._check_open()
        if batches is None:
            batches = list(iter_headers(data, verify=True))
        expected = self.log_end_offset
        for _, header in batches:
            if header.base_offset < expected:
                raise InvalidRecordError(
                    f"batch at offset {header.base_offset} is below the log end offset {expected}"
                )
            expected = header.next_offset
        if not batches:
            return None
        view = memoryview(data)
        now = self.clock()
        end = self.log_end_offset
        for pos, header in batches:
            self._segment_for(header, header.base_offset, now).append_stored(
                header, view[pos:pos + header.size])
        self._appended(end, sum(h.record_count for _, h in batches), now)
        first, last = batches[0][1], batches[-1][1]
        return AppendInfo(first.base_offset, last.last_offset,
                          max(h.max_timestamp for _, h in batches),
                          sum(h.record_count for _, h in batches))

    def _segment_for(self, header: BatchHeader, base_offset: int, now: int) -> LogSegment:
        """The segment to append to, rolling a new one when the active one is full or old."""
        active = self._segments[-1]
        if active.damaged_at is not None or (active.size and (
            active.size + header.size > self.config.segment_bytes
            or now - active.first_batch_timestamp >= self.config.segment_ms
            or not active.fits(header, base_offset)
        )):
            active = self.roll(base_offset)
        return active

    def roll(self, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``base_offset`` (default: the log end offset)."""
        self._check_open()
        old = self._segments[-1]
        base = self.log_end_offset if base_offset is None else base_offset
        if old.size == 0 and old.base_offset == base:
            return old
        # The old segment's records are durable before the new one's name is (its creation
        # syncs the directory): else a power loss could keep the new segment and lose the
        # old one's tail, leaving a hole in the offsets. One fsync per segment; the segments
        # before it were synced at their own rolls.
        old.sync()
        self._synced_end = max(self._synced_end, old.next_offset)
        old.index.flush()
        old.time_index.flush()
        old.txn_index.sync()  # a snapshot taken after the roll counts on its entries
        segment = LogSegment(self.directory, base, self.config.index_interval_bytes,
                             create=True)
        self._segments.append(segment)
        return segment

    def _appended(self, end: int, records: int, now: int) -> None:
        """``records`` were just written from offset ``end`` on: sync them if
        ``flush_messages`` or ``flush_ms`` says so. If the sync fails they are cut again, so
        that a failed append has written nothing (its producer retries it, its follower
        fetches it again); if even that fails, the log closes itself (as Kafka takes a log
        directory that fails offline) rather than count, or serve, what it could not sync."""
        self._unflushed_records += records
        config = self.config
        if (config.flush_messages is None or self._unflushed_records < config.flush_messages) \
                and (config.flush_ms is None or now - self._last_flush_ms < config.flush_ms):
            return  # the default (neither set): the page cache has them, replicas too
        try:
            self.sync()
        except (StorageError, OSError) as e:
            self._unflushed_records -= records
            try:
                self.truncate_to(end)
            except (StorageError, OSError) as undo:
                self._fail(f"records from offset {end} could neither be synced ({e}) nor cut "
                           f"({undo})")
                raise StorageError(f"{self.directory}: {self._failure}") from undo
            if isinstance(e, StorageError):
                raise
            raise StorageError(f"cannot sync {self.directory}: {e}") from e

    def _fail(self, reason: str) -> None:
        """Close for good, without the clean-shutdown marker (opening again recovers)."""
        logger.error("%s closes: %s", self.directory, reason)
        self._failure = reason
        self._closed = True
        for segment in self._segments:
            segment.close()

    # -- reading -----------------------------------------------------------------------------

    def _check_offset(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.directory.name}"
            )

    def _segment_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._segments, offset, key=_base_offset) - 1, 0)

    def read(self, offset: int, max_bytes: int = 1 << 20, max_offset: int | None = None) -> bytes:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one
        batch) and below ``max_offset`` (e.g. the high watermark). Empty at the end.

        Every batch returned has had its framing and both CRCs checked: a batch damaged on
        disk raises CorruptRecordError here rather than reaching a consumer or a follower.
        Raises OffsetOutOfRangeError outside [log start offset, log end offset].
        """
        return self._read(offset, max_bytes, max_offset, verify=True)

    def _read(self, offset: int, max_bytes: int, max_offset: int | None, verify: bool) -> bytes:
        self._check_open()
        self._check_offset(offset)
        end = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if offset >= end:
            return b""
        for segment in self._segments[self._segment_index(offset):]:
            found = segment.find(offset)
            if found is not None:
                data = segment.read(found[0], max_bytes, end)
                if verify:
                    for _ in iter_headers(data, verify=True):
                        pass
                return data
        return b""

    def read_range(self, start: int, end: int, max_bytes: int | None = None) -> list[bytes]:
        """All batches holding offsets in [start, end), as chunks of whole batches.

        For readers in this process: the chunks are not checked here, because the readers
        that decode them (``raylog.records.read_table``, ``read_records``) check framing,
        both CRCs and the payload of every batch and raise CorruptRecordError; checking
        twice cost about a tenth of an Arrow read. Bytes that leave the process go through
        :meth:`read`, which checks them.
        """
        chunks, total, offset = [], 0, start
        end = min(end, self.log_end_offset)
        while offset < end and (max_bytes is None or total < max_bytes):
            data = self._read(offset, 16 << 20, end, verify=False)
            if not data:
                break
            chunks.append(data)
            total += len(data)
            last = None
            for _, last in iter_headers(data, verify=False):  # noqa: B007
                pass
            offset = last.next_offset
        return chunks

    def verified_headers(self, start: int = 0) -> Iterator[BatchHeader]:
        """The headers of the batches holding offsets at or after ``start``, in offset order,
        each checked against its CRCs. A damaged batch ends the walk (and is marked: see
        :meth:`LogSegment.verified_headers`)."""
        for segment in self._segments:
            if segment.next_offset <= start:
                continue
            for header in segment.verified_headers():
                if header.next_offset > start:
                    yield header
            if segment.damaged_at is not None:
                return

    def replay(self, start: int = 0) -> Iterator[tuple[BatchHeader, Marker | None]]:
        """As :meth:`verified_headers`, each header with the marker of its batch if it is a
        control batch (None otherwise): what rebuilding producer state reads. A control
        batch whose CRCs match but whose record is not a marker cannot have been written by
        a leader (Partition.write_marker builds them, producers' are refused): it raises
        CorruptRecordError rather than be read as anything."""
        for segment in self._segments:
            if segment.next_offset <= start:
                continue
            for header, buf, pos in segment.verified_batches():
                if header.next_offset > start:
                    yield header, read_marker(header, buf, pos) if header.control else None
            if segment.damaged_at is not None:
                return

    # -- the aborted-transaction index ---------------------------------------------------------

    def add_aborted(self, entry: AbortedTxn) -> None:
        """Index an aborted transaction whose abort marker was just appended (at
        ``entry.last_offset``), in the marker's segment. Written to the page cache; made
        durable by the next flush, roll or :meth:`sync_txn_indexes`."""
        self._check_open()
        self._segments[self._segment_index(entry.last_offset)].txn_index.append(entry)

    def restore_aborted(self, entries: list[AbortedTxn]) -> int:
        """Add the entries a replay of the log found and the index lacks (a crash between
        a marker and its entry), durably; entries of markers the log no longer holds are
        skipped. Returns how many were added."""
        added = 0
        for entry in entries:
            if self.log_start_offset <= entry.last_offset < self.log_end_offset:
                segment = self._segments[self._segment_index(entry.last_offset)]
                added += segment.txn_index.restore(entry)
        if added:
            self.sync_txn_indexes()
        return added

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions holding an offset in [start, end), in marker order.
        Their markers lie at or after ``start``, in any later segment: every segment from
        the one holding ``start`` is looked at (their entries are in memory)."""
        out = []
        for segment in self._segments[self._segment_index(start):]:
            out.extend(segment.txn_index.overlapping(start, end))
        return out

    def sync_txn_indexes(self) -> None:
        """fsync the aborted-transaction entries written since the last sync."""
        for segment in self._segments:
            segment.txn_index.sync()

    def offsets_for_time(self, timestamp: int, max_offset: int | None = None
                         ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp``."""
        self._check_open()
        end = self.log_end_offset if max_offset is None else max_offset
        start = self.log_start_offset  # records below it were deleted: never an answer
        for segment in self._segments:
            if segment.max_timestamp < timestamp:
                continue
            for header, buf, pos in segment.batches(segment.time_start(timestamp)):
                if header.base_offset >= end:
                    return None
                if header.max_timestamp < timestamp or header.next_offset <= start:
                    continue
                payload = decode(header, buf, pos)
                timestamps = payload.column(0).to_numpy()
                offsets = offsets_of(header, payload)
                hits = np.flatnonzero((timestamps >= timestamp) & (offsets >= start))
                if not hits.size:
                    continue
                i = int(hits[0])
                offset = int(offsets[i])
                return (offset, int(timestamps[i])) if offset < end else None
        return None

    # -- truncation, flushing, high watermark --------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; return the bytes removed.

        Batches are atomic: a batch that straddles ``offset`` goes entirely, so the log end
        offset afterwards may be below ``offset``.
        """
        self._check_open()
        if offset >= self.log_end_offset:
            return 0
        self._recovery_checkpoint.truncated()
        removed = 0
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            segment = self._segments.pop()
            removed += segment.size
            segment.delete()
        if offset < self._start_floor:  # what is appended from here on is readable again
            self._set_start_floor(offset)
        active = self._segments[-1]
        if offset < active.base_offset:  # below the log start: start over there
            removed += active.size
            active.delete()
            self._segments[-1] = LogSegment(self.directory, offset,
                                            self.config.index_interval_bytes, create=True)
        else:
            removed += active.truncate_to(offset)
        self._compactor.truncated(self.log_end_offset)
        # Written only when it moved: undoing a failed sync (see _appended) then asks no
        # more of a failing disk than the cut itself.
        pending = self._flush_job.end if self._flush_job is not None else -1
        if max(self.recovery_point, pending) > self.log_end_offset:
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self._recovery_checkpoint.write(self.recovery_point)
        self._synced_end = min(self._synced_end, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        return removed

    def restart_at(self, offset: int) -> None:
        """Remove every segment and start the log over, empty, at ``offset`` (a follower whose
        whole log lies below its leader's log start)."""
        self._check_open()
        self._recovery_checkpoint.truncated()
        for segment in self._segments:
            segment.delete()
        self._segments = [LogSegment(self.directory, offset, self.config.index_interval_bytes,
                                     create=True)]
        self._compactor.truncated(offset)
        self._set_start_floor(min(self._start_floor, offset))
        self.recovery_point = self._synced_end = offset
        self._recovery_checkpoint.write(offset)
        self.high_watermark = offset

    def advance_log_start(self, offset: int) -> int:
        """Move the log start up to ``offset`` (at most to the log end): records below it
        are no longer readable, and the segments that lie wholly below it are deleted,
        never the active one. A follower follows its leader's log start with it. Returns
        how many segments went."""
        self._check_open()
        offset = min(offset, self.log_end_offset)
        if offset > self.log_start_offset:
            self._set_start_floor(offset)
            self.recovery_point = max(self.recovery_point, offset)
            self.high_watermark = max(self.high_watermark, offset)
        return self._delete_oldest([s for s in self._segments[:-1] if s.next_offset <= offset])

    def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords: make every record below ``offset`` unreadable (segments
        wholly below it are deleted). ``offset`` must lie in [log start, high watermark];
        OffsetOutOfRangeError otherwise, with nothing changed. Returns the log start."""
        self._check_open()
        if not self.log_start_offset <= offset <= self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records below {offset}: it is outside [{self.log_start_offset}, "
                f"{self.high_watermark}] (log start, high watermark) of {self.directory.name}")
        self.advance_log_start(offset)
        return self.log_start_offset

    def _delete_oldest(self, doomed: list[LogSegment]) -> int:
        """Delete the first ``len(doomed)`` segments (rolling first if the active one is
        among them); the log start moves up. Returns how many went."""
        if not doomed:
            return 0
        if doomed[-1] is self._segments[-1]:
            self.roll()
        del self._segments[: len(doomed)]
        for segment in doomed:
            if self.defer_deletions:
                retire(segment)
                self._retired.append(segment)
            else:
                segment.delete()
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        self.high_watermark = max(self.high_watermark, self.log_start_offset)
        return len(doomed)

    def flush(self) -> None:
        """fsync every segment written since the last flush, batches and indexes, and
        checkpoint the recovery point."""
        self._check_open()
        start = self._segment_index(self.recovery_point)
        for segment in self._segments[start:]:
            segment.flush()
        self.recovery_point = self.log_end_offset
        self._recovery_checkpoint.write(self.recovery_point)
        self._flushed()

    def sync(self) -> None:
        """Make every record appended so far durable: one fsync of the active segment's
        batches. Its indexes and the recovery point wait for :meth:`flush`, since opening
        after a crash checks the active segment batch by batch and rebuilds its indexes
        anyway; when a segment was rolled since the last flush, this is a whole flush, so
        that a crash still leaves only the active segment to check. Raises StorageError (or
        OSError from an index or checkpoint file) if the disk refuses."""
        self._check_open()
        if self._segment_index(self.recovery_point) < len(self._segments) - 1:
            self.flush()
            return
        self._segments[-1].sync()
        self._flushed()

    def _flushed(self) -> None:
        self._synced_end = self.log_end_offset
        self._unflushed_records = 0
        self._last_flush_ms = self.clock()

    def _flush_due(self) -> bool:
        return self.config.flush_ms is not None and bool(self._unflushed_records) and \
            self.clock() - self._last_flush_ms >= self.config.flush_ms

    def maybe_flush(self) -> bool:
        """Flush if ``flush_ms`` has passed since the last flush; for a periodic caller."""
        if self._flush_due():
            self.flush()
            return True
        return False

    def start_flush(self) -> FlushJob | None:
        """Plan :meth:`maybe_flush`'s flush as a job for another thread (None if none is
        due or one is running): it fsyncs the segments written since the recovery point
        and checkpoints the log end of now. :meth:`finish_flush` must follow on this
        thread. Index files wait for :meth:`flush` (opening checks them against the
        batches anyway)."""
        self._check_open()
        if self._flush_job is not None or not self._flush_due():
            return None
        start = self._segment_index(self.recovery_point)
        self._flush_job = FlushJob([s.reader() for s in self._segments[start:]],
                                   self.log_end_offset, self._recovery_checkpoint.generation,
                                   self._recovery_checkpoint)
        self._unflushed_records = 0
        self._last_flush_ms = self.clock()
        return self._flush_job

    def finish_flush(self, job: FlushJob) -> None:
        """Take a flush job's outcome: what it synced counts if the log was not truncated
        since (a failed job counts nothing; the records wait for the next flush)."""
        if job is self._flush_job:
            self._flush_job = None
        for reader in job.readers:  # already closed unless run() never ran
            reader.close()
        if job.done and job.generation == self._recovery_checkpoint.generation:
            self.recovery_point = max(self.recovery_point, job.end)
            self._synced_end = max(self._synced_end, min(job.end, self.log_end_offset))

    def take_retired(self) -> list[LogSegment]:
        """The segments retention took since the last call, when ``defer_deletions`` is
        set: out of the log and renamed ``*.deleted`` (durably), to be deleted with
        :func:`~raylog.storage.handoff.delete_retired` on any thread."""
        retired, self._retired = self._retired, []
        return retired

    def time_work_pending(self) -> bool:
        """Whether a periodic caller has work that only time finishes: records waiting for
        a flush by ``flush_ms``, or a high watermark not yet checkpointed."""
        return bool(self.config.flush_ms is not None and self._unflushed_records) or \
            self.high_watermark != self._hw_checkpointed

    def update_high_watermark(self, offset: int) -> int:
        """Move the high watermark (clamped into [log start, log end]); return it."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    def checkpoint_high_watermark(self) -> None:
        """Write the high watermark to its checkpoint file, if it moved since the last."""
        if self.high_watermark != self._hw_checkpointed:
            self._hw_checkpoint.write_offset(self.high_watermark)
            self._hw_checkpointed = self.high_watermark

    # -- retention and compaction --------------------------------------------------------------

    def enforce_retention(self, max_offset: int | None = None,
                          limits: tuple[int | None, int | None] | None = None) -> int:
        """Delete the oldest segments past ``retention_ms`` or ``retention_bytes``.

        Only whole segments below ``max_offset`` (default: the log end offset) go; the active
        segment is rolled first if it must go too. ``limits``: (ms, bytes) to apply instead
        (a tiered log's local tail: LogConfig.local_retention). Returns the number of
        segments deleted.
        """
        self._check_open()
        config = self.config
        retention_ms, retention_bytes = limits or (config.retention_ms, config.retention_bytes)
        if not config.delete or (retention_ms is None and retention_bytes is None):
            return 0
        limit = self.log_end_offset if max_offset is None else max_offset
        now = self.clock()
        remaining = self.size_bytes
        doomed = []
        for segment in self._segments:
            if segment.size == 0 or segment.next_offset > limit:
                break
            expired = retention_ms is not None and now - segment.max_timestamp > retention_ms
            oversized = retention_bytes is not None and \
                remaining - segment.size >= retention_bytes
            if not (expired or oversized):
                break
            doomed.append(segment)
            remaining -= segment.size
        return self._delete_oldest(doomed)

    def compact(self, max_offset: int | None = None) -> CleanerStats:
        """Keep only the newest record per key in the segments before the active one, below
        ``max_offset`` (default: the log end offset), if a pass is due (see cleaner.py);
        the whole pass on this thread."""
        job = self.start_compaction(max_offset)
        if job is None:
            return CleanerStats()
        try:
            job.build()
        finally:
            stats = self.finish_compaction(job)
        return stats

    def start_compaction(self, max_offset: int | None = None) -> CleaningPass | None:
        """Plan a compaction pass (as :meth:`compact`), if one is due and none is running.
        Its :meth:`~CleaningPass.build` may run on another thread while this log is used;
        :meth:`finish_compaction` must follow, on this log's thread, whether the build
        succeeded, failed or never ran."""
        self._check_open()
        if not self.config.compact:
            return None
        limit = self.log_end_offset if max_offset is None else max_offset
        return self._compactor.plan(self._segments, limit)

    def finish_compaction(self, job: CleaningPass) -> CleanerStats:
        """Swap a built pass's output in, in one short step (or discard it if the log was
        truncated or closed since, or it was not built)."""
        return self._compactor.swap(self._segments, job, closed=self._closed)

    def dirty_ratio(self, max_offset: int | None = None) -> float:
        """The uncleaned share of the bytes compaction could clean below ``max_offset``
        (default: the log end offset)."""
        limit = self.log_end_offset if max_offset is None else max_offset
        return self._compactor.dirty_ratio(self._segments, limit)

    @property
    def clean_end_offset(self) -> int:
        """Compaction's clean boundary: below it, no key appears twice."""
        return self._compactor.clean_end

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, checkpoint and mark the shutdown clean; the next open trusts the indexes."""
        if self._closed:
            return
        self.flush()
        self.checkpoint_high_watermark()
        delete_retired(self.take_retired())
        for segment in self._segments:
            segment.close()
        # The marker vouches for the segments and index files: their names must be durable
        # first (flush synced their bytes), then the marker's own.
        files.fsync_dir(self.directory)
        files.touch(self.directory / CLEAN_SHUTDOWN_FILE)
        files.fsync_dir(self.directory)
        self._closed = True

    def delete(self) -> None:
        """Close and remove the whole directory (the partition is being deleted). A flush
        job in flight writes no checkpoint after it (the directory may be made again, for
        a new topic of the same name)."""
        self._recovery_checkpoint.truncated()
        for segment in self._segments + self.take_retired():
            segment.close()
        self._closed = True
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _base_offset(segment: LogSegment) -> int:
    return segment.base_offset

