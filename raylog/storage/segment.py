"""One segment of a partition log: a file of whole batches, its two indexes and its
aborted-transaction index (txn_index.py)."""

from __future__ import annotations

import logging
import mmap
import os
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from raylog.errors import CorruptRecordError, StorageError
from raylog.records.header import (
    CRC_POS,
    HEADER_SIZE,
    LENGTH_PREFIX,
    LENGTH_PREFIX_SIZE,
    BatchHeader,
    check_prefix,
    iter_headers,
    parse_header,
    stamped_prefix,
)
from raylog.storage import files
from raylog.storage.index import OffsetIndex, TimeIndex
from raylog.storage.txn_index import TXN_INDEX_SUFFIX, TxnIndex

logger = logging.getLogger(__name__)

# Positions and relative offsets are stored as uint32.
MAX_RELATIVE_OFFSET = 2**32 - 1
MAX_SEGMENT_POSITION = 2**32 - 1

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"


T = TypeVar("T")


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def log_bases(names: set[str] | list[str]) -> list[int]:
    """The base offsets of the segments among a directory's file ``names``, in order."""
    return sorted(int(name[:-len(LOG_SUFFIX)]) for name in names
                  if name.endswith(LOG_SUFFIX) and name[:-len(LOG_SUFFIX)].isdigit())


_EXTENSIONS = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def segment_files(base_offset: int, suffix: str = "") -> tuple[str, ...]:
    """The names of a segment's four files (the log, its index, its time index, its
    aborted-transaction index: the last exists only once it has an entry)."""
    stem = segment_name(base_offset)
    return tuple(stem + ext + suffix for ext in _EXTENSIONS)


class IndexMismatchError(CorruptRecordError):
    """An index entry disagrees with the batches; the segment rebuilds its indexes."""


class LogSegment:
    """A file ``<base offset, 20 digits>.log`` of batches, with ``.index`` and ``.timeindex``
    and, once it holds an abort marker, ``.txnindex`` (``txn_index``: kept in step with the
    batches by its log: appended after an abort marker, cut by :meth:`truncate_to`, loaded
    and checked by :meth:`load_txn_index`).

    Invariants: the file holds whole batches in increasing, non-overlapping offset order,
    each with ``base_offset <= offset < base_offset + 2**32``; ``size`` is the file length and
    ``next_offset`` is one past the last batch's range (``base_offset`` when empty). The indexes
    in memory always describe the file; their files may lag until :meth:`flush`. An index
    entry is checked against the batch it names before it is used (and both indexes are
    rebuilt from the batches when one is wrong), so a damaged index file costs a scan, never
    a wrong answer. ``damaged_at``, when set, is where a flushed segment holds a batch that
    failed its checks: nothing there or after it is served, and nothing is cut either.
    Owned by one :class:`PartitionLog`; not safe for concurrent use: work on another thread
    reads a :meth:`reader` copy, which has a descriptor of its own.
    """

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int,
                 *, create: bool = False, suffix: str = "") -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        stem = segment_name(base_offset)
        self.path = self.directory / (stem + LOG_SUFFIX + suffix)
        self.index = OffsetIndex(self.directory / (stem + INDEX_SUFFIX + suffix))
        self.time_index = TimeIndex(self.directory / (stem + TIME_INDEX_SUFFIX + suffix))
        self.txn_index = TxnIndex(self.directory / (stem + TXN_INDEX_SUFFIX + suffix))
        self._fd = files.create(self.path, os.O_RDWR | (os.O_TRUNC if create else 0))
        # A segment dropped without close() (its log abandoned, as after a crash in a test
        # or a failed open) gives its descriptor back, as Python's file objects do.
        self._release = weakref.finalize(self, os.close, self._fd)
        self.size = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        self.damaged_at: int | None = None
        self.dirty = False
        self._bytes_since_index = 0
        if create:
            self.index.clear()
            self.time_index.clear()
            self.txn_index.clear()
            # Durable before anything is appended to it or a checkpoint counts on it.
            files.fsync_dir(self.directory)

    def __repr__(self) -> str:
        return (f"LogSegment({self.base_offset}, next_offset={self.next_offset}, "
                f"size={self.size})")

    # -- appending ---------------------------------------------------------------------------

    def fits(self, header: BatchHeader, base_offset: int) -> bool:
        """Whether a batch at ``base_offset`` can go here without overflowing the indexes."""
        return (base_offset + header.last_offset_delta - self.base_offset <= MAX_RELATIVE_OFFSET
                and self.size + header.size <= MAX_SEGMENT_POSITION)

    def append(self, header: BatchHeader, batch: bytes | memoryview, base_offset: int,
               leader_epoch: int) -> None:
        """Write ``batch`` stamped with ``base_offset`` and ``leader_epoch``."""
        view = memoryview(batch)
        self._write([stamped_prefix(view, base_offset, leader_epoch), view[CRC_POS:]])
        self._note(header._replace(base_offset=base_offset, leader_epoch=leader_epoch),
                   self.size)
        self.size += header.size

    def append_stored(self, header: BatchHeader, batch: bytes | memoryview) -> None:
        """Write an already stamped batch as it is (replication, compaction)."""
        self._write([batch])
        self._note(header, self.size)
        self.size += header.size

    def _write(self, buffers: list) -> None:
        total = sum(len(b) for b in buffers)
        try:
            written = files.write_at(self._fd, buffers, self.size)
            while written < total:  # a short write: only on a full disk or a signal
                rest = b"".join(bytes(b) for b in buffers)[written:]
                written += files.write_at(self._fd, [rest], self.size + written)
        except OSError as e:
            files.truncate(self._fd, self.size)
            raise StorageError(f"cannot write to {self.path}: {e}") from e
        self.dirty = True

    def _note(self, header: BatchHeader, position: int, *, index: bool = True) -> None:
        """Account for the batch just written (or found) at ``position``."""
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
        if index and self._bytes_since_index >= self.index_interval_bytes:
            self.index.add(header.base_offset - self.base_offset, position)
            self.time_index.maybe_add(self.max_timestamp, header.last_offset - self.base_offset)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.next_offset = header.next_offset

    # -- reading -----------------------------------------------------------------------------

    def _header_at(self, position: int) -> BatchHeader:
        data = os.pread(self._fd, HEADER_SIZE, position)
        header = parse_header(data)
        if header.batch_length < HEADER_SIZE - LENGTH_PREFIX_SIZE or \
                position + header.size > self.size:
            raise CorruptRecordError(f"bad batch length at byte {position} of {self.path}")
        return header

    def walk(self, position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` of each batch from ``position``, headers unverified.

        Stops before ``damaged_at``.
        """
        end = self.size if self.damaged_at is None else self.damaged_at
        while position < end:
            header = self._header_at(position)
            yield position, header
            position += header.size

    def batches(self, position: int = 0, chunk_bytes: int = 1 << 20
                ) -> Iterator[tuple[BatchHeader, bytes, int]]:
        """Yield ``(header, buffer, pos)`` for each batch from ``position``, framing and both
        CRCs checked; the batch is ``buffer[pos:pos + header.size]``. Raises
        CorruptRecordError at the first bad one. Reads ``chunk_bytes`` at a time."""
        end = self.size if self.damaged_at is None else self.damaged_at
        while position < end:
            data = self.read(position, chunk_bytes)
            for pos, header in iter_headers(data, verify=True):
                yield header, data, pos
            position += len(data)
        if self.damaged_at is not None:
            raise self._damage()

    def verified_headers(self, chunk_bytes: int = 1 << 20) -> Iterator[BatchHeader]:
        """Yield the header of every batch, framing and both CRCs checked. At the first batch
        that fails, mark the segment damaged there (nothing from there on is served, nothing
        is cut) and stop: what is rebuilt from headers (producer state, the epoch cache)
        never takes a damaged batch's word."""
        for header, _, _ in self.verified_batches(chunk_bytes):
            yield header

    def verified_batches(self, chunk_bytes: int = 1 << 20
                         ) -> Iterator[tuple[BatchHeader, bytes, int]]:
        """As :meth:`verified_headers`, yielding ``(header, buffer, pos)``: the batch is
        ``buffer[pos:pos + header.size]`` (for a replay that reads markers)."""
        end = self.size if self.damaged_at is None else self.damaged_at
        position = 0
        while position < end:
            data = self.read(position, chunk_bytes)
            good = 0
            try:
                for pos, header in iter_headers(data, verify=True):
                    good = pos + header.size
                    yield header, data, pos
            except CorruptRecordError as e:
                self.damaged_at = position + good
                logger.error("%s is damaged at byte %d (%s): nothing there or after it is "
                             "served", self.path, self.damaged_at, e)
                return
            position += len(data)

    def _damage(self) -> CorruptRecordError:
        return CorruptRecordError(
            f"batch at byte {self.damaged_at} of {self.path} failed its checks")

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose range reaches ``offset`` (its last offset >= it), if any.

        Raises CorruptRecordError if that batch is in the damaged part of the segment.
        """
        if offset >= self.next_offset:
            return None
        found = self._locate(offset)
        if found is None and self.damaged_at is not None:
            raise self._damage()
        return found

    def _locate(self, offset: int) -> tuple[int, BatchHeader] | None:
        return self._indexed(lambda: self._scan_from_index(offset))

    def _indexed(self, lookup: Callable[[], T]) -> T:
        """Run an index lookup; if an entry proves wrong, rebuild the indexes and run it again."""
        try:
            return lookup()
        except IndexMismatchError:
            self.rebuild_indexes()
            return lookup()

    def _scan_from_index(self, offset: int) -> tuple[int, BatchHeader] | None:
        for position, header in self.walk(self._index_start(offset)):
            if header.last_offset >= offset:
                return position, header
        return None

    def _index_start(self, offset: int) -> int:
        """Position of the batch that the last offset-index entry at or below ``offset``
        names, after checking that a batch with that offset starts there (0 if none)."""
        i = self.index.entry_below(max(offset - self.base_offset, 0))
        if i < 0:
            return 0
        relative, position = self.index.firsts[i], self.index.seconds[i]
        data = os.pread(self._fd, HEADER_SIZE, position) if position < self.size else b""
        try:
            header = parse_header(data)
            check_prefix(header, data, 0)
        except CorruptRecordError as e:
            raise IndexMismatchError(f"offset index of {self.path}: entry {i} names byte "
                                     f"{position}, where no batch starts") from e
        if header.base_offset != self.base_offset + relative:
            raise IndexMismatchError(
                f"offset index of {self.path}: entry {i} says offset "
                f"{self.base_offset + relative} at byte {position}, the batch there has "
                f"{header.base_offset}")
        return position

    def time_start(self, timestamp: int) -> int:
        """A position from which a forward scan meets every record of this segment with a
        timestamp >= ``timestamp``: after the batches the time index proves older.

        The time-index entry used is checked against the batches it covers first: the
        newest of their timestamps must be the entry's, and the last of them must end at the
        entry's offset. Raises CorruptRecordError if it is still wrong after a rebuild.
        """
        return self._indexed(lambda: self._checked_time_start(timestamp))

    def _checked_time_start(self, timestamp: int) -> int:
        times = self.time_index
        i = times.entry_before(timestamp)
        if i < 0:
            return 0
        # Entry i was written when the running max timestamp grew: the batches after the
        # previous entry's offset, up to entry i's, hold that max.
        first = self.base_offset + (times.seconds[i - 1] + 1 if i else 0)
        last = self.base_offset + times.seconds[i]
        newest = -1
        for position, header in self.walk(self._index_start(first)):
            if header.last_offset < first:
                continue
            newest = max(newest, header.max_timestamp)
            if header.last_offset >= last:
                if header.last_offset == last and newest == times.firsts[i]:
                    return position + header.size
                break
        raise IndexMismatchError(f"time index of {self.path}: entry {i} "
                                 f"({times.firsts[i]}, {times.seconds[i]}) does not match "
                                 f"its batches")

    def read(self, position: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from ``position``: as many as fit in ``max_bytes`` (at least one),
        stopping before the first batch with base offset >= ``max_offset``."""
        data = os.pread(self._fd, max(min(max_bytes, self.size - position), 0), position)
        cut, end, unpack = 0, len(data), LENGTH_PREFIX.unpack_from
        while cut + LENGTH_PREFIX_SIZE <= end:
            base_offset, length = unpack(data, cut)
            if max_offset is not None and base_offset >= max_offset:
                break
            if cut + LENGTH_PREFIX_SIZE + length > end:
                break
            cut += LENGTH_PREFIX_SIZE + length
        if cut == 0:
            if position >= self.size:
                return b""
            header = self._header_at(position)
            if max_offset is not None and header.base_offset >= max_offset:
                return b""
            return os.pread(self._fd, header.size, position)
        return data if cut == end else data[:cut]

    def read_all(self) -> bytes:
        return os.pread(self._fd, self.size, 0)

    # -- opening and recovery ------------------------------------------------------------------

    def load(self) -> bool:
        """Open after a clean shutdown: trust the index files if they check out.

        The files must be whole and in order (see :meth:`OffsetIndex.load`), every entry
        inside the segment, and the last entries must match the batches: the tail from the
        last time-index entry's batch is walked, and it must start where an offset-index
        entry says, hold the offsets and the newest timestamp the entries claim, and have an
        offset-index entry exactly where ``index_interval_bytes`` puts one (so a truncated
        index, or an empty time index beside a non-empty offset index, is caught). Earlier
        entries are checked when a lookup uses them. Returns False (state undefined; rebuild)
        when anything disagrees.
        """
        if not (self.index.load() and self.time_index.load()):
            return False
        if len(self.index) and self.index.seconds[-1] >= self.size:
            return False
        try:
            self._restore_tail()
        except CorruptRecordError:
            return False
        return True

    def _restore_tail(self) -> None:
        """Derive next_offset and the timestamps from the indexes plus a walk of the tail.

        Raises CorruptRecordError if the tail disagrees with the indexes or the batches do
        not end exactly at the end of the file.
        """
        index, times, base = self.index, self.time_index, self.base_offset
        self.next_offset = base
        self.max_timestamp = newest = times.max_timestamp
        self.first_batch_timestamp = self._header_at(0).max_timestamp if self.size else None
        # The walk starts at the batch of the last time entry, which must be an offset-index
        # entry's (both are written together), or at 0 when there is no time entry.
        start, entry = 0, -1
        if len(times):
            entry = index.entry_below(times.seconds[-1])
            if entry < 0:
                raise IndexMismatchError(f"time index of {self.path} is ahead of its index")
            start = self._index_start(base + index.firsts[entry])
        anchor, interval = start, self.index_interval_bytes
        for position, header in self.walk(start):
            if len(times) and position == start:
                if header.last_offset != base + times.seconds[-1] or \
                        header.max_timestamp > times.max_timestamp:
                    raise IndexMismatchError(f"last time entry of {self.path} is wrong")
            else:
                newest = max(newest, header.max_timestamp)
                if position - anchor >= interval:
                    # Appending wrote an offset-index entry here, and a time entry too had
                    # the newest timestamp grown past the last one.
                    entry += 1
                    if entry >= len(index) or index.seconds[entry] != position or \
                            index.firsts[entry] != header.base_offset - base or \
                            newest > times.max_timestamp:
                        raise IndexMismatchError(
                            f"indexes of {self.path} disagree with the batches at byte "
                            f"{position}")
                    anchor = position
            self._note(header, position, index=False)
        if entry != len(index) - 1:
            raise IndexMismatchError(f"offset index of {self.path} has entries past its end")
        self._bytes_since_index = self.size - self.index.last()[1]

    def recover(self, min_offset: int | None = None, *, cut: bool = True) -> int:
        """Rebuild the indexes from the batches, verifying each; cut a torn or corrupt tail.

        A batch that fails its checks, or whose offsets do not follow the previous batch's
        (or start below ``min_offset``), ends the valid prefix. With ``cut`` the file is
        truncated there (a torn write after a crash) and the bytes cut are returned. Without
        it (a flushed segment: no write can be torn, so a bad batch is damage), nothing is
        cut: the segment serves the valid prefix and ``damaged_at`` marks where it ends.
        """
        self.index.clear()
        self.time_index.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp = None
        self.damaged_at = None
        self._bytes_since_index = 0
        expected = max(self.base_offset, min_offset or 0)
        valid = 0
        if self.size:
            with mmap.mmap(self._fd, self.size, access=mmap.ACCESS_READ) as data:
                batches = iter_headers(data, verify=True)
                try:
                    for position, header in batches:
                        if header.base_offset < expected or \
                                header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
                            break
                        self._note(header, position)
                        expected = header.next_offset
                        valid = position + header.size
                except CorruptRecordError:
                    pass
                finally:
                    batches.close()
        damaged = self.size - valid
        if damaged and cut:
            files.truncate(self._fd, valid)
            self.size = valid
        elif damaged:
            self.damaged_at = valid
        self.dirty = True
        return damaged if cut else 0

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the batches, cutting nothing, and write them."""
        next_offset, max_timestamp = self.next_offset, self.max_timestamp
        self.recover(cut=False)
        if self.damaged_at is not None:
            # What lies past the damage is unknown: keep what the segment knew before.
            self.next_offset = max(self.next_offset, next_offset)
            self.max_timestamp = max(self.max_timestamp, max_timestamp)
        self.index.flush(fsync=True)
        self.time_index.flush(fsync=True)

    # -- truncation, flushing, deletion ----------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose range reaches ``offset``; return the bytes removed."""
        found = self.find(offset)
        if found is None:
            return 0
        position, header = found
        removed = self.size - position
        files.truncate(self._fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(header.base_offset - self.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        try:
            self._restore_tail()
        except CorruptRecordError:
            self.rebuild_indexes()
        self.dirty = True
        return removed

    def sync(self) -> None:
        """fsync the batches written since the last sync (the indexes wait for
        :meth:`flush`). Raises StorageError if the disk refuses."""
        if self.dirty:
            try:
                files.fsync(self._fd)
            except OSError as e:
                raise StorageError(f"cannot sync {self.path}: {e}") from e
            self.dirty = False

    def flush(self) -> None:
        """fsync the batches and write the index files."""
        self.sync()
        self.index.flush(fsync=True)
        self.time_index.flush(fsync=True)
        self.txn_index.sync()

    def load_txn_index(self) -> bool:
        """Load the aborted-transaction index once the batches are known (``next_offset``
        set): entries past the end go. False, with the file emptied, if it was corrupt: the
        log's owner then rebuilds the entries from the batches."""
        try:
            self.txn_index.load(self.base_offset, self.next_offset)
        except CorruptRecordError as e:
            logger.error("%s; it is rebuilt from the batches", e)
            self.txn_index.clear()
            self.txn_index.sync()
            return False
        return True

    def reader(self) -> LogSegment:
        """A read-only copy for another thread: the batches of this segment as it is now,
        through a descriptor of its own, so that it stays readable (and never reads another
        file through a reused descriptor) whatever happens to this segment meanwhile. Use
        only ``batches``, ``read``, ``sync`` and the attributes; close it when done. If this
        segment is truncated meanwhile, the copy may find fewer bytes and raise
        CorruptRecordError."""
        copy = object.__new__(LogSegment)
        copy.__dict__.update(self.__dict__)
        copy._fd = os.dup(self._fd)
        copy.txn_index = TxnIndex(self.txn_index.path)  # the entries of now, not later ones
        copy.txn_index.entries = list(self.txn_index.entries)
        copy._release = weakref.finalize(copy, os.close, copy._fd)
        return copy

    def close(self) -> None:
        if self._fd >= 0:
            self._release.detach()
            os.close(self._fd)
            self._fd = -1

    def delete(self, *, sync: bool = True) -> None:
        """Close and remove the four files; returns once the removal is durable (with
        ``sync=False``, the caller syncs the directory)."""
        self.close()
        # The transaction index first: a crash must not leave it behind for a later
        # segment of the same base offset to take as its own.
        for path in (self.txn_index.path, self.path, self.index.path, self.time_index.path):
            files.remove(path)
        if sync:
            files.fsync_dir(self.directory)

    def rename_suffix(self, suffix: str, *, sync: bool = True) -> None:
        """Rename all four files to carry ``suffix`` ("" for the final names); returns
        once the renames are durable (with ``sync=False``, the caller syncs the
        directory)."""
        stem = segment_name(self.base_offset)
        for attr, ext in (("path", LOG_SUFFIX), ("index", INDEX_SUFFIX),
                          ("time_index", TIME_INDEX_SUFFIX), ("txn_index", TXN_INDEX_SUFFIX)):
            holder = self if attr == "path" else getattr(self, attr)
            new = self.directory / (stem + ext + suffix)
            if holder.path.exists():
                files.replace(holder.path, new)
            holder.path = new
        if sync:
            files.fsync_dir(self.directory)
