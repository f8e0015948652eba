"""A stand-in for ``raylog.storage.files`` that can tell what a power loss would leave.

:class:`PowerLoss` replaces the functions of ``raylog.storage.files`` (storage looks them up
on the module at each call). It does every write, truncation and name change for real, and
remembers what is not durable yet (an fsync only settles that account: a test's files need
no real durability, and real fsyncs would make the many reopened crash copies slow):

- **bytes**: the content a file had at its last fsync, for every file written or truncated
  since (through ``files.write_at``, ``write``, ``truncate``, or ``create`` with O_TRUNC);
- **names**: every creation, removal and rename whose directory was not synced since.

:meth:`PowerLoss.crash_copy` copies the directories under ``root`` as a power loss at that
moment could leave them, the worst way: every unsynced byte gone (a file appended to comes
back at its length of its last fsync, a rewritten one with its old bytes), then every
unsynced name change undone (a created file gone, a deleted one back, a rename reversed).
Writes that do not go through ``files`` (none in storage) are kept as written.

With ``lose_bytes=False`` only names are undone (the tests of name changes alone).

:class:`FailingDisk` makes fsyncs (and truncations, if asked) fail, as a dying disk does.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import pytest

from raylog.storage import files

SEAM = ("create", "remove", "replace", "fsync_dir", "write_at", "write", "truncate", "fsync")


def _inode(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


class PowerLoss:
    """Does every file operation of storage for real, and records what is not durable."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path, *,
                 lose_bytes: bool = True) -> None:
        self.root = Path(root)
        self.lose_bytes = lose_bytes
        self.pending: list[tuple] = []  # name changes whose directory was not synced since
        self.synced_bytes: dict[tuple[int, int], bytes] = {}  # (device, inode) of a file
        # changed since its last fsync: its content as of that fsync
        self.events: list[tuple[str, str]] = []
        self.copies: list[Path] = []
        self.copy_each_event = False
        self._counter = itertools.count()
        self._real = {name: getattr(files, name) for name in SEAM}
        for name in SEAM:
            monkeypatch.setattr(files, name, getattr(self, name))

    def _watched(self, path: Path) -> bool:
        """Only the log directories under ``root``: not the crash copies opened later."""
        return Path(path) == self.root or self.root in Path(path).parents

    def _event(self, kind: str, path: Path) -> None:
        self.events.append((kind, Path(path).name))
        if self.copy_each_event:
            self.copies.append(self.crash_copy())

    # -- bytes -----------------------------------------------------------------------------------

    def _path_of(self, fd: int) -> Path | None:
        """The watched file open as ``fd``, None if it is elsewhere or deleted."""
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(" (deleted)") or not self._watched(Path(path)):
            return None
        return Path(path)

    def _changing(self, fd: int) -> Path | None:
        """About to change the file open as ``fd``: remember its synced content first."""
        path = self._path_of(fd)
        if path is not None:
            self.synced_bytes.setdefault(_inode(os.fstat(fd)), path.read_bytes())
        return path

    def write_at(self, fd: int, buffers: list, position: int) -> int:
        self._changing(fd)
        return self._real["write_at"](fd, buffers, position)

    def write(self, fd: int, data: bytes) -> int:
        self._changing(fd)
        return self._real["write"](fd, data)

    def truncate(self, fd: int, size: int) -> None:
        self._changing(fd)
        self._real["truncate"](fd, size)

    def fsync(self, fd: int) -> None:
        os.fstat(fd)  # a descriptor that is not open fails as the real fsync would
        path = self._path_of(fd)
        if path is not None and self.synced_bytes.pop(_inode(os.fstat(fd)), None) is not None \
                and self.lose_bytes:  # else a crash copy is the same before and after
            self._event("fsync", path)

    def _durable_content(self, path: Path) -> bytes:
        """What a power loss now would leave in the file at ``path`` (its name aside); it is
        forgotten: the caller is about to unlink or replace it."""
        if not self.lose_bytes:
            return path.read_bytes()
        content = self.synced_bytes.pop(_inode(path.stat()), None)
        return path.read_bytes() if content is None else content

    # -- names -----------------------------------------------------------------------------------

    def create(self, path: Path, flags: int = os.O_RDWR) -> int:
        path = Path(path)
        existed = path.exists()
        if existed and flags & os.O_TRUNC and self._watched(path):
            self.synced_bytes.setdefault(_inode(path.stat()), path.read_bytes())
        fd = self._real["create"](path, flags)
        if not existed and self._watched(path):
            self.pending.append(("create", path))
            self._event("create", path)
        return fd

    def remove(self, path: Path) -> None:
        path = Path(path)
        if path.exists() and self._watched(path):
            self.pending.append(("remove", path, self._durable_content(path)))
            self._real["remove"](path)
            self._event("remove", path)
        else:
            self._real["remove"](path)

    def replace(self, source: Path, target: Path) -> None:
        target = Path(target)
        watched = self._watched(target)
        old = self._durable_content(target) if watched and target.exists() else None
        self._real["replace"](source, target)
        if watched:
            self.pending.append(("replace", Path(source), target, old))
            self._event("replace", target)

    def fsync_dir(self, path: Path) -> None:
        if not Path(path).is_dir():
            raise FileNotFoundError(2, "No such directory", str(path))
        self.pending = [c for c in self.pending if c[1].parent != Path(path)]
        if self._watched(path):
            self._event("sync", path)

    # -- the power loss --------------------------------------------------------------------------

    def crash_copy(self) -> Path:
        """A copy of every directory under ``root`` as a power loss now could leave it."""
        dest = self.root.parent / f"crash-{next(self._counter)}"
        shutil.copytree(self.root, dest)
        if self.lose_bytes:
            for path in self.root.rglob("*"):
                content = self.synced_bytes.get(_inode(path.stat())) if path.is_file() \
                    else None
                if content is not None:
                    (dest / path.relative_to(self.root)).write_bytes(content)
        for change in reversed(self.pending):
            where = dest / change[1].relative_to(self.root)
            if change[0] == "create":
                where.unlink(missing_ok=True)
            elif change[0] == "remove":
                where.write_bytes(change[2])
            else:
                target = dest / change[2].relative_to(self.root)
                target.rename(where)
                if change[3] is not None:
                    target.write_bytes(change[3])
        return dest


class FailingDisk:
    """``files.fsync`` (and, if asked, ``files.truncate``) fail while ``failing``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, truncate: bool = False) -> None:
        self.failing = False
        real_fsync, real_truncate = files.fsync, files.truncate

        def fsync(fd: int) -> None:
            if self.failing:
                raise OSError(5, "Input/output error")
            real_fsync(fd)

        def cut(fd: int, size: int) -> None:
            if self.failing and truncate:
                raise OSError(5, "Input/output error")
            real_truncate(fd, size)

        monkeypatch.setattr(files, "fsync", fsync)
        monkeypatch.setattr(files, "truncate", cut)
