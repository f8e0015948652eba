"""The leader's sweep of its partition's folder in the store: upload folders the metadata
does not account for are deleted (docs/tiered.md, "The sweep").

Every cleanup before it starts from the metadata: a leader deletes the attempts its records
name as orphans. Objects no record leads to stay behind in two ways:

- a deposed leader killed while it puts objects into a folder its successor already deleted
  (the attempt is DELETE_FINISHED, or its COPY_FINISHED was refused by the successor's
  fence): nothing looks at that folder again;
- a folder with no record at all: its COPY_STARTED was lost (a metadata-topic failover
  that truncated an acknowledged record, an operator who recreated ``__raylog_remote_log``),
  or was written by a newer leader and is not applied here yet.

So the leader (after its fence, catch-up and orphan deletion, then every
``RAYLOG_TIERED_SWEEP_S``) lists the partition's folder once, non-recursively, and deletes
every upload folder whose segment id the metadata state holds neither as readable nor as a
copy in progress of the leader's epoch or a newer one. A folder of an attempt the state
records in any other state goes at once: nobody reads it and no record will make it
readable again. A folder with no record goes only once its newest object is older than
``grace`` measured from before the sweep caught up with the metadata topic: only a leader
puts objects, and only after its COPY_STARTED is acknowledged, so a folder whose objects
were put before the catch-up began has its record applied here, unless that record was
lost; a young one may be a newer leader's copy this process has not heard of yet. The grace
covers the clocks of the store and of the brokers disagreeing (an object's time is the
store's). A leader that finds a newer leader's fence in the state is deposed and sweeps
nothing.

Plain Python; the store and the clock are the caller's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from raylog.errors import InvalidConfigError
from raylog.tiered.layout import partition_prefix
from raylog.tiered.metadata import RemoteLogState
from raylog.tiered.store import ObjectStore
from raylog.tiered.uploader import PartitionRef
from raylog.util.arguments import settings_from_environ

INTERVAL_ENV = "RAYLOG_TIERED_SWEEP_S"
GRACE_ENV = "RAYLOG_TIERED_SWEEP_GRACE_S"
DEFAULT_INTERVAL_S = 600.0


@dataclass(frozen=True)
class SweepSettings:
    """How often a tiered leader sweeps each partition it leads (``interval_s``), and how
    old a folder no record names must be to go (``grace_s``, default twice the interval).
    From the environment of the broker's node (``RAYLOG_TIERED_SWEEP_S``,
    ``RAYLOG_TIERED_SWEEP_GRACE_S``)."""

    interval_s: float = DEFAULT_INTERVAL_S
    grace_s: float | None = None

    def __post_init__(self) -> None:
        for name, value in (("interval_s", self.interval_s), ("grace_s", self.grace)):
            if not math.isfinite(value) or value <= 0:
                raise InvalidConfigError(f"sweep {name} must be a number of seconds > 0, "
                                         f"got {value!r}")

    @property
    def grace(self) -> float:
        return 2 * self.interval_s if self.grace_s is None else self.grace_s

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> SweepSettings:
        must_be = "a number of seconds > 0"
        values = settings_from_environ(environ, {
            "interval_s": (INTERVAL_ENV, float, must_be),
            "grace_s": (GRACE_ENV, float, must_be)})
        return cls(**values)


@dataclass(frozen=True)
class Folder:
    """An upload folder found in the store: its full path, the segment id its name holds,
    and its time in ms when the listing gave one (a file:// directory's; S3 has none)."""

    path: str
    segment_id: str
    mtime_ms: int | None


def _mtime_ms(info) -> int | None:
    return None if info.mtime_ns is None else info.mtime_ns // 1_000_000


def list_upload_folders(store: ObjectStore, ref: PartitionRef) -> list[Folder]:
    """The partition's upload folders (``<base offset, 20 digits>-<segment id>``), from one
    non-recursive listing; anything else there is not an upload's and is left out."""
    from pyarrow import fs
    selector = fs.FileSelector(partition_prefix(store.prefix, ref.topic, ref.topic_id,
                                                ref.partition),
                               allow_not_found=True, recursive=False)
    found = []
    for info in store.filesystem.get_file_info(selector):
        base, dash, segment_id = info.base_name.partition("-")
        if info.type == fs.FileType.Directory and dash and segment_id \
                and len(base) == 20 and base.isdigit():
            found.append(Folder(info.path, segment_id, _mtime_ms(info)))
    return sorted(found, key=lambda f: f.path)


def newest_object_ms(store: ObjectStore, folder: Folder) -> int | None:
    """When the folder's newest object was put: the listing's time of the folder, or (a
    store whose folders have none) its objects' newest; None when nothing tells."""
    if folder.mtime_ms is not None:
        return folder.mtime_ms
    from pyarrow import fs
    infos = store.filesystem.get_file_info(
        fs.FileSelector(folder.path, allow_not_found=True, recursive=False))
    times = [t for t in map(_mtime_ms, infos) if t is not None]
    return max(times) if times else None


@dataclass(frozen=True)
class SweepPlan:
    """Folders of attempts the metadata records and does not keep (delete now), and
    folders no record names (delete once older than the grace)."""

    recorded: list[Folder]
    unrecorded: list[Folder]


def plan_sweep(state: RemoteLogState, ref: PartitionRef, leader_epoch: int,
               folders: list[Folder]) -> SweepPlan:
    """What a leader at ``leader_epoch`` may delete of ``folders`` (see the module
    docstring); nothing once a newer leader's fence is in the state."""
    if state.fence_epoch(ref.topic_id, ref.partition) > leader_epoch:
        return SweepPlan([], [])
    kept = {s.segment_id for s in state.readable(ref.topic_id, ref.partition)}
    kept |= {s.segment_id for s in state.in_flight(ref.topic_id, ref.partition)
             if s.leader_epoch >= leader_epoch}
    recorded, unrecorded = [], []
    for folder in folders:
        if folder.segment_id in kept:
            continue
        if state.attempt(ref.topic_id, ref.partition, folder.segment_id) is None:
            unrecorded.append(folder)
        else:
            recorded.append(folder)
    return SweepPlan(recorded, unrecorded)


def sweep(store: ObjectStore, plan: SweepPlan, since_ms: int, grace_ms: int) -> list[str]:
    """Delete the plan's recorded folders, and its unrecorded ones whose newest object is
    older than ``grace_ms`` before ``since_ms`` (taken before the caller caught up with the
    metadata topic); the paths deleted. OSError when the store fails."""
    doomed = [f.path for f in plan.recorded]
    for folder in plan.unrecorded:
        put_ms = newest_object_ms(store, folder)
        if put_ms is not None and since_ms - put_ms > grace_ms:
            doomed.append(folder.path)
    for path in doomed:
        store.delete_folder(path)
    return doomed
