"""A producer keeps its promises while the controller or a leader hangs (issue 22, items 7
and 8), over a fake cluster behind the client's wrappers (tests/unit/fake_remote.py): the
real connection, controller client and metadata refresher, fake actors that stop.

- While the controller hangs, nothing of the producer waits on it: batches of partitions
  whose leaders answer are acknowledged, and every other future resolves by its delivery
  deadline (invariant 7), however many batches fail meanwhile.
- A leader that hangs holds the attempts sent to it; once the metadata names a newer leader
  epoch, they are given up as unanswered and retried at the new leader under their own
  numbers: a batch the old leader had appended (and replicated) is recognised there as a
  duplicate, not written twice.
- No attempt is waited on past request_timeout_ms and a slack.
"""

from __future__ import annotations

import time

import pytest

import raylog.client.producer as producer_module
from raylog.client.producer import Producer
from raylog.errors import ActorUnavailableError, RequestTimeoutError
from tests.unit import fake_remote
from tests.unit.fake_remote import FakeController

SLACK_S = 5.0  # a future may resolve this much after its deadline (threads, a busy host)


@pytest.fixture
def controller(monkeypatch) -> FakeController:
    fake_remote.install(monkeypatch, producer_module)
    controller = FakeController()
    yield controller
    controller.cont()  # however the test ended
    for broker in controller.brokers.values():
        broker.cont()


def warm_producer(controller: FakeController, partitions: int, **settings) -> Producer:
    """A producer that has sent to every partition once: it knows the topic's metadata."""
    producer = Producer(cluster=fake_remote.fake_cluster(controller),
                        **{"linger_ms": 1, "retry_backoff_ms": 10, **settings})
    for p in range(partitions):
        producer.send("t", b"warm", partition=p).result(timeout=5)
    return producer


def test_a_hung_controller_stops_no_partition_whose_leader_answers(controller):
    """The controller stops; then partition 0's leader dies, so its batches fail and their
    producer wants new metadata. The other partitions' batches are acknowledged meanwhile,
    partition 0's fail by their deadline, and the producer has one metadata request
    waiting on the controller, not one per failure."""
    controller.add_topic("t", 3)
    delivery_s = 1.0
    producer = warm_producer(controller, 3, delivery_timeout_ms=int(delivery_s * 1000))
    controller.stop()
    controller.brokers[1].dead = True  # partition 0's leader
    sent = []
    for i in range(150):
        sent.append((i % 3, time.monotonic(), producer.send("t", b"v%d" % i,
                                                            partition=i % 3)))
        time.sleep(0.005)
    for partition, at, future in sent:
        left = at + delivery_s + SLACK_S - time.monotonic()
        if partition:
            assert future.result(timeout=max(left, 0)).offset >= 1
        else:
            error = future.exception(timeout=max(left, 0))
            assert isinstance(error, RequestTimeoutError | ActorUnavailableError), error
    assert controller.held == 1  # one background refresh, waiting on the hung controller
    controller.brokers[1].dead = False
    producer.close(timeout=5)


def test_futures_end_by_their_deadline_while_the_controller_hangs_and_leaders_refuse(
        controller):
    """Every leader refuses with a retriable error that asks for new metadata (a leader
    moved), and the controller hangs: no batch of any partition waits on it past its
    deadline."""
    controller.add_topic("t", 2)
    producer = warm_producer(controller, 2, delivery_timeout_ms=500)
    controller.stop()
    for partition in controller.partitions.values():
        partition.fail_over(partition.leader)  # a new epoch: the producer's is stale
    futures = [(time.monotonic(), producer.send("t", b"v%d" % i, partition=i % 2))
               for i in range(40)]
    for at, future in futures:
        left = at + 0.5 + SLACK_S - time.monotonic()
        assert future.exception(timeout=max(left, 0)) is not None
    producer.close(timeout=5)


def test_a_hung_leader_is_left_for_the_new_one_once_the_metadata_names_it(controller):
    """Partition 0's leader stops with batches in flight (and more queued behind the
    in-flight limit). The cluster fences it and elects broker 2 at a new epoch: the
    producer, refreshing its metadata because the attempts are slow, gives them up and
    sends them to broker 2, long before request_timeout_ms; every record lands once and in
    order. The stopped broker's late answers are refusals (it is fenced) that nobody reads."""
    (p0,) = controller.add_topic("t", 1)
    producer = warm_producer(controller, 1, delivery_timeout_ms=120_000,
                             request_timeout_ms=60_000, max_in_flight_requests_per_partition=2)
    old = controller.brokers[1]
    old.stop()
    futures = []
    for i in range(20):
        futures.append(producer.send("t", b"v%02d" % i))
        if i % 4 == 3:
            time.sleep(0.01)  # a few batches
    assert_waits = time.monotonic()
    while old.held < 1 and time.monotonic() - assert_waits < 5:
        time.sleep(0.01)
    assert old.held >= 1
    controller.alive.discard(1)
    p0.fail_over(2)
    for future in futures:
        # within the slow-attempt check and a refresh, not request_timeout_ms (60 s)
        future.result(timeout=producer_module.SLOW_REQUEST_S +
                      producer_module.SLOW_REFRESH_S + SLACK_S)
    assert p0.values == [b"warm", *[b"v%02d" % i for i in range(20)]]
    old.cont()
    producer.close(timeout=5)
    assert p0.values == [b"warm", *[b"v%02d" % i for i in range(20)]]


def test_a_batch_the_hung_leader_appended_is_a_duplicate_at_the_new_one(controller):
    """The leader appends (and, the log being shared, replicates) the batch, then hangs
    without answering. At the new leader the retry carries the same producer id, epoch and
    sequence, and is answered with the first append's offsets: the record is there once."""
    (p0,) = controller.add_topic("t", 1)
    producer = warm_producer(controller, 1, delivery_timeout_ms=120_000)
    controller.brokers[1].swallow = True
    future = producer.send("t", b"once")
    start = time.monotonic()
    while p0.values[-1:] != [b"once"] and time.monotonic() - start < 5:
        time.sleep(0.01)
    p0.fail_over(2)
    assert future.result(timeout=producer_module.SLOW_REQUEST_S +
                         producer_module.SLOW_REFRESH_S + SLACK_S).offset == 1
    assert p0.values == [b"warm", b"once"]
    (state,) = p0.states._producers.values()
    assert state.epoch == 0  # retried under its own numbers, not renumbered
    controller.brokers[1].swallow = False
    producer.close(timeout=5)


def test_no_attempt_is_waited_on_past_the_request_timeout_and_a_slack(controller,
                                                                       monkeypatch):
    """The leader hangs and nobody fences it: the attempt is given up after
    request_timeout_ms and the slack (at the earliest after the slow-attempt check) and
    sent again, under its own numbers; when the leader answers at last, the retry is a
    duplicate of the first attempt and the record is there once."""
    monkeypatch.setattr(producer_module, "SLOW_REQUEST_S", 0.2)
    monkeypatch.setattr(producer_module, "REQUEST_SLACK_S", 0.2)
    (p0,) = controller.add_topic("t", 1)
    producer = warm_producer(controller, 1, request_timeout_ms=300,
                             delivery_timeout_ms=120_000)
    leader = controller.brokers[1]
    leader.stop()
    future = producer.send("t", b"once")
    start = time.monotonic()
    while leader.held < 2 and time.monotonic() - start < 10:
        time.sleep(0.01)
    assert leader.held >= 2  # the first attempt given up, a second one sent
    assert not future.done()
    leader.cont()
    assert future.result(timeout=5).offset == 1
    assert p0.values == [b"warm", b"once"]
    producer.close(timeout=5)
