"""The storage work a log's owner may hand to another thread: periodic flushes, and the
deletion of segments that retention took (compaction's passes: see cleaner.py).

The rule for every piece here is the same: the owner's thread plans the work in one short
step and keeps every change to the log's state (its list of segments, offsets, recovery
point in memory) for itself; the other thread only touches files through descriptors or
paths that nothing else uses any more, and what it writes that the log also writes (the
recovery-point checkpoint) goes through a lock and is skipped when the log was truncated
since the work was planned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from pathlib import Path

from raylog.storage import files
from raylog.storage.checkpoint import Checkpoint
from raylog.storage.segment import LogSegment

DELETED_SUFFIX = ".deleted"  # a segment retention took, while it waits for its deletion


class RecoveryPoint:
    """The recovery-point checkpoint file of one log.

    Written by the log's thread (:meth:`write`, :meth:`truncated`) and by flush jobs on
    another thread (:meth:`write_if_current`), one at a time under a lock. A job's write is
    skipped once the log was truncated after the job was planned: it must never leave the
    file above the log end.
    """

    def __init__(self, path: Path) -> None:
        self._checkpoint = Checkpoint(path)
        self._lock = threading.Lock()
        self.generation = 0  # truncations so far

    def read(self) -> int | None:
        return self._checkpoint.read_offset()

    def write(self, offset: int) -> None:
        with self._lock:
            self._checkpoint.write_offset(offset)

    def truncated(self) -> None:
        """The log is being truncated: flush jobs planned before write nothing more."""
        with self._lock:
            self.generation += 1

    def write_if_current(self, generation: int, offset: int) -> bool:
        with self._lock:
            if generation != self.generation:
                return False
            self._checkpoint.write_offset(offset)
            return True


@dataclasses.dataclass
class FlushJob:
    """A flush of one log planned by ``PartitionLog.start_flush``: fsync the segments written
    since the recovery point (through read-only copies with descriptors of their own, so the
    log may go on appending, rolling or truncating meanwhile), then checkpoint ``end`` as
    the recovery point unless the log was truncated since. :meth:`run` on any thread;
    ``PartitionLog.finish_flush`` on the log's thread afterwards, whatever happened."""

    readers: list[LogSegment]
    end: int  # the log end when planned: every record below it is synced by run()
    generation: int
    recovery_point: RecoveryPoint
    done: bool = False

    def run(self) -> None:
        try:
            for reader in self.readers:
                reader.sync()
            self.done = self.recovery_point.write_if_current(self.generation, self.end)
        finally:
            for reader in self.readers:
                reader.close()


def retire(segment: LogSegment) -> None:
    """Take ``segment`` out of its log's names, durably (its descriptor stays open):
    renamed ``*.deleted``, which opening a log removes. Oldest first: a power loss then
    never brings back a segment whose older neighbour went."""
    segment.rename_suffix(DELETED_SUFFIX)


def delete_retired(segments: list[LogSegment]) -> None:
    """Close and remove retired segments; for any thread, since nothing else refers to
    them. One directory sync at the end (a name left behind is removed at the next open)."""
    directories = set()
    for segment in segments:
        segment.delete(sync=False)
        directories.add(segment.directory)
    for directory in directories:
        with contextlib.suppress(FileNotFoundError):  # the whole log was deleted meanwhile
            files.fsync_dir(directory)


def remove_retired(directory: Path, names: set[str]) -> None:
    """When a log opens: remove the segments a crash left retired, durably. ``names`` is
    the directory's listing, kept true: the names removed leave it."""
    leftovers = [name for name in names if name.endswith(DELETED_SUFFIX)]
    for name in leftovers:
        files.remove(directory / name)
    if leftovers:
        files.fsync_dir(directory)
    names.difference_update(leftovers)
