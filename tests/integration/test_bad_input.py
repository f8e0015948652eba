"""Bad input at every public entry point, against the session's cluster: each gets a typed
error with a clear message before a deadline, and nothing stored changes. Also the
controller's own checks, called the way a client that skips its checks would. (The client
side alone, without a cluster: tests/unit/client/test_client_arguments.py.)"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import ray

from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.client.remote import resolve
from raylog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidOffsetRangeError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    RaylogError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownGroupError,
    UnknownPartitionError,
    UnknownTopicError,
)
from raylog.integrations import spark as raylog_spark
from raylog.integrations.ray_data import read_topic, write_dataset
from raylog.metadata.limits import DEFAULT_MAX_PARTITIONS_PER_TOPIC

# Each answer takes milliseconds; the bound is generous because the machine is shared.
DEADLINE_S = 5.0
RECORDS = 10


class Known:
    """What the tests refuse to change: a topic with records, a compacted topic, a group
    with committed offsets."""

    def __init__(self, cluster: Any) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.cluster = cluster
        self.admin = Admin(cluster=cluster)
        self.topic = f"bad-input-{suffix}"
        self.compacted = f"bad-input-compacted-{suffix}"
        self.group = f"bad-input-group-{suffix}"
        self.admin.create_topic(self.topic, partitions=2, configs={"retention.ms": 3_600_000})
        self.admin.create_topic(self.compacted, configs={"cleanup.policy": "compact",
                                                         "max.message.bytes": 4096})
        with Producer(cluster=cluster) as producer:
            for i in range(RECORDS):
                producer.send(self.topic, b"v%d" % i, key=b"k%d" % i).result(30)
            producer.send(self.compacted, b"v", key=b"k").result(30)
        with Consumer(cluster=cluster, group_id=self.group) as consumer:
            consumer.commit({TopicPartition(self.topic, 0): 1})

    def stored(self) -> tuple:
        """Everything a bad call could have changed."""
        tps = [TopicPartition(t, p) for t, n in ((self.topic, 2), (self.compacted, 1))
               for p in range(n)]
        with Consumer(cluster=self.cluster, group_id=self.group) as consumer:
            ends = consumer.end_offsets(tps)
            committed = consumer.committed(tps)
        groups = sorted(g["group_id"] for g in self.admin.list_groups())
        return self.admin.describe_topics(), groups, ends, committed


@pytest.fixture(scope="module")
def known(ray_cluster) -> Known:
    return Known(ray_cluster.raylog)


def refused(known: Known, call: Callable[[], object], error: type[RaylogError]) -> RaylogError:
    """``call`` raises ``error`` (typed, with a message) before the deadline and changes
    nothing stored."""
    before = known.stored()
    started = time.monotonic()
    with pytest.raises(error) as info:
        call()
    assert time.monotonic() - started < DEADLINE_S
    assert str(info.value).strip()
    assert known.stored() == before
    return info.value


def _new() -> str:
    return f"never-{uuid.uuid4().hex[:8]}"


ADMIN = [
    (lambda k: k.admin.create_topic(k.topic), TopicExistsError),
    (lambda k: k.admin.create_topic(_new(), 10**6), InvalidPartitionsError),
    (lambda k: k.admin.create_topic(_new(), DEFAULT_MAX_PARTITIONS_PER_TOPIC + 1),
     InvalidPartitionsError),
    (lambda k: k.admin.create_topic(_new(), configs="notadict"), InvalidConfigError),
    (lambda k: k.admin.create_topic(_new(), configs={"retention.msx": 1}), InvalidConfigError),
    (lambda k: k.admin.delete_topic(_new()), UnknownTopicError),
    (lambda k: k.admin.delete_topic("__consumer_offsets"), InvalidTopicError),
    (lambda k: k.admin.describe_topics([k.topic, _new()]), UnknownTopicError),
    (lambda k: k.admin.add_partitions(k.topic, 1), InvalidPartitionsError),
    (lambda k: k.admin.add_partitions(k.topic, 2), InvalidPartitionsError),
    (lambda k: k.admin.add_partitions(k.topic, 10**6), InvalidPartitionsError),
    (lambda k: k.admin.add_partitions(_new(), 3), UnknownTopicError),
    (lambda k: k.admin.add_partitions("__consumer_offsets", 50), InvalidTopicError),
    (lambda k: k.admin.alter_configs(k.topic, None, ["segment.bytes"]), InvalidConfigError),
    (lambda k: k.admin.alter_configs(k.topic, None, ["segment.bites"]), InvalidConfigError),
    (lambda k: k.admin.alter_configs(k.topic, {"retention.ms": 5}, ["retention.ms"]),
     InvalidConfigError),
    (lambda k: k.admin.alter_configs(k.topic, {"retention.ms": 5}, "nope"),
     InvalidConfigError),
    (lambda k: k.admin.alter_configs(_new(), {"retention.ms": 5}), UnknownTopicError),
    (lambda k: k.admin.describe_group(_new()), UnknownGroupError),
    (lambda k: k.admin.delete_group(_new()), UnknownGroupError),
    (lambda k: k.admin.reset_offsets(k.group, _new(), "earliest"), UnknownTopicError),
    (lambda k: k.admin.reset_offsets(k.group, k.topic, "earliest", [2]),
     UnknownPartitionError),
    (lambda k: k.admin.reset_offsets(k.group, k.topic, 10**9), OffsetOutOfRangeError),
    (lambda k: k.admin.reset_offsets(k.group, k.topic, "earliest", []),
     InvalidArgumentError),
]


@pytest.mark.parametrize(("call", "error"), ADMIN)
def test_admin(known, call, error):
    refused(known, lambda: call(known), error)


def test_more_partitions_than_the_brokers_can_hold_are_refused_quickly(known):
    """Within the limit per topic, but beyond what three brokers may hold (the session's
    cluster sets RAYLOG_MAX_REPLICAS_PER_BROKER): refused before any replica is created."""
    error = refused(known, lambda: known.admin.create_topic(
        _new(), DEFAULT_MAX_PARTITIONS_PER_TOPIC), InvalidPartitionsError)
    assert "replicas on broker " in str(error) and "limit per broker" in str(error)
    refused(known, lambda: known.admin.add_partitions(known.topic,
                                                      DEFAULT_MAX_PARTITIONS_PER_TOPIC),
            InvalidPartitionsError)


def test_the_partition_limit_message_says_how_to_change_it(known):
    message = str(refused(known, lambda: known.admin.create_topic(_new(), 10**6),
                          InvalidPartitionsError))
    assert "the limit is 10000 per topic" in message
    assert "RAYLOG_MAX_PARTITIONS_PER_TOPIC" in message


def _send_and_wait(topic: str, value: bytes, **kwargs: Any) -> object:
    with Producer() as producer:
        return producer.send(topic, value, **kwargs).result(timeout=DEADLINE_S)


@pytest.mark.parametrize(("call", "error"), [
    (lambda k: _send_and_wait(_new(), b"v"), UnknownTopicError),
    (lambda k: _send_and_wait(k.topic, b"v", partition=2), UnknownPartitionError),
    (lambda k: _send_and_wait(k.compacted, b"v"), InvalidRecordError),  # no key
    (lambda k: _send_and_wait(k.compacted, os.urandom(8192), key=b"k"), RecordTooLargeError),
    (lambda k: Producer(linger=5), InvalidConfigError),
])
def test_producer(known, call, error):
    refused(known, lambda: call(known), error)


def _consumer_call(method: str, *args: Any, group: str | None = None) -> object:
    with Consumer(group_id=group) as consumer:
        return getattr(consumer, method)(*args)


@pytest.mark.parametrize(("call", "error"), [
    (lambda k: _consumer_call("assign", [(_new(), 0)]), UnknownTopicError),
    (lambda k: _consumer_call("assign", [(k.topic, 2)]), UnknownPartitionError),
    (lambda k: _consumer_call("end_offsets", [(_new(), 0)]), UnknownTopicError),
    (lambda k: _consumer_call("offsets_for_times", {(k.topic, 0): 2**63}),
     InvalidArgumentError),
    (lambda k: _consumer_call("subscribe", _new(), group=k.group), UnknownTopicError),
    (lambda k: _consumer_call("commit", {(_new(), 0): 1}, group=k.group), UnknownTopicError),
    (lambda k: _consumer_call("commit", {(k.topic, 5): 1}, group=k.group),
     UnknownPartitionError),
    (lambda k: Consumer(group="g"), InvalidConfigError),
])
def test_consumer(known, call, error):
    refused(known, lambda: call(known), error)


def test_subscribe_takes_a_string_as_one_topic(known):
    group = f"one-topic-{uuid.uuid4().hex[:8]}"
    with Consumer(group_id=group, auto_offset_reset="earliest") as consumer:
        consumer.subscribe(known.topic)
        deadline = time.monotonic() + 60
        while consumer.assignment() != {TopicPartition(known.topic, p) for p in range(2)}:
            assert time.monotonic() < deadline, "the topic's partitions were never assigned"
            consumer.poll(timeout_ms=200)


def _spark_session() -> Any:
    """A SparkSession object never started: every check comes before Spark is used."""
    from pyspark.sql import SparkSession

    return SparkSession.__new__(SparkSession)


@pytest.mark.parametrize(("call", "error"), [
    (lambda k: read_topic(_new()), UnknownTopicError),
    (lambda k: read_topic(k.topic, end_offset=10**9), OffsetOutOfRangeError),
    (lambda k: read_topic(k.topic, start_offset=5, end_offset=2), InvalidOffsetRangeError),
    (lambda k: read_topic(k.topic, end_offset="first"), InvalidOffsetRangeError),
    (lambda k: write_dataset(ray.data.from_items([{"value": b"v"}]), _new()),
     UnknownTopicError),
    (lambda k: write_dataset(ray.data.from_items([{"value": b"v"}]), k.topic,
                             producer_settings={"linger": 5}), InvalidConfigError),
    (lambda k: write_dataset(ray.data.from_items([{"value": b"v"}]), k.topic,
                             concurrency=10**6), InvalidArgumentError),
    (lambda k: write_dataset(ray.data.from_items([{"key": b"v"}]), k.topic),
     InvalidRecordError),
    (lambda k: raylog_spark.read("spark", k.topic), InvalidArgumentError),
    (lambda k: raylog_spark.read(_spark_session(), _new()), UnknownTopicError),
    (lambda k: raylog_spark.read(_spark_session(), k.topic, max_records_per_task=0),
     InvalidArgumentError),
    (lambda k: raylog_spark.write("frame", k.topic), InvalidArgumentError),
    (lambda k: raylog_spark.write(ray.data.from_items([{"value": b"v"}]), _new()),
     UnknownTopicError),
    (lambda k: raylog_spark.micro_batches(_spark_session(), k.topic, ""),
     InvalidArgumentError),
    (lambda k: raylog_spark.micro_batches(_spark_session(), 5, "g"), InvalidTopicError),
    (lambda k: raylog_spark.session(executors=0), InvalidArgumentError),
])
def test_ray_data_and_spark(known, call, error):
    refused(known, lambda: call(known), error)


def _controller(method: str, *args: Any) -> Callable[[Known], object]:
    """A raw call of the controller's RPC ``method``, as a client skipping every check of its
    own (and of the typed ControllerClient) would make it."""
    return lambda k: resolve(getattr(k.cluster.controller.handle, method).remote(*args))


# The controller's checks, reached as a client that skips its own would reach them.
CONTROLLER = [
    (_controller("create_topic", "never-a", "3"), InvalidArgumentError),
    (_controller("create_topic", "never-b", 1, 1, "notadict"), InvalidArgumentError),
    (_controller("create_topic", "never-c", 10**6), InvalidPartitionsError),
    (_controller("create_topic", "__never", 1), InvalidTopicError),
    (_controller("delete_topic", [1]), InvalidArgumentError),
    (_controller("delete_topic", "__consumer_offsets"), InvalidTopicError),
    (_controller("add_partitions", "never-d", True), InvalidArgumentError),
    (_controller("alter_configs", "never-e", {"retention.ms": "x"}), InvalidConfigError),
    (lambda k: _controller("alter_configs", k.topic, None, "retention.ms")(k),
     InvalidArgumentError),
    (lambda k: _controller("describe_topics", k.topic)(k), InvalidArgumentError),
    (_controller("metadata", [5]), InvalidArgumentError),
    (_controller("list_topics", "yes"), InvalidArgumentError),
    (lambda k: _controller("join_group", "g", None, "c", [k.topic], None, 1000, "nope")(k),
     InvalidConfigError),
    (lambda k: _controller("join_group", "", None, "c", [k.topic], None, 1000, "range")(k),
     InvalidArgumentError),
    (lambda k: _controller("join_group", "g", None, "c", None, "(", 1000, "range")(k),
     InvalidArgumentError),
    (lambda k: _controller("join_group", "g", None, "c", [k.topic], None, -1, "range")(k),
     InvalidArgumentError),
    (lambda k: _controller("join_group", "g\udc80", None, "c", [k.topic], None, 1000,
                           "range")(k), InvalidArgumentError),
    (lambda k: _controller("heartbeat", k.group, "m", "owned")(k), InvalidArgumentError),
    (lambda k: _controller("commit_offsets", k.group, None, -1,
                           [(_new(), 0, 5, "")])(k), UnknownTopicError),
    (lambda k: _controller("commit_offsets", k.group, None, -1,
                           [(k.topic, 0, -5, "")])(k), InvalidArgumentError),
    (lambda k: _controller("commit_offsets", k.group, None, -1, [(k.topic, 0, 5)])(k),
     InvalidArgumentError),
    (lambda k: _controller("committed_offsets", k.group, "x")(k), InvalidArgumentError),
    (lambda k: _controller("reset_offsets", k.group, k.topic, ["offset", -1])(k),
     InvalidArgumentError),
    (lambda k: _controller("reset_offsets", k.group, k.topic, "earliest", [])(k),
     InvalidArgumentError),
    (_controller("describe_group", 5), InvalidArgumentError),
    (_controller("delete_group", None), InvalidArgumentError),
]


@pytest.mark.parametrize(("call", "error"), CONTROLLER)
def test_controller(known, call, error):
    refused(known, lambda: call(known), error)
