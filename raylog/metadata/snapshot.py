"""Snapshots of the metadata state: what a restarted controller loads instead of replaying
the metadata log's whole history.

A snapshot is one file, ``<position>.snapshot`` (the position in 20 digits), in the
metadata log's directory. ``position`` is the log offset of the first event it does not
hold: it is the state after the events at offsets ``[0, position)``, and its ``applied``
equals ``position``. Layout (integers big-endian)::

    magic      4 bytes   b"RLMS"
    version    1 byte    VERSION (0); a newer one raises UnsupportedFormatVersionError
    position   8 bytes   as in the file name
    length     8 bytes   of the body
    crc        4 bytes   CRC32C of position, length and body
    body       length bytes: the state's data (MetadataState.to_data), as JSON

Written to ``<name>.tmp``, fsynced, renamed to its name, then the directory is fsynced: a
crash at any byte leaves no snapshot, a temporary file (ignored and removed on open) or the
whole snapshot. A file that is torn anyway (its size is not the header's) or damaged (the
checksum, the magic or the body disagree) raises :class:`CorruptSnapshotError` on reading.

Plain Python: file operations go through ``raylog.storage.files`` (tests simulate power
loss there).
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path

from raylog.errors import CorruptSnapshotError, InvalidConfigError
from raylog.metadata.state import MetadataState
from raylog.records.header import crc32c
from raylog.storage import files
from raylog.storage.formats import check_version
from raylog.util.arguments import settings_from_environ

SUFFIX = ".snapshot"
TMP_SUFFIX = files.TMP_SUFFIX  # of a snapshot being written
CORRUPT_SUFFIX = ".corrupt"  # an unusable snapshot set aside by the store
MAGIC = b"RLMS"
VERSION = 0  # the newest snapshot format this raylog writes and reads
_HEADER = struct.Struct(">4sBQQI")  # magic, version, position, length, crc
_CRC_FROM = 5  # the crc covers position and length (and the body after the header)
_CRC_TO = 21

# Defaults of SnapshotPolicy, and the environment variables that override them on the head
# node (set them where its `ray start` runs, then restart the controller).
DEFAULT_AFTER_EVENTS = 10_000           # events in the log since the last snapshot
DEFAULT_AFTER_BYTES = 16 << 20          # bytes of log since the last snapshot
AFTER_EVENTS_ENV = "RAYLOG_METADATA_SNAPSHOT_AFTER_EVENTS"
AFTER_BYTES_ENV = "RAYLOG_METADATA_SNAPSHOT_AFTER_BYTES"


@dataclasses.dataclass(frozen=True)
class SnapshotPolicy:
    """When the metadata store takes a snapshot: once the log since the last one holds
    ``after_events`` events or ``after_bytes`` bytes, whichever comes first. A restart then
    replays fewer than that many events after loading the snapshot."""

    after_events: int = DEFAULT_AFTER_EVENTS
    after_bytes: int = DEFAULT_AFTER_BYTES

    def __post_init__(self) -> None:
        for name, env in (("after_events", AFTER_EVENTS_ENV), ("after_bytes", AFTER_BYTES_ENV)):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise InvalidConfigError(f"{env} ({name}) must be an integer >= 1, "
                                         f"got {value!r}")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> SnapshotPolicy:
        values = settings_from_environ(environ, {
            "after_events": (AFTER_EVENTS_ENV, int, "an integer >= 1"),
            "after_bytes": (AFTER_BYTES_ENV, int, "an integer >= 1")})
        return cls(**values)

    def due(self, events: int, size_bytes: int) -> bool:
        return events >= self.after_events or size_bytes >= self.after_bytes


def snapshot_path(directory: Path, position: int) -> Path:
    return Path(directory) / f"{position:020d}{SUFFIX}"


def snapshot_positions(directory: Path) -> list[int]:
    """The positions of the snapshot files in ``directory``, newest (highest) first."""
    return sorted((int(p.name[:-len(SUFFIX)]) for p in Path(directory).glob("*" + SUFFIX)
                   if p.name[:-len(SUFFIX)].isdigit()), reverse=True)


def remove_temporary(directory: Path) -> None:
    """Remove what a crash left of snapshots being written (they never counted)."""
    leftovers = list(Path(directory).glob("*" + SUFFIX + TMP_SUFFIX))
    for path in leftovers:
        files.remove(path)
    if leftovers:
        files.fsync_dir(Path(directory))


def check_snapshot_versions(directory: Path) -> None:
    """Refuse (UnsupportedFormatVersionError) if a snapshot in ``directory`` says it is of
    a newer version than this raylog reads: checked from the headers alone before the store
    opens anything, so that nothing changes before a refusal."""
    for position in snapshot_positions(directory):
        path = snapshot_path(directory, position)
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
        if len(head) == _HEADER.size and head[:4] == MAGIC:
            check_version(path, _HEADER.unpack(head)[1], VERSION)


def write_snapshot(directory: Path, state: MetadataState) -> Path:
    """Write ``state`` as the snapshot at its position (``state.applied``); return the path
    once the snapshot is durable, name included. Raises OSError if the disk refuses (the
    temporary file may stay: opening the store removes it)."""
    body = json.dumps(state.to_data(), sort_keys=True, separators=(",", ":")).encode()
    head = _HEADER.pack(MAGIC, VERSION, state.applied, len(body), 0)
    crc = crc32c(body, crc32c(head[_CRC_FROM:_CRC_TO]))
    head = _HEADER.pack(MAGIC, VERSION, state.applied, len(body), crc)
    path = snapshot_path(directory, state.applied)
    files.write_atomic(path, head + body)
    return path


def read_snapshot(directory: Path, position: int) -> MetadataState:
    """The state in the snapshot at ``position``. Raises CorruptSnapshotError, saying why,
    if the file is torn, damaged or not a snapshot of that position."""
    path = snapshot_path(directory, position)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CorruptSnapshotError(f"cannot read snapshot {path}: {e}") from e
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"snapshot {path} is torn: {len(data)} bytes, shorter than "
                                   f"its {_HEADER.size}-byte header")
    magic, version, stored, length, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptSnapshotError(f"{path} is not a metadata snapshot (magic {magic!r})")
    if len(data) != _HEADER.size + length:
        raise CorruptSnapshotError(f"snapshot {path} is torn: {len(data)} bytes where its "
                                   f"header says {_HEADER.size + length}")
    body = memoryview(data)[_HEADER.size:]
    if crc32c(body, crc32c(data[_CRC_FROM:_CRC_TO])) != crc:
        raise CorruptSnapshotError(f"snapshot {path} is damaged: its checksum does not match")
    # Whole and its body intact, so a newer version is a newer raylog's, not damage:
    # refused, never set aside as corrupt (the store would then load an older state).
    check_version(path, version, VERSION)
    if stored != position:
        raise CorruptSnapshotError(f"snapshot {path} holds position {stored}, not {position}")
    try:
        state = MetadataState.from_data(json.loads(bytes(body)))
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptSnapshotError(f"snapshot {path} does not decode to a state: {e}") from e
    if state.applied != position:
        raise CorruptSnapshotError(f"snapshot {path} holds a state after {state.applied} "
                                   f"events, not {position}")
    return state
