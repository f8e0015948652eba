"""Transactions through the Java connector, ``format("raylog")``, in a real RayDP session:
batch and streaming reads with an isolation level, and batch writes in transactions
(docs/spark.md, "Transactions")."""

from __future__ import annotations

import pytest

from raylog import Admin, Producer
from raylog.metadata.topics import TRANSACTION_STATE_TOPIC
from raylog.transactions.log import TRANSACTION_STATE_PARTITIONS
from raylog.types import TopicPartition
from tests.integration.conftest import read_to_ends, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

COMMITTED, ABORTED, OPEN, AFTER = 40, 30, 20, 10


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


def send_all(producer: Producer, topic: str, prefix: str, count: int) -> None:
    for i in range(count):
        producer.send(topic, b"%s-%d" % (prefix.encode(), i), key=b"k%d" % (i % 5))
    producer.flush(60)


@pytest.fixture(scope="module")
def transactional(admin) -> tuple[str, Producer]:
    """A topic holding a committed transaction, an aborted one, one left open, and plain
    records written after the open one began (behind the last stable offset)."""
    topic = "spark-txn-source"
    admin.create_topic(topic, partitions=2)
    producer = Producer(transactional_id="spark-txn-source", linger_ms=2)
    producer.init_transactions(60)
    producer.begin_transaction()
    send_all(producer, topic, "committed", COMMITTED)
    producer.commit_transaction(60)
    producer.begin_transaction()
    send_all(producer, topic, "aborted", ABORTED)
    producer.abort_transaction(60)
    producer.begin_transaction()
    send_all(producer, topic, "open", OPEN)  # sent, neither committed nor aborted
    with Producer(linger_ms=2) as plain:
        send_all(plain, topic, "after", AFTER)
    yield topic, producer
    producer.close()


def values(frame) -> list[str]:
    return sorted(r.v for r in frame.selectExpr("CAST(value AS STRING) v").collect())


def expected(*groups: tuple[str, int]) -> list[str]:
    return sorted(f"{prefix}-{i}" for prefix, count in groups for i in range(count))


def test_read_committed_reads_committed_transactions_only(spark, transactional):
    topic, _ = transactional
    reader = spark.read.format("raylog").option("subscribe", topic)
    committed = reader.option("kafka.isolation.level", "read_committed").load()
    # Stored batches (values), the broker's Arrow path (no values), and a count, which is
    # not answered from offsets: aborted records and markers hold offsets.
    assert values(committed) == expected(("committed", COMMITTED))
    assert committed.select("offset").count() == COMMITTED
    assert len(committed.select("partition", "offset").collect()) == COMMITTED
    raylogs_spelling = spark.read.format("raylog").option("subscribe", topic) \
        .option("isolationLevel", "read_committed").load()
    assert values(raylogs_spelling) == expected(("committed", COMMITTED))

    everything = expected(("committed", COMMITTED), ("aborted", ABORTED), ("open", OPEN),
                          ("after", AFTER))
    assert values(spark.read.format("raylog").option("subscribe", topic).load()) == everything
    assert values(reader.option("kafka.isolation.level", "read_uncommitted").load()) \
        == everything


def test_streaming_read_committed_ends_at_the_last_stable_offset(spark, transactional,
                                                                  tmp_path):
    topic, _ = transactional

    def run(name: str, **options) -> list[str]:
        stream = spark.readStream.format("raylog").option("subscribe", topic) \
            .option("startingOffsets", "earliest")
        for key, value in options.items():
            stream = stream.option(key, value)
        query = (stream.load().selectExpr("CAST(value AS STRING) v").writeStream
                 .format("memory").queryName(name)
                 .option("checkpointLocation", str(tmp_path / name))
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None
        return sorted(r.v for r in spark.sql(f"SELECT v FROM {name}").collect())

    assert run("txn_committed", **{"kafka.isolation.level": "read_committed"}) \
        == expected(("committed", COMMITTED))
    assert run("txn_uncommitted") == expected(("committed", COMMITTED), ("aborted", ABORTED),
                                              ("open", OPEN), ("after", AFTER))


def read_values(spark, topic: str, **options) -> list[str]:
    reader = spark.read.format("raylog").option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return values(reader.load())


def test_a_transactional_write_commits_every_row_once(spark, admin):
    topic = "spark-txn-write"
    admin.create_topic(topic, partitions=2)
    frame = spark.range(0, 90, 1, numPartitions=3).selectExpr("CONCAT('w-', id) AS value")
    for _ in range(2):  # the same transactional id again: its producers are fenced anew
        frame.write.format("raylog").option("topic", topic) \
            .option("transactional.id", "spark-txn-write").mode("append").save()
    assert read_values(spark, topic, **{"kafka.isolation.level": "read_committed"}) \
        == sorted([f"w-{i}" for i in range(90)] * 2)


@pytest.mark.parametrize("host, point", [
    ("controller", "transactions.joint_commit_decided"),
    ("gateway", "spark_writer.committed_jointly"),
])
def test_a_transactional_write_survives_a_death_right_after_its_commit_was_decided(
        spark, admin, ray_cluster, tmp_path, host, point):
    """The driver commits the tasks' transactions in one joint commit, whose decision record
    is the commit point of all. The coordinator's host (the controller) dies right after
    that record is durable, before any task's transaction is prepared to commit; or the
    writer gateway that asked dies before answering. Either way the driver's call is asked
    again (the same write id), the restarted controller finishes the decision it replays,
    and every row is read_committed, once."""
    topic = f"spark-txn-decided-{host}"
    admin.create_topic(topic, partitions=2)
    frame = spark.range(0, 90, 1, numPartitions=3).selectExpr("CONCAT('d-', id) AS value")
    died = tmp_path / f"{host}-died"
    with ray_cluster.failpoints({point: f"exit-once:{died}"}):
        frame.write.format("raylog").option("topic", topic) \
            .option("transactional.id", f"spark-decided-{host}").mode("append").save()
    assert died.exists()  # it died where the fail point is
    committed = {"kafka.isolation.level": "read_committed"}
    rows = sorted(f"d-{i}" for i in range(90))
    wait_for(lambda: read_values(spark, topic, **committed) == rows, timeout=120,
             what="every row of the write read_committed")
    assert read_values(spark, topic) == rows  # nothing written twice or aborted
    # One decision was written: the driver's retry was answered from the decision the
    # restarted controller replayed (or held), not decided again; once every task's
    # transaction committed, the decision's tombstone followed.
    prefix = f'["joint_commit", "spark-decided-{host}@'.encode()

    def decision_records() -> list[bytes | None]:
        tps = [TopicPartition(TRANSACTION_STATE_TOPIC, p)
               for p in range(TRANSACTION_STATE_PARTITIONS)]
        return [r.value for r in read_to_ends(tps) if r.key.startswith(prefix)]

    def removed() -> list[bytes | None] | None:
        values = decision_records()
        return values if None in values else None

    # (In the active segment of its partition: compaction has not touched it.)
    found = wait_for(removed, timeout=60, what="the decision's tombstone")
    assert len(found) == 2 and found[0] is not None and found[1] is None


def test_a_transactional_write_failing_midway_leaves_no_row_committed(spark, admin):
    topic = "spark-txn-failing"
    admin.create_topic(topic, partitions=2)
    # Rows of 200 KB: the first two tasks finish (their transactions open), then the last
    # one's row 235 raises after it handed the gateway three batches of about 4 MB (two at a
    # time: the first was acknowledged).
    frame = spark.range(0, 240, 1, numPartitions=3).selectExpr(
        "CASE WHEN id = 235 THEN CAST(raise_error('a failing row') AS STRING) "
        "ELSE CONCAT('f-', id, ':', REPEAT('x', 200000)) END AS value")
    with pytest.raises(Exception, match="a failing row"):
        frame.write.format("raylog").option("topic", topic) \
            .option("transactional.id", "spark-txn-failing").mode("append").save()
    written = read_values(spark, topic)
    assert len(written) >= 160 + 20  # the two tasks' rows and a batch of the third: aborted
    committed = {"kafka.isolation.level": "read_committed"}
    assert read_values(spark, topic, **committed) == []
    # Aborted, not left open: a later row is read_committed at once (the last stable offset
    # is past them).
    with Producer(linger_ms=2) as plain:
        send_all(plain, topic, "later", 3)
    assert read_values(spark, topic, **committed) == expected(("later", 3))


def test_a_streaming_query_killed_mid_batch_writes_each_record_once(spark, admin, ray_cluster,
                                                                   tmp_path):
    """A streaming query with ``transactional.id`` dies in its first micro-batch after the
    driver committed one task's transaction: the writer gateway holding both is killed (a
    fail point) right after that commit, so the other task's transaction is lost open and
    the batch fails. Restarted from its checkpoint, the query reruns the batch: the task
    whose transaction committed writes nothing, the other writes its rows again, and the
    later batches follow. read_committed readers see every input record once."""
    source, sink, records = "spark-txn-stream-in", "spark-txn-stream-out", 120
    admin.create_topic(source, partitions=2)
    admin.create_topic(sink, partitions=2)
    with Producer(linger_ms=2) as plain:
        for i in range(records):
            plain.send(source, b"s-%d" % i, partition=i % 2)
        plain.flush(60)

    def start():
        # Micro-batches of 40 records, 20 of each source partition: two tasks each
        # (minPartitions: tasks cut by offsets alone, the same when a batch is rerun).
        return (spark.readStream.format("raylog").option("subscribe", source)
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 40)
                .option("minPartitions", 2)
                .load().select("value")
                .writeStream.format("raylog").option("topic", sink)
                .option("transactional.id", "spark-stream")
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(availableNow=True).start())

    died = tmp_path / "gateway-died"
    with ray_cluster.failpoints({"spark_writer.committed": f"exit-once:{died}"}):
        query = start()
        with pytest.raises(Exception, match=r"(?i)actor|died|unavailable"):
            query.awaitTermination(300)
    assert died.exists()  # the gateway died after the batch's first commit
    query = start()
    query.awaitTermination(300)
    assert query.exception() is None
    committed = read_values(spark, sink, **{"kafka.isolation.level": "read_committed"})
    assert committed == expected(("s", records))
    # The other task's first attempt is in the log, aborted: the rerun wrote it again.
    assert len(read_values(spark, sink)) > records
