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
never trusted blindly: :meth:`load` refuses a file with a torn entry or entries out of order;
the segment checks the entries against each other and against its batches when it opens
(see ``LogSegment.load``) and each entry it uses against the batch it names, and rebuilds
both indexes from the batches when anything disagrees.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

import numpy as np

from raylog.storage import files

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
        files.remove(self.path)

    def add(self, first: int, second: int) -> None:
        self.firsts.append(first)
        self.seconds.append(second)

    def load(self) -> bool:
        """Read the file; False (and no entries) when it is missing or malformed."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) % self.entry.size:
            return False
        entries = np.frombuffer(data, self._dtype)
        firsts, seconds = entries["first"], entries["second"]
        # Both columns strictly increase: a flipped high bit almost always breaks this.
        if (np.diff(firsts) <= 0).any() or (np.diff(seconds) <= 0).any():
            return False
        self.firsts = array(self.first_type, firsts.astype(self.first_type).tobytes())
        self.seconds = array(self.second_type, seconds.astype(self.second_type).tobytes())
        self._written = len(self.firsts)
        return True

    def flush(self, fsync: bool = False) -> None:
        """Append the entries not yet in the file; rewrite it if it was truncated."""
        if self._written == len(self.firsts) and not fsync and self.path.exists():
            return
        pack = self.entry.pack
        tail = b"".join(
            pack(f, s) for f, s in zip(self.firsts[self._written:], self.seconds[self._written:],
                                       strict=True)
        )
        fd = files.create(self.path,
                          os.O_WRONLY | (os.O_APPEND if self._written else os.O_TRUNC))
        try:
            files.write(fd, tail)
            if fsync:
                files.fsync(fd)
        finally:
            os.close(fd)
        self._written = len(self.firsts)

    def _truncate_entries(self, keep: int) -> None:
        if keep >= len(self.firsts):
            return
        del self.firsts[keep:]
        del self.seconds[keep:]
        if self._written > keep:
            fd = files.create(self.path, os.O_WRONLY)
            try:
                files.truncate(fd, keep * self.entry.size)
            finally:
                os.close(fd)
            self._written = keep


class OffsetIndex(_IndexFile):
    """Maps relative offsets to byte positions of batches in one segment."""

    entry = _OFFSET_ENTRY
    first_type = "I"  # relative offset
    second_type = "I"  # position
    _dtype = np.dtype([("first", ">u4"), ("second", ">u4")])

    def entry_below(self, relative_offset: int) -> int:
        """The index of the last entry with relative offset <= the argument, or -1."""
        return bisect.bisect_right(self.firsts, relative_offset) - 1

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
    _dtype = np.dtype([("first", ">i8"), ("second", ">u4")])

    @property
    def max_timestamp(self) -> int:
        return self.firsts[-1] if self.firsts else -1

    def entry_before(self, timestamp: int) -> int:
        """The index of the last entry with a timestamp < ``timestamp``, or -1.

        If the entry is right, every record up to and including its offset is older than
        ``timestamp``.
        """
        return bisect.bisect_left(self.firsts, timestamp) - 1

    def maybe_add(self, timestamp: int, relative_offset: int) -> None:
        if timestamp > self.max_timestamp and (
            not self.seconds or relative_offset > self.seconds[-1]
        ):
            self.add(timestamp, relative_offset)

    def truncate_to_offset(self, relative_offset: int) -> None:
        """Drop entries for offsets at or past ``relative_offset``."""
        self._truncate_entries(bisect.bisect_left(self.seconds, relative_offset))
