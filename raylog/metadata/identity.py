"""A broker's identity belongs to its data directory, not to the Ray node serving it.

Ray gives a node a new ID every time it starts, so raylog names brokers by a small integer
written into the data directory, as Kafka's ``meta.properties``::

    # raylog broker identity: do not edit, do not copy to another broker
    version=1
    broker.id=3
    cluster.id=6f1c0d5e9b7a4e21

The file is written once, atomically (a temporary file, fsynced, renamed, and the directory
fsynced), when the controller adopts a new directory. Whichever node mounts the directory
later serves that broker: its replicas are created there and reopen their segments.

A directory is held by one process at a time through an advisory lock (``.lock``), so two
nodes on one machine never share one. Without ``RAYLOG_DATA_DIR`` a node takes the first free
slot of ``~/.raylog/brokers/``: the same one every run for a single node, distinct ones for
several nodes on one machine.

Plain Python, no Ray.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import re
from pathlib import Path

from raylog.errors import StorageError
from raylog.storage import files
from raylog.storage.formats import check_version

IDENTITY_FILE = "meta.properties"
LOCK_FILE = ".lock"
FORMAT_VERSION = 1  # the newest this raylog writes and reads; a newer one is refused
MAX_SLOTS = 1024  # data directory slots tried under the default root
_HEADER = "# raylog broker identity: do not edit, do not copy to another broker\n"


class IdentityError(StorageError):
    """A data directory's identity file is unreadable, or belongs elsewhere."""


class DirectoryLockedError(StorageError):
    """A directory's lock is held by another process (its lock file names it): nothing in
    the directory was read or changed. For a replica's directory, that process is one of
    the broker's own (one being replaced, still exiting): the broker opens the replica once
    it is gone (raylog/replica/lock_waits.py)."""


@dataclasses.dataclass(frozen=True)
class BrokerIdentity:
    broker_id: int
    cluster_id: str
    version: int = FORMAT_VERSION

    def to_text(self) -> str:
        return (f"{_HEADER}version={self.version}\nbroker.id={self.broker_id}\n"
                f"cluster.id={self.cluster_id}\n")

    @classmethod
    def parse(cls, text: str, where: str) -> BrokerIdentity:
        fields = {}
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise IdentityError(f"{where}: not a key=value line: {line!r}")
            fields[key.strip()] = value.strip()
        try:
            version = int(fields["version"])
            broker_id = int(fields["broker.id"])
            cluster_id = fields["cluster.id"]
        except (KeyError, ValueError) as e:
            raise IdentityError(f"{where}: missing or malformed {e}") from None
        check_version(where, version, FORMAT_VERSION)
        if version < 1:  # version 1 is the first ever written
            raise IdentityError(f"{where}: format version {version} was never written")
        if broker_id < 0 or not re.fullmatch(r"[0-9a-f]{8,64}", cluster_id):
            raise IdentityError(f"{where}: bad broker.id {broker_id} or cluster.id "
                                f"{cluster_id!r}")
        return cls(broker_id, cluster_id, version)


def read_identity(directory: Path) -> BrokerIdentity | None:
    """The identity written in ``directory``, or None if it has none yet."""
    path = directory / IDENTITY_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise IdentityError(f"cannot read {path}: {e}") from e
    return BrokerIdentity.parse(text, str(path))


def write_identity(directory: Path, identity: BrokerIdentity) -> None:
    """Write the identity atomically: a crash leaves the old file or the new, never half."""
    files.write_atomic(Path(directory) / IDENTITY_FILE, identity.to_text().encode())


class DirectoryLock:
    """An exclusive advisory lock on a directory, held until released or the process ends.

    Locks are per open file: another process (or another DirectoryLock in this one) cannot
    take it while it is held.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock; False if someone else holds it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> int | None:
        """The process id the lock file names (its last holder's, who may hold it still),
        None if it names none. For messages: the lock itself is what excludes."""
        try:
            text = (self.directory / LOCK_FILE).read_text().strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None


def claim_data_dir(configured: str | os.PathLike | None, default_root: Path
                   ) -> tuple[Path, DirectoryLock]:
    """The data directory this process serves, locked: ``configured`` if given, else the
    first free slot ``default_root/<n>``. Raises IdentityError if ``configured`` is held by
    another process (two nodes set to one directory) or every slot is taken."""
    if configured:
        directory = Path(configured).expanduser().resolve()
        lock = DirectoryLock(directory)
        if not lock.acquire():
            raise IdentityError(f"data directory {directory} is in use by another process "
                                f"on this machine: give each broker node its own")
        return directory, lock
    for slot in range(MAX_SLOTS):
        directory = default_root / str(slot)
        lock = DirectoryLock(directory)
        if lock.acquire():
            return directory, lock
    raise IdentityError(f"all {MAX_SLOTS} data directory slots under {default_root} are in "
                        f"use; set RAYLOG_DATA_DIR")
