"""A consumer keeps its promises while the controller or a leader hangs (issue 22, items 7
and 8), over a fake cluster behind the client's wrappers (tests/unit/fake_remote.py).

- ``poll(timeout)`` returns within its timeout while the controller hangs, and what the
  consumer reads from leaders that answer keeps coming: no metadata refresh, commit,
  heartbeat, join or committed-offset lookup is waited for inside poll.
- A group member that cannot reach the coordinator gives its partitions up when its session
  would have run out (Kafka's consumer does the same), and comes back once it can.
- A revoked partition's final commit on its way to a hung coordinator stops no reading of
  the others; the partition stays the member's until that commit ended.
- A fetch to a leader that hangs is given up once the metadata names another leader, and
  any request past its wait and request_timeout_ms plus a slack.
"""

from __future__ import annotations

import time

import pytest

import raylog.client.consumer as consumer_module
from raylog.client.consumer import Consumer
from raylog.types import TopicPartition
from tests.unit import fake_remote
from tests.unit.fake_remote import FakeController, FakePartition
from tests.unit.logutil import batch_of

BOUND_S = 5.0  # generous: a poll of 0.2 s must return well within this
TOPIC = "t"


@pytest.fixture
def controller(monkeypatch) -> FakeController:
    fake_remote.install(monkeypatch, consumer_module)
    controller = FakeController()
    controller.add_topic(TOPIC, 3)
    yield controller
    controller.cont()  # however the test ended
    for broker in controller.brokers.values():
        broker.cont()


def write(partition: FakePartition, *values: bytes) -> None:
    partition.append(batch_of(list(values)))


def timed_poll(consumer: Consumer, timeout_ms: int = 200) -> list:
    started = time.monotonic()
    records = consumer.poll(timeout_ms=timeout_ms)
    assert time.monotonic() - started < timeout_ms / 1000 + BOUND_S
    return records


def read_until(consumer: Consumer, wanted: set[bytes], timeout_s: float = BOUND_S) -> set:
    """Poll until every value of ``wanted`` was read; what was read."""
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    while not wanted <= seen:
        assert time.monotonic() < deadline, f"never read {sorted(wanted - seen)}"
        seen.update(r.value for r in timed_poll(consumer))
    return seen


def test_poll_returns_in_time_and_reads_on_while_the_controller_hangs(controller):
    """The controller stops, then partition 0's leader dies: its fetches fail and want new
    metadata. Each poll still returns within its timeout, and records written to the other
    partitions meanwhile are read."""
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller),
                        auto_offset_reset="earliest", fetch_max_wait_ms=100)
    consumer.assign([TopicPartition(TOPIC, p) for p in range(3)])
    for i, p in enumerate(controller.topics[TOPIC]):
        write(p, b"before-%d" % i)
    read_until(consumer, {b"before-0", b"before-1", b"before-2"})
    controller.stop()
    controller.brokers[1].dead = True  # partition 0's leader
    for round_ in range(5):
        values = {b"during-%d-%d" % (round_, p) for p in (1, 2)}
        for p in (1, 2):
            write(controller.topics[TOPIC][p], b"during-%d-%d" % (round_, p))
        read_until(consumer, values)
    assert controller.held == 1  # one background refresh waits on it, not one per poll
    controller.cont()
    consumer.close()


def test_a_member_that_cannot_reach_the_coordinator_reads_on_then_gives_up_at_its_session(
        controller):
    """A subscribed member whose coordinator stops: it reads what it owns for as long as
    its session could still be alive, never waiting on the coordinator inside poll (not for
    heartbeats, nor auto-commits every 50 ms); then it gives everything up (its partitions
    are lost: the coordinator may have handed them on) and returns nothing, still in time.
    When the coordinator answers again, it rejoins and reads again."""
    session_s = 1.5
    lost: list = []
    listener = type("Listener", (), {"on_partitions_lost": lambda self, ps: lost.extend(ps)})()
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller), group_id="g",
                        auto_offset_reset="earliest", fetch_max_wait_ms=100,
                        session_timeout_ms=int(session_s * 1000), heartbeat_interval_ms=100,
                        auto_commit_interval_ms=50)
    consumer.subscribe([TOPIC], listener=listener)
    parts = controller.topics[TOPIC]
    write(parts[0], b"first")
    read_until(consumer, {b"first"})
    controller.stop()
    stopped = time.monotonic()
    write(parts[1], b"while-stopped")
    read_until(consumer, {b"while-stopped"})
    assert time.monotonic() - stopped < session_s  # (else the test proves nothing)
    assert not lost
    deadline = time.monotonic() + session_s + BOUND_S
    while not lost:
        assert time.monotonic() < deadline, "kept its partitions past its session"
        timed_poll(consumer)
    assert consumer.assignment() == set()
    write(parts[2], b"unowned")
    assert not any(r.value == b"unowned" for r in timed_poll(consumer))
    controller.cont()
    read_until(consumer, {b"unowned"}, timeout_s=2 * BOUND_S)  # rejoined, read again
    consumer.close()


def test_a_revoked_partition_is_released_when_its_commit_ended_and_reading_goes_on(
        controller):
    """Told to give partition 0 up just before the coordinator stops, the member stops
    reading it at once and commits its position in the background: poll reads the other
    partitions meanwhile, and partition 0 stays claimed (nobody else may take it) until the
    commit ended."""
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller), group_id="g",
                        auto_offset_reset="earliest", fetch_max_wait_ms=100,
                        heartbeat_interval_ms=100, session_timeout_ms=60_000)
    consumer.subscribe([TOPIC])
    parts = controller.topics[TOPIC]
    write(parts[0], b"p0")
    read_until(consumer, {b"p0"})
    p0 = TopicPartition(TOPIC, 0)
    controller.revoke = {(TOPIC, 0)}
    consumer._membership.refresh()  # the answer telling it to give partition 0 up
    controller.stop()
    write(parts[0], b"p0-after")
    write(parts[1], b"p1")
    seen = read_until(consumer, {b"p1"})
    assert b"p0-after" not in seen and p0 not in consumer.assignment()
    assert p0 in consumer._membership._owned  # still claimed: its commit is on its way
    controller.cont()
    deadline = time.monotonic() + BOUND_S
    while p0 in consumer._membership._owned:
        assert time.monotonic() < deadline, "never released after its commit"
        timed_poll(consumer)
    assert controller.committed[(TOPIC, 0)] == 1
    consumer.close()


def test_a_fetch_from_a_hung_leader_moves_to_the_new_leader(controller):
    """Partition 0's leader stops with a fetch outstanding; the cluster fences it and
    broker 2 leads at a new epoch. The consumer, asking for metadata because the fetch is
    slow, gives it up and reads from broker 2, long before request_timeout_ms."""
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller),
                        auto_offset_reset="earliest", fetch_max_wait_ms=100)
    consumer.assign([TopicPartition(TOPIC, 0)])
    p0 = controller.topics[TOPIC][0]
    write(p0, b"a")
    read_until(consumer, {b"a"})
    controller.brokers[1].stop()
    timed_poll(consumer)  # a fetch is held by the stopped broker now
    controller.alive.discard(1)
    p0.fail_over(2)
    write(p0, b"b")
    read_until(consumer, {b"b"}, timeout_s=consumer_module.SLOW_REQUEST_S +
               consumer_module.SLOW_REFRESH_S + BOUND_S)
    consumer.close()


def test_no_fetch_is_waited_on_past_its_wait_and_the_request_timeout(controller,
                                                                     monkeypatch):
    """A leader that hangs and is never replaced: the consumer gives each fetch up after
    fetch_max_wait_ms, request_timeout_ms and the slack, and asks again."""
    monkeypatch.setattr(consumer_module, "SLOW_REQUEST_S", 0.2)
    monkeypatch.setattr(consumer_module, "REQUEST_SLACK_S", 0.2)
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller),
                        auto_offset_reset="earliest", fetch_max_wait_ms=100,
                        request_timeout_ms=300)
    consumer.assign([TopicPartition(TOPIC, 0)])
    write(controller.topics[TOPIC][0], b"a")
    read_until(consumer, {b"a"})
    leader = controller.brokers[1]
    leader.stop()
    deadline = time.monotonic() + BOUND_S
    while leader.held < 2:
        assert time.monotonic() < deadline, "the first fetch was never given up"
        timed_poll(consumer)
    consumer.close()
