"""Kafka clients against raylog through the Kafka listener (raylog/kafka/gateway/), on the
session's multi-node cluster: confluent-kafka (librdkafka) and Debian's kcat producing and
consuming, and cross-reading with raylog's own Producer and Consumer.

Every test starts and stops its own listener on loopback, speaking for every broker (as
``raylog gateway`` does). Consumers use assign(), no groups.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kafka.partitioner.default import murmur2

from raylog import Admin, Consumer, Producer, TopicPartition
from tests.children import Child
from tests.integration.conftest import consume_all, wait_for

PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def kafka_records(n: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    """(key, value, headers, timestamp) of n records with distinct keys and distinct
    timestamps of the last minute: older ones would be past the topic's retention (7 days,
    by the newest timestamp of a segment, as Kafka's) and deleted before they are read."""
    base = int(time.time() * 1000) - 60_000
    return [(f"key-{i}".encode(), f"value-{i}-".encode() * 3, [("n", str(i).encode()),
                                                                ("empty", b"")],
             base + i) for i in range(n)]


def produce_with_confluent(bootstrap: str, topic: str, records: list, **config) -> dict:
    """Produce every record idempotently with acks=all and the Java client's partitioner;
    key -> (partition, offset) from the delivery reports."""
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                              "acks": "all", "partitioner": "murmur2_random",
                              "linger.ms": 5, **config})
    delivered, failed = {}, []

    def report(error, message) -> None:
        if error is not None:
            failed.append(error)
        else:
            delivered[message.key()] = (message.partition(), message.offset())

    for key, value, headers, timestamp in records:
        producer.produce(topic, value=value, key=key, headers=headers, timestamp=timestamp,
                         on_delivery=report)
        producer.poll(0)
    assert producer.flush(60) == 0, "records left undelivered"
    assert failed == []
    return delivered


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_records_are_read_identically_by_raylog(gateway, topic, codec):
    records = kafka_records(200)
    delivered = produce_with_confluent(gateway, topic, records, **{"compression.type": codec})
    assert len(delivered) == len(records)
    for key, (partition, _) in delivered.items():
        assert partition == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS  # the Java client's pick
    read = consume_all(topic, PARTITIONS, len(records))
    by_key = {r.key: r for r in read}
    assert len(read) == len(records)
    for key, value, headers, timestamp in records:
        r = by_key[key]
        assert (r.value, list(r.headers), r.timestamp) == (value, headers, timestamp)
        assert (r.partition, r.offset) == delivered[key]


def consume_with_confluent(bootstrap: str, topic: str, expected: int, **config) -> list:
    """``expected`` records of ``topic`` read from offset 0 (``config``: the consumer's
    further settings, as a login's)."""
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                              "enable.auto.commit": False, "enable.partition.eof": False,
                              **config})
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = []
    try:
        def progress() -> bool:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is not None:
                    assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                    continue
                got.append(message)
            return len(got) >= expected

        wait_for(progress, timeout=60, what=f"{expected} records read by confluent-kafka")
    finally:
        consumer.close()
    return got


def test_raylog_records_are_read_identically_by_confluent_kafka(gateway, topic):
    records = kafka_records(300)
    with Producer(acks="all") as producer:
        futures = {key: producer.send(topic, value=value, key=key, headers=headers,
                                      timestamp=timestamp)
                   for key, value, headers, timestamp in records}
        producer.flush()
        where = {key: (f.result().partition, f.result().offset) for key, f in futures.items()}
    got = consume_with_confluent(gateway, topic, len(records))
    assert len(got) == len(records)
    by_key = {m.key(): m for m in got}
    for key, value, headers, timestamp in records:
        m = by_key[key]
        assert (m.value(), m.headers(), m.timestamp()[1]) == (value, headers, timestamp)
        assert (m.partition(), m.offset()) == where[key]
        assert m.partition() == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS


def test_one_listener_is_one_kafka_broker_over_raylogs_replicas(gateway, topic, ray_cluster):
    from confluent_kafka.admin import AdminClient

    described = AdminClient({"bootstrap.servers": gateway}).list_topics(topic, timeout=30)
    one = min(ray_cluster.broker_ids)
    assert list(described.brokers) == [one]
    assert str(described.brokers[one]) == f"{gateway}/{one}"
    meta = ray_cluster.raylog.topic(topic, refresh=True)
    assert {p: (m.leader, m.replicas, m.isrs)
            for p, m in described.topics[topic].partitions.items()} == \
        {p.partition: (one, list(p.replicas), list(p.isr)) for p in meta.partitions}


def test_an_unknown_topic_is_not_created(gateway, ray_cluster):
    name = f"absent-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer({"bootstrap.servers": gateway, "message.timeout.ms": 3000})
    errors = []
    producer.produce(name, value=b"x", on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert errors and errors[0] is not None
    assert name not in Admin().list_topics()


@pytest.mark.skipif(shutil.which("kcat") is None,
                    reason="kcat is not installed (Debian package kcat; `make test` installs "
                           "it when it can)")
def test_kcat_produces_and_consumes(gateway, topic):
    lines = [f"k{i}:v{i}" for i in range(50)]
    subprocess.run(["kcat", "-b", gateway, "-P", "-t", topic, "-K", ":", "-X",
                    "partitioner=murmur2_random"], input="\n".join(lines) + "\n", text=True,
                   check=True, timeout=60)
    read = {(r.key, r.value) for r in consume_all(topic, PARTITIONS, len(lines))}
    assert read == {(f"k{i}".encode(), f"v{i}".encode()) for i in range(50)}
    out = subprocess.run(["kcat", "-b", gateway, "-C", "-t", topic, "-e", "-o", "beginning",
                          "-f", "%k=%s\\n"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert sorted(out.split()) == sorted(f"k{i}=v{i}" for i in range(50))


def test_raylog_consumer_reads_through_its_own_positions(gateway, topic):
    """ListOffsets through the listener agrees with raylog's own answer."""
    produce_with_confluent(gateway, topic, kafka_records(30))
    consumer = KafkaConsumer({"bootstrap.servers": gateway, "group.id": "unused"})
    try:
        for p in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(KafkaTopicPartition(topic, p),
                                                       timeout=30)
            with Consumer() as native:
                tp = TopicPartition(topic, p)
                assert (low, high) == (native.beginning_offsets([tp])[tp],
                                       native.end_offsets([tp])[tp])
    finally:
        consumer.close()


def test_the_raylog_gateway_command_serves_until_sigterm(ray_cluster, topic):
    raylog = os.path.join(os.path.dirname(sys.executable), "raylog")
    with Child([raylog, "gateway", "--address", ray_cluster.cluster.address, "--port", "0"],
               merge_stderr=True) as command:
        line = command.wait_for_line("Kafka listener on", timeout=120)
        bootstrap = re.search(r"advertised as (\S+)", line).group(1)
        records = kafka_records(20)
        assert len(produce_with_confluent(bootstrap, topic, records)) == 20
        assert sorted(r.key for r in consume_all(topic, PARTITIONS, 20)) == \
            sorted(k for k, _, _, _ in records)
        assert command.stop(signal.SIGTERM) == 0
        line = command.wait_for_line("Kafka listener stopped after", timeout=10)
        # an idempotent acks=all producer's batches are never merged (appends.py)
        assert line.endswith("(0 acks=1 batches appended in 0 calls)")


def test_topics_administered_with_confluent_kafka_admin(gateway, ray_cluster):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
    )

    name = f"admin-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gateway})
    admin.create_topics([NewTopic(name, 2, 2, config={"retention.ms": "3600000"})])[name] \
        .result(60)
    described = Admin().describe_topic(name)
    assert len(described["partitions"]) == 2
    assert len(described["partitions"][0]["replicas"]) == 2
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(60)
    assert configs["retention.ms"].value == "3600000"
    change = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "60000",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(60)
    assert Admin().describe_configs(name)[name]["retention.ms"]["value"] == 60000
    admin.create_partitions([NewPartitions(name, 3)])[name].result(60)
    assert len(Admin().describe_topic(name)["partitions"]) == 3
    admin.delete_topics([name])[name].result(60)
    assert name not in Admin().list_topics()


@pytest.fixture
def node_listeners(ray_cluster) -> Iterator[dict[str, tuple[str, int]]]:
    """A listener actor on every broker node (``raylog start --kafka-port 0``); killed after."""
    import ray

    from raylog.kafka.gateway.cluster import listener_actor_name
    from raylog.session import start_kafka_listeners
    from raylog.util.cluster_names import NAMESPACE

    listeners = start_kafka_listeners(0)
    try:
        yield listeners
    finally:
        for node in listeners:
            ray.kill(ray.get_actor(listener_actor_name(node), namespace=NAMESPACE))


def test_a_listener_per_broker_node_advertises_each_broker_at_its_node(node_listeners, topic,
                                                                       ray_cluster):
    from confluent_kafka.admin import AdminClient

    brokers = ray_cluster.brokers()
    assert set(node_listeners) == {b["node_id"] for b in brokers.values() if b["alive"]}
    host, port = next(iter(node_listeners.values()))
    bootstrap = f"{host}:{port}"
    described = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    assert {b: (m.host, m.port) for b, m in described.brokers.items()} == \
        {b: node_listeners[info["node_id"]] for b, info in brokers.items() if info["alive"]}
    meta = ray_cluster.raylog.topic(topic, refresh=True)
    assert {p: m.leader for p, m in described.topics[topic].partitions.items()} == \
        {p.partition: p.leader for p in meta.partitions}
    # Every client reaches every partition at its leader's node, old librdkafka too.
    records = kafka_records(60)
    delivered = produce_with_confluent(bootstrap, topic, records)
    assert len(delivered) == 60
    got = consume_with_confluent(bootstrap, topic, 60)
    assert sorted(m.key() for m in got) == sorted(k for k, _, _, _ in records)
    if shutil.which("kcat"):
        out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-e", "-q",
                              "-o", "beginning", "-f", "%k\\n"], capture_output=True,
                             text=True, check=True, timeout=60).stdout
        assert sorted(out.split()) == sorted(k.decode() for k, _, _, _ in records)
