"""The aborted-transaction index of one segment (Kafka's ``.txnindex``).

File ``<base>.txnindex``, beside the segment holding the abort markers it lists: entries of
32 bytes, big-endian ``(producer_id: int64, first_offset: int64, last_offset: int64,
last_stable_offset: int64)``, one per abort marker in the segment, in the markers' offset
order. ``first_offset`` is the first offset the aborted transaction wrote in the partition
(possibly in an earlier segment), ``last_offset`` its abort marker's, and
``last_stable_offset`` the partition's last stable offset once the marker was applied (the
first offset of the earliest transaction still open then, else the marker's offset + 1).
A read_committed reader drops a producer's batches between an entry's first and last
offsets.

The log is the truth, not this file: an entry is written (to the page cache) after its
marker is appended, so a crash can lose it; the replica re-derives the entries of the
batches it replays when it opens (see ``Partition._load_producers``) and adds the missing
ones (:meth:`TxnIndex.restore`). Opening drops entries past the segment's end (a cut tail)
and refuses a file that is not whole entries in order inside the segment
(CorruptTxnIndexError): the log then empties it and the replica rebuilds every segment's
entries from the batches. Created only when a segment gets its first entry. Owned by one
:class:`~raylog.storage.segment.LogSegment`; not safe for concurrent use.

Readers drop what the entries name with :func:`aborted_or_control` and
:func:`without_batches`: a replica's read_committed reads and a tiered segment read from the
object store without a broker (raylog/tiered/cold_read.py) alike.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from raylog.errors import CorruptTxnIndexError
from raylog.records.header import BatchHeader, iter_headers
from raylog.storage import files

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">qqqq")


class AbortedTxn(NamedTuple):
    """One aborted transaction of one producer in a partition (see the module docstring)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset
    last_stable_offset: int

    def covers(self, producer_id: int, offset: int) -> bool:
        """Whether a batch of ``producer_id`` at ``offset`` belongs to this transaction."""
        return producer_id == self.producer_id and \
            self.first_offset <= offset <= self.last_offset


class TxnIndex:
    """The aborted transactions whose abort markers lie in one segment, in marker order."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.entries: list[AbortedTxn] = []
        self._unsynced = False  # entries written but not fsynced
        self._dir_dirty = False  # the file was created, replaced or removed since a sync

    def __len__(self) -> int:
        return len(self.entries)

    def load(self, base_offset: int, next_offset: int) -> None:
        """Read the file (missing: no entries). Entries at or past ``next_offset`` are
        dropped, from the file too (their markers were cut). Raises CorruptTxnIndexError for
        a torn entry, entries out of order or outside [``base_offset``, ``next_offset``) in
        a way a cut tail does not explain, or an entry that contradicts itself."""
        self.entries = []
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        if len(data) % _ENTRY.size:
            raise CorruptTxnIndexError(f"{self.path}: {len(data)} bytes, not whole "
                                       f"{_ENTRY.size}-byte entries")
        entries = decode_entries(data)
        previous = base_offset - 1
        for i, entry in enumerate(entries):
            if entry.last_offset >= next_offset:  # a cut tail: ends the valid entries
                self.entries = entries[:i]
                self._rewrite()
                return
            if not (entry.producer_id >= 0 and entry.last_offset > previous and
                    0 <= entry.first_offset <= entry.last_offset and
                    entry.first_offset <= entry.last_stable_offset <= entry.last_offset + 1):
                raise CorruptTxnIndexError(f"{self.path}: entry {i} {tuple(entry)} is out of "
                                           f"order or inconsistent")
            previous = entry.last_offset
        self.entries = entries

    def append(self, entry: AbortedTxn) -> None:
        """Add the entry of an abort marker appended after every entry here: written to
        the file at once (page cache), synced by :meth:`sync`."""
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"{self.path}: entry at {entry.last_offset} is not after the "
                             f"last one at {self.entries[-1].last_offset}")
        self.entries.append(entry)
        self._dir_dirty |= not self.path.exists()
        fd = files.create(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            files.write(fd, _ENTRY.pack(*entry))
        finally:
            os.close(fd)
        self._unsynced = True

    def restore(self, entry: AbortedTxn) -> bool:
        """Add ``entry`` if it is missing (a crash lost it after its marker was written);
        return whether it was. Keeps the marker order, rewriting the file if it must."""
        i = bisect.bisect_left(self.entries, entry.last_offset, key=_last_offset)
        if i < len(self.entries) and self.entries[i].last_offset == entry.last_offset:
            if self.entries[i] == entry:
                return False
            self.entries[i] = entry  # the log's word wins over a stale entry
        elif i == len(self.entries):
            self.append(entry)
            return True
        else:
            self.entries.insert(i, entry)
        self._rewrite()
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or after ``offset``."""
        keep = bisect.bisect_left(self.entries, offset, key=_last_offset)
        if keep < len(self.entries):
            del self.entries[keep:]
            self._rewrite()

    def clear(self) -> None:
        self.entries = []
        if self.path.exists():
            files.remove(self.path)
            self._dir_dirty = True
        self._unsynced = False

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """The entries of transactions holding an offset in [start, end)."""
        i = bisect.bisect_left(self.entries, start, key=_last_offset)
        return [e for e in self.entries[i:] if e.first_offset < end]

    def sync(self) -> None:
        """Make the entries written so far durable (the file's name too, if new)."""
        if self._unsynced and self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                files.fsync(fd)
            finally:
                os.close(fd)
        if self._dir_dirty:
            files.fsync_dir(self.path.parent)
        self._unsynced = self._dir_dirty = False

    def _rewrite(self) -> None:
        if not self.entries:
            self.clear()
            return
        # Written whole and fsynced by write_atomic: only its name waits for sync().
        files.write_atomic(self.path, b"".join(_ENTRY.pack(*e) for e in self.entries),
                           sync_dir=False)
        self._dir_dirty = True


def decode_entries(data: bytes | memoryview) -> list[AbortedTxn]:
    """The entries of a whole index file's bytes (a remote segment's ``txn.index`` too);
    the caller checks the length is whole entries."""
    return [AbortedTxn(*fields) for fields in _ENTRY.iter_unpack(data)]


def _last_offset(entry: AbortedTxn) -> int:
    return entry.last_offset


def _is_control(header: BatchHeader) -> bool:
    return header.control


def aborted_or_control(aborted: Sequence[AbortedTxn]) -> Callable[[BatchHeader], bool]:
    """Whether a batch is a marker or belongs to one of the ``aborted`` transactions (with
    none, as for every read_uncommitted read, only the control bit is looked at)."""
    if not aborted:
        return _is_control
    by_producer: dict[int, list[AbortedTxn]] = {}
    for entry in aborted:
        by_producer.setdefault(entry.producer_id, []).append(entry)

    def drop(header: BatchHeader) -> bool:
        if header.control:
            return True
        if not header.transactional:
            return False
        return any(e.covers(header.producer_id, header.base_offset)
                   for e in by_producer.get(header.producer_id, ()))
    return drop


def without_batches(chunk: bytes, drop: Callable[[BatchHeader], bool]) -> bytes:
    """``chunk`` (whole batches) without the batches ``drop`` picks; ``chunk`` itself when
    none is dropped."""
    kept, keep_from, dropped = [], 0, False
    for pos, header in iter_headers(chunk, verify=False):
        if drop(header):
            kept.append(chunk[keep_from:pos])
            keep_from, dropped = pos + header.size, True
    if not dropped:
        return chunk
    kept.append(chunk[keep_from:])
    return b"".join(kept)
