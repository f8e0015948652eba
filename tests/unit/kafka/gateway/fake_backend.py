"""A raylog cluster faked behind the gateway's seam (raylog/kafka/gateway/backend.py), no
Ray: topics with their partitions' leaders, and a log per partition of the raylog batches
appended to it, stamped with their base offsets as a leader would."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from raylog.client.connection import PartitionMetadata, TopicMetadata
from raylog.errors import TopicExistsError, UnknownTopicError
from raylog.kafka.gateway.backend import Broker


@dataclasses.dataclass
class FakeController:
    backend: FakeBackend

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, Any], topic_id: str) -> dict[str, Any]:
        if name in self.backend.topics:
            raise TopicExistsError(f"topic {name!r} exists")
        self.backend.add_topic(name, partitions, topic_id=topic_id)
        return {"name": name}


class FakeBackend:
    cluster_id = "fake-cluster"

    def __init__(self, brokers: list[Broker] | None = None) -> None:
        self.broker_list = brokers or [Broker(1, "127.0.0.1", 9092), Broker(2, "127.0.0.1", 9093)]
        self.topics: dict[str, TopicMetadata] = {}
        self.controller = FakeController(self)
        self.calls: list[tuple] = []  # every call that would reach the cluster's data

    def add_topic(self, name: str, partitions: int = 1, leader: int | None = 1,
                  topic_id: str = "0123456789abcdef0123456789abcdef") -> None:
        parts = tuple(PartitionMetadata(i, leader, 3, (1, 2), (1, 2))
                      for i in range(partitions))
        self.topics[name] = TopicMetadata(name, topic_id, parts, {}, 0.0)

    async def brokers(self) -> list[Broker]:
        return list(self.broker_list)

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

    async def blocking(self, call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(call, *args)
