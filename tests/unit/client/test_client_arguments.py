"""Every public client entry point refuses bad arguments with a typed error, on the client,
before any remote call: a table of bad inputs per entry point, against a cluster whose
controller fails the test if it is called. (The same against a real cluster, with unknown
topics and the controller's own checks: tests/integration/test_bad_input.py.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pyarrow as pa
import pytest

from raylog import Admin, Consumer, NewTopic, Producer
from raylog.client.connection import PartitionMetadata, RaylogCluster, TopicMetadata
from raylog.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidOffsetRangeError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    RaylogError,
    UnknownPartitionError,
)
from raylog.integrations.ray_data import read_topic, write_dataset
from raylog.integrations.ray_data.ranges import Timestamp
from raylog.metadata.limits import PartitionLimits


class _NoController:
    def __getattr__(self, method):
        def called(*args, **kwargs):
            raise AssertionError(f"the controller was called ({method}) for a bad argument")
        return called


class _RefusingLeader:
    """A partition leader that refuses every batch at once (a test that sent good records
    can then close its producer without waiting for anything)."""

    broker_id = 0
    leader_epoch = 0

    def append(self, batch, acks, timeout_ms, client_id=None):
        raise InvalidRecordError("refused by the test's leader")

    handle = None  # every partition's host

    def append_batches(self, batches, acks, timeout_ms, client_id=None, socket=False):
        raise InvalidRecordError("refused by the test's leader")


class _Cluster(RaylogCluster):
    """Knows topic "t" (2 partitions, leaders that refuse every batch); any controller call
    fails the test."""

    def __init__(self) -> None:  # no actor handle: nothing remote exists
        self.controller = _NoController()
        self.embedded = False
        self.limits = PartitionLimits(max_partitions_per_topic=100)
        self._lock = threading.Lock()
        self._topics = {"t": TopicMetadata(
            "t", "id", tuple(PartitionMetadata(p, 0, 0, (0,), (0,), {0: _RefusingLeader()})
                             for p in range(2)), {},
            fetched_at=time.monotonic() + 3600)}


@pytest.fixture
def cluster() -> _Cluster:
    return _Cluster()


def refused(call: Callable[[], object], error: type[RaylogError]) -> RaylogError:
    """The error ``call`` raises, with a message. At once, without I/O: the cluster fixture
    fails the test on any controller call, and its leaders refuse every batch."""
    with pytest.raises(error) as info:
        call()
    assert str(info.value)  # a message, naming the problem
    return info.value


ADMIN = [
    (lambda a: a.create_topic(5), InvalidTopicError),
    (lambda a: a.create_topic(""), InvalidTopicError),
    (lambda a: a.create_topic("x" * 300), InvalidTopicError),
    (lambda a: a.create_topic("naïve"), InvalidTopicError),
    (lambda a: a.create_topic("__mine"), InvalidTopicError),
    (lambda a: a.create_topic("n", 0), InvalidPartitionsError),
    (lambda a: a.create_topic("n", -3), InvalidPartitionsError),
    (lambda a: a.create_topic("n", True), InvalidPartitionsError),
    (lambda a: a.create_topic("n", "3"), InvalidPartitionsError),
    (lambda a: a.create_topic("n", None), InvalidPartitionsError),
    (lambda a: a.create_topic("n", 101), InvalidPartitionsError),  # the cluster's limit
    (lambda a: a.create_topic("n", 10**6), InvalidPartitionsError),
    (lambda a: a.create_topic("n", 1, 0), InvalidReplicationFactorError),
    (lambda a: a.create_topic("n", 1, 1.0), InvalidReplicationFactorError),
    (lambda a: a.create_topic("n", configs="notadict"), InvalidConfigError),
    (lambda a: a.create_topic("n", configs={"retention.msx": 1}), InvalidConfigError),
    (lambda a: a.create_topic("n", configs={"retention.ms": -5}), InvalidConfigError),
    (lambda a: a.create_topic("n", configs={"segment.bytes": 2**70}), InvalidConfigError),
    (lambda a: a.delete_topic(None), InvalidTopicError),
    (lambda a: a.delete_topic("__consumer_offsets"), InvalidTopicError),
    (lambda a: a.list_topics("yes"), InvalidArgumentError),
    (lambda a: a.describe_topic(["t"]), InvalidTopicError),
    (lambda a: a.describe_topics(5), InvalidTopicError),
    (lambda a: a.describe_topics([None]), InvalidTopicError),
    (lambda a: a.add_partitions("t", 0), InvalidPartitionsError),
    (lambda a: a.add_partitions("t", "4"), InvalidPartitionsError),
    (lambda a: a.add_partitions("t", 10**6), InvalidPartitionsError),
    (lambda a: a.add_partitions("__consumer_offsets", 9), InvalidTopicError),
    (lambda a: a.alter_configs(5), InvalidTopicError),
    (lambda a: a.alter_configs("t", "retention.ms=5"), InvalidConfigError),
    (lambda a: a.alter_configs("t", {"nope": 1}), InvalidConfigError),
    (lambda a: a.alter_configs("t", None, 5), InvalidArgumentError),
    (lambda a: a.alter_configs("t", None, ["nope"]), InvalidConfigError),
    (lambda a: a.describe_group(""), InvalidArgumentError),
    (lambda a: a.describe_group(None), InvalidArgumentError),
    (lambda a: a.describe_group("g" * 300), InvalidArgumentError),
    (lambda a: a.delete_group([1]), InvalidArgumentError),
    (lambda a: a.reset_offsets("", "t", "earliest"), InvalidArgumentError),
    (lambda a: a.reset_offsets("g", "", "earliest"), InvalidTopicError),
    (lambda a: a.reset_offsets("g", "t", "first"), InvalidArgumentError),
    (lambda a: a.reset_offsets("g", "t", -1), InvalidArgumentError),
    (lambda a: a.reset_offsets("g", "t", True), InvalidArgumentError),
    (lambda a: a.reset_offsets("g", "t", {"timestamp": "x"}), InvalidArgumentError),
    (lambda a: a.reset_offsets("g", "t", "earliest", []), InvalidArgumentError),
    (lambda a: a.reset_offsets("g", "t", "earliest", [-1]), UnknownPartitionError),
    (lambda a: a.reset_offsets("g", "t", "earliest", 0), InvalidArgumentError),
    (lambda a: a.reset_offsets("g", "t", "earliest", dry_run="yes"), InvalidArgumentError),
    (lambda a: a.create_topics("n"), InvalidArgumentError),
    (lambda a: a.create_topics(NewTopic("n")), InvalidArgumentError),
    (lambda a: a.create_topics([NewTopic("n", 0)]), InvalidPartitionsError),
    (lambda a: a.create_topics([{"name": "n", "partitions": 2}]), InvalidArgumentError),
    (lambda a: a.create_topics([NewTopic("n"), NewTopic("n")]), InvalidArgumentError),
    (lambda a: a.create_topics([NewTopic("ok"), NewTopic("bad/name")]), InvalidTopicError),
    (lambda a: a.create_topics([NewTopic("ok", 1, 1, {"retention.ms": "x"})]),
     InvalidConfigError),
    (lambda a: a.create_topics(["n"]), InvalidArgumentError),
    (lambda a: a.delete_records("t"), InvalidArgumentError),
    (lambda a: a.delete_records({("t", 5): 1}), UnknownPartitionError),
    (lambda a: a.delete_records({("t", 0): -2}), InvalidArgumentError),
    (lambda a: a.delete_records({("t", 0): "1"}), InvalidArgumentError),
    (lambda a: a.delete_records({("t", 0): 1, ("t", 9): 1}), UnknownPartitionError),
    (lambda a: a.list_consumer_group_offsets(""), InvalidArgumentError),
    (lambda a: a.list_consumer_group_offsets("g", "t"), InvalidArgumentError),
    (lambda a: a.plan_balance([-1]), InvalidArgumentError),
    (lambda a: a.plan_balance("3"), InvalidArgumentError),
    (lambda a: a.plan_balance([True]), InvalidArgumentError),
    (lambda a: a.execute_balance({"moves": "all"}), InvalidArgumentError),
    (lambda a: a.execute_balance([]), InvalidArgumentError),
    (lambda a: a.execute_balance({"moves": [], "remove": [-3]}), InvalidArgumentError),
    (lambda a: a.execute_balance({"moves": []}, timeout_s=-1), InvalidArgumentError),
    (lambda a: a.execute_balance({"moves": []}, poll_s=0), InvalidArgumentError),
    (lambda a: a.execute_balance({"moves": []}, wait="yes"), InvalidArgumentError),
]


@pytest.mark.parametrize(("call", "error"), ADMIN)
def test_admin_refuses_bad_arguments_before_asking(cluster, call, error):
    refused(lambda: call(Admin(cluster=cluster)), error)


@pytest.mark.parametrize(("make", "error"), [
    (lambda c: Admin(cluster=c, timeout=5), InvalidConfigError),
    (lambda c: Admin(cluster="localhost"), InvalidArgumentError),
    (lambda c: Producer(cluster=c, linger=5), InvalidConfigError),
    (lambda c: Producer(cluster=c, acks=2), InvalidConfigError),
    (lambda c: Producer(cluster=c, linger_ms=-1), InvalidConfigError),
    (lambda c: Producer(cluster=c, linger_ms=10**30), InvalidConfigError),
    (lambda c: Producer(cluster=c, batch_size=None), InvalidConfigError),
    (lambda c: Producer(cluster=c, partitioner="murmur2"), InvalidConfigError),
    (lambda c: Producer(cluster=c, value_serializer="json"), InvalidConfigError),
    (lambda c: Producer(cluster=c, key_serializer=5), InvalidConfigError),
    (lambda c: Consumer(cluster=c, value_deserializer="json"), InvalidConfigError),
    (lambda c: Producer(cluster=5), InvalidArgumentError),
    (lambda c: Consumer(cluster=c, group="g"), InvalidConfigError),
    (lambda c: Consumer(cluster=c, group_id=""), InvalidConfigError),
    (lambda c: Consumer(cluster=c, group_id="g\udc80"), InvalidConfigError),
    (lambda c: Consumer(cluster=c, max_poll_records=0), InvalidConfigError),
    (lambda c: Consumer(cluster=c, auto_offset_reset="first"), InvalidConfigError),
    (lambda c: Consumer(cluster=c, fetch_max_wait_ms=2**40), InvalidConfigError),
    (lambda c: Consumer(cluster=[c]), InvalidArgumentError),
])
def test_clients_refuse_bad_options(cluster, make, error):
    message = str(refused(lambda: make(cluster), error))
    if "unknown" in message:
        assert "(did you mean" in message or "(valid:" in message


def test_the_unknown_option_message_names_the_closest_valid_one(cluster):
    error = refused(lambda: Producer(cluster=cluster, linger=5), InvalidConfigError)
    assert str(error) == "unknown Producer option 'linger' (did you mean 'linger_ms'?)"


PRODUCER = [
    (lambda p: p.send(["t"], b"v"), InvalidTopicError),
    (lambda p: p.send(5, b"v"), InvalidTopicError),
    (lambda p: p.send(None, b"v"), InvalidTopicError),
    (lambda p: p.send("", b"v"), InvalidTopicError),
    (lambda p: p.send("bad/name", b"v"), InvalidTopicError),
    (lambda p: p.send("t", "text"), InvalidRecordError),
    (lambda p: p.send("t", 5), InvalidRecordError),
    (lambda p: p.send("t", b"v", key="text"), InvalidRecordError),
    (lambda p: p.send("t", b"v", partition=2), UnknownPartitionError),
    (lambda p: p.send("t", b"v", partition=-1), UnknownPartitionError),
    (lambda p: p.send("t", b"v", partition=True), UnknownPartitionError),
    (lambda p: p.send("t", b"v", partition="0"), UnknownPartitionError),
    (lambda p: p.send("t", b"v", timestamp=-1), InvalidRecordError),
    (lambda p: p.send("t", b"v", timestamp="now"), InvalidRecordError),
    (lambda p: p.send("t", b"v", timestamp=2**63), InvalidRecordError),
    (lambda p: p.send("t", b"v", timestamp=1.5), InvalidRecordError),
    (lambda p: p.send("t", b"v", headers={"a": "text"}), InvalidRecordError),
    (lambda p: p.send("t", b"v", headers={1: b"x"}), InvalidRecordError),
    (lambda p: p.send("t", b"v", headers=[("a", "text")]), InvalidRecordError),
    (lambda p: p.send("t", b"v", headers=[(1, b"x")]), InvalidRecordError),
    (lambda p: p.send_batch("t", "not a table"), InvalidRecordError),
    (lambda p: p.send_batch(5, pa.table({"value": [b"v"]})), InvalidTopicError),
    (lambda p: p.send_batch("t", pa.table({"v": [b"v"]})), InvalidRecordError),
    (lambda p: p.send_batch("t", pa.table({"value": [b"v"]}), partition=9),
     UnknownPartitionError),
    (lambda p: p.send_batch("t", pa.table({"value": [b"v"]}), partition=False),
     UnknownPartitionError),
    (lambda p: p.flush("soon"), InvalidArgumentError),
    (lambda p: p.flush(-1), InvalidArgumentError),
    (lambda p: p.close(float("nan")), InvalidArgumentError),
]


@pytest.mark.parametrize(("call", "error"), PRODUCER)
def test_producer_refuses_bad_arguments_before_sending(cluster, call, error):
    producer = Producer(cluster=cluster)
    try:
        refused(lambda: call(producer), error)
    finally:
        producer.close()


def test_a_bad_timestamp_never_reaches_a_batch_of_other_records(cluster):
    """Once a keyless record opened a batch, the next keyless records join it on a fast
    path: a bad timestamp there used to break the whole batch when it was encoded."""
    with Producer(cluster=cluster, linger_ms=60_000, delivery_timeout_ms=60_000) as producer:
        first = producer.send("t", b"first")
        refused(lambda: producer.send("t", b"v", timestamp="now"), InvalidRecordError)
        first.add_done_callback(lambda future: None)  # its refusal on close is expected


def test_futures_refuse_bad_arguments(cluster):
    with Producer(cluster=cluster, linger_ms=60_000, delivery_timeout_ms=60_000) as producer:
        future = producer.send("t", b"v")
        future.add_done_callback(lambda f: None)  # its refusal on close is expected
        refused(lambda: future.result(timeout="soon"), InvalidArgumentError)
        refused(lambda: future.exception(timeout=-2), InvalidArgumentError)
        refused(lambda: future.add_done_callback("print"), InvalidArgumentError)
        batch = producer.send_batch("t", pa.table({"value": [b"v"]}))
        refused(lambda: batch.result(timeout=-1), InvalidArgumentError)
        with pytest.raises(InvalidRecordError, match="refused by the test's leader"):
            batch.result(timeout=60)  # a bound on a hang, not a figure: it answers at once


class _Listener:
    on_partitions_revoked = "not callable"


CONSUMER = [
    (lambda c: c.assign("t"), InvalidArgumentError),
    (lambda c: c.assign(None), InvalidArgumentError),
    (lambda c: c.assign([5]), InvalidArgumentError),
    (lambda c: c.assign([("t", "0")]), InvalidArgumentError),
    (lambda c: c.assign([("t", 9)]), UnknownPartitionError),
    (lambda c: c.assign([("t", -1)]), UnknownPartitionError),
    (lambda c: c.assign([("", 0)]), InvalidTopicError),
    (lambda c: c.seek(("t", 0), -1), InvalidArgumentError),
    (lambda c: c.seek(("t", 0), "5"), InvalidArgumentError),
    (lambda c: c.seek(("t", 0), 2**63), InvalidArgumentError),
    (lambda c: c.seek("t", 5), InvalidArgumentError),
    (lambda c: c.seek(("t", 1), 5), UnknownPartitionError),  # not assigned
    (lambda c: c.seek_to_end(("t", 1)), UnknownPartitionError),
    (lambda c: c.position(("t", 1)), UnknownPartitionError),
    (lambda c: c.poll("1000"), InvalidArgumentError),
    (lambda c: c.poll(-1), InvalidArgumentError),
    (lambda c: c.poll(10**12), InvalidArgumentError),
    (lambda c: c.poll(100, 0), InvalidArgumentError),
    (lambda c: c.poll(100, "5"), InvalidArgumentError),
    (lambda c: c.poll(1.0), InvalidArgumentError),
    (lambda c: c.poll(timeout=-1), InvalidArgumentError),
    (lambda c: c.poll(timeout="1"), InvalidArgumentError),
    (lambda c: c.poll(timeout=True), InvalidArgumentError),
    (lambda c: c.poll(500, timeout=1.0), InvalidArgumentError),
    (lambda c: c.offsets_for_times([("t", 0)]), InvalidArgumentError),
    (lambda c: c.offsets_for_times({("t", 0): -1}), InvalidArgumentError),
    (lambda c: c.offsets_for_times({("t", 0): "yesterday"}), InvalidArgumentError),
    (lambda c: c.offsets_for_times({("t", 5): 0}), UnknownPartitionError),
    (lambda c: c.beginning_offsets("t"), InvalidArgumentError),
    (lambda c: c.end_offsets([("t", 9)]), UnknownPartitionError),
    (lambda c: c.pause(("t", 1)), UnknownPartitionError),
    (lambda c: c.pause("t"), InvalidArgumentError),
    (lambda c: c.resume(5), InvalidArgumentError),
    (lambda c: c.subscribe(["t"]), IllegalStateError),  # no group_id
    (lambda c: c.commit({("t", 0): 1}), IllegalStateError),
]


@pytest.mark.parametrize(("call", "error"), CONSUMER)
def test_consumer_refuses_bad_arguments_before_fetching(cluster, call, error):
    with Consumer(cluster=cluster) as consumer:
        consumer.assign([("t", 0)])
        refused(lambda: call(consumer), error)


GROUP_CONSUMER = [
    (lambda c: c.subscribe(5), InvalidTopicError),
    (lambda c: c.subscribe([]), InvalidTopicError),
    (lambda c: c.subscribe(["t", None]), InvalidTopicError),
    (lambda c: c.subscribe(["t"], pattern="t.*"), InvalidArgumentError),
    (lambda c: c.subscribe(), InvalidArgumentError),
    (lambda c: c.subscribe(pattern="("), InvalidArgumentError),
    (lambda c: c.subscribe(pattern=5), InvalidArgumentError),
    (lambda c: c.subscribe(["t"], listener=_Listener()), InvalidArgumentError),
    (lambda c: c.commit([("t", 0)]), InvalidArgumentError),
    (lambda c: c.commit({("t", 0): -1}), InvalidArgumentError),
    (lambda c: c.commit({("t", 0): True}), InvalidArgumentError),
    (lambda c: c.commit({"t": 5}), InvalidArgumentError),
    (lambda c: c.commit_async({("t", 0): "5"}), InvalidArgumentError),
    (lambda c: c.commit_async({("t", 0): 5}, callback=5), InvalidArgumentError),
    (lambda c: c.committed("t"), InvalidArgumentError),
]


@pytest.mark.parametrize(("call", "error"), GROUP_CONSUMER)
def test_group_consumer_refuses_bad_arguments_before_asking(cluster, call, error):
    with Consumer(cluster=cluster, group_id="g") as consumer:
        refused(lambda: call(consumer), error)


@pytest.mark.parametrize(("call", "error"), [
    (lambda c: read_topic(5, cluster=c), InvalidTopicError),
    (lambda c: read_topic([], cluster=c), InvalidTopicError),
    (lambda c: read_topic("t", cluster="x"), InvalidArgumentError),
    (lambda c: read_topic("t", start_offset=-5, cluster=c), InvalidOffsetRangeError),
    (lambda c: read_topic("t", end_offset="last", cluster=c), InvalidOffsetRangeError),
    (lambda c: read_topic("t", start_offset=Timestamp(-1), cluster=c),
     InvalidOffsetRangeError),
    (lambda c: read_topic("t", start_offset=2**63, cluster=c), InvalidOffsetRangeError),
    (lambda c: read_topic("t", start_offset={"t": {"0": "first"}}, cluster=c),
     InvalidOffsetRangeError),
    (lambda c: read_topic("t", cluster=c, max_records_per_block=0), InvalidArgumentError),
    (lambda c: read_topic("t", cluster=c, max_records_per_block="1"), InvalidArgumentError),
    (lambda c: read_topic("t", cluster=c, timeout_ms=-1), InvalidArgumentError),
    (lambda c: read_topic("t", cluster=c, timeout_ms=1.5), InvalidArgumentError),
    (lambda c: read_topic("t", cluster=c, override_num_blocks=0), InvalidArgumentError),
    (lambda c: write_dataset("not a dataset", "t", cluster=c), InvalidArgumentError),
])
def test_ray_data_entry_points_refuse_bad_arguments(cluster, call, error):
    refused(lambda: call(cluster), error)


def test_poll_with_a_float_says_which_unit_it_takes(cluster):
    with Consumer(cluster=cluster) as consumer:
        consumer.assign([("t", 0)])
        message = str(refused(lambda: consumer.poll(1.0), InvalidArgumentError))
        assert "milliseconds" in message and "timeout=1.0" in message


@pytest.mark.parametrize(("serializer", "match"), [
    (lambda v: 1 / 0, "value_serializer failed: ZeroDivisionError"),
    (lambda v: v, "value_serializer must return bytes, returned 'text'"),
])
def test_a_failing_serializer_refuses_the_record_at_once(cluster, serializer, match):
    producer = Producer(cluster=cluster, value_serializer=serializer)
    try:
        with pytest.raises(InvalidRecordError, match=match):
            producer.send("t", "text")
    finally:
        producer.close(timeout=5)
