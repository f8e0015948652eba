"""Where a remote (tiered) segment lives in the object store, and the record that describes it.

A closed segment the leader uploads becomes a folder of objects under the cluster's store
prefix::

    <prefix>/<topic>-<topic id>/<partition>/<base offset, 20 digits>-<segment id>/
        segment.log              the local segment's bytes, unchanged (whole Kafka batches)
        offset.index             its sparse offset index   (storage/index.py's format)
        time.index               its time index            (storage/index.py's format)
        txn.index                the aborted transactions overlapping its offsets whose
                                 markers the leader had (only if there are some)
        leader-epoch-checkpoint  the leader epochs that start at or below its end offset
        producer.snapshot        the producer state as of its end offset (after its last
                                 batch), in the format of a log's ``<offset>.snapshot``
                                 (replica/producer_state.py); uploads of before it have none
        manifest.json            RemoteSegment.to_json(), written last

The topic id is in the path so that a topic deleted and created again under its name never
meets the old topic's objects. The segment id (a fresh uuid per upload attempt) is in the path
so that an attempt cut short (its leader killed) never collides with the next attempt of the
same segment: the abandoned folder is an orphan its successor finds from the metadata and
deletes (``state`` COPY_STARTED never followed by COPY_FINISHED).

A :class:`RemoteSegment` is also the value of the remote-log metadata topic's records (key
:meth:`RemoteSegment.key`): the latest record of a key is the segment's state. A segment is
readable only in state COPY_FINISHED; every object's size and sha256 are in ``files``, so a
reader detects a corrupt or missing object before it serves a byte of it.

A **fence** (:func:`fence_record`) is the record a new leader writes before it reads the
metadata: from it on, a COPY_FINISHED of an older leader epoch of that partition finishes
nothing (raylog/tiered/metadata.py). It is a RemoteSegment value of the same format, in
state DELETE_FINISHED, whose segment id is ``fence-<leader epoch>-<unique id>``: a reader
of before fences takes it for a deleted attempt and passes over it, and its key, one per
fence written (a leader that writes its fence again writes a new one), is never
superseded, so compaction keeps every fence where it was written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

# The object names inside a segment's folder.
SEGMENT = "segment.log"
OFFSET_INDEX = "offset.index"
TIME_INDEX = "time.index"
TXN_INDEX = "txn.index"
LEADER_EPOCHS = "leader-epoch-checkpoint"
PRODUCER_SNAPSHOT = "producer.snapshot"  # absent from uploads of before 2026-11-26 night
MANIFEST = "manifest.json"

# The lifecycle of one upload attempt, in order (Kafka's RemoteLogSegmentState).
COPY_STARTED = "copy_started"
COPY_FINISHED = "copy_finished"
DELETE_STARTED = "delete_started"
DELETE_FINISHED = "delete_finished"
STATES = (COPY_STARTED, COPY_FINISHED, DELETE_STARTED, DELETE_FINISHED)

# The remote-log metadata topic: compacted, internal, keyed by RemoteSegment.key().
METADATA_TOPIC = "__raylog_remote_log"

FORMAT_VERSION = 1

TOPIC_ID = re.compile(r"[0-9a-f]{32}")  # uuid.uuid4().hex, as the controller makes them

FENCE_PREFIX = "fence-"  # the segment id of a fence record: fence-<leader epoch>-<uuid>


def topic_folder(prefix: str, topic: str, topic_id: str) -> str:
    """The folder holding every remote segment of one topic (one topic id)."""
    return f"{prefix.rstrip('/')}/{topic}-{topic_id}"


def folder_topic_id(folder: str) -> str | None:
    """The topic id a topic's folder (:func:`topic_folder`, full path or last name) names;
    None for a name of another form (a topic id is 32 hex digits, a uuid's: whatever else
    shares the store's prefix is never taken for a topic's folder)."""
    name = folder.rstrip("/").rsplit("/", 1)[-1]
    topic, dash, topic_id = name.rpartition("-")
    return topic_id if topic and dash and TOPIC_ID.fullmatch(topic_id) else None


def parse_key(key: str) -> tuple[str, int, str]:
    """(topic id, partition, segment id) of a metadata record's key (RemoteSegment.key);
    ValueError for another form."""
    topic_id, partition, segment_id = key.split("/", 2)
    return topic_id, int(partition), segment_id


def partition_prefix(prefix: str, topic: str, topic_id: str, partition: int) -> str:
    """The folder holding every remote segment of one partition."""
    return f"{topic_folder(prefix, topic, topic_id)}/{partition}"


def segment_folder(prefix: str, topic: str, topic_id: str, partition: int,
                   base_offset: int, segment_id: str) -> str:
    return f"{partition_prefix(prefix, topic, topic_id, partition)}/{base_offset:020d}-{segment_id}"


def digest(data: bytes | memoryview) -> str:
    """The checksum stored for an object: sha256, hex."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class RemoteFile:
    size: int
    sha256: str


@dataclass(frozen=True)
class RemoteSegment:
    """One upload attempt of one closed segment, as the metadata topic records it.

    ``end_offset`` is the segment's last offset (inclusive, as Kafka's); ``leader_epochs``
    maps each leader epoch that starts at or below ``end_offset`` to its start offset;
    ``leader_epoch`` is the epoch of the leader that uploaded it (a new leader's records win
    over an old one's); ``files`` maps object names to their size and checksum.
    """

    topic: str
    topic_id: str
    partition: int
    segment_id: str
    base_offset: int
    end_offset: int
    max_timestamp: int
    size_bytes: int
    leader_epoch: int
    broker_id: int
    state: str = COPY_STARTED
    leader_epochs: dict[int, int] = field(default_factory=dict)
    files: dict[str, RemoteFile] = field(default_factory=dict)
    event_time_ms: int = 0
    version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"unknown remote segment state {self.state!r}")
        if self.end_offset < self.base_offset:
            raise ValueError(f"remote segment ends ({self.end_offset}) before it starts "
                             f"({self.base_offset})")

    def key(self) -> str:
        return f"{self.topic_id}/{self.partition}/{self.segment_id}"

    @property
    def is_fence(self) -> bool:
        """Whether this is a new leader's fence (:func:`fence_record`), not an attempt."""
        return self.segment_id.startswith(FENCE_PREFIX)

    def folder(self, prefix: str) -> str:
        return segment_folder(prefix, self.topic, self.topic_id, self.partition,
                              self.base_offset, self.segment_id)

    def with_state(self, state: str, event_time_ms: int, **changes: Any) -> RemoteSegment:
        return dataclasses.replace(self, state=state, event_time_ms=event_time_ms, **changes)

    def to_json(self) -> bytes:
        body = dataclasses.asdict(self)
        body["leader_epochs"] = {str(e): s for e, s in self.leader_epochs.items()}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> RemoteSegment:
        """Raises ValueError for anything but a whole record of a version this code reads."""
        try:
            body = json.loads(data)
            if body.get("version", 0) > FORMAT_VERSION:
                raise ValueError(f"remote segment record of version {body['version']}; "
                                 f"this raylog reads up to {FORMAT_VERSION}")
            body["leader_epochs"] = {int(e): int(s)
                                     for e, s in body.get("leader_epochs", {}).items()}
            body["files"] = {name: RemoteFile(**f) for name, f in body.get("files", {}).items()}
            return cls(**body)
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
            raise ValueError(f"not a remote segment record: {e}") from e


def fence_record(topic: str, topic_id: str, partition: int, leader_epoch: int, broker_id: int,
                 event_time_ms: int) -> RemoteSegment:
    """The fence a leader at ``leader_epoch`` writes before it reads the partition's
    metadata (see the module docstring)."""
    return RemoteSegment(topic=topic, topic_id=topic_id, partition=partition,
                         segment_id=f"{FENCE_PREFIX}{leader_epoch}-{uuid.uuid4().hex}",
                         base_offset=0, end_offset=0, max_timestamp=-1, size_bytes=0,
                         leader_epoch=leader_epoch, broker_id=broker_id,
                         state=DELETE_FINISHED, event_time_ms=event_time_ms)
