"""One replica of one partition: its log, its role and leader epoch, and the high watermark.

Plain Python: the replica actor owns one :class:`Partition` and does only the Ray work
around it (placement, waiting, timers).
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

import pyarrow as pa

from raylog.errors import (
    CorruptRecordError,
    FencedEpochError,
    InvalidRecordError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from raylog.producer_state import ProducerStates
from raylog.records import TABLE_SCHEMA, parse_header, read_table
from raylog.records.header import BatchHeader, check_crcs
from raylog.replication.epochs import LEADER_EPOCH_FILE, EpochEndOffset, LeaderEpochCache
from raylog.storage import AppendInfo, PartitionLog
from raylog.topics import REPLICATION_DEFAULTS, log_config

EARLIEST = "earliest"
LATEST = "latest"


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


class FetchResult(NamedTuple):
    """Batches from one partition and where the partition stands."""

    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class Partition:
    """A partition replica: leader or follower, at a leader epoch, over one log.

    Invariants: ``log_start_offset <= high_watermark <= log_end_offset``; consumers never see
    records at or above the high watermark; a request carrying a leader epoch older than
    this replica's is refused with FencedEpochError. Not safe for concurrent use.
    """

    def __init__(self, topic: str, partition: int, log: PartitionLog, replica_id: int,
                 configs: dict[str, Any] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.replica_id = replica_id
        self.configs = {**REPLICATION_DEFAULTS, **(configs or {})}
        self.role = Role.LEADER
        self.leader_epoch = 0
        self.isr: list[int] = [replica_id]
        self.producers = ProducerStates()
        self.producers.rebuild(h for segment in log.segments for _, h in segment.walk())
        # Which leader epoch wrote which offsets, beside the log (rebuilt from its batch
        # headers if the file is missing or damaged): what a follower's truncation asks.
        self.epochs = LeaderEpochCache.open(
            log.directory / LEADER_EPOCH_FILE, log.log_start_offset, log.log_end_offset,
            lambda: (h for segment in log.segments for _, h in segment.walk()))
        if log.high_watermark < log.log_end_offset:
            # A single-replica leader has everything it holds committed.
            self._advance_high_watermark()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def become_leader(self, leader_epoch: int, isr: list[int]) -> None:
        self._check_epoch(leader_epoch)
        self.role = Role.LEADER
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.epochs.assign(leader_epoch, self.log.log_end_offset)
        self._advance_high_watermark()

    def _check_epoch(self, leader_epoch: int | None) -> None:
        if leader_epoch is not None and leader_epoch < self.leader_epoch:
            raise FencedEpochError(
                f"{self.name}: request at leader epoch {leader_epoch}, replica is at "
                f"{self.leader_epoch}")

    def _check_leader(self, leader_epoch: int | None) -> None:
        self._check_epoch(leader_epoch)
        if self.role is not Role.LEADER:
            raise NotLeaderError(f"replica {self.replica_id} is not the leader of {self.name}")

    def _advance_high_watermark(self) -> None:
        # With replication, the HW is the lowest log end offset in the ISR; alone, our own.
        if self.isr == [self.replica_id]:
            self.log.update_high_watermark(self.log.log_end_offset)

    def append(self, batch: bytes, acks: int | str = 1, leader_epoch: int | None = None,
               accept_unknown: bool = False) -> AppendInfo:
        """Append a producer batch as leader, in its producer's sequence order.

        Raises SequenceGap when the producer's earlier batches have not arrived yet (the
        caller waits and tries again; ``accept_unknown`` accepts a producer this replica has
        no state for at whatever sequence it is), NotLeaderError, FencedEpochError,
        NotEnoughReplicasError (acks=all with too small an ISR) or the log's own errors. A
        batch already appended (a retry) is not appended again: its first answer returns.
        """
        self._check_leader(leader_epoch)
        if acks in ("all", -1) and len(self.isr) < self.configs["min_insync_replicas"]:
            raise NotEnoughReplicasError(
                f"{self.name}: {len(self.isr)} in-sync replicas, min_insync_replicas="
                f"{self.configs['min_insync_replicas']}")
        header = parse_header(batch)
        duplicate = self.producers.check(header, accept_unknown)
        if duplicate is not None:
            return duplicate  # a retry of a batch already appended: answer it again
        try:
            # Before the append, as Kafka does: the cache may name an epoch the log lacks
            # (harmless, cut back on open), never the other way round.
            self.epochs.assign(self.leader_epoch, self.log.log_end_offset)
            info = self.log.append(batch, self.leader_epoch)
        except (RecordTooLargeError, InvalidRecordError, CorruptRecordError) as e:
            # Refused for good: its sequence is spent, or the producer's next batches would
            # wait for it forever. Unless the bytes were damaged on the way (a CRC fails):
            # then its producer id and sequence are not to be trusted either.
            if not isinstance(e, CorruptRecordError) or _intact(header, batch):
                self.producers.accept(header, AppendInfo(-1, -1, header.max_timestamp, 0))
            raise
        self.producers.accept(header, info)
        self._advance_high_watermark()
        return info

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        """Kafka's OffsetForLeaderEpoch, as a leader answers it: the largest epoch at or
        below ``leader_epoch`` this log holds and the offset where it ended (for the latest
        epoch, the log end). A follower truncates to it before fetching."""
        return self.epochs.end_offset_for(leader_epoch, self.log.log_end_offset)

    def enforce_retention(self) -> int:
        """Delete the segments past retention (below the high watermark only); the epoch
        cache forgets what the log no longer holds. Returns the segments deleted."""
        deleted = self.log.enforce_retention(max_offset=self.log.high_watermark)
        if deleted:
            self.epochs.truncate_from_start(self.log.log_start_offset)
        return deleted

    def fetch(self, offset: int, max_bytes: int) -> FetchResult:
        """Batches from ``offset`` below the high watermark (consumers' view)."""
        log = self.log
        data = log.read(offset, max_bytes, max_offset=log.high_watermark)
        return FetchResult(data, log.high_watermark, log.log_start_offset, log.log_end_offset)

    def list_offset(self, spec: str | int) -> tuple[int, int] | None:
        """(offset, timestamp) for ``"earliest"`` (the log start), ``"latest"`` (the high
        watermark), both with timestamp -1, or a timestamp in ms: the first record at or after
        it below the high watermark, None if there is none."""
        if spec == EARLIEST:
            return self.log.log_start_offset, -1
        if spec == LATEST:
            return self.log.high_watermark, -1
        if type(spec) is not int:
            raise ValueError(f"offset spec must be 'earliest', 'latest' or a timestamp, "
                             f"got {spec!r}")
        return self.log.offsets_for_time(spec, max_offset=self.log.high_watermark)

    def read_table(self, start: int, end: int) -> pa.Table:
        """Records at offsets [start, end) as one Arrow table (TABLE_SCHEMA).

        Raises OffsetOutOfRangeError if ``start`` is below the log start or ``end`` above the
        high watermark.
        """
        log = self.log
        if not log.log_start_offset <= start <= end <= log.high_watermark:
            raise OffsetOutOfRangeError(
                f"{self.name}: range [{start}, {end}) is outside the readable "
                f"[{log.log_start_offset}, {log.high_watermark})")
        tables = [read_table(chunk, start, end) for chunk in log.read_range(start, end)]
        if not tables:
            return TABLE_SCHEMA.empty_table()
        return pa.concat_tables(tables)

    def update_configs(self, configs: dict[str, Any]) -> None:
        """Apply altered topic configs; the log uses them from its next operation."""
        self.configs = {**REPLICATION_DEFAULTS, **configs}
        self.log.config = log_config(configs)

    def describe(self) -> dict[str, Any]:
        log = self.log
        return {
            "topic": self.topic, "partition": self.partition, "replica": self.replica_id,
            "role": self.role.value, "leader_epoch": self.leader_epoch, "isr": list(self.isr),
            "log_start_offset": log.log_start_offset, "log_end_offset": log.log_end_offset,
            "high_watermark": log.high_watermark, "size_bytes": log.size_bytes,
            "segments": len(log.segments), "directory": str(log.directory),
            "leader_epochs": [list(entry) for entry in self.epochs.entries],
        }


def _intact(header: BatchHeader, batch: bytes) -> bool:
    """Whether both CRCs of ``batch`` match: what is malformed is its producer's doing."""
    try:
        check_crcs(header, batch, 0)
    except CorruptRecordError:
        return False
    return True
