"""A consumer's poll with nothing in flight waits for news (issue 23, item 3): the
coordinator's answer granting partitions, a background lookup ending, a backoff's end. It
neither sleeps in slices nor returns late: a poll whose data comes early returns early. Over
a fake cluster behind the client's wrappers (tests/unit/fake_remote.py), no Ray."""

from __future__ import annotations

import threading

import pytest

import raylog.client.consumer as consumer_module
from raylog.client.consumer import Consumer
from raylog.types import TopicPartition
from tests.unit import fake_remote
from tests.unit.fake_remote import FakeController, wait_until
from tests.unit.logutil import batch_of

TOPIC = "t"


@pytest.fixture
def controller(monkeypatch) -> FakeController:
    fake_remote.install(monkeypatch, consumer_module)
    controller = FakeController()
    controller.add_topic(TOPIC, 1)
    return controller


def test_a_poll_waiting_for_its_partitions_wakes_when_they_are_granted(controller):
    granted = threading.Event()
    grant = controller._grant
    controller._grant = lambda member_id: grant(member_id) if granted.is_set() else []
    controller.topics[TOPIC][0].append(batch_of([b"x"]))
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller), group_id="g",
                        auto_offset_reset="earliest", heartbeat_interval_ms=20)
    consumer.subscribe([TOPIC])
    looks = []  # each pass of poll's loop asks for what the partitions need
    send_fetches = consumer._send_fetches
    consumer._send_fetches = lambda: (looks.append(1), send_fetches())[1]
    polled: list = []
    poller = threading.Thread(target=lambda: polled.append(consumer.poll(timeout_ms=600_000)))
    poller.start()
    try:
        # Heartbeats are answered, granting nothing: no news, so the poll does not look
        # again (in 50 ms slices it would have looked about 8 times over 20 beats).
        calls = controller.calls
        wait_until(lambda: controller.calls >= calls + 20)
        assert len(looks) <= 2
        granted.set()  # the next answer grants the partition: the poll reads and returns
        poller.join(timeout=60)
        assert not poller.is_alive()
        assert [r.value for r in polled[0]] == [b"x"]
    finally:
        granted.set()
        poller.join()
        consumer.close()


def test_a_poll_with_nothing_to_wait_for_returns_empty_at_its_timeout(controller):
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller))
    assert consumer.poll(timeout_ms=0) == []  # nothing assigned
    assert consumer.poll(timeout_ms=50) == []
    consumer.close()


def test_a_poll_waiting_out_a_partitions_backoff_wakes_when_it_ends(controller):
    """Every replica fails at first: the partition backs off, with nothing in flight. The
    poll asks again when the backoff ends (nothing else would wake it) and returns the
    records then, long before its timeout."""
    controller.topics[TOPIC][0].append(batch_of([b"x"]))
    brokers = controller.brokers.values()
    for broker in brokers:
        broker.dead = True
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller),
                        auto_offset_reset="earliest", retry_backoff_ms=500)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])

    def revive() -> None:  # once the partition failed and backs off
        wait_until(lambda: consumer._assigned[tp].not_before > 0)
        for broker in brokers:
            broker.dead = False

    reviver = threading.Thread(target=revive)
    reviver.start()
    try:
        records = consumer.poll(timeout_ms=30_000)
        assert [r.value for r in records] == [b"x"]
    finally:
        reviver.join()
        consumer.close()
