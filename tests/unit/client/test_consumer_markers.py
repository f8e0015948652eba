"""A consumer never shows a transaction marker (a control batch) as a record: it moves past
it. Over the fake cluster of tests/unit/fake_remote.py, no Ray."""

from __future__ import annotations

import raylog.client.consumer as consumer_module
from raylog.client.consumer import Consumer
from raylog.types import TopicPartition
from tests.unit import fake_remote
from tests.unit.fake_remote import FakeController
from tests.unit.logutil import batch_of
from tests.unit.txnutil import COMMIT, append_marker


def test_a_consumer_skips_markers(monkeypatch):
    fake_remote.install(monkeypatch, consumer_module)
    controller = FakeController()
    controller.add_topic("t", 1)
    partition = controller.topics["t"][0]
    partition.append(batch_of([b"a", b"b"]))
    append_marker(partition, COMMIT, 3)
    partition.append(batch_of([b"c"]))
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller),
                        auto_offset_reset="earliest")
    consumer.assign([TopicPartition("t", 0)])
    got = []
    for _ in range(50):
        got += consumer.poll(timeout_ms=100)
        if len(got) >= 3:
            break
    consumer.close()
    assert [(r.offset, r.value) for r in got] == [(0, b"a"), (1, b"b"), (3, b"c")]



def test_the_position_moves_past_a_marker_fetched_alone(monkeypatch):
    fake_remote.install(monkeypatch, consumer_module)
    controller = FakeController()
    controller.add_topic("t", 1)
    partition = controller.topics["t"][0]
    partition.append(batch_of([b"a", b"b"]))
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller),
                        auto_offset_reset="earliest")
    tp = TopicPartition("t", 0)
    consumer.assign([tp])
    got = []
    for _ in range(50):
        got += consumer.poll(timeout_ms=100)
        if len(got) >= 2:
            break
    assert consumer.position(tp) == 2
    append_marker(partition, COMMIT, 3)  # the next answer holds the marker only
    for _ in range(50):
        got += consumer.poll(timeout_ms=100)
        if consumer.position(tp) == 3:
            break
    position = consumer.position(tp)
    consumer.close()
    assert [r.value for r in got] == [b"a", b"b"]
    assert position == 3  # past the marker at offset 2 at once, as Kafka's
