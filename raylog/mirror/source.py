"""The Flight endpoint's backend on a real cluster: what ``raylog flight-serve`` reads.

Runs in a driver process of the source cluster and reads through raylog's clients and
wrappers: the controller (via Admin) for topics and groups, a Consumer for offsets, and the
partition leaders' brokers (``ReplicaClient.fetch``, a long poll) for stored batches, which
cross Ray and Flight as they are on disk. A leader that moves is followed, as consumers do:
metadata refreshed, the read asked again, for up to ``READ_RETRY_S``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from raylog.client.admin import Admin
from raylog.client.connection import RaylogCluster
from raylog.client.consumer import Consumer
from raylog.client.remote import resolve
from raylog.errors import RaylogError
from raylog.metadata.topics import check_partition, validate_topic_name
from raylog.mirror.flight_server import Fetched
from raylog.mirror.retry import Backoff, Retrying
from raylog.types import TopicPartition

logger = logging.getLogger(__name__)

READ_RETRY_S = 30.0


class ClusterSource:
    """Answers the endpoint's questions about the cluster this process is connected to.
    Safe to call from several threads (every call makes its own requests)."""

    def __init__(self, cluster: RaylogCluster) -> None:
        self.cluster = cluster
        self.admin = Admin(cluster=cluster)

    def topics(self) -> list[dict[str, Any]]:
        return [{"name": t["name"], "topic_id": t["topic_id"],
                 "partitions": len(t["partitions"]),
                 "replication_factor": t["replication_factor"], "configs": t["configs"]}
                for t in self.admin.describe_topics()]

    def offsets(self, topic: object) -> list[tuple[int, int]]:
        name = validate_topic_name(topic)
        partitions = self.cluster.topic(name, refresh=True).num_partitions
        tps = [TopicPartition(name, p) for p in range(partitions)]
        with Consumer(cluster=self.cluster) as consumer:
            starts = consumer.beginning_offsets(tps)
            ends = consumer.end_offsets(tps)
        return [(starts[tp], ends[tp]) for tp in tps]

    def group_offsets(self, topics: list[str]) -> dict[str, list[list[Any]]]:
        wanted = set(topics)
        out = {}
        for group in self.admin.list_groups():
            committed = self.admin.list_consumer_group_offsets(group["group_id"])
            mine = [[tp.topic, tp.partition, offset] for tp, offset in sorted(committed.items())
                    if tp.topic in wanted]
            if mine:
                out[group["group_id"]] = mine
        return out

    def start_fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
                    max_wait_ms: int) -> Callable[[], Fetched]:
        """Ask the partition's leader for stored batches from ``offset`` now; the returned
        function waits for them (following a moving leader)."""
        validate_topic_name(topic)

        def ask(refresh: bool) -> Any:
            meta = self.cluster.topic(topic, refresh=refresh)
            if partition >= meta.num_partitions and not refresh:  # added since cached
                meta = self.cluster.topic(topic, refresh=True)
            check_partition(topic, partition, meta.num_partitions)
            return meta.partitions[partition].leader_client().fetch(offset, max_bytes,
                                                                     max_wait_ms, 1)

        try:
            first: Any = ask(False)
        except RaylogError as e:
            if not e.retriable:
                raise
            first = e

        def attempt() -> Fetched:
            nonlocal first
            pending, first = first, None
            if pending is None:
                pending = ask(True)
            elif isinstance(pending, RaylogError):
                raise pending
            answer = resolve(pending)
            return Fetched(answer.data, answer.high_watermark, answer.log_start_offset)

        def result() -> Fetched:
            retrying = Retrying(Backoff(0.05, 1.0, jitter=0), logger.info, READ_RETRY_S)
            return retrying.call(f"reading {topic}-{partition}", attempt)

        return result
