"""Transactions through the clients, on the session's 3-broker cluster: the transactional
Producer (init, begin, send, commit, abort) and read_committed consumers. A transaction over
two topics is seen whole by read_committed once committed, never once aborted, and both by
read_uncommitted; a zombie (an older producer of the same transactional id) is fenced and
writes nothing more; a transaction its producer abandons is aborted at its timeout and
read_committed consumers go past it.
"""

from __future__ import annotations

import uuid

import pytest

from raylog import Admin, Consumer, Producer
from raylog.errors import ProducerFencedError
from raylog.types import TopicPartition
from tests.integration.conftest import replica_info, wait_for

PARTITIONS = 2


def new_id(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def two_topics(ray_cluster, topic) -> tuple[str, str]:
    other = f"{topic}-b"
    Admin().create_topic(other, partitions=PARTITIONS, replication_factor=3)
    return topic, other


def transactional(tid: str, **settings) -> Producer:
    producer = Producer(transactional_id=tid, linger_ms=5, **settings)
    producer.init_transactions()
    return producer


def read(topics: tuple[str, ...], isolation: str, until: int | None = None,
         timeout_s: float = 60) -> list[tuple[str, bytes]]:
    """(topic, value) of every record of ``topics``, from the start to each partition's end
    (its last stable offset for read_committed) once those ends are at least ``until``
    records in all (a read_committed end stays behind an open transaction)."""
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    with Consumer(auto_offset_reset="earliest", isolation_level=isolation,
                  fetch_max_wait_ms=100) as consumer:
        consumer.assign(tps)

        def ends() -> dict | None:
            found = consumer.end_offsets(tps)
            return found if until is None or sum(found.values()) >= until else None

        end = wait_for(ends, timeout=timeout_s, what=f"the ends of {topics} ({isolation})")
        got = []

        def progress() -> bool:
            got.extend(consumer.poll(timeout_ms=200))
            return all(consumer.position(tp) >= end[tp] for tp in tps)

        wait_for(progress, timeout=timeout_s, what=f"every record of {topics} ({isolation})")
    return [(r.topic, r.value) for r in got]


def test_read_committed_sees_a_committed_transaction_whole_and_an_aborted_one_never(
        ray_cluster, two_topics):
    a, b = two_topics
    producer = transactional(new_id("app"))
    producer.begin_transaction()
    for i in range(10):
        producer.send(a, b"c-a%d" % i, key=b"%d" % i)
        producer.send(b, b"c-b%d" % i, key=b"%d" % i)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(10):
        producer.send(a, b"x-a%d" % i, key=b"%d" % i)
        producer.send(b, b"x-b%d" % i, key=b"%d" % i)
    producer.flush()  # in the log, then aborted
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(a, b"c-last", partition=0)
    producer.commit_transaction()
    producer.close()
    # 41 records and 8 + 2 markers at most: wait until every end is past the last commit.
    committed = read((a, b), "read_committed", until=41)
    assert sorted(v for _, v in committed) == sorted(
        [b"c-a%d" % i for i in range(10)] + [b"c-b%d" % i for i in range(10)] + [b"c-last"])
    assert len(committed) == 21  # each once
    everything = read((a, b), "read_uncommitted", until=41)
    assert sorted(v for _, v in everything) == sorted(
        [b"%s-%s%d" % (kind, t, i) for kind in (b"c", b"x") for t in (b"a", b"b")
         for i in range(10)] + [b"c-last"])


def test_an_open_transaction_holds_read_committed_back_until_it_commits(ray_cluster, topic):
    producer = transactional(new_id("open"))
    producer.begin_transaction()
    producer.send(topic, b"pending", partition=0)
    producer.flush()
    with Consumer(isolation_level="read_committed") as consumer:
        tp = TopicPartition(topic, 0)
        assert consumer.end_offsets([tp]) == {tp: 0}  # the last stable offset
        producer.commit_transaction()
        wait_for(lambda: consumer.end_offsets([tp])[tp] == 2, timeout=60,
                 what="the commit marker to move the last stable offset")
    assert read((topic,), "read_committed") == [(topic, b"pending")]
    producer.close()


def test_a_zombie_is_fenced_and_writes_nothing_more(ray_cluster, topic):
    tid = new_id("zombie")
    zombie = transactional(tid)
    zombie.begin_transaction()
    zombie.send(topic, b"zombie-1", partition=0).result(timeout=60)
    successor = transactional(tid)  # fences the zombie; its open transaction is aborted
    successor.begin_transaction()
    successor.send(topic, b"successor", partition=0)
    successor.send(topic, b"successor", partition=1)
    successor.commit_transaction()
    late = zombie.send(topic, b"zombie-2", partition=0)  # partition 0 is in its transaction
    with pytest.raises(ProducerFencedError):
        late.result(timeout=60)
    for step in (zombie.commit_transaction, zombie.abort_transaction,
                 lambda: zombie.send(topic, b"zombie-3", partition=1)):
        with pytest.raises(ProducerFencedError):
            step()
    zombie.close()
    successor.close()
    assert sorted(read((topic,), "read_committed", until=2)) == [(topic, b"successor")] * 2
    values = [v for _, v in read((topic,), "read_uncommitted", until=2)]
    assert b"zombie-2" not in values and b"zombie-3" not in values


def test_an_abandoned_transaction_is_aborted_at_its_timeout_and_read_past(ray_cluster, topic):
    admin = Admin()
    abandoned = transactional(new_id("abandoned"), transaction_timeout_ms=2_000)
    abandoned.begin_transaction()
    abandoned.send(topic, b"abandoned", partition=1).result(timeout=60)
    other = transactional(new_id("other"))
    other.begin_transaction()
    other.send(topic, b"committed", partition=1)
    other.commit_transaction()
    # The abandoned transaction holds partition 1's last stable offset back until the
    # coordinator aborts it; then read_committed reads past it to the commit after it.
    wait_for(lambda: replica_info(admin, topic, 1)["last_stable_offset"] ==
             replica_info(admin, topic, 1)["high_watermark"], timeout=90,
             what="the abandoned transaction to be aborted")
    assert read((topic,), "read_committed", until=1) == [(topic, b"committed")]
    with pytest.raises(ProducerFencedError):
        abandoned.commit_transaction()
    abandoned.close()
    other.close()
