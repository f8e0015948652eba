"""The consumer's fetch streams (``stream_fetches``: raylog/client/fetch_plan.py's
BrokerStream, raylog/replica/fetch_stream.py's rules), over the fake cluster of
tests/unit/fake_remote.py: one streaming call per broker carries answer after answer; a
partition sought or paused while full makes its stream again without holding up the others
(one in error: test_consumer_fetches.py, with calls and streams); a stream the broker ends is
followed by a new one; closing cancels them."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

import raylog.client.consumer as consumer_module
from raylog.client.consumer import Consumer
from raylog.client.host_socket import SocketStream
from raylog.types import TopicPartition
from tests.unit import fake_remote
from tests.unit.client.test_consumer_fetches import (
    PARTITIONS,
    TOPIC,
    every_partition,
    read_until,
    write,
)
from tests.unit.fake_remote import FakeController, wait_until


@pytest.fixture
def controller(monkeypatch) -> FakeController:
    fake_remote.install(monkeypatch, consumer_module)
    controller = FakeController()
    controller.add_topic(TOPIC, PARTITIONS)
    yield controller
    controller.cont()


def streaming(controller, **settings) -> Consumer:
    settings = {"auto_offset_reset": "earliest", "fetch_max_wait_ms": 50,
                "retry_backoff_ms": 10, "stream_fetches": True, **settings}
    return Consumer(cluster=fake_remote.fake_cluster(controller), **settings)


def streams_of(controller, broker: int) -> list:
    return controller.brokers[broker].fetch_stream.streams


def test_one_stream_per_broker_carries_answer_after_answer(controller):
    with streaming(controller) as consumer:
        consumer.assign(every_partition())
        for round_ in range(3):
            for p in range(6):
                write(controller, p, b"r%d-p%d" % (round_, p))
            records = read_until(consumer, {b"r%d-p%d" % (round_, p) for p in range(6)})
            assert sorted((r.partition, r.offset) for r in records) == \
                [(p, round_) for p in range(6)]
        for broker in (1, 2, 3):  # one stream each, all the way: no call per answer
            assert len(streams_of(controller, broker)) == 1, broker
            assert streams_of(controller, broker)[0].taken >= 3


def test_a_sought_partition_makes_its_stream_again_from_the_new_offset(controller):
    tp = TopicPartition(TOPIC, 0)  # on broker 1, with partition 3
    with streaming(controller) as consumer:
        consumer.assign([tp, TopicPartition(TOPIC, 3)])
        write(controller, 0, b"a", b"b")
        read_until(consumer, {b"a", b"b"})
        first = streams_of(controller, 1)[0]
        consumer.seek(tp, 0)
        records = read_until(consumer, {b"a", b"b"})
        assert [(r.offset, r.value) for r in records] == [(0, b"a"), (1, b"b")]
        assert first.cancelled and len(streams_of(controller, 1)) == 2
        write(controller, 3, b"c")  # the new stream reads partition 3 on
        assert [r.offset for r in read_until(consumer, {b"c"})] == [0]


def test_a_paused_full_partition_does_not_hold_up_the_others_in_its_stream(controller):
    paused, other = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 3)  # both on broker 1
    with streaming(controller, max_buffered_records=2) as consumer:
        consumer.assign([paused, other])
        consumer.pause(paused)
        write(controller, 0, b"x0", b"x1", b"x2")  # fills it: never drained while paused
        wait_until(lambda: consumer.poll(timeout_ms=10) == [] and
                   consumer._assigned[paused].buffered >= 2, 10)
        for i in range(3):  # the other partition goes on, answer after answer
            write(controller, 3, b"y%d" % i)
            assert [r.value for r in read_until(consumer, {b"y%d" % i})] == [b"y%d" % i]
        consumer.resume(paused)
        assert {r.value for r in read_until(consumer, {b"x0", b"x1", b"x2"})} == \
            {b"x0", b"x1", b"x2"}


def test_a_stream_the_broker_ends_is_followed_by_a_new_one(controller):
    for broker in controller.brokers.values():
        broker.fetch_stream.lifetime_s = 0.1
    with streaming(controller) as consumer:
        consumer.assign(every_partition())
        for i in range(4):
            write(controller, 0, b"v%d" % i)
            assert [r.offset for r in read_until(consumer, {b"v%d" % i})] == [i]
            wait_until(lambda: streams_of(controller, 1)[-1].finished, 5)  # past its life
        assert len(streams_of(controller, 1)) >= 3


def test_closing_cancels_its_streams(controller):
    consumer = streaming(controller)
    consumer.assign(every_partition())
    write(controller, 0, b"v")
    read_until(consumer, {b"v"})
    consumer.close()
    streams = [s for b in (1, 2, 3) for s in streams_of(controller, b)]
    assert streams and all(s.cancelled for s in streams)
    wait_until(lambda: all(s.finished for s in streams), 5)


def test_without_a_wait_the_consumer_fetches_by_calls(controller):
    """A stream parks each of its fetches: with fetch_max_wait_ms=0 it would answer without
    end, so the consumer makes fetch calls instead."""
    with streaming(controller, fetch_max_wait_ms=0) as consumer:
        consumer.assign(every_partition())
        write(controller, 0, b"v")
        read_until(consumer, {b"v"})
    assert not any(streams_of(controller, b) for b in (1, 2, 3))


def test_a_partition_left_out_while_full_joins_its_brokers_stream_once_it_drains(controller):
    """A stream made while a partition's buffer is full leaves it out; once poll has taken
    some of its records it is wanted again with records still buffered, and the stream is
    made again with it (a stream has no next call to join)."""
    full, other = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 3)  # both on broker 1
    with streaming(controller, max_buffered_records=2, max_poll_records=1) as consumer:
        consumer.assign([full, other])
        write(controller, 0, b"x0", b"x1", b"x2")
        got = read_until(consumer, {b"x0"})  # poll returns one of the three at a time
        assert [r.value for r in got] == [b"x0"] and consumer._assigned[full].buffered == 2
        consumer.seek(other, 0)  # its stream is made again while the other one is full ...
        got = consumer.poll(timeout_ms=10, max_records=1)
        assert consumer._assigned[full].fetch is None  # ... so without it
        assert [r.value for r in got] == [b"x1"] and consumer._assigned[full].buffered == 1
        consumer.pause(full)  # (so that polls leave its one record buffered)
        consumer.poll(timeout_ms=10)
        assert consumer._assigned[full].fetch is not None  # prefetching again at once
        consumer.resume(full)
        write(controller, 0, b"x3")
        assert b"x3" in {r.value for r in read_until(consumer, {b"x3"}, timeout_s=5)}


def test_a_revoked_partition_is_not_read_on_by_its_stream(controller):
    kept, revoked = TopicPartition(TOPIC, 3), TopicPartition(TOPIC, 0)  # both on broker 1
    with streaming(controller) as consumer:
        consumer.assign([kept, revoked])
        write(controller, 0, b"a")
        read_until(consumer, {b"a"})
        consumer.assign([kept])
        write(controller, 3, b"b")
        assert [r.value for r in read_until(consumer, {b"b"})] == [b"b"]
        first, *_, last = streams_of(controller, 1)
        assert first.cancelled and last.partitions == [(TOPIC, 3)]


class Link:
    """The connection under a SocketStream, for the consumer's wait alone."""

    def send_control(self, stream_id: int, op: str) -> None:
        pass

    def forget(self, stream_id: int) -> None:
        pass


def test_polls_wait_wakes_for_a_socket_stream_beside_rays_requests(controller):
    """A socket stream's answer ends poll's wait with Ray's requests out too (taken in
    slices), and alone (on the wake it gives); so does the timeout, with nothing come."""
    with streaming(controller) as consumer:
        stream = SocketStream(Link(), 1, consumer._news.set)
        ray_request: concurrent.futures.Future = concurrent.futures.Future()
        for others in ([ray_request], []):
            timer = threading.Timer(0.05, stream._put, (1, ["an answer"]))
            timer.start()
            assert consumer._wait([stream, *others], 10) == [stream]
            assert stream.take() == ["an answer"]
            timer.join()
            consumer._news.clear()
        assert consumer._wait([stream, ray_request], 0.02) == []
        assert consumer._wait([stream], 0.02) == []
        ray_request.set_result(None)
        assert consumer._wait([stream, ray_request], 10) == [ray_request]
