"""The file system calls of storage: writes and the fsyncs that make them durable, changes to
the names in a log directory and the directory syncs that make those durable.

fsync of a file makes the bytes written to it durable: until then a power loss can take them
back (a file appended to comes back shorter, a rewritten one with its old bytes). Storage
writes, truncates and syncs segment, index and checkpoint files here.

fsync of a file makes its bytes durable, not its name: a file created, renamed or deleted
can come back as it was after a power loss until the directory holding it is fsynced too.
Recovery trusts names (the clean-shutdown marker, which segments exist, which compaction
output was swapped in), so storage makes every such change here and syncs the directory
with :func:`fsync_dir` before any step that relies on it: the marker goes only after the
segments are synced, a new segment's name is durable before records are appended to it, a
deleted segment is gone for good before the next one is deleted, compaction's renames are
durable before the segments they replace are deleted.

One module so that tests can replace these functions (they are looked up on the module at
each call) and record the order of operations, or simulate a power loss that drops every
byte not yet followed by an fsync of its file and undoes every name change not yet followed
by a sync of its directory (tests/unit/powerloss.py).

Every file that is rewritten whole (checkpoints, snapshots, a broker's identity, a partition
directory's marker) is written with :func:`write_atomic`, the one place of the pattern.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_at(fd: int, buffers: list, position: int) -> int:
    """Write ``buffers`` at byte ``position`` of the open file ``fd``; return the bytes
    written (fewer than given only on a full disk or a signal)."""
    return os.pwritev(fd, buffers, position)


def write(fd: int, data: bytes) -> int:
    """Write ``data`` at the current position of ``fd``; return the bytes written."""
    return os.write(fd, data)


def truncate(fd: int, size: int) -> None:
    """Cut (or extend with zeros) the open file ``fd`` to ``size`` bytes."""
    os.ftruncate(fd, size)


def fsync(fd: int) -> None:
    """Make what was written to ``fd`` durable, its bytes and its size."""
    os.fsync(fd)


def fsync_dir(path: Path) -> None:
    """Make the names in directory ``path`` durable: creations, renames and deletions."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create(path: Path, flags: int = os.O_RDWR) -> int:
    """Open ``path`` with ``flags``, creating it if missing; return the descriptor."""
    return os.open(path, flags | os.O_CREAT, 0o644)


def touch(path: Path) -> None:
    """Create ``path`` empty if it is missing."""
    os.close(create(path, os.O_WRONLY))


def remove(path: Path) -> None:
    """Delete ``path``; a missing file is not an error."""
    Path(path).unlink(missing_ok=True)


def replace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``, replacing it atomically if it exists."""
    os.replace(source, target)


TMP_SUFFIX = ".tmp"  # of a file :func:`write_atomic` is writing: never counts


def write_atomic(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace the file ``path`` with ``data`` so that a crash leaves the old file or the
    new one, whole, never a mix: ``data`` goes to ``path`` + TMP_SUFFIX, which is fsynced, then
    renamed over ``path``. With ``sync_dir`` the directory is synced too, so the new file
    is durable when this returns; a caller that changes more names in the directory first
    (deleting older files) passes False and syncs once after them. A crash may leave the
    ``.tmp`` file: its owner removes or overwrites it, it never counts. Raises OSError if
    the disk refuses (``path`` is then unchanged)."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = create(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            view = view[write(fd, view):]
        fsync(fd)
    finally:
        os.close(fd)
    replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)


def make_dirs(path: Path) -> None:
    """Create directory ``path`` and missing parents, each made durable in its parent."""
    path = Path(path)
    if path.is_dir():
        return
    make_dirs(path.parent)
    path.mkdir(exist_ok=True)
    fsync_dir(path.parent)
