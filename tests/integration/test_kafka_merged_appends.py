"""The Kafka listener's merged appends (raylog/kafka/gateway/appends.py): a broker's
``produce_batches`` answers each batch with its own offsets or its own error, and a
non-idempotent acks=1 producer's batches, merged, land where each was acknowledged."""

from __future__ import annotations

import time

import pyarrow as pa
import ray
from confluent_kafka import Producer as KafkaProducer

from raylog.errors import CorruptRecordError, FencedEpochError, NotLeaderError
from raylog.records import encode
from raylog.records.payload import PAYLOAD_SCHEMA
from tests.integration.conftest import consume_all, kafka_listener_backend

PARTITIONS = 3


def batch(*values: bytes) -> bytes:
    now = int(time.time() * 1000)
    return encode(pa.record_batch([[now] * len(values), [None] * len(values), list(values),
                                   [[]] * len(values)], schema=PAYLOAD_SCHEMA))


def test_produce_batches_answers_each_batch_with_its_own_offsets_or_error(ray_cluster, topic):
    meta = ray_cluster.raylog.topic(topic, refresh=True)
    leader = meta.partitions[0].leader_client()
    elsewhere = next(p for p in range(1, PARTITIONS)
                     if meta.partitions[p].leader_client().broker_id != leader.broker_id)
    epoch = leader.leader_epoch
    corrupt = bytearray(batch(b"bad"))
    corrupt[-5] ^= 0xFF  # inside the payload: its CRC no longer holds
    answers = ray.get(leader.handle.produce_batches.remote([
        (topic, 0, epoch, batch(b"a", b"b")),
        (topic, 0, epoch, bytes(corrupt)),
        (topic, elsewhere, meta.partitions[elsewhere].leader_epoch, batch(b"x")),
        (topic, 0, epoch - 1, batch(b"fenced")),
        (topic, 0, epoch, batch(b"c")),
    ], 1, 30_000))
    assert (answers[0].base_offset, answers[0].record_count) == (0, 2)
    assert isinstance(answers[1], CorruptRecordError)
    assert isinstance(answers[2], NotLeaderError)  # this broker does not lead it
    assert isinstance(answers[3], FencedEpochError)
    assert (answers[4].base_offset, answers[4].record_count) == (2, 1)
    read = [r for r in consume_all(topic, PARTITIONS, 3) if r.partition == 0]
    assert [(r.offset, r.value) for r in read] == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_merged_batches_land_where_each_was_acknowledged(ray_cluster, topic):
    """One call in flight per broker: the batches of a non-idempotent acks=1 producer that
    come meanwhile leave together. Each record is read at the partition and offset its
    delivery report gave, once."""
    with kafka_listener_backend(ray_cluster.raylog, append_calls_in_flight=1) as \
            (bootstrap, backend):
        producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": 1,
                                  "enable.idempotence": False, "linger.ms": 1,
                                  "batch.num.messages": 50, "compression.type": "lz4"})
        delivered, failed = {}, []

        def report(error, message) -> None:
            if error is not None:
                failed.append(error)
            else:
                delivered[message.value()] = (message.partition(), message.offset())

        n = 20_000
        for i in range(n):
            producer.produce(topic, value=b"value-%06d" % i, partition=i % PARTITIONS,
                             on_delivery=report)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0 and failed == []
        calls, batches = backend.appends_sent
    assert len(delivered) == n
    assert batches >= n // 50 and calls < batches  # batches did share calls
    read = consume_all(topic, PARTITIONS, n)
    assert {r.value: (r.partition, r.offset) for r in read} == delivered
    assert len(read) == n
