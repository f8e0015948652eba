"""A raylog cluster faked behind the gateway's seam (raylog/kafka/gateway/backend.py), no
Ray: topics with their partitions' leaders, and a log per partition of the raylog batches
appended to it, stamped with their base offsets as a leader would. A partition's last stable
offset and aborted transactions are set by a test (``stable``, ``aborted``); by default
every record is stable."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from raylog.client.connection import PartitionMetadata, TopicMetadata
from raylog.errors import (
    InvalidPartitionsError,
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownTopicError,
)
from raylog.kafka.gateway.backend import Broker
from raylog.metadata.topics import (
    canonical_config_name,
    described_configs,
    normalize_configs,
    validate_topic_name,
)
from raylog.records import parse_header, stamp
from raylog.replica.partition import READ_COMMITTED, READ_UNCOMMITTED, FetchResult
from raylog.storage import AppendInfo
from raylog.storage.txn_index import AbortedTxn


@dataclasses.dataclass
class FakeController:
    backend: FakeBackend

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, Any], topic_id: str) -> dict[str, Any]:
        if name in self.backend.topics:
            raise TopicExistsError(f"topic {name!r} exists")
        self.backend.add_topic(name, partitions, topic_id=topic_id)
        return {"name": name}


@dataclasses.dataclass
class FakeAdmin:
    """raylog's Admin as the gateway calls it, over the fake's topics and configs."""

    backend: FakeBackend

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     configs: dict[str, Any] | None = None) -> dict[str, Any]:
        validate_topic_name(name)
        configs = normalize_configs(configs)
        if name in self.backend.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if partitions < 1:
            raise InvalidPartitionsError(f"partitions must be >= 1, got {partitions}")
        self.backend.add_topic(name, partitions)
        self.backend.configs[name] = configs
        return {"name": name}

    def delete_topic(self, name: str) -> None:
        if self.backend.topics.pop(name, None) is None:
            raise UnknownTopicError(f"unknown topic {name!r}")

    def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        topic = self.backend.topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        if total <= topic.num_partitions:
            raise InvalidPartitionsError(f"{name} has {topic.num_partitions} partitions")
        self.backend.add_topic(name, total)
        return {"name": name}

    def describe_configs(self, names: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
        for name in names:
            if name not in self.backend.topics:
                raise UnknownTopicError(f"unknown topic {name!r}")
        return {n: described_configs(self.backend.configs.get(n, {})) for n in names}

    def alter_configs(self, name: str, set_configs: dict[str, Any],
                      delete_configs: list[str]) -> dict[str, Any]:
        if name not in self.backend.topics:
            raise UnknownTopicError(f"unknown topic {name!r}")
        configs = self.backend.configs.setdefault(name, {})
        updates = normalize_configs(set_configs)
        for key in delete_configs:
            configs.pop(canonical_config_name(key), None)
        configs.update(updates)
        return {"name": name}


class FakeBackend:
    cluster_id = "fake-cluster"

    def __init__(self, brokers: list[Broker] | None = None) -> None:
        self.broker_list = brokers or [Broker(1, "127.0.0.1", 9092), Broker(2, "127.0.0.1", 9093)]
        self.topics: dict[str, TopicMetadata] = {}
        self.controller = FakeController(self)
        self.admin = FakeAdmin(self)
        self.configs: dict[str, dict[str, Any]] = {}  # topic -> overrides
        self.calls: list[tuple] = []  # every call that would reach the cluster's data
        self.logs: dict[tuple[str, int], list[bytes]] = {}  # stamped batches
        self.fail_appends: BaseException | None = None  # raised by every append when set
        self.unanswered: list[asyncio.Future] = []  # acks=0 appends
        self.stable: dict[tuple[str, int], int] = {}  # last stable offsets (else the end)
        self.aborted: dict[tuple[str, int], list[AbortedTxn]] = {}

    def add_topic(self, name: str, partitions: int = 1, leader: int | None = 1,
                  topic_id: str = "0123456789abcdef0123456789abcdef") -> None:
        parts = tuple(PartitionMetadata(i, leader, 3, (1, 2), (1, 2))
                      for i in range(partitions))
        self.topics[name] = TopicMetadata(name, topic_id, parts, {}, 0.0)

    async def brokers(self) -> dict[int, Broker]:
        return {b.node_id: b for b in self.broker_list}

    async def controller_id(self) -> int:
        return min(b.node_id for b in self.broker_list)

    async def topic(self, name: str, max_age_s: float = 300.0) -> TopicMetadata:
        if name not in self.topics:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return self.topics[name]

    async def list_topics(self) -> list[str]:
        return sorted(n for n in self.topics if not n.startswith("__"))

    def forget(self, name: str) -> None:
        pass

    def _log(self, topic: TopicMetadata, partition: int) -> list[bytes]:
        if topic.partitions[partition].leader is None:
            raise LeaderNotAvailableError(f"{topic.name}-{partition} has no leader")
        return self.logs.setdefault((topic.name, partition), [])

    @staticmethod
    def _end(log: list[bytes]) -> int:
        if not log:
            return 0
        last = parse_header(log[-1])
        return last.base_offset + last.last_offset_delta + 1

    def append(self, topic: TopicMetadata, partition: int, batch: bytes, acks: int,
               timeout_ms: int):
        self.calls.append(("append", topic.name, partition, acks))
        log = self._log(topic, partition)
        failure = self.fail_appends

        async def answer() -> AppendInfo:
            if failure is not None:
                raise failure
            header = parse_header(batch)
            base = self._end(log)
            stamped = bytearray(batch)
            stamp(stamped, base, 3)
            log.append(bytes(stamped))
            return AppendInfo(base, base + header.last_offset_delta, header.max_timestamp,
                              header.record_count)

        return answer()

    def append_unacknowledged(self, topic: TopicMetadata, partition: int,
                              batch: bytes) -> None:
        self.unanswered.append(asyncio.ensure_future(self.append(topic, partition, batch, 0, 0)))

    async def fetch(self, topic: TopicMetadata, partition: int, offset: int, max_bytes: int,
                    max_wait_ms: int, min_bytes: int,
                    isolation: str = READ_UNCOMMITTED) -> FetchResult:
        self.calls.append(("fetch", topic.name, partition, offset))
        log = self._log(topic, partition)
        end = self._end(log)
        if not 0 <= offset <= end:
            raise OffsetOutOfRangeError(f"offset {offset} outside [0, {end}]")
        below = end
        if isolation == READ_COMMITTED:
            below = self.stable.get((topic.name, partition), end)
        data = b"".join(b for b in log
                        if (h := parse_header(b)).base_offset + h.last_offset_delta >= offset
                        and h.base_offset < below)
        if not data and max_wait_ms > 0:
            await asyncio.sleep(max_wait_ms / 1000)
        if isolation == READ_COMMITTED:
            return FetchResult(data, end, 0, end, below,
                               tuple(self.aborted.get((topic.name, partition), ())))
        return FetchResult(data, end, 0, end)

    async def list_offset(self, topic: TopicMetadata, partition: int, spec: str | int):
        log = self._log(topic, partition)
        if spec == "earliest":
            return 0, -1
        if spec == "latest":
            return self._end(log), -1
        if spec == "last_stable":
            return self.stable.get((topic.name, partition), self._end(log)), -1
        for batch in log:
            h = parse_header(batch)
            if h.max_timestamp >= spec:
                return h.base_offset, h.max_timestamp
        return None

    async def delete_records(self, topic: TopicMetadata, partition: int, offset: int) -> int:
        self.calls.append(("delete_records", topic.name, partition, offset))
        return offset

    async def blocking(self, call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(call, *args)
