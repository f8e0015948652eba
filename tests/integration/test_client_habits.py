"""The Python API as kafka-python and confluent-kafka users expect it: serializers,
headers as a dict, poll's units, several topics at once, configs and committed offsets."""

from __future__ import annotations

import asyncio
import gc
import json
import logging

import pytest
import ray

from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition
from raylog.errors import InvalidRecordError, OffsetOutOfRangeError, TopicExistsError
from tests.integration.conftest import wait_for


def test_serializers_and_dict_headers_round_trip(ray_cluster, topic_name):
    Admin().create_topic(topic_name)
    with Producer(key_serializer=str.encode,
                  value_serializer=lambda v: json.dumps(v).encode()) as producer:
        producer.send(topic_name, {"page": "/home"}, key="user-1",
                      headers={"trace": b"abc", "empty": None}).result(timeout=60)
        producer.send(topic_name, None, key="user-1").result(timeout=60)  # a tombstone
    with Consumer(auto_offset_reset="earliest", key_deserializer=bytes.decode,
                  value_deserializer=json.loads) as consumer:
        consumer.assign([TopicPartition(topic_name, 0)])
        records = []
        while len(records) < 2:
            records += consumer.poll(timeout=5.0)  # seconds, as confluent-kafka's poll
    assert [(r.key, r.value) for r in records] == [("user-1", {"page": "/home"}),
                                                  ("user-1", None)]
    assert list(records[0].headers) == [("trace", b"abc"), ("empty", None)]


def test_a_record_that_fails_to_deserialize_is_named_and_can_be_skipped(ray_cluster,
                                                                        topic_name):
    Admin().create_topic(topic_name)
    with Producer() as producer:
        for value in (b"1", b"2", b"not json", b"4"):
            producer.send(topic_name, value).result(timeout=60)
    tp = TopicPartition(topic_name, 0)
    with Consumer(auto_offset_reset="earliest", value_deserializer=json.loads) as consumer:
        consumer.assign([tp])
        good = []
        while len(good) < 2:
            good += consumer.poll(timeout_ms=5000)
        assert [r.value for r in good] == [1, 2]
        with pytest.raises(InvalidRecordError, match=f"{topic_name}-0 offset 2"):
            consumer.poll(timeout_ms=5000)
        assert consumer.position(tp) == 2  # still on it: it is never skipped silently
        consumer.seek(tp, 3)
        assert [r.value for r in consumer.poll(timeout_ms=5000)] == [4]


def test_create_topics_describe_configs_and_committed_offsets(ray_cluster, topic_name):
    admin = Admin()
    first, second = f"{topic_name}-a", f"{topic_name}-b"
    created = admin.create_topics([NewTopic(first, 2, 1, {"retention.ms": 60_000}),
                                   {"name": second, "num_partitions": 3}])
    assert {name: len(t["partitions"]) for name, t in created.items()} == {first: 2, second: 3}
    with pytest.raises(TopicExistsError):
        admin.create_topics([NewTopic(first)])
    configs = admin.describe_configs([first, second])
    assert configs[first]["retention.ms"] == {"value": 60_000, "is_default": False}
    assert configs[second]["retention.ms"]["is_default"] is True
    assert configs[second]["retention.bytes"]["value"] == -1  # no limit, as Kafka writes it
    assert configs[first]["cleanup.policy"] == {"value": "delete", "is_default": True}
    group = f"habits-{topic_name}"
    with Consumer(group_id=group) as consumer:
        consumer.assign([TopicPartition(first, 0)])
        consumer.commit({TopicPartition(first, 0): 0})
    assert admin.list_consumer_group_offsets(group) == {TopicPartition(first, 0): 0}
    assert admin.list_consumer_group_offsets(group, [TopicPartition(first, 1)]) == {}


@ray.remote(num_cpus=0)
class _Failing:
    async def fail(self, text: str) -> None:
        await asyncio.sleep(0.3)
        raise ValueError(text)


def test_answers_a_client_drops_are_not_reported_as_unhandled_errors(ray_cluster):
    """A fetch in flight when its consumer closes (or seeks) may end in an error nobody
    reads; Ray would print it as an "Unhandled error" unless raylog reads it."""
    from raylog.client import remote

    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    ray_logger = logging.getLogger("ray")
    ray_logger.addHandler(handler)
    try:
        actor = _Failing.remote()
        remote.discard(actor.fail.remote("dropped by raylog"))
        actor.fail.remote("dropped by nobody")  # the control: reported
        gc.collect()
        wait_for(lambda: any("dropped by nobody" in m for m in seen), timeout=30,
                 what="Ray reporting the control's unhandled error")
        wait_for(lambda: remote._reaper.pending == 0, timeout=30, what="the reaper reading it")
        gc.collect()
        assert not any("dropped by raylog" in m for m in seen)
    finally:
        ray_logger.removeHandler(handler)


def test_delete_records_moves_where_readers_start(ray_cluster, topic_name):
    admin = Admin()
    admin.create_topic(topic_name, partitions=2, replication_factor=2)
    tp = TopicPartition(topic_name, 0)
    # acks=all: the high watermark has passed all 20 once they are acknowledged (records are
    # deleted only below it; with acks=1 the follower may not have fetched them yet).
    with Producer(linger_ms=0, acks="all") as producer:
        for i in range(20):
            producer.send(topic_name, b"%d" % i, partition=0).result(timeout=60)
    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records({tp: 21})
    assert admin.delete_records({tp: 12}) == {tp: 12}
    with Consumer(auto_offset_reset="earliest") as consumer:
        assert consumer.beginning_offsets([tp]) == {tp: 12}
        consumer.assign([tp])
        read = []
        while len(read) < 8:
            read += consumer.poll(timeout_ms=5000)
    assert [r.offset for r in read] == list(range(12, 20))
    assert admin.delete_records({tp: -1, TopicPartition(topic_name, 1): -1}) == {
        tp: 20, TopicPartition(topic_name, 1): 0}
