"""Log compaction: keep the newest record of every key, at its original offset.

The cleaner works on the segments below the active one and below the high watermark (the
cleanable segments). A durable clean boundary (``cleaner-offset-checkpoint``, Kafka's first
dirty offset) splits them: below it every key appears once (a pass cleaned them), the
segments ending above it are dirty. A pass is due when the dirty share of the cleanable
bytes reaches ``min_cleanable_dirty_ratio``, or when ``delete_retention_ms`` passed since the
last one (tombstones may have expired). It maps every key of the dirty segments to its
newest offset, then rewrites only the segments that shrink against that map: a record goes
when a newer one of its key exists, and a tombstone (value None) also when its segment's
newest record is ``delete_retention_ms`` old, so that consumers had time to see the
deletion. Consecutive segments that shrink are merged while they fit one segment. Batches
left whole are copied byte for byte; filtered ones are re-encoded with an explicit
``offset_delta`` column, so every kept record keeps its offset and the batch its range.

A pass has three steps, so that its slow part runs on another thread than the log's owner
(see :class:`CleaningPass`): :meth:`Compactor.plan` on the owner's thread (sizes only),
:meth:`CleaningPass.build` anywhere (reads through descriptors of its own, writes the output
as ``*.cleaned`` files and fsyncs them), :meth:`Compactor.swap` on the owner's thread (one
short step: checks that what the pass read is still the log, then three renames/deletions,
each made durable by one directory sync, and the list of segments edited in place).

Crash safety: the output is renamed ``*.swap`` only once durable, and only then are the old
segments deleted and the output renamed into place; :func:`finish_interrupted_cleaning`, run
when a log opens, discards output that never reached ``.swap`` and completes a swap a crash
interrupted. The boundary is written after the swap: a crash before leaves more to clean,
never less.

Transactions (txn_cleaning.py, Kafka's rules): aborted records go and never supersede,
undecided ones stay untouched and hold the clean boundary back, and markers stay while
their transaction's records may be read, then go (with their aborted-transaction index
entries) once ``delete_retention_ms`` old. The output segments carry the
aborted-transaction entries of the segments they replace.

Memory: the key map holds every distinct key of the dirty segments.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylog.errors import CorruptRecordError
from raylog.records.header import BatchHeader, stamp, validate_batch
from raylog.records.payload import EXPLICIT_SCHEMA, decode, encode, offsets_of
from raylog.storage import files
from raylog.storage.checkpoint import Checkpoint
from raylog.storage.config import LogConfig
from raylog.storage.segment import LOG_SUFFIX, LogSegment, log_bases, segment_files
from raylog.storage.txn_cleaning import Transactions

CLEANED_SUFFIX = ".cleaned"  # a pass's output while it is written
SWAP_SUFFIX = ".swap"  # the output, durable, while it replaces the segments it covers
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"  # the clean boundary


@dataclasses.dataclass
class CleanerStats:
    segments_cleaned: int = 0  # segments rewritten (merged or not)
    segments_read: int = 0     # segments read: the dirty ones, and the clean ones checked
    records_read: int = 0
    records_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    dirty_ratio: float = 0.0   # the dirty share of the cleanable bytes when the pass began


@dataclasses.dataclass
class CleaningPass:
    """One compaction pass of one log, planned by :meth:`Compactor.plan`.

    Concurrency: :meth:`build` may run on any thread while the log's owner goes on using the
    log; it touches nothing of the log: it reads ``readers`` (read-only copies of the
    cleanable segments with descriptors of their own, so the owner may truncate, delete or
    close the originals meanwhile) and writes only its own ``*.cleaned`` files. Whatever it
    built is applied, or discarded, by :meth:`Compactor.swap` on the owner's thread.
    """

    segments: list[LogSegment]  # the cleanable segments when planned, in offset order
    readers: list[LogSegment]   # their read-only copies, for build()
    first_dirty: int            # index of the first dirty one
    end: int                    # the clean boundary once the pass is applied
    now: int                    # ms, when planned: the tombstone horizon counts from it
    config: LogConfig
    directory: Path
    generation: int             # the compactor's truncation count when planned
    outputs: list[tuple[int, int, LogSegment]] = dataclasses.field(default_factory=list)
    stats: CleanerStats = dataclasses.field(default_factory=CleanerStats)
    built: bool = False

    def build(self) -> None:
        """Map the dirty keys, then write a cleaned segment for each run of segments that
        shrink (``outputs``: first index, count, the ``.cleaned`` segment, fsynced). On
        failure, its own files are removed and the error raised.

        Each batch is decoded once to learn which of its records stay (the dirty segments'
        keys are held meanwhile, as Arrow arrays), and once more only if some but not all of
        them stay (to re-encode it): batches kept whole are copied byte for byte, batches
        kept of none skipped."""
        stats = self.stats
        try:
            txns = Transactions.read(self.readers)
            if txns.first_undecided is not None:  # cleaned again once they are decided
                self.end = min(self.end, max(txns.first_undecided,
                                             self.readers[0].base_offset))
            dirty = [_scan(r, txns) for r in self.readers[self.first_dirty:]]
            newest = newest_offsets(dirty)
            horizon = self.now - self.config.delete_retention_ms
            masks = []
            for i, reader in enumerate(self.readers):
                stats.segments_read += 1
                scan = dirty[i - self.first_dirty] if i >= self.first_dirty else \
                    _scan(reader, txns)
                old_enough = reader.max_timestamp < horizon
                masks.append(scan.keep(newest, old_enough))
                if txns:
                    txns.decide_markers(scan.batches, scan.offsets, masks[-1], old_enough)
            del dirty
            shrinks = [not mask.all() for mask in masks]
            for first, count in _runs(self.readers, shrinks, self.config.segment_bytes):
                group = self.readers[first:first + count]
                cleaned = LogSegment(self.directory, group[0].base_offset,
                                     self.config.index_interval_bytes, create=True,
                                     suffix=CLEANED_SUFFIX)
                self.outputs.append((first, count, cleaned))
                for reader, mask in zip(group, masks[first:first + count], strict=True):
                    _copy_cleaned(reader, cleaned, mask, stats)
                for reader in group:  # the entries of the abort markers it keeps
                    for entry in reader.txn_index.entries:
                        if entry.last_offset not in txns.removed_markers:
                            cleaned.txn_index.append(entry)
                cleaned.flush()
                stats.bytes_before += sum(reader.size for reader in group)
                stats.bytes_after += cleaned.size
                stats.segments_cleaned += count
            self.built = True
        except BaseException:
            self.discard()
            raise
        finally:
            for reader in self.readers:
                reader.close()

    def discard(self) -> None:
        """Remove the output (never swapped in: a crash would discard it as well), and give
        back the readers' descriptors if build() never ran."""
        for _, _, cleaned in self.outputs:
            cleaned.delete(sync=False)
        self.outputs.clear()
        for reader in self.readers:
            reader.close()


class Compactor:
    """The compaction passes of one partition log, and its clean boundary.

    Owns the boundary (``clean_end``, with its checkpoint file) and when it last cleaned;
    the segments belong to the log, whose list :meth:`swap` edits in place. Time comes from
    ``clock`` (milliseconds). Concurrency: every method runs on the log owner's thread; at
    most one pass is planned and not yet swapped at a time (:meth:`plan` returns None
    meanwhile); only the pass's :meth:`CleaningPass.build` runs elsewhere.
    """

    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int]) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self._checkpoint = Checkpoint(directory / CLEANER_CHECKPOINT_FILE)
        self.clean_end = self._checkpoint.read_offset() or 0
        self._last_clean_ms = clock()
        self._generation = 0  # truncations: a pass planned before one is stale
        self._running: CleaningPass | None = None

    # -- the boundary ---------------------------------------------------------------------------

    def opened(self, log_start: int, log_end: int) -> None:
        """The log opened: the boundary lies within it."""
        self.clean_end = min(max(self.clean_end, log_start), log_end)

    def truncated(self, log_end: int) -> None:
        """The log lost its offsets from ``log_end`` on: a pass planned before cannot be
        applied, and the boundary comes down, durably, since what is appended next is not
        clean."""
        self._generation += 1
        if self.clean_end > log_end:
            self.clean_end = log_end
            self._checkpoint.write_offset(log_end)

    def dirty_ratio(self, segments: list[LogSegment], limit: int) -> float:
        """The dirty share of the bytes of the cleanable segments (0 when there are none)."""
        return _ratio(*self._split(segments, limit))

    def _split(self, segments: list[LogSegment], limit: int
               ) -> tuple[list[LogSegment], list[LogSegment]]:
        cleanable = [s for s in segments[:-1] if s.next_offset <= limit]
        dirty = [s for s in cleanable if s.next_offset > self.clean_end]
        return cleanable[:len(cleanable) - len(dirty)], dirty

    # -- a pass ---------------------------------------------------------------------------------

    def plan(self, segments: list[LogSegment], limit: int) -> CleaningPass | None:
        """A pass over the segments before the active (last) one and entirely below
        ``limit``, if one is due and none is running."""
        if self._running is not None:
            return None
        clean, dirty = self._split(segments, limit)
        ratio = _ratio(clean, dirty)
        now = self.clock()
        due = (dirty and ratio >= self.config.min_cleanable_dirty_ratio) or (
            clean and now - self._last_clean_ms >= self.config.delete_retention_ms)
        if not due:
            return None
        self._last_clean_ms = now
        cleanable = clean + dirty
        self._running = CleaningPass(
            segments=cleanable, readers=[s.reader() for s in cleanable],
            first_dirty=len(clean), end=max(self.clean_end, cleanable[-1].next_offset),
            now=now, config=self.config, directory=self.directory,
            generation=self._generation, stats=CleanerStats(dirty_ratio=ratio))
        return self._running

    def swap(self, segments: list[LogSegment], job: CleaningPass, *, closed: bool = False
             ) -> CleanerStats:
        """Apply a built pass to ``segments`` (the log's list, edited in place), or discard
        it: all of it if the log was truncated or closed since it was planned, the output of
        a run whose segments are gone (retention took them) otherwise. Ends the pass."""
        if job is self._running:
            self._running = None
        if not job.built or closed or job.generation != self._generation:
            job.discard()
            return CleanerStats(dirty_ratio=job.stats.dirty_ratio)
        present = {id(s) for s in segments}  # the pass holds its segments: ids not reused
        swaps = []
        for first, count, cleaned in job.outputs:
            group = job.segments[first:first + count]
            if all(id(s) in present for s in group):
                swaps.append((group, cleaned))
            else:
                cleaned.delete(sync=False)
        _swap_in(self.directory, segments, swaps)
        if job.end != self.clean_end:
            self.clean_end = job.end
            self._checkpoint.write_offset(job.end)
        return job.stats


def _ratio(clean: list[LogSegment], dirty: list[LogSegment]) -> float:
    dirty_bytes = sum(s.size for s in dirty)
    total = dirty_bytes + sum(s.size for s in clean)
    return dirty_bytes / total if total else 0.0


def _runs(segments: list[LogSegment], shrinks: list[bool], segment_bytes: int
          ) -> list[tuple[int, int]]:
    """(first index, count) of each run of consecutive segments that shrink, merged while
    their total size fits one segment (and their offsets the 32-bit deltas of one index)."""
    runs: list[tuple[int, int]] = []
    size = 0
    for i, segment in enumerate(segments):
        if not shrinks[i]:
            continue
        if runs and runs[-1][0] + runs[-1][1] == i and size + segment.size <= segment_bytes \
                and segment.next_offset - segments[runs[-1][0]].base_offset <= 2**32 - 1:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            size += segment.size
        else:
            runs.append((i, 1))
            size = segment.size
    return runs


def _swap_in(directory: Path, segments: list[LogSegment],
             swaps: list[tuple[list[LogSegment], LogSegment]]) -> None:
    # Each step is durable before the next (one directory sync each): a crash leaves either
    # the old segments, or .swap files that the next open finishes swapping in, never a
    # merged segment beside an old one it overlaps.
    if not swaps:
        return
    for _, cleaned in swaps:
        cleaned.rename_suffix(SWAP_SUFFIX, sync=False)
    files.fsync_dir(directory)
    for group, _ in swaps:
        for segment in group:
            segment.delete(sync=False)
    files.fsync_dir(directory)
    for _, cleaned in swaps:
        cleaned.rename_suffix("", sync=False)
    files.fsync_dir(directory)
    for group, cleaned in swaps:
        i = segments.index(group[0])
        segments[i:i + len(group)] = [cleaned]


def finish_interrupted_cleaning(directory: Path, index_interval_bytes: int,
                                names: set[str]) -> None:
    """Discard compaction output never swapped in; complete the swaps a crash interrupted.
    Runs when a log opens, before its segments are taken from ``names``, the directory's
    listing, which it keeps true (names removed leave it, renamed ones change in it)."""
    discarded = [name for name in names if name.endswith(CLEANED_SUFFIX)]
    for name in discarded:
        files.remove(directory / name)
    if discarded:
        files.fsync_dir(directory)
    names.difference_update(discarded)
    for name in sorted(n for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX)):
        base = int(name.split(".")[0])
        swapped = LogSegment(directory, base, index_interval_bytes, suffix=SWAP_SUFFIX)
        swapped.recover()
        for old_base in log_bases(names):
            if base <= old_base < max(swapped.next_offset, base + 1):
                LogSegment(directory, old_base, 1).delete()
                names.difference_update(segment_files(old_base))
        swapped.rename_suffix("")
        swapped.close()
        for final, swap in zip(segment_files(base), segment_files(base, SWAP_SUFFIX),
                               strict=True):
            if swap in names:
                names.discard(swap)
                names.add(final)
    # What is left is index files of a swap whose segment file was already renamed.
    leftovers = [name for name in names if name.endswith(SWAP_SUFFIX)]
    for name in leftovers:
        files.remove(directory / name)
    if leftovers:  # the swaps above synced their own steps
        files.fsync_dir(directory)
    names.difference_update(leftovers)


def _paced(segment: LogSegment) -> Iterator[tuple[BatchHeader, bytes, int]]:
    """The segment's batches, handing the interpreter lock to other threads after each: a
    pass runs beside the event loop that serves every replica, which then waits for at most
    one batch's work instead of the interpreter's switch interval (5 ms) at a time."""
    for batch in segment.batches():
        yield batch
        time.sleep(0)


@dataclasses.dataclass
class _Scan:
    """What a pass learnt of one segment's batches in one read: each batch's base offset
    and record count, and per record its key, offset and whether it is a keyed tombstone
    (value None)."""

    batches: list[tuple[int, int]]
    keys: pa.ChunkedArray
    offsets: np.ndarray
    tombstones: np.ndarray
    discard: np.ndarray  # records that go whatever their keys (aborted transactions')

    def keep(self, newest: pa.Table, drop_tombstones: bool) -> np.ndarray:
        """Which records compaction keeps: those with no newer record of their key in
        ``newest`` (keyless ones too), and, with ``drop_tombstones``, no keyed tombstone.
        Vectorised (Arrow's kernels, which let other threads run meanwhile)."""
        keep = np.ones(len(self.offsets), dtype=bool)
        if newest.num_rows and len(self.offsets):
            slot = pc.index_in(self.keys, value_set=newest.column(0).combine_chunks())
            latest = pc.take(newest.column(1), slot)  # null: not in newest (or no key)
            keep = pc.fill_null(pc.equal(latest, pa.array(self.offsets)), True) \
                .to_numpy(zero_copy_only=False)
        if drop_tombstones:
            keep &= ~self.tombstones
        return keep & ~self.discard


def _scan(segment: LogSegment, txns: Transactions) -> _Scan:
    batches, keys, offsets, tombstones, discard = [], [], [], [], []
    for header, buf, pos in _paced(segment):
        payload = decode(header, buf, pos)
        n = header.record_count
        batches.append((header.base_offset, n))
        # Markers and undecided or aborted records neither supersede nor are superseded:
        # without a key, compaction keeps them (the aborted ones are discarded below).
        key = pa.nulls(n, pa.binary()) if txns and txns.unkeyed(header) else \
            payload.column(1).combine_chunks()
        keys.append(key)
        offsets.append(offsets_of(header, payload))
        tombstones.append(pc.and_(pc.is_null(payload.column(2)), pc.is_valid(key))
                          .to_numpy(zero_copy_only=False))
        discard.append(np.full(n, bool(txns) and txns.discarded(header)))
    return _Scan(batches, pa.chunked_array(keys, pa.binary()),
                 np.concatenate(offsets) if offsets else np.empty(0, np.int64),
                 np.concatenate(tombstones) if tombstones else np.empty(0, bool),
                 np.concatenate(discard) if discard else np.empty(0, bool))


def newest_offsets(scans: Iterable[_Scan]) -> pa.Table:
    """Each key of ``scans`` (segments in offset order) beside the offset of its newest
    record there: a table of two columns, key and offset."""
    scans = list(scans)
    keys = pa.chunked_array([chunk for scan in scans for chunk in scan.keys.chunks],
                            pa.binary())
    offsets = np.concatenate([scan.offsets for scan in scans]) if scans else \
        np.empty(0, np.int64)
    table = pa.table({"key": keys, "offset": offsets})
    table = table.filter(pc.is_valid(table.column(0)))
    return table.group_by("key", use_threads=False).aggregate([("offset", "max")])


def _copy_cleaned(segment: LogSegment, cleaned: LogSegment, keep: np.ndarray,
                  stats: CleanerStats) -> None:
    """Append to ``cleaned`` what ``keep`` keeps of each batch of ``segment`` (``keep``:
    the segment's records in order, as :func:`_scan` read them)."""
    at = 0
    for header, buf, pos in _paced(segment):
        n = header.record_count
        stats.records_read += n
        out = clean_batch(header, buf, pos, keep[at:at + n])
        at += n
        if out is None:
            stats.records_removed += n
            continue
        out_header = validate_batch(out)
        cleaned.append_stored(out_header, out)
        stats.records_removed += n - out_header.record_count
    if at != len(keep):
        raise CorruptRecordError(f"{segment.path} changed while it was cleaned: {at} records "
                                 f"read, {len(keep)} before")


def clean_batch(header: BatchHeader, buf: bytes | memoryview, pos: int, keep: np.ndarray
                ) -> bytes | memoryview | None:
    """The batch at ``buf[pos:]`` with the records ``keep`` does not keep removed.

    Returns the original bytes when nothing is removed (without decoding them) and None
    when nothing is left.
    """
    if len(keep) != header.record_count:
        raise CorruptRecordError(f"batch at offset {header.base_offset} changed while it was "
                                 f"cleaned")
    kept = int(keep.sum())
    if kept == len(keep):
        return memoryview(buf)[pos:pos + header.size]
    if kept == 0:
        return None
    payload = decode(header, buf, pos)
    offsets = offsets_of(header, payload)
    columns = payload.select(range(4)).filter(pa.array(keep))
    deltas = pa.array((offsets[keep] - header.base_offset).astype(np.int32))
    table = pa.Table.from_arrays([*columns.columns, deltas], schema=EXPLICIT_SCHEMA)
    out = bytearray(encode(
        table,
        codec=header.codec,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        last_offset_delta=header.last_offset_delta,
        transactional=header.transactional,
    ))
    stamp(out, header.base_offset, header.leader_epoch)
    return out
