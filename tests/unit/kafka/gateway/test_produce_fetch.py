"""Produce, InitProducerId, Fetch, ListOffsets and DeleteRecords on raw sockets, over a
fake cluster whose partitions keep the raylog batches appended to them."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.admin import DeleteRecordsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from raylog.errors import NotEnoughReplicasError, NotLeaderError
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.listener import KafkaListener, ListenerThread
from raylog.records import parse_header, read_records
from raylog.storage.txn_index import AbortedTxn
from tests.unit.kafka.builders import kafka_batch, read_kafka, with_attributes
from tests.unit.kafka.gateway import wire

RECORDS = [(1_700_000_000_000, b"k1", b"v1", [("h", b"x")]),
           (1_700_000_000_001, None, b"v2", []),
           (1_700_000_000_002, b"k3", None, [("a", None), ("b", b"")])]


@pytest.fixture
def addr(backend):
    with ListenerThread(KafkaListener(backend, port=0)) as running:
        yield running.listener.host, running.listener.port


def produce(records: bytes, topic: str = "orders", partition: int = 0, acks: int = -1,
            transactional_id: str | None = None, version: int = 9) -> ProduceRequest:
    P = ProduceRequest
    return P[version](transactional_id=transactional_id, acks=acks, timeout_ms=1000,
                      topic_data=[P.TopicProduceData(name=topic, partition_data=[
                          P.TopicProduceData.PartitionProduceData(index=partition,
                                                                  records=records)])])


def fetch(offset: int, partition: int = 0, version: int = 12, epoch: int = -1,
          max_wait_ms: int = 0, min_bytes: int = 0, isolation_level: int = 0) -> FetchRequest:
    F = FetchRequest
    return F[version](replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                      max_bytes=1 << 20, isolation_level=isolation_level, session_id=0,
                      session_epoch=-1,
                      topics=[F.FetchTopic(topic="orders", partitions=[F.FetchTopic.FetchPartition(
                          partition=partition, current_leader_epoch=epoch,
                          fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                          partition_max_bytes=1 << 20)])],
                      forgotten_topics_data=[], rack_id="")


def partition_answer(answer):
    return answer.responses[0].partition_responses[0]


@pytest.mark.parametrize("produce_version,fetch_version", [(3, 4), (7, 10), (9, 12),
                                                           (11, 12)])
def test_records_produced_are_fetched_identically(addr, backend, produce_version,
                                                  fetch_version):
    first = partition_answer(wire.call(addr, produce(kafka_batch(RECORDS),
                                                     version=produce_version),
                                       produce_version))
    assert (first.error_code, first.base_offset) == (Code.NONE, 0)
    second = partition_answer(wire.call(addr, produce(kafka_batch(RECORDS[:1]),
                                                      version=produce_version),
                                        produce_version))
    assert (second.error_code, second.base_offset) == (Code.NONE, 3)
    answer = wire.call(addr, fetch(0, version=fetch_version), fetch_version)
    assert answer.error_code == Code.NONE and answer.session_id == 0
    part = answer.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark, part.last_stable_offset) == (Code.NONE, 4, 4)
    batches = read_kafka(part.records)
    assert [b[0][0] for b in batches] == [0, 3]  # base offsets
    got = [r for _, recs in batches for r in recs]
    want = [(i, ts, k, v, [tuple(h) for h in hs]) for i, (ts, k, v, hs) in
            enumerate(RECORDS + RECORDS[:1])]
    assert got == want
    # what raylog stored is the same records, as raylog's own reader sees them
    stored = read_records(b"".join(backend.logs[("orders", 0)]))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in stored] == \
        [(i, ts, k, v) for i, ts, k, v, _ in want]


def test_a_fetch_from_inside_a_batch_returns_the_whole_batch(addr):
    wire.call(addr, produce(kafka_batch(RECORDS)), 9)
    part = wire.call(addr, fetch(2), 12).responses[0].partitions[0]
    [(fields, recs)] = read_kafka(part.records)
    assert fields[0] == 0 and [r[0] for r in recs] == [0, 1, 2]


def test_producer_fields_are_kept_so_retries_are_recognised(addr, backend):
    batch = kafka_batch(RECORDS, producer_id=77, producer_epoch=2, base_sequence=5)
    wire.call(addr, produce(batch), 9)
    header = parse_header(backend.logs[("orders", 0)][0])
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, 5)
    part = wire.call(addr, fetch(0), 12).responses[0].partitions[0]
    [(fields, _)] = read_kafka(part.records)
    assert fields[7:10] == (77, 2, 5)


def _legacy(magic: int) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1 if magic else None, key=b"k", value=b"v")
    return bytes(builder.build())


def _corrupt() -> bytes:
    batch = bytearray(kafka_batch(RECORDS))
    batch[-1] ^= 0xFF
    return bytes(batch)


@pytest.mark.parametrize("records,code", [
    (_legacy(0), Code.UNSUPPORTED_FOR_MESSAGE_FORMAT),
    (_legacy(1), Code.UNSUPPORTED_FOR_MESSAGE_FORMAT),
    (_corrupt(), Code.CORRUPT_MESSAGE),
    (kafka_batch(RECORDS)[:30], Code.CORRUPT_MESSAGE),
])
def test_bad_records_are_refused_and_nothing_is_stored(addr, backend, records, code):
    part = partition_answer(wire.call(addr, produce(records, version=3), 3))
    assert (part.error_code, part.base_offset) == (code, -1)
    assert backend.calls == [] and backend.logs == {}


@pytest.mark.parametrize("request_,code", [
    (produce(kafka_batch(RECORDS), acks=2), Code.INVALID_REQUIRED_ACKS),
    (produce(kafka_batch(RECORDS), topic="nope"), Code.UNKNOWN_TOPIC_OR_PARTITION),
    (produce(kafka_batch(RECORDS), partition=9), Code.UNKNOWN_TOPIC_OR_PARTITION),
])
def test_refused_produce_requests(addr, backend, request_, code):
    part = partition_answer(wire.call(addr, request_, 9))
    assert part.error_code == code
    assert backend.logs == {}


@pytest.mark.parametrize("error,code", [
    (NotLeaderError("moved"), Code.NOT_LEADER_OR_FOLLOWER),
    (NotEnoughReplicasError("isr"), Code.NOT_ENOUGH_REPLICAS),
])
def test_cluster_errors_become_kafka_codes(addr, backend, error, code):
    backend.fail_appends = error
    assert partition_answer(wire.call(addr, produce(kafka_batch(RECORDS)), 9)).error_code == code


def test_acks_0_is_not_answered_and_is_appended(addr, backend):
    with wire.connect(addr) as sock:
        sock.sendall(wire.frame(produce(kafka_batch(RECORDS), acks=0), 9, correlation_id=1)
                     + wire.frame(fetch(0), 12, correlation_id=2))
        correlation, answer = wire.response(sock, 1, 12)
    assert correlation == 2
    assert [r[0] for _, recs in read_kafka(answer.responses[0].partitions[0].records)
            for r in recs] == [0, 1, 2]


def test_pipelined_produces_are_appended_in_request_order(addr, backend):
    with wire.connect(addr) as sock:
        sock.sendall(b"".join(wire.frame(produce(kafka_batch([(i, None, b"%d" % i, [])])), 9,
                                         correlation_id=i) for i in range(20)))
        answers = [wire.response(sock, 0, 9) for _ in range(20)]
    assert [(c, partition_answer(a).base_offset) for c, a in answers] == \
        [(i, i) for i in range(20)]
    assert [r.value for r in read_records(b"".join(backend.logs[("orders", 0)]))] == \
        [b"%d" % i for i in range(20)]


@pytest.mark.parametrize("version", [0, 2, 3, 4])
def test_init_producer_id(addr, version):
    fresh = wire.call(addr, InitProducerIdRequest[version](
        transactional_id=None, transaction_timeout_ms=60000), version)
    assert fresh.error_code == Code.NONE and fresh.producer_id >= 0
    assert fresh.producer_epoch == 0
    other = wire.call(addr, InitProducerIdRequest[version](
        transactional_id=None, transaction_timeout_ms=60000), version)
    assert other.producer_id != fresh.producer_id
    if version >= 3:
        bumped = wire.call(addr, InitProducerIdRequest[version](
            transactional_id=None, transaction_timeout_ms=60000,
            producer_id=fresh.producer_id, producer_epoch=0), version)
        assert (bumped.producer_id, bumped.producer_epoch) == (fresh.producer_id, 1)


def test_fetch_errors_and_leader_epochs(addr, backend):
    wire.call(addr, produce(kafka_batch(RECORDS)), 9)
    out_of_range = wire.call(addr, fetch(99), 12).responses[0].partitions[0]
    assert out_of_range.error_code == Code.OFFSET_OUT_OF_RANGE
    fenced = wire.call(addr, fetch(0, epoch=1), 12).responses[0].partitions[0]
    assert fenced.error_code == Code.FENCED_LEADER_EPOCH  # the fake's leaders are at 3
    current = wire.call(addr, fetch(0, epoch=3), 12).responses[0].partitions[0]
    assert current.error_code == Code.NONE and current.records


def test_fetch_waits_for_min_bytes_up_to_max_wait(addr, backend):
    part = wire.call(addr, fetch(0, max_wait_ms=200, min_bytes=1), 12).responses[0]
    assert (part.partitions[0].error_code, part.partitions[0].records) == (Code.NONE, b"")
    assert ("fetch", "orders", 0, 0) in backend.calls
    assert len([c for c in backend.calls if c[0] == "fetch"]) == 2  # a pass, then a wait


def test_list_offsets(addr, backend):
    wire.call(addr, produce(kafka_batch(RECORDS)), 9)
    L = ListOffsetsRequest

    def ask(timestamp: int, version: int = 7, isolation_level: int = 0):
        return wire.call(addr, L[version](replica_id=-1, isolation_level=isolation_level,
                                          topics=[
            L.ListOffsetsTopic(name="orders", partitions=[L.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])]),
            version).topics[0].partitions[0]

    assert (ask(-2).offset, ask(-2).error_code) == (0, Code.NONE)
    assert ask(-1).offset == 3
    assert ask(-1, version=1).offset == 3
    assert ask(-1).leader_epoch == 3
    assert (ask(1_700_000_000_001).offset, ask(1_700_000_000_001).timestamp) == \
        (0, 1_700_000_000_002)
    assert (ask(1_800_000_000_000).offset, ask(1_800_000_000_000).timestamp) == (-1, -1)
    assert ask(-3).error_code == Code.UNSUPPORTED_VERSION
    # read_committed: the latest offset is the last stable one
    backend.stable[("orders", 0)] = 1
    assert ask(-1, isolation_level=1).offset == 1
    assert ask(-1, version=2, isolation_level=1).offset == 1
    assert ask(-1).offset == 3


def test_a_transactional_produce_keeps_the_batch_transactional(addr, backend):
    data = with_attributes(kafka_batch(RECORDS, producer_id=5, producer_epoch=1,
                                       base_sequence=0), 0x10)
    part = partition_answer(wire.call(addr, produce(data, transactional_id="tx"), 9))
    assert (part.error_code, part.base_offset) == (Code.NONE, 0)
    (stored,) = backend.logs[("orders", 0)]
    header = parse_header(stored)
    assert header.transactional and (header.producer_id, header.producer_epoch) == (5, 1)


@pytest.mark.parametrize("version", [4, 5, 12])
def test_a_read_committed_fetch_answers_the_lso_and_the_aborted_transactions(
        addr, backend, version):
    for i in range(3):
        wire.call(addr, produce(kafka_batch([RECORDS[i]])), 9)
    backend.stable[("orders", 0)] = 2
    backend.aborted[("orders", 0)] = [AbortedTxn(77, 1, 5, 0)]
    committed = wire.call(addr, fetch(0, version=version, isolation_level=1),
                          version).responses[0].partitions[0]
    assert (committed.high_watermark, committed.last_stable_offset) == (3, 2)
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == \
        [(77, 1)]
    assert [r[0] for _, recs in read_kafka(committed.records) for r in recs] == [0, 1]
    # read_uncommitted: everything below the high watermark, no aborted transactions
    plain = wire.call(addr, fetch(0, version=version), version).responses[0].partitions[0]
    assert (plain.last_stable_offset, plain.aborted_transactions) == (3, None)
    assert [r[0] for _, recs in read_kafka(plain.records) for r in recs] == [0, 1, 2]


def test_delete_records(addr, backend):
    D = DeleteRecordsRequest
    answer = wire.call(addr, D[2](topics=[D.DeleteRecordsTopic(name="orders", partitions=[
        D.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=1, offset=0)])],
        timeout_ms=1000), 2)
    part = answer.topics[0].partitions[0]
    assert (part.error_code, part.low_watermark) == (Code.NONE, 0)
    assert backend.calls == [("delete_records", "orders", 1, 0)]


def test_a_produce_request_of_the_wrong_shape_closes_the_connection(addr, backend):
    with wire.connect(addr) as sock:
        body = struct.pack(">hhih", 0, 9, 1, -1) + b"\x00" * 3
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert wire.closed(sock)
    assert backend.calls == []


def test_a_connection_reads_ahead_and_never_answers_a_stale_empty_read(addr, backend):
    wire.call(addr, produce(kafka_batch(RECORDS)), 9)
    with wire.connect(addr) as sock:
        sock.sendall(wire.frame(fetch(0), 12, correlation_id=1))
        first = wire.response(sock, 1, 12)[1].responses[0].partitions[0]
        assert [r[0] for _, recs in read_kafka(first.records) for r in recs] == [0, 1, 2]
        # what follows offset 2 was asked for at once (and found nothing yet)
        assert ("fetch", "orders", 0, 3) in backend.calls
        wire.call(addr, produce(kafka_batch(RECORDS[:2])), 9)
        sock.sendall(wire.frame(fetch(3), 12, correlation_id=2))
        second = wire.response(sock, 1, 12)[1].responses[0].partitions[0]
        assert second.high_watermark == 5
        assert [r[0] for _, recs in read_kafka(second.records) for r in recs] == [3, 4]
        # a fetch from another offset drops the read ahead and reads afresh
        sock.sendall(wire.frame(fetch(1), 12, correlation_id=3))
        third = wire.response(sock, 1, 12)[1].responses[0].partitions[0]
        assert [r[0] for _, recs in read_kafka(third.records) for r in recs] == [0, 1, 2, 3, 4]
