"""Brokers on a real 3-node Ray cluster: placement, produce/consume, restarts, bad input."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict

import pyarrow as pa
import pytest
import ray

import raylog
from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.errors import (
    ClientClosedError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from tests.integration.conftest import (
    consume_all,
    leader_broker,
    replica_info,
    restart_controller,
    restarts,
    wait_for,
)


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


def test_replicas_land_on_their_brokers_nodes_with_files_there(ray_cluster, admin, topic_name):
    described = admin.create_topic(topic_name, partitions=6)
    assigned = {p["partition"]: p["replicas"][0] for p in described["partitions"]}
    brokers = ray_cluster.brokers()
    assert set(assigned.values()) == set(ray_cluster.broker_ids)  # spread over all brokers
    with Producer() as producer:
        for p in range(6):
            producer.send(topic_name, b"x", partition=p)
    for partition, broker in assigned.items():
        node = brokers[broker]["node_id"]
        actor = leader_broker(admin, topic_name, partition)
        info = replica_info(admin, topic_name, partition)
        assert (info["broker_id"], info["node_id"]) == (broker, node)
        # Ray's own record of where the broker actor lives, from the GCS actor table.
        gcs = ray._private.state.actors(actor._actor_id.hex())
        assert gcs["Address"]["NodeID"] == node
        assert brokers[broker]["data_dir"] == str(ray_cluster.data_dirs[node].resolve())
        directory = ray_cluster.data_dirs[node].resolve() / f"{topic_name}-{partition}"
        assert info["directory"] == str(directory)
        assert (directory / "00000000000000000000.log").stat().st_size > 0
        for other, other_dir in ray_cluster.data_dirs.items():
            if other != node:
                assert not (other_dir / f"{topic_name}-{partition}").exists()


def test_100k_records_round_trip_in_order_without_loss_or_duplicates(admin, topic_name):
    admin.create_topic(topic_name, partitions=6)
    sent_per_key: dict[bytes, list[int]] = defaultdict(list)
    with Producer(linger_ms=10, batch_size=256 << 10) as producer:
        futures = []
        for seq in range(100_000):
            key = b"user-%d" % (seq % 997)
            sent_per_key[key].append(seq)
            futures.append(producer.send(topic_name, b"%d" % seq, key=key))
        producer.flush()
    metadata = [f.result(timeout=60) for f in futures]
    records = consume_all(topic_name, 6, 100_000)
    assert len(records) == 100_000
    assert sorted(int(r.value) for r in records) == list(range(100_000))  # no loss, no dupes
    by_partition = defaultdict(list)
    for r in records:
        by_partition[r.partition].append(r)
    assert len(by_partition) == 6
    for rows in by_partition.values():
        assert [r.offset for r in rows] == list(range(len(rows)))  # dense, in order
    seen_per_key = defaultdict(list)
    for rows in by_partition.values():
        for r in rows:
            seen_per_key[r.key].append(int(r.value))
    assert seen_per_key == sent_per_key  # each key's records in send order
    where = {(m.partition, m.offset): int(v) for m, v in
             zip(metadata, (b"%d" % i for i in range(100_000)), strict=True)}
    assert all(where[(r.partition, r.offset)] == int(r.value) for r in records)


def test_keys_land_where_kafka_clients_put_them(admin, topic_name):
    admin.create_topic(topic_name, partitions=6)
    # toPositive(murmur2(key)) % 6 from the hashes in Kafka's own tests (UtilsTest).
    expected = {b"foobar": 0, b"a-little-bit-long-string": 2, b"abc": 3,
                b"a-little-bit-longer-string": 5}
    with Producer() as producer:
        futures = {key: producer.send(topic_name, b"v", key=key) for key in expected}
        assert {key: f.result(30).partition for key, f in futures.items()} == expected


def test_a_killed_broker_comes_back_with_its_data(admin, topic_name):
    admin.create_topic(topic_name, partitions=2)
    with Producer() as producer:
        for i in range(2000):
            producer.send(topic_name, b"before-%d" % i, partition=0)
    actor = leader_broker(admin, topic_name, 0)
    ray.kill(actor, no_restart=False)
    # A restarted incarnation serving its data again, as the leader of a new epoch.
    wait_for(lambda: restarts(actor) >= 1 and
             replica_info(admin, topic_name, 0)["log_end_offset"] == 2000 and
             replica_info(admin, topic_name, 0)["role"] == "leader",
             timeout=60, what="the broker to restart")
    with Producer() as producer:
        assert producer.send(topic_name, b"after", partition=0).result(30).offset == 2000
    values = [r.value for r in consume_all(topic_name, 1, 2001)]
    assert values == [b"before-%d" % i for i in range(2000)] + [b"after"]
    assert admin.describe_topic(topic_name)["partitions"][0]["leader_epoch"] >= 1


def test_a_killed_controller_comes_back_with_all_topics(ray_cluster, admin, topic_name):
    admin.create_topic(topic_name, partitions=3, configs={"retention.ms": 3_600_000})
    admin.alter_configs(topic_name, {"segment.bytes": 1 << 20})
    def metadata() -> tuple[dict, dict]:
        """What the controller keeps of every topic (leaders and ISRs of other tests'
        topics may still move while brokers they restarted catch up), and all of this
        test's own topic."""
        topics = admin.describe_topics()
        kept = {t["name"]: (t["topic_id"], t["configs"],
                            [p["replicas"] for p in t["partitions"]]) for t in topics}
        return kept, next(t for t in topics if t["name"] == topic_name)

    before = metadata()
    with Producer() as producer:
        producer.send(topic_name, b"kept", partition=1).result(30)
    restart_controller()
    wait_for(lambda: metadata() == before, timeout=60,
             what="the controller to come back with every topic")
    assert admin.describe_topic(topic_name)["configs"] == {
        "retention_ms": 3_600_000, "segment_bytes": 1 << 20}
    with Producer() as producer:
        assert producer.send(topic_name, b"more", partition=1).result(30).offset == 1
    assert [r.value for r in consume_all(topic_name, 3, 2)] == [b"kept", b"more"]


def test_offsets_seek_and_time_lookup(admin, topic_name):
    admin.create_topic(topic_name, partitions=1)
    tp = TopicPartition(topic_name, 0)
    # Relative to now: the default retention (7 days) deletes records stamped long ago.
    base = time.time_ns() // 1_000_000 - 60_000
    with Producer() as producer:
        for i in range(100):
            producer.send(topic_name, b"%d" % i, timestamp=base + i * 10)
    with Consumer() as consumer:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 100}
        assert consumer.position(tp) == 100  # auto_offset_reset="latest"
        found = consumer.offsets_for_times({tp: base + 255})[tp]
        assert (found.offset, found.timestamp) == (26, base + 260)
        assert consumer.offsets_for_times({tp: base + 1000})[tp] is None
        consumer.seek(tp, found.offset)
        assert [r.offset for r in consumer.poll(timeout_ms=5000, max_records=3)] == [26, 27, 28]
        assert consumer.position(tp) == 29
        consumer.seek_to_beginning(tp)
        assert consumer.poll(timeout_ms=5000, max_records=1)[0].offset == 0
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 100
        # After the seek, the next record polled is the next one produced, not an older one.
        with Producer() as producer:
            producer.send(topic_name, b"next").result(30)
        polled: list = []
        wait_for(lambda: polled.extend(consumer.poll(timeout_ms=200)) or polled,
                 what="the record produced after seek_to_end")
        assert [(r.offset, r.value) for r in polled] == [(100, b"next")]


def test_send_batch_writes_a_table_without_per_record_python(admin, topic_name):
    admin.create_topic(topic_name, partitions=3)
    n = 30_000
    start = int(time.time() * 1000)  # recent: retention would delete records from 1970
    table = pa.table({
        "key": pa.array([b"k%d" % (i % 50) for i in range(n)]),
        "value": pa.array([json.dumps({"i": i}) for i in range(n)]),  # strings become bytes
        "timestamp": pa.array(range(start, start + n), pa.int64()),
    })
    with Producer(batch_size=64 << 10) as producer:
        batches = producer.send_batch(topic_name, table).result(60)
    assert sum(rows for _, _, rows in batches) == n
    records = consume_all(topic_name, 3, n)
    assert sorted(json.loads(r.value)["i"] for r in records) == list(range(n))
    # Keyed rows land where send() would put them, in table order within a partition.
    from raylog.records.partitioner import key_partition

    for r in records:
        assert r.partition == key_partition(r.key, 3)
        assert r.timestamp == start + json.loads(r.value)["i"]



@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_send_batch_batches_beyond_rays_inline_limit_arrive_whole(admin, topic_name,
                                                                  compression):
    """Batches over Ray's inline limit go as pa.Buffers (remote.zero_copy) that the broker
    checks and writes in place: every row arrives once, in order, byte for byte."""
    admin.create_topic(topic_name, partitions=2)
    n = 40_000  # 100-byte values: about 4 MB, so 1 MiB batches of 10,000 rows or so
    values = [os.urandom(50).hex().encode() for _ in range(n)]
    with Producer(batch_size=1 << 20, compression_type=compression, acks="all") as producer:
        batches = producer.send_batch(topic_name, pa.table({"value": values}),
                                      partition=1).result(60)
    assert len(batches) > 1 and sum(rows for _, _, rows in batches) == n
    records = consume_all(topic_name, 2, n)
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == list(range(n))

def test_topic_admin_round_trip(admin, topic_name):
    admin.create_topic(topic_name, partitions=2, configs={"cleanup.policy": "compact"})
    assert topic_name in admin.list_topics()
    admin.add_partitions(topic_name, 4)
    described = admin.describe_topic(topic_name)
    assert len(described["partitions"]) == 4
    with Producer() as producer:
        assert producer.send(topic_name, b"v", key=b"k", partition=3).result(30).offset == 0
    admin.alter_configs(topic_name, {"delete.retention.ms": "1000"}, ["cleanup.policy"])
    assert admin.describe_topic(topic_name)["configs"] == {"delete_retention_ms": 1000}
    status = admin.cluster_status()
    assert sorted(p for b in status["brokers"] for t, p in b["replicas"]
                  if t == topic_name) == [0, 1, 2, 3]
    admin.delete_topic(topic_name)
    assert topic_name not in admin.list_topics()
    with pytest.raises(UnknownTopicError):
        admin.describe_topic(topic_name)


# -- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["", "x" * 250, "has space", "slash/name", "..", ".",
                                  "../escape", "naïve", "tab\tname"])
def test_invalid_topic_names_are_refused(admin, name):
    before = admin.list_topics()
    with pytest.raises(InvalidTopicError):
        admin.create_topic(name)
    assert admin.list_topics() == before


def test_bad_topic_settings_are_refused_and_nothing_changes(ray_cluster, admin, topic_name):
    before = admin.describe_topics()
    with pytest.raises(InvalidPartitionsError, match="partitions"):
        admin.create_topic(topic_name, partitions=0)
    with pytest.raises(InvalidReplicationFactorError, match="replication factor"):
        admin.create_topic(topic_name, replication_factor=0)
    with pytest.raises(InvalidReplicationFactorError, match=r"factor 4 .*live brokers \(3\)"):
        admin.create_topic(topic_name, replication_factor=len(ray_cluster.broker_ids) + 1)
    with pytest.raises(InvalidConfigError, match="retention_bytes"):
        admin.create_topic(topic_name, configs={"retention.bytes": -7})
    with pytest.raises(InvalidConfigError, match="shred"):
        admin.create_topic(topic_name, configs={"cleanup.policy": "shred"})
    with pytest.raises(InvalidTopicError, match="internal"):
        admin.create_topic("__consumer_offsets")
    assert admin.describe_topics() == before
    admin.create_topic(topic_name)
    with pytest.raises(TopicExistsError):
        admin.create_topic(topic_name, partitions=5)
    with pytest.raises(InvalidPartitionsError):
        admin.add_partitions(topic_name, 1)
    assert len(admin.describe_topic(topic_name)["partitions"]) == 1


def test_unknown_topics_and_partitions_are_refused(admin, topic_name):
    with Producer() as producer, pytest.raises(UnknownTopicError, match=topic_name):
        producer.send(topic_name, b"v")
    with Consumer() as consumer, pytest.raises(UnknownTopicError):
        consumer.assign([TopicPartition(topic_name, 0)])
    with pytest.raises(UnknownTopicError):
        admin.delete_topic(topic_name)
    admin.create_topic(topic_name, partitions=2)
    with Producer() as producer, pytest.raises(UnknownPartitionError, match=r"0\.\.1"):
        producer.send(topic_name, b"v", partition=2)
    with Consumer() as consumer, pytest.raises(UnknownPartitionError):
        consumer.assign([TopicPartition(topic_name, 5)])


def test_records_larger_than_the_limit_are_refused(admin, topic_name):
    admin.create_topic(topic_name, configs={"max.message.bytes": 64 << 10})
    with Producer(max_request_size=1 << 20) as producer:
        with pytest.raises(RecordTooLargeError):
            producer.send(topic_name, b"x" * (2 << 20))  # over the producer's own limit
        future = producer.send(topic_name, os.urandom(256 << 10))  # over the topic's limit
        with pytest.raises(RecordTooLargeError, match="max_message_bytes"):
            future.result(timeout=30)
        assert producer.send(topic_name, b"small").result(30).offset == 0


def test_clients_refuse_use_after_close(admin, topic_name):
    admin.create_topic(topic_name)
    producer = Producer()
    producer.close()
    with pytest.raises(ClientClosedError):
        producer.send(topic_name, b"v")
    with pytest.raises(ClientClosedError):
        producer.send_batch(topic_name, pa.table({"value": [b"v"]}))
    consumer = Consumer()
    consumer.close()
    with pytest.raises(ClientClosedError):
        consumer.poll()
    with pytest.raises(ClientClosedError):
        consumer.assign([TopicPartition(topic_name, 0)])
    closed_admin = Admin()
    closed_admin.close()
    with pytest.raises(ClientClosedError):
        closed_admin.list_topics()
    assert raylog.Admin().list_topics()  # other clients are unaffected
