"""One segment of a partition log: a file of whole batches and its two indexes."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from raylog.errors import CorruptRecordError, StorageError
from raylog.records.header import (
    CRC_POS,
    HEADER_SIZE,
    LENGTH_PREFIX,
    LENGTH_PREFIX_SIZE,
    BatchHeader,
    iter_headers,
    parse_header,
    stamped_prefix,
)
from raylog.storage.index import OffsetIndex, TimeIndex

# Positions and relative offsets are stored as uint32.
MAX_RELATIVE_OFFSET = 2**32 - 1
MAX_SEGMENT_POSITION = 2**32 - 1

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class LogSegment:
    """A file ``<base offset, 20 digits>.log`` of batches, with ``.index`` and ``.timeindex``.

    Invariants: the file holds whole batches in increasing, non-overlapping offset order,
    each with ``base_offset <= offset < base_offset + 2**32``; ``size`` is the file length and
    ``next_offset`` is one past the last batch's range (``base_offset`` when empty). The indexes
    in memory always describe the file; their files may lag until :meth:`flush`.
    Owned by one :class:`PartitionLog`; not safe for concurrent use.
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
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if create else 0)
        self._fd = os.open(self.path, flags, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        self.dirty = False
        self._bytes_since_index = 0
        if create:
            self.index.clear()
            self.time_index.clear()

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
            written = os.pwritev(self._fd, buffers, self.size)
            while written < total:  # a short write: only on a full disk or a signal
                rest = b"".join(bytes(b) for b in buffers)[written:]
                written += os.pwrite(self._fd, rest, self.size + written)
        except OSError as e:
            os.ftruncate(self._fd, self.size)
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
        """Yield ``(position, header)`` of each batch from ``position``, headers unverified."""
        while position < self.size:
            header = self._header_at(position)
            yield position, header
            position += header.size

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose range reaches ``offset`` (its last offset >= it), if any."""
        if offset >= self.next_offset:
            return None
        return self._locate(offset)

    def _locate(self, offset: int) -> tuple[int, BatchHeader] | None:
        _, start = self.index.lookup(max(offset - self.base_offset, 0))
        for position, header in self.walk(start):
            if header.last_offset >= offset:
                return position, header
        return None

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
        """Open after a clean shutdown: trust the index files if they look right.

        Checks that the newest offset-index entry points at a batch with the offset it
        claims, then walks the batch headers after it to find the segment's end. Returns False
        (state undefined; call :meth:`recover`) when anything disagrees.
        """
        if not (self.index.load() and self.time_index.load()):
            return False
        try:
            relative, position = self.index.last()
            if len(self.index) and (
                position >= self.size
                or self._header_at(position).base_offset != self.base_offset + relative
            ):
                return False
            self._restore_tail()
        except CorruptRecordError:
            return False
        return True

    def _restore_tail(self) -> None:
        """Derive next_offset and the timestamps from the indexes plus a walk of the tail.

        The last time-index entry gives the largest timestamp up to its offset; the batches
        after it (and after the last offset-index entry) are walked. Raises
        CorruptRecordError if they do not end exactly at the end of the file.
        """
        self.next_offset = self.base_offset
        self.max_timestamp = self.time_index.max_timestamp
        self.first_batch_timestamp = self._header_at(0).max_timestamp if self.size else None
        _, start = self.index.last()
        if len(self.time_index):
            found = self._locate(self.base_offset + self.time_index.seconds[-1])
            if found is None:
                raise CorruptRecordError(f"time index of {self.path} points past its end")
            start = min(start, found[0])
        # walk() raises unless the batches end exactly at the end of the file.
        for position, header in self.walk(start):
            self._note(header, position, index=False)
        self._bytes_since_index = self.size - self.index.last()[1]

    def recover(self, min_offset: int | None = None) -> int:
        """Rebuild the indexes from the batches, verifying each; cut a torn or corrupt tail.

        A batch that fails its checks, or whose offsets do not follow the previous batch's
        (or start below ``min_offset``), ends the valid prefix. Returns the bytes cut.
        """
        self.index.clear()
        self.time_index.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp = None
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
        cut = self.size - valid
        if cut:
            os.ftruncate(self._fd, valid)
            self.size = valid
        self.dirty = True
        return cut

    # -- truncation, flushing, deletion ----------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose range reaches ``offset``; return the bytes removed."""
        found = self.find(offset)
        if found is None:
            return 0
        position, header = found
        removed = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(header.base_offset - self.base_offset)
        self._restore_tail()
        self.dirty = True
        return removed

    def flush(self) -> None:
        """fsync the batches and write the index files."""
        if self.dirty:
            os.fsync(self._fd)
            self.dirty = False
        self.index.flush(fsync=True)
        self.time_index.flush(fsync=True)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        for path in (self.path, self.index.path, self.time_index.path):
            path.unlink(missing_ok=True)

    def rename_suffix(self, suffix: str) -> None:
        """Rename all three files to carry ``suffix`` ("" for the final names)."""
        stem = segment_name(self.base_offset)
        for attr, ext in (("path", LOG_SUFFIX), ("index", INDEX_SUFFIX),
                          ("time_index", TIME_INDEX_SUFFIX)):
            holder = self if attr == "path" else getattr(self, attr)
            new = self.directory / (stem + ext + suffix)
            if holder.path.exists():
                os.replace(holder.path, new)
            holder.path = new
