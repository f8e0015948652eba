"""raylog's clients and quotas (docs/quotas.md), over a fake cluster behind the client's
wrappers (tests/unit/fake_remote.py): the producer and the consumer name their client id on
every produce call and fetch, and add up the throttle times their answers carried."""

from __future__ import annotations

import time

import pytest

import raylog.client.consumer as consumer_module
import raylog.client.producer as producer_module
from raylog.client.consumer import Consumer
from raylog.client.producer import Producer
from raylog.quotas.enforcer import Throttled
from raylog.types import TopicPartition
from tests.unit import fake_remote
from tests.unit.fake_remote import FakeController, _LongPoll, _LongPollMany, _Method


@pytest.fixture
def controller(monkeypatch) -> FakeController:
    fake_remote.install(monkeypatch, producer_module, consumer_module)
    controller = FakeController()
    controller.add_topic("t", 1)
    yield controller
    controller.cont()


def throttling(controller: FakeController, held_ms: int) -> list[str | None]:
    """Every broker answers produces and fetches as held back by ``held_ms``; the client
    ids they named."""
    named: list[str | None] = []
    for broker in controller.brokers.values():
        def produce(*args, client_id=None, _serve=broker._produce_batches):
            named.append(client_id)  # a produce call's answers are held back together
            return Throttled(_serve(*args), held_ms)

        def fetch(*args, client_id=None, _serve=broker._fetch):
            named.append(client_id)
            answer = _serve(*args)
            return Throttled(answer, held_ms) if answer.data else answer

        def fetch_many(*args, client_id=None, _serve=broker._fetch_many):
            named.append(client_id)
            answers = _serve(*args)
            return Throttled(answers, held_ms) if any(getattr(a, "data", None)
                                                      for a in answers) else answers

        broker.produce_batches = _Method(broker, produce)
        broker.fetch = _LongPoll(broker, fetch)
        broker.fetch_many = _LongPollMany(broker, fetch_many)
    return named


def test_the_producer_names_its_client_id_and_counts_its_throttle_time(controller):
    named = throttling(controller, 7)
    with Producer(cluster=fake_remote.fake_cluster(controller), client_id="loader",
                  linger_ms=0) as producer:
        assert producer.throttle_time_ms == 0
        offsets = [producer.send("t", b"v%d" % i).result(timeout=10).offset for i in range(3)]
        assert offsets == [0, 1, 2]  # a held answer is an answer
        assert producer.throttle_time_ms == 7 * len(named)
    assert set(named) == {"loader"}


def test_the_consumer_names_its_client_id_and_counts_its_throttle_time(controller):
    with Producer(cluster=fake_remote.fake_cluster(controller)) as producer:
        producer.send("t", b"record").result(timeout=10)
    named = throttling(controller, 5)
    with Consumer(cluster=fake_remote.fake_cluster(controller), client_id="reader",
                  auto_offset_reset="earliest", fetch_max_wait_ms=10) as consumer:
        consumer.assign([TopicPartition("t", 0)])
        records = []
        deadline = time.monotonic() + 10
        while not records:
            assert time.monotonic() < deadline, "the record was never read"
            records = consumer.poll(timeout_ms=100)
        assert [r.value for r in records] == [b"record"]
        assert consumer.throttle_time_ms >= 5
    assert set(named) == {"reader"}
