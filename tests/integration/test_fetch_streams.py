"""Consumers' fetch streams (``stream_fetches``: raylog/replica/fetch_stream.py, the brokers'
``fetch_stream``, raylog/client/fetch_plan.py's BrokerStream) on the real cluster: one
streaming call per serving process carries answer after answer, a consumer's close cancels
its streams on the brokers, a consumer killed leaves none running for long, and reading
goes on across a leader's death."""

from __future__ import annotations

import time

import pytest
import ray

from raylog import Admin, Consumer, Producer
from raylog.replica.fetch_stream import STREAM_LIFETIME_S
from raylog.types import TopicPartition
from tests.integration.conftest import wait_for

PARTITIONS = 6
BACKLOG = 400


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


def serving(ray_cluster, topic: str) -> list:
    """The handles of the processes serving the topic's leaders."""
    meta = ray_cluster.raylog.topic(topic, refresh=True)
    return list({p.leader_client().handle: None for p in meta.partitions})


def open_streams(handles: list, client_id: str) -> int:
    """The streams of consumers with ``client_id`` running on these processes (other
    tests' consumers, and the cluster's own, may hold streams there too)."""
    return sum(ray.get([h.__ray_call__.remote(lambda host: host.open_streams[client_id])
                        for h in handles], timeout=30))


def streaming(**settings) -> Consumer:
    return Consumer(auto_offset_reset="earliest", enable_auto_commit=False,
                    stream_fetches=True, **settings)


def read(consumer: Consumer, wanted: set[bytes], timeout_s: float = 60) -> list:
    records: list = []
    wait_for(lambda: records.extend(consumer.poll(timeout_ms=200)) or
             wanted <= {r.value for r in records}, timeout=timeout_s,
             what=f"{len(wanted)} records read")
    return records


@pytest.mark.cluster
def test_a_streaming_consumer_reads_round_after_round_and_its_close_ends_the_streams(
        ray_cluster, admin, topic_name):
    admin.create_topic(topic_name, partitions=PARTITIONS)
    handles = serving(ray_cluster, topic_name)
    consumer = streaming(client_id=topic_name)
    consumer.assign([TopicPartition(topic_name, p) for p in range(PARTITIONS)])
    with Producer(linger_ms=0) as producer:
        for round_ in range(3):
            values = {b"r%d-%d" % (round_, i) for i in range(60)}
            for i, value in enumerate(sorted(values)):
                producer.send(topic_name, value, partition=i % PARTITIONS)
            producer.flush()
            records = read(consumer, values)
            assert sorted((r.partition, r.offset) for r in records) == sorted(
                (p, round_ * 10 + k) for p in range(PARTITIONS) for k in range(10))
    assert 0 < open_streams(handles, topic_name) <= len(handles)  # one per process at most
    consumer.close()
    wait_for(lambda: open_streams(handles, topic_name) == 0, timeout=30,
             what="the closed consumer's streams cancelled on the brokers")


@ray.remote(num_cpus=0, max_restarts=0)
class _Reader:
    def __init__(self, topic: str) -> None:
        import raylog
        raylog.init()
        self.consumer = Consumer(auto_offset_reset="earliest", stream_fetches=True,
                                 enable_auto_commit=False, client_id=topic)
        self.consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])

    def read(self, expected: int) -> int:
        got = 0
        deadline = time.monotonic() + 60
        while got < expected and time.monotonic() < deadline:
            got += len(self.consumer.poll(timeout_ms=200))
        return got


@pytest.mark.cluster
def test_a_killed_consumers_streams_end_on_the_brokers(ray_cluster, admin, topic_name):
    admin.create_topic(topic_name, partitions=PARTITIONS)
    handles = serving(ray_cluster, topic_name)
    with Producer() as producer:
        for i in range(60):
            producer.send(topic_name, b"%d" % i, partition=i % PARTITIONS)
    reader = _Reader.remote(topic_name)
    assert ray.get(reader.read.remote(60), timeout=90) == 60
    assert open_streams(handles, topic_name) > 0
    ray.kill(reader, no_restart=True)
    # Ended by Ray when it hears of the death, or by the streams' lifetime at the latest.
    wait_for(lambda: open_streams(handles, topic_name) == 0, timeout=STREAM_LIFETIME_S + 30,
             what="the dead consumer's streams ended")


@pytest.mark.cluster
def test_a_streaming_consumer_reads_on_across_a_leaders_death(ray_cluster, admin,
                                                              topic_name):
    admin.create_topic(topic_name, partitions=3, replication_factor=3,
                       configs={"min.insync.replicas": 2})
    tps = [TopicPartition(topic_name, p) for p in range(3)]
    with streaming() as consumer, Producer(acks="all") as producer:
        consumer.assign(tps)
        for i in range(30):
            producer.send(topic_name, b"a%d" % i, partition=i % 3)
        producer.flush()
        read(consumer, {b"a%d" % i for i in range(30)})
        leader = ray_cluster.raylog.topic(topic_name, refresh=True).partitions[0]
        ray.kill(leader.leader_client().handle, no_restart=False)  # Ray restarts it
        for i in range(30):
            producer.send(topic_name, b"b%d" % i, partition=i % 3)
        producer.flush()
        records = read(consumer, {b"b%d" % i for i in range(30)}, timeout_s=120)
        for p in range(3):  # in offset order, no gap
            offsets = [r.offset for r in records if r.partition == p]
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


def _read_inside(actor: object, topic: str, expected: int, seconds: float) -> None:
    """Run inside a serving process (through ``__ray_call__``): a thread of it reads the
    topic with a consumer that asks for streams, as a broker's own threads (its tiered
    metadata feed) read the partitions it serves; the outcome lands on the actor."""
    import threading

    from raylog import Consumer
    from raylog.types import TopicPartition

    outcome = actor._stream_test_outcome = {"read": 0, "error": None, "done": False,
                                            "streams": 0}

    def run() -> None:
        try:
            # One batch an answer: the backlog would come as a stream's items back to back
            # (what loses them), and later every 10 ms an answer, empty or not.
            with Consumer(auto_offset_reset="earliest", enable_auto_commit=False,
                          stream_fetches=True, fetch_max_wait_ms=10,
                          max_partition_fetch_bytes=1, client_id=topic) as consumer:
                consumer.assign([TopicPartition(topic, 0)])
                until = time.monotonic() + seconds
                while outcome["read"] < expected or time.monotonic() < until:
                    outcome["read"] += len(consumer.poll(timeout_ms=100))
                    outcome["streams"] = max(outcome["streams"], actor.open_streams[topic])
                    if time.monotonic() > until + 60:
                        break
        except Exception as e:  # what the test reports
            outcome["error"] = repr(e)
        outcome["done"] = True

    threading.Thread(target=run, daemon=True).start()


@pytest.mark.cluster
def test_a_consumer_in_a_serving_process_reads_that_process_s_partitions(
        ray_cluster, admin, topic_name):
    """Ray loses the items of a stream from an actor to a caller in its own process when
    they come fast (a hundred or so in: "owner is unknown", or an AssertionError inside
    Ray's ``next``; a broker's tiered metadata feed died of it), so a consumer there fetches
    from its own process by calls, streams asked for or not: no stream is opened."""
    admin.create_topic(topic_name, partitions=1)
    host = serving(ray_cluster, topic_name)[0]
    with Producer(linger_ms=0) as producer:
        for i in range(BACKLOG):  # a batch each
            producer.send(topic_name, b"%d" % i).result(timeout=30)
        ray.get(host.__ray_call__.remote(_read_inside, topic_name, BACKLOG + 50, 3.0),
                timeout=30)
        for i in range(BACKLOG, BACKLOG + 50):
            producer.send(topic_name, b"%d" % i).result(timeout=30)

    def outcome() -> dict:
        return ray.get(host.__ray_call__.remote(lambda actor: dict(
            actor._stream_test_outcome)), timeout=30)

    wait_for(lambda: outcome()["done"], timeout=120, what="the reader inside the broker done")
    assert outcome() == {"read": BACKLOG + 50, "error": None, "done": True, "streams": 0}
