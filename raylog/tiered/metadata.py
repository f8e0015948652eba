"""The remote-log metadata of every tiered partition: what ``__raylog_remote_log`` says.

The metadata topic (layout.METADATA_TOPIC, compacted) holds one record per upload attempt
per state change, keyed by :meth:`RemoteSegment.key`; :class:`RemoteLogState` is what its
records say once applied in log order. Every broker that hosts a tiered replica keeps one,
fed by the topic; it is plain Python, so its rules are tested without Ray.

The rules (docs/tiered.md):

- A record never moves an attempt back (COPY_STARTED < COPY_FINISHED < DELETE_STARTED <
  DELETE_FINISHED): a late record of an older state is ignored.
- **Readable** segments are COPY_FINISHED attempts that overlap no other readable one: where
  finished attempts overlap (a deposed leader finished a copy its successor made too), the
  one of the newer leader epoch wins, then the one that finished first. The outcome depends
  only on each key's latest record, never on how records of different keys interleave, so a
  compacted metadata topic replays to the same state. (Records below the high watermark are
  the same bytes on every replica: a deposed leader's finished copy holds the right records.)
  Sorted by base offset; the remote log starts at the first one's base offset.
- **Orphans** are objects nobody will read: finished attempts that lost, COPY_STARTED of an
  older leader epoch (its leader was deposed mid-upload), DELETE_STARTED never finished.
  A leader deletes them (its own epoch's attempt in flight is not one).
- **Fences** (layout.fence_record): a new leader writes one before it reads the metadata
  and deletes orphans. A COPY_FINISHED of an epoch below the newest fence applied before it
  finishes nothing: its attempt stays (or, if its earlier records were compacted away,
  becomes) a COPY_STARTED of an older epoch, an orphan. So a deposed leader's late
  COPY_FINISHED can neither make readable a copy its successor is deleting as an orphan
  (the successor read the state after its fence) nor, as the latest record of its key
  after compaction, bring back a copy that was deleted. This too is the same after
  compaction: every fence has a key of its own (one per fence written) and stays where it was
  written, compaction keeps the order of what it keeps, so a kept COPY_FINISHED has the
  same fences before it as in the whole topic.
- **Tombstones** (a record without a value, raylog/tiered/cleanup.py): once a deleted topic's
  objects are gone, every key of its topic id gets one; the key is forgotten (attempt or
  fence), and a partition with no key left is forgotten whole, so a replay of the compacted
  topic, where compaction dropped the key, ends in the same state.

Not thread-safe: its owner applies records and reads on one thread (or under a lock).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from raylog.tiered.layout import (
    COPY_FINISHED,
    COPY_STARTED,
    DELETE_STARTED,
    STATES,
    RemoteSegment,
    parse_key,
)

PartitionKey = tuple[str, int]  # (topic id, partition)


@dataclass
class _PartitionRemoteLog:
    attempts: dict[str, RemoteSegment] = field(default_factory=dict)  # segment id -> latest
    readable: list[RemoteSegment] = field(default_factory=list)  # sorted by base offset
    fence_epoch: int = -1  # the newest leader epoch fenced so far
    fences: set[str] = field(default_factory=set)  # their segment ids (keys to tombstone)
    topic: str = ""  # the topic's name, as its records give it

    def resolve(self) -> None:
        finished = sorted((s for s in self.attempts.values() if s.state == COPY_FINISHED),
                          key=lambda s: (-s.leader_epoch, s.event_time_ms, s.segment_id))
        chosen: list[RemoteSegment] = []
        for s in finished:
            if not any(c.base_offset <= s.end_offset and s.base_offset <= c.end_offset
                       for c in chosen):
                chosen.append(s)
        self.readable = sorted(chosen, key=lambda s: s.base_offset)


class RemoteLogState:
    """Remote segments of every partition, from the metadata topic's records in order."""

    def __init__(self) -> None:
        self._partitions: dict[PartitionKey, _PartitionRemoteLog] = {}

    def apply(self, record: RemoteSegment) -> bool:
        """Take one record; False if it was ignored (an older state than the attempt's) or
        fenced (a COPY_FINISHED of an epoch below the partition's newest fence)."""
        log = self._partitions.setdefault((record.topic_id, record.partition),
                                          _PartitionRemoteLog())
        log.topic = record.topic
        if record.is_fence:
            log.fence_epoch = max(log.fence_epoch, record.leader_epoch)
            log.fences.add(record.segment_id)
            return True
        previous = log.attempts.get(record.segment_id)
        if record.state == COPY_FINISHED and record.leader_epoch < log.fence_epoch:
            if previous is None:  # its COPY_STARTED compacted away: still an orphan to delete
                log.attempts[record.segment_id] = record.with_state(COPY_STARTED,
                                                                    record.event_time_ms)
            return False
        if previous is not None and STATES.index(record.state) < STATES.index(previous.state):
            return False
        log.attempts[record.segment_id] = record
        if COPY_FINISHED in (record.state, previous.state if previous else None):
            log.resolve()
        return True

    def apply_all(self, records: Iterable[RemoteSegment]) -> None:
        for record in records:
            self.apply(record)

    def apply_value(self, key: bytes | None, value: bytes | None) -> bool:
        """Take one record of the metadata topic as stored: a tombstone (no value) forgets
        its key, anything else is a RemoteSegment. ValueError for neither."""
        if value is not None:
            return self.apply(RemoteSegment.from_json(value))
        if key is None:
            raise ValueError("a remote-log metadata record with neither key nor value")
        self.remove(key.decode())
        return True

    def remove(self, key: str) -> None:
        """Forget the attempt or fence of ``key`` (its tombstone); a partition with no key
        left is forgotten whole."""
        topic_id, partition, segment_id = parse_key(key)
        log = self._partitions.get((topic_id, partition))
        if log is None:
            return
        log.fences.discard(segment_id)
        if log.attempts.pop(segment_id, None) is not None:
            log.resolve()
        if not log.attempts and not log.fences:
            del self._partitions[(topic_id, partition)]

    def topics(self) -> dict[str, tuple[str, list[str]]]:
        """Per topic id with any record: its topic's name and every key it holds (attempts
        and fences), sorted."""
        out: dict[str, tuple[str, list[str]]] = {}
        for (topic_id, partition), log in sorted(self._partitions.items()):
            keys = out.setdefault(topic_id, (log.topic, []))[1]
            keys += sorted(f"{topic_id}/{partition}/{s}" for s in (*log.attempts, *log.fences))
        return out

    def readable(self, topic_id: str, partition: int) -> list[RemoteSegment]:
        """The segments a reader may read, sorted by base offset, never overlapping."""
        log = self._partitions.get((topic_id, partition))
        return list(log.readable) if log is not None else []

    def segment_for(self, topic_id: str, partition: int, offset: int) -> RemoteSegment | None:
        """The readable segment holding ``offset``, if any."""
        for segment in self.readable(topic_id, partition):
            if segment.base_offset <= offset <= segment.end_offset:
                return segment
        return None

    def orphans(self, topic_id: str, partition: int, leader_epoch: int) -> list[RemoteSegment]:
        """What a leader at ``leader_epoch`` must delete: finished attempts that lost,
        copies started by older leaders and never finished, deletions never finished."""
        log = self._partitions.get((topic_id, partition))
        if log is None:
            return []
        readable = {s.segment_id for s in log.readable}
        out = [s for key, s in log.attempts.items()
               if s.state == DELETE_STARTED
               or (s.state == COPY_FINISHED and key not in readable)
               or (s.state == COPY_STARTED and s.leader_epoch < leader_epoch)]
        return sorted(out, key=lambda s: (s.base_offset, s.segment_id))

    def fence_epoch(self, topic_id: str, partition: int) -> int:
        """The newest leader epoch fenced for the partition (-1: none)."""
        log = self._partitions.get((topic_id, partition))
        return -1 if log is None else log.fence_epoch

    def state_of(self, record: RemoteSegment) -> str | None:
        """The state the attempt of ``record`` is in (None: no record of it); of a fence,
        its state once a fence of its epoch or a newer one was applied."""
        log = self._partitions.get((record.topic_id, record.partition))
        if record.is_fence:
            return record.state if log is not None and \
                log.fence_epoch >= record.leader_epoch else None
        attempt = log.attempts.get(record.segment_id) if log is not None else None
        return attempt.state if attempt is not None else None

    def attempt(self, topic_id: str, partition: int, segment_id: str) -> RemoteSegment | None:
        """The latest record of the attempt ``segment_id`` (None: no record of it)."""
        log = self._partitions.get((topic_id, partition))
        return None if log is None else log.attempts.get(segment_id)

    def in_flight(self, topic_id: str, partition: int) -> list[RemoteSegment]:
        """Copies started and not finished (any epoch)."""
        log = self._partitions.get((topic_id, partition))
        if log is None:
            return []
        return [s for s in log.attempts.values() if s.state == COPY_STARTED]

    def log_start(self, topic_id: str, partition: int) -> int | None:
        """The first offset the remote log holds; None if it holds none."""
        readable = self.readable(topic_id, partition)
        return readable[0].base_offset if readable else None

    def end_offset(self, topic_id: str, partition: int) -> int | None:
        """The last offset the remote log holds (inclusive); None if it holds none."""
        readable = self.readable(topic_id, partition)
        return readable[-1].end_offset if readable else None

    def size_bytes(self, topic_id: str, partition: int) -> int:
        return sum(s.size_bytes for s in self.readable(topic_id, partition))

    def forget(self, topic_id: str, partition: int) -> None:
        """Drop a partition's state (its topic was deleted)."""
        self._partitions.pop((topic_id, partition), None)
