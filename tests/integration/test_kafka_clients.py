"""Kafka clients none of us wrote, against raylog through the Kafka listener, cross-read with
raylog's own clients: Apache Kafka's Java client (kafka-clients 4.x from Maven Central and a
small program compiled at test time, tests/java/kafka-clients/), Debian's kcat (an older
librdkafka) and Ray Data's ``read_kafka``/``write_kafka``. Spark's own ``format("kafka")`` is in
test_spark_kafka_source.py.

Every test starts and stops its own listener on loopback, speaking for every broker of the
session's cluster (conftest.gateway).
Every record is compared whole: key, value, headers, timestamp, partition and offset.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2

from raylog import Admin, Consumer, Producer, TopicPartition
from tests.children import Child
from tests.integration.conftest import consume_all, wait_for
from tests.integration.java_deps import (
    compile_java,
    java_command,
    maven_jars,
)

pytestmark = [pytest.mark.cluster]

PARTITIONS = 3
BASE_TS = time.time_ns() // 1_000_000 - 3_600_000  # an hour ago: inside any retention
JAVA_TIMEOUT_S = 240
EPOCH = datetime.datetime(1970, 1, 1)


def record(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]], int]:
    """Record i as the Java program (tests/java/kafka-clients) makes it too."""
    return (f"key-{i}".encode(), f"value-{i}-".encode() * 3,
            [("n", str(i).encode()), ("empty", b"")], BASE_TS + i)


def java_partition(key: bytes) -> int:
    """The partition Kafka's Java client's default partitioner picks for a key."""
    return (murmur2(key) & 0x7FFFFFFF) % PARTITIONS


def produce_native(topic: str, n: int) -> dict[bytes, tuple[int, int]]:
    """Records 0..n-1 through raylog's Producer: key -> (partition, offset)."""
    with Producer(acks="all") as producer:
        futures = {}
        for i in range(n):
            key, value, headers, timestamp = record(i)
            futures[key] = producer.send(topic, value=value, key=key, headers=headers,
                                         timestamp=timestamp)
        producer.flush()
        return {key: (f.result().partition, f.result().offset) for key, f in futures.items()}


def native_rows(topic: str, n: int) -> dict[bytes, tuple]:
    """key -> (value, headers, timestamp, partition, offset) as raylog's Consumer reads them."""
    read = consume_all(topic, PARTITIONS, n)
    assert len(read) == n
    return {r.key: (r.value, [(k, v) for k, v in r.headers], r.timestamp, r.partition,
                    r.offset) for r in read}


# -- the Java client ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def java() -> Iterator:
    """Runs the Java program: ``java(command, *args)`` -> its JSON lines."""
    return java_runner()


def java_runner() -> Callable[..., list[dict]]:
    """``run(command, *args)`` -> the Java program's JSON lines (skips the test when
    Maven Central cannot be reached, maven_jars)."""
    jars = maven_jars("kafka-clients")
    classes = compile_java("kafka-clients", jars)

    def run(*args: str) -> list[dict]:
        with Child(java_command(classes, jars, "KafkaClientsCheck", *args)) as child:
            code = child.wait(timeout=JAVA_TIMEOUT_S, what=f"the Java client's {args[0]}")
            assert code == 0, f"java {args[0]} exited {code}:\n{child.stderr[-6000:]}"
            return [json.loads(line) for line in child.lines if line.startswith("{")]

    return run


def test_java_idempotent_producer_records_are_read_identically_by_raylog(gateway, topic, java):
    n = 300
    delivered = java("produce", gateway, topic, str(n), str(BASE_TS))
    assert [d["i"] for d in delivered] == list(range(n))
    rows = native_rows(topic, n)
    for d in delivered:
        key, value, headers, timestamp = record(d["i"])
        assert d["partition"] == java_partition(key)
        assert rows[key] == (value, headers, timestamp, d["partition"], d["offset"])


def test_java_consumer_group_reads_raylog_records_identically_and_commits(
        gateway, topic, java):
    n = 200
    where = produce_native(topic, n)
    group = f"java-{uuid.uuid4().hex[:8]}"
    lines = java("consume", gateway, topic, group, str(n))
    committed = lines.pop()["committed"]
    assert len(lines) == n
    for line in lines:
        key = bytes.fromhex(line["key"])
        _, value, headers, timestamp = record(int(key.split(b"-")[1]))
        assert bytes.fromhex(line["value"]) == value
        assert [(k, bytes.fromhex(v)) for k, v in line["headers"]] == headers
        assert (line["timestamp"], line["timestamp_type"]) == (timestamp, "CreateTime")
        assert (line["partition"], line["offset"]) == where[key]
        assert line["partition"] == java_partition(key)
    # the Java consumer's commits are raylog's: its own Consumer of the group reads them
    ends = {p: 1 + max(o for q, o in where.values() if q == p) for p in range(PARTITIONS)}
    assert {int(p): o for p, o in committed.items()} == ends
    with Consumer(group_id=group) as native:
        seen = native.committed([TopicPartition(topic, p) for p in range(PARTITIONS)])
    assert {tp.partition: o for tp, o in seen.items()} == ends
    assert group in {g["group_id"] for g in Admin().list_groups()}


def test_java_admin_client_creates_describes_and_deletes_a_topic(gateway, ray_cluster, java):
    name = f"java-admin-{uuid.uuid4().hex[:8]}"
    lines = java("admin", gateway, name)
    steps = {k: v for line in lines for k, v in line.items()}
    assert steps["created"] == name and steps["deleted"] == name
    assert sorted(p["partition"] for p in steps["described"]) == list(range(PARTITIONS))
    assert all(p["leader"] in ray_cluster.broker_ids for p in steps["described"])
    assert "retention.ms" in steps["configs"]
    assert isinstance(steps["groups"], list)
    wait_for(lambda: name not in Admin().list_topics(), timeout=60,
             what=f"{name} to be deleted")


# -- kcat ---------------------------------------------------------------------------------

def _kcat() -> str:
    found = shutil.which("kcat")
    if found is None:
        # as the Makefile's `kcat` target does: apt when root, else a skip saying why
        subprocess.run(["make", "-s", "kcat"], cwd=Path(__file__).resolve().parents[2],
                       capture_output=True, timeout=600, check=False)
        found = shutil.which("kcat")
    if found is None:
        pytest.skip("kcat is not installed and cannot be here (Debian package kcat: "
                    "`make kcat` installs it as root with apt)")
    return found


def test_kcat_produces_keys_and_headers_and_consumes_what_raylog_wrote(gateway, topic):
    kcat = _kcat()
    n = 60
    lines = "".join(f"kc-{i}\tvalue-{i}\n" for i in range(n))
    subprocess.run([kcat, "-b", gateway, "-P", "-t", topic, "-K", "\t", "-H", "origin=kcat",
                    "-H", "empty=", "-X", "partitioner=murmur2_random"],
                   input=lines, text=True, check=True, timeout=120)
    rows = native_rows(topic, n)
    for i in range(n):
        value, headers, _, partition, _ = rows[f"kc-{i}".encode()]
        assert (value, headers) == (f"value-{i}".encode(), [("origin", b"kcat"),
                                                            ("empty", b"")])
        assert partition == java_partition(f"kc-{i}".encode())

    # raylog's records read back by kcat (-C -e: to the end, then exit), as JSON
    where = produce_native(topic, n)
    out = subprocess.run([kcat, "-b", gateway, "-C", "-t", topic, "-e", "-o", "beginning",
                          "-J"], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    read = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(read) == 2 * n
    ours = {m["key"]: m for m in read if m["key"].startswith("key-")}
    assert len(ours) == n
    for i in range(n):
        key, value, headers, timestamp = record(i)
        m = ours[key.decode()]
        assert (m["payload"], m["ts"], m["partition"], m["offset"]) == (
            value.decode(), timestamp, *where[key])
        assert m["headers"] == [x for k, v in headers for x in (k, v.decode())]
    # and kcat's own records as raylog stored them
    for m in read:
        if m["key"] in ours:
            continue
        value, _, timestamp, partition, offset = rows[m["key"].encode()]
        assert (m["payload"].encode(), m["ts"], m["partition"], m["offset"]) == (
            value, timestamp, partition, offset)
        assert m["headers"] == ["origin", "kcat", "empty", ""]


# -- Ray Data -----------------------------------------------------------------------------

def test_ray_data_read_kafka_reads_what_read_topic_reads(gateway, topic):
    import ray

    from raylog.integrations.ray_data import read_topic

    n = 150
    produce_native(topic, n)
    wanted = ["key", "value", "topic", "partition", "offset", "timestamp"]
    through_kafka = ray.data.read_kafka(topic, bootstrap_servers=gateway,
                                        start_offset="earliest", end_offset="latest")
    rows = through_kafka.take_all()
    native = read_topic(topic).take_all()
    assert len(rows) == len(native) == n

    def table(rs: list[dict]) -> list[tuple]:
        return sorted(tuple(r[c] for c in wanted) for r in rs)

    # read_topic gives Spark's shape: the timestamp as a (UTC) datetime, headers as a list
    for r in native:
        r["timestamp"] = (r["timestamp"] - EPOCH) // datetime.timedelta(milliseconds=1)
    assert table(rows) == table(native)
    for r in rows:
        _, value, headers, timestamp = record(int(r["key"].split(b"-")[1]))
        assert (r["value"], dict(r["headers"]), r["timestamp"]) == (value, dict(headers),
                                                                    timestamp)


def test_ray_data_write_kafka_lands_keyed_records_where_the_java_client_would(
        gateway, topic):
    import ray

    n = 120
    ds = ray.data.from_items([{"id": f"id-{i}", "n": i} for i in range(n)])
    ds.write_kafka(topic, gateway, key_field="id", producer_config={"acks": "all",
                                                                     "partitioner":
                                                                     "murmur2_random"})
    read = consume_all(topic, PARTITIONS, n)
    assert len(read) == n
    for r in read:
        row = json.loads(r.value)
        assert r.key == row["id"].encode()
        assert r.partition == java_partition(r.key)
    assert sorted(json.loads(r.value)["n"] for r in read) == list(range(n))
