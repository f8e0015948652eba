"""The sparse offset index and the time index of one segment.

Offset index file (``<base>.index``): entries of 8 bytes, big-endian
``(relative_offset: uint32, position: uint32)``. An entry says the batch starting at byte
``position`` of the segment has base offset ``segment base + relative_offset``. One entry is
added when at least ``index_interval_bytes`` of log were written since the previous one, so a
lookup finds the nearest preceding entry and scans at most that many bytes of batch headers.

Time index file (``<base>.timeindex``): entries of 12 bytes, big-endian
``(timestamp: int64, relative_offset: uint32)``. An entry ``(t, o)`` says every record at
offsets <= base + o has timestamp <= t. Entries are added beside offset-index entries when the
segment's largest timestamp grew, so their timestamps strictly increase.

Both live in memory as arrays; the files are written incrementally by :meth:`flush` and are
never trusted blindly: :meth:`load` refuses a file with a torn entry or entries out of order,
and the segment rebuilds the index from its batches instead.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from itertools import pairwise
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class _IndexFile:
    """Entries kept in two parallel arrays, appended to their file on flush."""

    entry: struct.Struct
    first_type: str
    second_type: str

    def __init__(self, path: Path) -> None:
        self.path = path
        self.firsts = array(self.first_type)
        self.seconds = array(self.second_type)
        self._written = 0  # entries already in the file

    def __len__(self) -> int:
        return len(self.firsts)

    def clear(self) -> None:
        self.firsts = array(self.first_type)
        self.seconds = array(self.second_type)
        self._written = 0
        self.path.unlink(missing_ok=True)

    def add(self, first: int, second: int) -> None:
        self.firsts.append(first)
        self.seconds.append(second)

    def load(self) -> bool:
        """Read the file; False (and no entries) when it is missing or malformed."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        size = self.entry.size
        if len(data) % size:
            return False
        firsts, seconds = array(self.first_type), array(self.second_type)
        for first, second in self.entry.iter_unpack(data):
            firsts.append(first)
            seconds.append(second)
        if not self._well_ordered(firsts, seconds):
            return False
        self.firsts, self.seconds = firsts, seconds
        self._written = len(firsts)
        return True

    @staticmethod
    def _well_ordered(firsts: array, seconds: array) -> bool:
        return all(a < b for a, b in pairwise(firsts)) and all(
            a < b for a, b in pairwise(seconds))

    def flush(self, fsync: bool = False) -> None:
        """Append the entries not yet in the file; rewrite it if it was truncated."""
        if self._written == len(self.firsts) and not fsync and self.path.exists():
            return
        pack = self.entry.pack
        tail = b"".join(
            pack(f, s) for f, s in zip(self.firsts[self._written:], self.seconds[self._written:],
                                       strict=True)
        )
        mode = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if self._written else os.O_TRUNC)
        fd = os.open(self.path, mode, 0o644)
        try:
            os.write(fd, tail)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._written = len(self.firsts)

    def _truncate_entries(self, keep: int) -> None:
        if keep >= len(self.firsts):
            return
        del self.firsts[keep:]
        del self.seconds[keep:]
        if self._written > keep:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, keep * self.entry.size)
            finally:
                os.close(fd)
            self._written = keep


class OffsetIndex(_IndexFile):
    """Maps relative offsets to byte positions of batches in one segment."""

    entry = _OFFSET_ENTRY
    first_type = "I"  # relative offset
    second_type = "I"  # position

    def lookup(self, relative_offset: int) -> tuple[int, int]:
        """The last entry with relative offset <= the argument, or (0, 0)."""
        i = bisect.bisect_right(self.firsts, relative_offset) - 1
        if i < 0:
            return 0, 0
        return self.firsts[i], self.seconds[i]

    def last(self) -> tuple[int, int]:
        if not self.firsts:
            return 0, 0
        return self.firsts[-1], self.seconds[-1]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past ``position``."""
        self._truncate_entries(bisect.bisect_left(self.seconds, position))


class TimeIndex(_IndexFile):
    """Maps timestamps to relative offsets in one segment."""

    entry = _TIME_ENTRY
    first_type = "q"  # timestamp
    second_type = "I"  # relative offset

    @property
    def max_timestamp(self) -> int:
        return self.firsts[-1] if self.firsts else -1

    def lookup(self, timestamp: int) -> int | None:
        """The relative offset of the last entry with a timestamp < ``timestamp``.

        Every record up to and including that offset is older than ``timestamp``.
        """
        i = bisect.bisect_left(self.firsts, timestamp) - 1
        return None if i < 0 else self.seconds[i]

    def maybe_add(self, timestamp: int, relative_offset: int) -> None:
        if timestamp > self.max_timestamp and (
            not self.seconds or relative_offset > self.seconds[-1]
        ):
            self.add(timestamp, relative_offset)

    def truncate_to_offset(self, relative_offset: int) -> None:
        """Drop entries for offsets at or past ``relative_offset``."""
        self._truncate_entries(bisect.bisect_left(self.seconds, relative_offset))
