"""The consumer's one fetch per serving process (raylog/client/fetch_plan.py), over a fake
cluster behind the client's wrappers (tests/unit/fake_remote.py): every partition it reads
from a broker goes into one call, one partition's error fails none of the others, and a
partition sought, newly assigned or given up does not wait for a fetch that is out."""

from __future__ import annotations

import threading
import time

import pytest

import raylog.client.consumer as consumer_module
from raylog.client.consumer import Consumer
from raylog.errors import OffsetOutOfRangeError
from raylog.types import TopicPartition
from tests.unit import fake_remote
from tests.unit.fake_remote import FakeController, _LongPoll, _LongPollMany, _Method
from tests.unit.logutil import batch_of

TOPIC = "t"
PARTITIONS = 6  # two on each of the three fake brokers (partition i on broker i % 3 + 1)


@pytest.fixture
def controller(monkeypatch) -> FakeController:
    fake_remote.install(monkeypatch, consumer_module)
    controller = FakeController()
    controller.add_topic(TOPIC, PARTITIONS)
    yield controller
    controller.cont()


def recording(controller: FakeController) -> list[tuple[int, list[tuple]]]:
    """Every broker's fetch_many calls as (broker id, the partitions and offsets asked);
    a single-partition fetch fails the test."""
    calls: list[tuple[int, list[tuple]]] = []
    lock = threading.Lock()
    for broker in controller.brokers.values():
        def fetch_many(reads, *args, _broker=broker, **kwargs):
            with lock:
                calls.append((_broker.broker_id, [(t, p, o) for t, p, _, o, _ in reads]))
            return _broker._fetch_many(reads, *args, **kwargs)

        def fetch(*args, **kwargs):
            raise AssertionError("the consumer made a fetch of one partition")

        broker.fetch_many = _LongPollMany(broker, fetch_many)
        broker.fetch = _LongPoll(broker, fetch)
    return calls


def write(controller: FakeController, partition: int, *values: bytes) -> None:
    controller.topics[TOPIC][partition].append(batch_of(list(values)))


def read_until(consumer: Consumer, wanted: set[bytes], timeout_s: float = 10.0) -> list:
    """Poll until every value of ``wanted`` was read; the records read."""
    records: list = []
    deadline = time.monotonic() + timeout_s
    while not wanted <= {r.value for r in records}:
        assert time.monotonic() < deadline, \
            f"never read {sorted(wanted - {r.value for r in records})}"
        records.extend(consumer.poll(timeout_ms=100))
    return records


def every_partition() -> list[TopicPartition]:
    return [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]


def test_one_fetch_per_broker_asks_for_every_partition_there(controller):
    calls = recording(controller)
    for p in range(PARTITIONS):
        write(controller, p, b"v%d" % p)
    with Consumer(cluster=fake_remote.fake_cluster(controller), auto_offset_reset="earliest",
                  fetch_max_wait_ms=50) as consumer:
        consumer.assign(every_partition())
        records = read_until(consumer, {b"v%d" % p for p in range(PARTITIONS)})
        assert sorted((r.partition, r.offset, r.value) for r in records) == \
            [(p, 0, b"v%d" % p) for p in range(PARTITIONS)]
        assert len(consumer._fetches) <= 3  # one out per broker at most
    first = {}
    for broker, reads in calls:
        first.setdefault(broker, reads)
        assert {p % 3 + 1 for _, p, _ in reads} == {broker}  # only what that broker leads
    # each broker's first fetch asked for both of its partitions, from offset 0
    assert {b: sorted(r) for b, r in first.items()} == {
        b: [(TOPIC, p, 0) for p in range(PARTITIONS) if p % 3 + 1 == b] for b in (1, 2, 3)}


@pytest.mark.parametrize("stream", [False, True], ids=["calls", "stream"])
def test_a_partitions_error_fails_none_of_the_others_in_its_fetch(controller, stream):
    """Partition 0's leader moves (broker 1 answers it with NotLeaderError); partition 3,
    in the same fetches to broker 1, is read on, and partition 0 is found on its new
    leader. A fetch stream (``stream_fetches``) ends at that error and is made again."""
    recording(controller)
    with Consumer(cluster=fake_remote.fake_cluster(controller), auto_offset_reset="earliest",
                  fetch_max_wait_ms=50, retry_backoff_ms=10, stream_fetches=stream) as consumer:
        consumer.assign(every_partition())
        write(controller, 0, b"p0-before")
        write(controller, 3, b"p3-before")
        read_until(consumer, {b"p0-before", b"p3-before"})
        controller.topics[TOPIC][0].fail_over(2)
        write(controller, 3, b"p3-after")
        write(controller, 0, b"p0-after")
        records = read_until(consumer, {b"p3-after", b"p0-after"})
        assert [r.offset for r in records if r.partition == 0] == [1]
        assert [r.offset for r in records if r.partition == 3] == [1]
        if stream:  # ended by broker 1's NotLeaderError
            assert controller.brokers[1].fetch_stream.streams[0].finished


def test_offset_out_of_range_resets_only_that_partition(controller):
    recording(controller)
    write(controller, 0, b"a0", b"a1")
    write(controller, 3, b"b0")
    with Consumer(cluster=fake_remote.fake_cluster(controller), auto_offset_reset="earliest",
                  fetch_max_wait_ms=50) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 3)])
        consumer.seek(TopicPartition(TOPIC, 0), 99)  # beyond the log end
        records = read_until(consumer, {b"a0", b"a1", b"b0"})
        assert sorted((r.partition, r.offset) for r in records) == [(0, 0), (0, 1), (3, 0)]


def test_auto_offset_reset_none_raises_after_the_others_were_taken_in(controller):
    recording(controller)
    write(controller, 3, b"b0")
    with Consumer(cluster=fake_remote.fake_cluster(controller), auto_offset_reset="none",
                  fetch_max_wait_ms=50) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 3)])
        consumer.seek(TopicPartition(TOPIC, 0), 99)
        consumer.seek(TopicPartition(TOPIC, 3), 0)
        deadline = time.monotonic() + 10
        with pytest.raises(OffsetOutOfRangeError):
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=100)
        assert [r.value for r in consumer.poll(timeout_ms=0)] == [b"b0"]


def test_a_sought_partition_waits_for_no_fetch_that_is_out(controller):
    """A fetch parked for a minute does not hold back a partition sought meanwhile: the
    fetch is given up and made again with it."""
    calls = recording(controller)
    write(controller, 0, b"old")
    with Consumer(cluster=fake_remote.fake_cluster(controller), auto_offset_reset="latest",
                  fetch_max_wait_ms=60_000) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 3)])
        assert consumer.poll(timeout_ms=200) == []  # both parked at the end
        parked = len(calls)
        consumer.seek(TopicPartition(TOPIC, 0), 0)
        assert [r.value for r in read_until(consumer, {b"old"}, timeout_s=10)] == [b"old"]
        assert (1, [(TOPIC, 0, 0), (TOPIC, 3, 0)]) in \
            [(b, sorted(r)) for b, r in calls[parked:]]


def test_a_newly_assigned_partition_waits_for_no_fetch_that_is_out(controller):
    recording(controller)
    write(controller, 3, b"new")
    with Consumer(cluster=fake_remote.fake_cluster(controller), auto_offset_reset="earliest",
                  fetch_max_wait_ms=60_000) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        assert consumer.poll(timeout_ms=200) == []  # parked on broker 1
        consumer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 3)])
        read_until(consumer, {b"new"})


def test_a_partition_given_up_while_its_fetch_is_out_gets_nothing_of_it(controller):
    """Partition 0 is unassigned while its fetch is parked; what is then written to it is
    not returned, and partition 3, asked in a fetch of its own, is read."""
    recording(controller)
    with Consumer(cluster=fake_remote.fake_cluster(controller), auto_offset_reset="latest",
                  fetch_max_wait_ms=1000) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 3)])
        assert consumer.poll(timeout_ms=200) == []
        consumer.assign([TopicPartition(TOPIC, 3)])
        write(controller, 0, b"gone")
        write(controller, 3, b"kept")
        records = read_until(consumer, {b"kept"})
        assert {r.partition for r in records} == {3}
        assert consumer.poll(timeout_ms=1200) == []  # partition 0's answer went unread


def test_a_fetch_that_fails_whole_is_retried_for_each_partition(controller):
    """Every call to broker 1 fails once (its process restarting): both its partitions
    are asked again, and read."""
    recording(controller)
    broker = controller.brokers[1]
    real = broker.fetch_many
    failures = []

    def failing(*args, **kwargs):
        if not failures:
            failures.append(1)
            return fake_remote.failed(fake_remote.ActorUnavailableError("restarting"))
        return real.remote(*args, **kwargs)

    broker.fetch_many = _Method(broker, lambda: None)
    broker.fetch_many.remote = failing
    write(controller, 0, b"x0")
    write(controller, 3, b"x3")
    with Consumer(cluster=fake_remote.fake_cluster(controller), auto_offset_reset="earliest",
                  fetch_max_wait_ms=50, retry_backoff_ms=10) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 3)])
        read_until(consumer, {b"x0", b"x3"})
    assert failures
