"""Client quotas on the listener, on raw sockets over the fake cluster and the controller's
quota service in memory: DescribeClientQuotas/AlterClientQuotas, and answers over a quota
carrying their throttle time while the connection waits it out."""

from __future__ import annotations

import time

import pytest
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from actors.quota_service import QuotaService
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.listener import KafkaListener, ListenerThread
from raylog.kafka.gateway.quotas import ListenerQuotas
from raylog.metadata import state as events
from raylog.metadata.access import MemoryLog, MetadataAccess
from raylog.quotas import ClientQuotas, QuotaSettings
from tests.unit.kafka.builders import kafka_batch
from tests.unit.kafka.gateway import wire
from tests.unit.kafka.gateway.fake_backend import FakeBackend
from tests.unit.kafka.gateway.test_produce_fetch import RECORDS, fetch, partition_answer, produce

A, D = AlterClientQuotasRequest, DescribeClientQuotasRequest


class QuotaBackend(FakeBackend):
    """The fake cluster, with a controller that has a quota service."""

    def __init__(self) -> None:
        super().__init__()
        access = MetadataAccess(MemoryLog())
        access.commit(events.cluster_created("c"))
        self.service: QuotaService | None = None
        self._access = access

    async def controller_call(self, method: str, *args, timeout_s: float):
        if self.service is None:  # made on the listener's loop, where it is called
            self.service = QuotaService(self._access)
        return await getattr(self.service, method)(*args)


@pytest.fixture
def backend() -> QuotaBackend:
    fake = QuotaBackend()
    fake.add_topic("orders", partitions=1)
    return fake


@pytest.fixture
def listener(backend):
    quotas = ListenerQuotas(ClientQuotas(QuotaSettings(window_num=2, window_size_s=0.5)))
    with ListenerThread(KafkaListener(backend, port=0, quotas=quotas)) as running:
        yield running.listener


def address(listener) -> tuple[str, int]:
    return listener.host, listener.port


def alter(entries, validate_only=False):
    return A[1](entries=[A.EntryData(
        entity=[A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[A.EntryData.OpData(key=k, value=float(v or 0), remove=v is None)
             for k, v in ops]) for entity, ops in entries], validate_only=validate_only)


def describe(components, strict=False):
    return D[1](components=[D.ComponentData(entity_type=t, match_type=m, match=n)
                            for t, m, n in components], strict=strict)


def test_alter_each_entry_on_its_own_then_describe(listener):
    answer = wire.call(address(listener), alter([
        ([("client-id", "test")], [("producer_byte_rate", 1000)]),
        ([("user", None)], [("consumer_byte_rate", 2048), ("request_percentage", 50)]),
        ([("client-id", "bad")], [("producer_byte_rate", -1)]),
        ([("client-id", "bad")], [("producer_byte_rate", 1.5)]),
        ([("ip", "1.2.3.4")], [("connection_creation_rate", 5)]),
        ([("user", "x")], [("not_a_quota", 5)]),
    ]), 1)
    assert [(e.error_code, [(p.entity_type, p.entity_name) for p in e.entity])
            for e in answer.entries] == [
        (Code.NONE, [("client-id", "test")]), (Code.NONE, [("user", None)]),
        (Code.INVALID_REQUEST, [("client-id", "bad")]),
        (Code.INVALID_REQUEST, [("client-id", "bad")]),
        (Code.INVALID_REQUEST, [("ip", "1.2.3.4")]),
        (Code.INVALID_REQUEST, [("user", "x")])]
    assert "must be a number > 0" in answer.entries[2].error_message
    assert "unknown quota key 'not_a_quota'" in answer.entries[5].error_message

    def described(components, strict=False):
        got = wire.call(address(listener), describe(components, strict), 1)
        assert got.error_code == Code.NONE
        return sorted(([(p.entity_type, p.entity_name) for p in e.entity],
                       sorted((v.key, v.value) for v in e.values)) for e in got.entries)

    assert described([]) == [
        ([("client-id", "test")], [("producer_byte_rate", 1000.0)]),
        ([("user", None)], [("consumer_byte_rate", 2048.0), ("request_percentage", 50.0)])]
    assert described([("user", 1, None)]) == [
        ([("user", None)], [("consumer_byte_rate", 2048.0), ("request_percentage", 50.0)])]
    assert described([("client-id", 0, "other")]) == []
    # removal; validate_only changes nothing
    assert wire.call(address(listener), alter([([("user", None)], [
        ("request_percentage", None)])], validate_only=True), 1).entries[0].error_code == 0
    assert len(described([("user", 2, None)])[0][1]) == 2
    wire.call(address(listener), alter([([("user", None)], [("request_percentage", None)])]), 1)
    assert described([("user", 2, None)]) == [
        ([("user", None)], [("consumer_byte_rate", 2048.0)])]
    bad = wire.call(address(listener), describe([("user", 7, None)]), 1)
    assert bad.error_code == Code.INVALID_REQUEST


def test_an_answer_over_the_quota_carries_its_throttle_and_the_connection_waits(listener):
    wire.call(address(listener), alter([([("client-id", "test")],
                                         [("producer_byte_rate", 100)])]), 1)

    def following() -> bool:
        return listener.quotas.quotas.active

    deadline = time.monotonic() + 10
    while not following():  # the listener's follower takes the change
        assert time.monotonic() < deadline, "the listener never saw the quota"
        time.sleep(0.01)
    with wire.connect(address(listener)) as sock:
        request = produce(kafka_batch(RECORDS))
        sock.sendall(wire.frame(request, 9))
        first = wire.response(sock, 0, 9)[1]
        assert partition_answer(first).error_code == Code.NONE
        # some 150 bytes over 0.5 s: about 300/s, held back about 1 s
        assert first.throttle_time_ms > 0
        assert listener.throttled == 0
        sock.sendall(wire.frame(fetch(0), 12, correlation_id=2))
        answer = wire.response(sock, 1, 12)[1]
        assert answer.responses[0].partitions[0].error_code == Code.NONE
        # the connection took the fetch only once the produce's throttle time had passed
        assert listener.throttled == 1
    # another client id is not held back
    other = produce(kafka_batch(RECORDS))
    with wire.connect(address(listener)) as sock:
        sock.sendall(wire.frame(other, 9, client_id="someone-else"))
        assert wire.response(sock, 0, 9)[1].throttle_time_ms == 0


def test_a_fetch_over_the_consumer_quota_says_so(listener):
    wire.call(address(listener), produce(kafka_batch(RECORDS)), 9)
    wire.call(address(listener), alter([([("user", "ANONYMOUS")],
                                         [("consumer_byte_rate", 10)])]), 1)
    deadline = time.monotonic() + 10
    while not listener.quotas.quotas.active:
        assert time.monotonic() < deadline, "the listener never saw the quota"
        time.sleep(0.01)
    answer = wire.call(address(listener), fetch(0), 12)
    assert answer.responses[0].partitions[0].records  # answered, not refused
    assert answer.throttle_time_ms > 0
