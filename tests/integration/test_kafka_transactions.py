"""Kafka transactions through the Kafka listener (raylog/kafka/gateway/transactions.py), on
the session's multi-node cluster, with confluent-kafka (librdkafka): a transactional
producer's commit over two topics read whole by a read_committed consumer, an aborted
transaction never seen by read_committed and seen by read_uncommitted, and a second producer
of the same transactional.id fencing the first; with the controller's txn_offset_commit
(branch txn-groups), offsets sent to a transaction committed with it and dropped at an abort.

Every confluent-kafka call has a deadline (librdkafka's own or the call's), so a failure
fails the test instead of hanging it.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from raylog import Admin
from tests.integration.conftest import wait_for

PARTITIONS = 2
CALL_TIMEOUT_S = 60  # init, commit, abort: the coordinator's load and writes on a busy machine


@pytest.fixture
def topics(topic) -> list[str]:
    """Two fresh topics of PARTITIONS partitions."""
    other = f"{topic}-b"
    Admin().create_topic(other, partitions=PARTITIONS, replication_factor=3)
    return [topic, other]


def transactional_producer(bootstrap: str, transactional_id: str) -> KafkaProducer:
    producer = KafkaProducer({"bootstrap.servers": bootstrap,
                              "transactional.id": transactional_id, "linger.ms": 5,
                              "message.timeout.ms": CALL_TIMEOUT_S * 1000})
    producer.init_transactions(CALL_TIMEOUT_S)
    return producer


def produce_all(producer: KafkaProducer, topics: list[str], values: list[bytes]) -> None:
    """Every value to every topic, round robin over the partitions, in the open
    transaction; each delivery checked."""
    failed = []

    def report(error, message) -> None:
        if error is not None:
            failed.append(error)

    for topic in topics:
        for i, value in enumerate(values):
            producer.produce(topic, value=value, partition=i % PARTITIONS, on_delivery=report)
    assert producer.flush(CALL_TIMEOUT_S) == 0, "records left undelivered"
    assert failed == []


def read(bootstrap: str, topics: list[str], isolation: str, expected: int) -> list[bytes]:
    """The values of every partition of ``topics`` from offset 0, read at ``isolation``
    until ``expected`` have come."""
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                              "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([KafkaTopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)])
    got: list[bytes] = []
    try:
        def progress() -> bool:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is not None:
                    assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                    continue
                got.append(message.value())
            return len(got) >= expected

        wait_for(progress, timeout=90, what=f"{expected} records read {isolation}")
    finally:
        consumer.close()
    return got


def test_committed_transactions_are_read_and_an_aborted_one_only_read_uncommitted(
        gateway, topics):
    producer = transactional_producer(gateway, f"tx-{uuid.uuid4().hex[:8]}")
    first = [b"first-%d" % i for i in range(10)]
    aborted = [b"aborted-%d" % i for i in range(10)]
    last = [b"last-%d" % i for i in range(10)]
    producer.begin_transaction()
    produce_all(producer, topics, first)
    producer.commit_transaction(CALL_TIMEOUT_S)
    producer.begin_transaction()
    produce_all(producer, topics, aborted)
    producer.abort_transaction(CALL_TIMEOUT_S)
    producer.begin_transaction()
    produce_all(producer, topics, last)
    producer.commit_transaction(CALL_TIMEOUT_S)

    # read_committed: both committed transactions whole in both topics, nothing aborted
    # (the last transaction follows the aborted one in every partition: had an aborted
    # record been delivered, it would have come before them)
    committed = read(gateway, topics, "read_committed", 2 * (len(first) + len(last)))
    assert sorted(committed) == sorted((first + last) * 2)
    # read_uncommitted: the aborted records too (the markers are never records)
    everything = read(gateway, topics, "read_uncommitted",
                      2 * (len(first) + len(aborted) + len(last)))
    assert sorted(everything) == sorted((first + aborted + last) * 2)


def test_a_second_producer_of_the_same_transactional_id_fences_the_first(gateway, topics):
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    zombie = transactional_producer(gateway, transactional_id)
    zombie.begin_transaction()
    produce_all(zombie, topics[:1], [b"zombie-%d" % i for i in range(5)])

    # The new producer's init aborts the zombie's open transaction and bumps the epoch.
    successor = transactional_producer(gateway, transactional_id)
    successor.begin_transaction()
    produce_all(successor, topics[:1], [b"successor-%d" % i for i in range(5)])
    successor.commit_transaction(CALL_TIMEOUT_S)

    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(CALL_TIMEOUT_S)
    error = caught.value.args[0]
    assert error.fatal(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                            KafkaError.INVALID_PRODUCER_EPOCH), error
    got = read(gateway, topics[:1], "read_committed", 5)
    assert sorted(got) == sorted(b"successor-%d" % i for i in range(5))


def test_offsets_sent_to_a_transaction_commit_with_it(ray_cluster, gateway, topics):
    source, sink = topics
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer({"bootstrap.servers": gateway, "group.id": group,
                              "enable.auto.commit": False})
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(gateway, transactional_id)
    try:
        def offsets(first: int, second: int) -> list[KafkaTopicPartition]:
            return [KafkaTopicPartition(source, 0, first), KafkaTopicPartition(source, 1, second)]

        producer.begin_transaction()
        produce_all(producer, [sink], [b"out-%d" % i for i in range(4)])
        producer.send_offsets_to_transaction(offsets(3, 5), consumer.consumer_group_metadata(),
                                             CALL_TIMEOUT_S)
        producer.commit_transaction(CALL_TIMEOUT_S)
        producer.begin_transaction()  # an aborted transaction's offsets are dropped
        produce_all(producer, [sink], [b"dropped"])
        producer.send_offsets_to_transaction(offsets(7, 9), consumer.consumer_group_metadata(),
                                             CALL_TIMEOUT_S)
        producer.abort_transaction(CALL_TIMEOUT_S)

        def committed() -> list[int]:
            return [tp.offset for tp in consumer.committed(offsets(0, 0), timeout=10)]

        # The abort's markers (the group's too) are written after abort_transaction returns:
        # until they are, the aborted offsets are pending and the committed ones read back
        # whether the abort drops them or not.
        controller = ray_cluster.raylog.controller
        wait_for(lambda: controller.txn_describe(transactional_id)["state"] == "COMPLETE_ABORT",
                 timeout=60, what="the abort to complete")
        assert committed() == [3, 5]
    finally:
        consumer.close()
