"""The gateway's transactional handlers (raylog/kafka/gateway/transactions.py) on raw
sockets: what each forwards to the controller's transaction coordinator (faked here: it
records the calls and raises what a test sets), and the codes it answers."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

from raylog.errors import (
    ConcurrentTransactionsError,
    InvalidTxnStateError,
    LeaderNotAvailableError,
    ProducerFencedError,
    RequestTimeoutError,
)
from raylog.kafka.gateway.dispatch import default_dispatch
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.listener import KafkaListener, ListenerThread
from tests.unit.kafka.gateway import wire
from tests.unit.kafka.gateway.fake_backend import FakeBackend


class TxnBackend(FakeBackend):
    """The fake cluster, whose controller answers the txn_* calls: each recorded, answered
    with ``answers[method]`` or raising ``fail`` when set."""

    def __init__(self) -> None:
        super().__init__()
        self.add_topic("orders", partitions=2)
        self.txn_calls: list[tuple] = []
        self.fail: BaseException | None = None
        self.answers = {"txn_init_producer_id": (4242, 3),
                        "txn_add_offsets": ("__consumer_offsets", 7)}

    async def controller_call(self, method: str, *args, timeout_s: float):
        self.txn_calls.append((method, *args))
        if self.fail is not None:
            raise self.fail
        return self.answers.get(method)


@pytest.fixture
def gateway():
    backend = TxnBackend()
    with ListenerThread(KafkaListener(backend, port=0,
                                      dispatch=default_dispatch())) as running:
        yield (running.listener.host, running.listener.port), backend


def test_the_transactional_apis_are_advertised_at_the_versions_served():
    ranges = {key: (low, high) for key, low, high in default_dispatch().ranges()}
    assert ranges[22] == (0, 4) and ranges[24] == (0, 3) and ranges[25] == (0, 3)
    assert ranges[26] == (0, 3) and ranges[28] == (0, 3)


@pytest.mark.parametrize("version", [0, 2, 3, 4])
def test_init_producer_id_with_a_transactional_id_asks_the_coordinator(gateway, version):
    addr, backend = gateway
    fields = {"transactional_id": "tx", "transaction_timeout_ms": 30_000}
    if version >= 3:  # KIP-360: a recovering producer names its id and epoch
        fields.update(producer_id=4242, producer_epoch=2)
    answer = wire.call(addr, InitProducerIdRequest[version](**fields), version)
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == \
        (Code.NONE, 4242, 3)
    expected = (4242, 2) if version >= 3 else (-1, -1)
    assert backend.txn_calls == [("txn_init_producer_id", "tx", 30_000, *expected)]


@pytest.mark.parametrize("error,version,code", [
    (ProducerFencedError("fenced"), 4, Code.PRODUCER_FENCED),
    (ProducerFencedError("fenced"), 3, Code.INVALID_PRODUCER_EPOCH),  # before KIP-588
    (ConcurrentTransactionsError("ending"), 4, Code.CONCURRENT_TRANSACTIONS),
    (InvalidTxnStateError("state"), 4, Code.INVALID_TXN_STATE),
    (LeaderNotAvailableError("no leader"), 4, Code.COORDINATOR_NOT_AVAILABLE),
    (RequestTimeoutError("slow"), 4, Code.COORDINATOR_NOT_AVAILABLE),
])
def test_init_producer_id_errors(gateway, error, version, code):
    addr, backend = gateway
    backend.fail = error
    answer = wire.call(addr, InitProducerIdRequest[version](
        transactional_id="tx", transaction_timeout_ms=30_000, producer_id=-1,
        producer_epoch=-1), version)
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (code, -1, -1)


def add_partitions(addr, topics: dict[str, list[int]], version: int = 3):
    R = AddPartitionsToTxnRequest
    answer = wire.call(addr, R[version](
        v3_and_below_transactional_id="tx", v3_and_below_producer_id=4242,
        v3_and_below_producer_epoch=3, v3_and_below_topics=[
            R.AddPartitionsToTxnTopic(name=name, partitions=parts)
            for name, parts in topics.items()]), version)
    return {(t.name, p.partition_index): p.partition_error_code
            for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions(gateway, version):
    addr, backend = gateway
    assert add_partitions(addr, {"orders": [0, 1]}, version) == \
        {("orders", 0): Code.NONE, ("orders", 1): Code.NONE}
    assert backend.txn_calls == [("txn_add_partitions", "tx", 4242, 3,
                                  [("orders", 0), ("orders", 1)])]


def test_add_partitions_with_unknown_ones_adds_nothing(gateway):
    addr, backend = gateway
    assert add_partitions(addr, {"orders": [0, 9], "nope": [0]}) == {
        ("orders", 0): Code.OPERATION_NOT_ATTEMPTED,
        ("orders", 9): Code.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): Code.UNKNOWN_TOPIC_OR_PARTITION}
    assert backend.txn_calls == []


def test_add_partitions_answers_the_coordinators_error_for_every_partition(gateway):
    addr, backend = gateway
    backend.fail = ProducerFencedError("fenced")
    assert add_partitions(addr, {"orders": [0, 1]}) == \
        {("orders", 0): Code.PRODUCER_FENCED, ("orders", 1): Code.PRODUCER_FENCED}
    assert add_partitions(addr, {"orders": [0]}, version=1) == \
        {("orders", 0): Code.INVALID_PRODUCER_EPOCH}


@pytest.mark.parametrize("version", [0, 3])
def test_add_offsets(gateway, version):
    addr, backend = gateway
    answer = wire.call(addr, AddOffsetsToTxnRequest[version](
        transactional_id="tx", producer_id=4242, producer_epoch=3, group_id="g"), version)
    assert answer.error_code == Code.NONE
    assert backend.txn_calls == [("txn_add_offsets", "tx", 4242, 3, "g")]
    backend.fail = InvalidTxnStateError("no transaction")
    answer = wire.call(addr, AddOffsetsToTxnRequest[version](
        transactional_id="tx", producer_id=4242, producer_epoch=3, group_id="g"), version)
    assert answer.error_code == Code.INVALID_TXN_STATE


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("committed", [True, False])
def test_end_txn(gateway, version, committed):
    addr, backend = gateway
    answer = wire.call(addr, EndTxnRequest[version](
        transactional_id="tx", producer_id=4242, producer_epoch=3, committed=committed),
        version)
    assert answer.error_code == Code.NONE
    assert backend.txn_calls == [("txn_end", "tx", 4242, 3, committed)]
    backend.fail = ProducerFencedError("fenced")
    answer = wire.call(addr, EndTxnRequest[version](
        transactional_id="tx", producer_id=4242, producer_epoch=3, committed=committed),
        version)
    assert answer.error_code == (Code.PRODUCER_FENCED if version >= 2
                                 else Code.INVALID_PRODUCER_EPOCH)


def txn_offset_commit(addr, version: int, partitions: dict[tuple[str, int], int],
                      member_id: str = "m-1", generation: int = 4):
    R = TxnOffsetCommitRequest
    fields = {"transactional_id": "tx", "group_id": "g", "producer_id": 4242,
              "producer_epoch": 3, "topics": [
                  R.TxnOffsetCommitRequestTopic(name=name, partitions=[
                      R.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                          partition_index=p, committed_offset=offset,
                          committed_leader_epoch=-1, committed_metadata=None)])
                  for (name, p), offset in partitions.items()]}
    if version >= 3:
        fields.update(generation_id=generation, member_id=member_id, group_instance_id=None)
    answer = wire.call(addr, R[version](**fields), version)
    return {(t.name, p.partition_index): p.error_code
            for t in answer.topics for p in t.partitions}


@pytest.mark.parametrize("version", [0, 2, 3])
def test_txn_offset_commit(gateway, version):
    addr, backend = gateway
    codes = txn_offset_commit(addr, version, {("orders", 0): 10, ("orders", 1): 20,
                                              ("nope", 0): 1})
    assert codes == {("orders", 0): Code.NONE, ("orders", 1): Code.NONE,
                     ("nope", 0): Code.UNKNOWN_TOPIC_OR_PARTITION}
    # before v3 the commit names no member: one outside the group's membership
    member = ("m-1", 4) if version >= 3 else (None, -1)
    assert backend.txn_calls == [("txn_offset_commit", "tx", 4242, 3, "g", *member,
                                  [("orders", 0, 10, ""), ("orders", 1, 20, "")])]
    backend.fail = ProducerFencedError("fenced")
    assert txn_offset_commit(addr, version, {("orders", 0): 11}) == \
        {("orders", 0): Code.PRODUCER_FENCED if version >= 3 else Code.INVALID_PRODUCER_EPOCH}
    backend.fail = InvalidTxnStateError("offsets not added")
    assert txn_offset_commit(addr, version, {("orders", 0): 11}) == \
        {("orders", 0): Code.INVALID_TXN_STATE}
