"""The brokers' fetch of several partitions in one call (``fetch_many``, actors/serving.py
and actors/broker.py), on the real cluster: it parks until any of its partitions has data,
answers each partition with its own result or error, bounds the whole answer's bytes, and
the broker passes on reads of partitions its replica host serves."""

from __future__ import annotations

from collections import defaultdict

import pytest
import ray

from raylog import Admin, Producer
from raylog.client.remote import HostClient, resolve
from raylog.errors import (
    FencedEpochError,
    NotLeaderError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from raylog.records import iter_batches
from raylog.replica.partition import FetchResult
from raylog.util.cluster_names import NAMESPACE, broker_actor_name
from tests.integration.conftest import wait_for
from tests.integration.test_replica_hosts import hosts_of, to_spread, two_process_broker

PARTITIONS = 9  # over three brokers: some process serves two or more
PARKED_MS = 60_000  # longer than any answer here may take but by being woken


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


def two_on_one_process(ray_cluster, admin: Admin, topic: str) -> tuple[object, list]:
    """(the handle of a process serving two or more of the topic's partitions, the leaders'
    clients of two of them)."""
    admin.create_topic(topic, partitions=PARTITIONS)
    meta = ray_cluster.raylog.topic(topic, refresh=True)
    by_handle = defaultdict(list)
    for p in meta.partitions:
        client = p.leader_client()
        by_handle[client.handle].append(client)
    handle, clients = max(by_handle.items(), key=lambda kv: len(kv[1]))
    assert len(clients) >= 2
    return handle, clients[:2]


def read(client, offset: int = 0, most: int = 1 << 20) -> tuple:
    return client.topic, client.partition, client.leader_epoch, offset, most


def offsets(result: FetchResult) -> list[int]:
    return [h.base_offset for _, h in iter_batches(result.data)]


@pytest.mark.cluster
def test_a_fetch_of_several_partitions_parks_until_any_has_data(ray_cluster, admin,
                                                                 topic_name):
    handle, (a, b) = two_on_one_process(ray_cluster, admin, topic_name)
    ref = HostClient(handle).fetch_many([read(a), read(b)], 50 << 20, PARKED_MS, 1)
    done, _ = ray.wait([ref], timeout=1.0)
    assert not done, "answered with nothing to read"
    with Producer(cluster=ray_cluster.raylog) as producer:
        producer.send(topic_name, b"to b", partition=b.partition).result(30)
    answers = resolve(ref, timeout=PARKED_MS / 2000)  # woken by the append, not timed out
    assert isinstance(answers[0], FetchResult) and answers[0].data == b""
    assert offsets(answers[1]) == [0] and answers[1].high_watermark == 1


@pytest.mark.cluster
def test_one_partitions_error_fails_none_of_the_others(ray_cluster, admin, topic_name):
    handle, (a, b) = two_on_one_process(ray_cluster, admin, topic_name)
    with Producer(cluster=ray_cluster.raylog) as producer:
        producer.send(topic_name, b"to a", partition=a.partition).result(30)
    reads = [read(a), (b.topic, b.partition, b.leader_epoch + 5, 0, 1 << 20),
             read(a, offset=999), ("no-such-topic", 0, 0, 0, 1 << 20)]
    # An error answers at once, the other partitions' reads with it.
    answers = resolve(HostClient(handle).fetch_many(reads, 50 << 20, PARKED_MS, 1),
                      timeout=PARKED_MS / 2000)
    assert offsets(answers[0]) == [0]
    assert isinstance(answers[1], FencedEpochError | UnknownLeaderEpochError), answers[1]
    assert isinstance(answers[2], OffsetOutOfRangeError), answers[2]
    assert isinstance(answers[3], NotLeaderError), answers[3]


@pytest.mark.cluster
def test_the_answers_bytes_are_bounded_and_the_partitions_after_are_left_unread(
        ray_cluster, admin, topic_name):
    handle, (a, b) = two_on_one_process(ray_cluster, admin, topic_name)
    with Producer(cluster=ray_cluster.raylog, linger_ms=0) as producer:
        for client in (a, b):
            for _ in range(3):
                producer.send(topic_name, b"x" * 100, partition=client.partition).result(30)
    # At least one whole batch, as a fetch of one partition: then the budget is spent.
    answers = resolve(HostClient(handle).fetch_many([read(a), read(b)], 1, 0, 1), timeout=60)
    assert offsets(answers[0]) == [0] and answers[1] is None
    # Per partition: at least one batch of each, within the whole answer's budget.
    answers = resolve(HostClient(handle).fetch_many([read(a, most=1), read(b, most=1)],
                                                    50 << 20, 0, 1), timeout=60)
    assert offsets(answers[0]) == [0] and offsets(answers[1]) == [0]
    answers = resolve(HostClient(handle).fetch_many([read(b), read(a)], 50 << 20, 0, 1),
                      timeout=60)
    assert offsets(answers[0]) == offsets(answers[1]) == [0, 1, 2]


@pytest.mark.cluster
def test_the_broker_passes_on_reads_of_partitions_its_replica_host_serves(
        ray_cluster, admin, topic_name):
    broker, node = two_process_broker(ray_cluster)
    # as many as test_replica_hosts' produce_batches test: with a few, the ones this broker
    # leads could all go to one process, whatever the earlier tests left
    partitions = to_spread(ray_cluster, admin, broker, 24, 1)
    admin.create_topic(topic_name, partitions=partitions)
    wait_for(lambda: hosts_of(ray_cluster, topic_name, broker), timeout=60,
             what="a partition on the replica host")
    meta = ray_cluster.raylog.topic(topic_name, refresh=True)
    mine = [p.leader_client() for p in meta.partitions if p.leader == broker]
    hosted = set(hosts_of(ray_cluster, topic_name, broker))
    assert hosted & {c.partition for c in mine}
    with Producer(cluster=ray_cluster.raylog) as producer:
        for client in mine:
            producer.send(topic_name, b"v", partition=client.partition).result(30)
    broker_actor = ray.get_actor(broker_actor_name(node), namespace=NAMESPACE)
    answers = resolve(HostClient(broker_actor).fetch_many([read(c) for c in mine], 50 << 20,
                                                          PARKED_MS, 1),
                      timeout=PARKED_MS / 2000)
    assert [offsets(a) for a in answers] == [[0]] * len(mine)
