"""The Java connector, ``format("raylog")``, in a real RayDP session on the test cluster:
every option of Spark's Kafka source it takes, the schema, count and column pushdown,
streaming with a checkpoint, the sinks, and a broker restarting in the middle of a scan."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pytest
import ray

from raylog import Admin, Producer
from raylog.records.partitioner import key_partition
from raylog.util.cluster_names import CONTROLLER_NAME, NAMESPACE
from tests.integration.conftest import consume_all, leader_broker, wait_for
from tests.integration.failover import lagging_new_leader

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

NOW_MS = time.time_ns() // 1_000_000
BASE_TS = NOW_MS - 3_600_000  # an hour ago: inside any retention
RECORDS = 600
KAFKA_SCHEMA = ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                "timestamp:timestamp,timestampType:int>")
KAFKA_HEADERS = "headers:array<struct<key:string,value:binary>>"


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


def produce(topic: str, count: int, first: int = 0, ts: int = BASE_TS) -> dict[int, list]:
    """``count`` records (key, value, timestamp, headers on odd ones); their offsets by
    partition, as the producer's acknowledgements gave them."""
    by_partition: dict[int, list] = {}
    with Producer(linger_ms=2) as producer:
        futures = []
        for i in range(first, first + count):
            headers = [("n", b"%d" % i)] if i % 2 else None
            futures.append((i, producer.send(topic, b"value-%d" % i, key=b"key-%d" % (i % 11),
                                             headers=headers, timestamp=ts + i)))
        for i, future in futures:
            meta = future.result(timeout=60)
            by_partition.setdefault(meta.partition, []).append((meta.offset, i))
    return by_partition


@pytest.fixture(scope="module")
def source(admin) -> tuple[str, dict[int, list]]:
    topic = "connector-source"
    admin.create_topic(topic, partitions=3)
    return topic, produce(topic, RECORDS)


def read(spark, **options):
    reader = spark.read.format("raylog")
    for key, value in options.items():
        reader = reader.option(key, value if isinstance(value, str) else json.dumps(value))
    return reader.load()


def plan(frame) -> str:
    return frame._jdf.queryExecution().executedPlan().toString()


def test_schema_is_spark_kafka_sources(spark, source):
    topic, _ = source
    frame = read(spark, subscribe=topic)
    assert frame.schema.simpleString() == KAFKA_SCHEMA
    assert all(field.nullable for field in frame.schema.fields)
    with_headers = read(spark, subscribe=topic, includeHeaders="true").schema
    assert with_headers.simpleString() == KAFKA_SCHEMA[:-1] + "," + KAFKA_HEADERS + ">"


def test_batch_read_holds_every_record_once(spark, source):
    topic, produced = source
    rows = read(spark, subscribe=topic, includeHeaders="true").collect()
    got = sorted((r.partition, r.offset, bytes(r.value), bytes(r.key),
                  [(h.key, bytes(h.value)) for h in r.headers or []], r.topic, r.timestampType)
                 for r in rows)
    want = sorted((p, offset, b"value-%d" % i, b"key-%d" % (i % 11),
                   [("n", b"%d" % i)] if i % 2 else [], topic, 0)
                  for p, records in produced.items() for offset, i in records)
    assert got == want
    stamps = read(spark, subscribe=topic).selectExpr("unix_millis(timestamp) ms", "value")
    assert sorted(r.ms for r in stamps.collect()) == [BASE_TS + i for i in range(RECORDS)]


def test_offsets_json_pattern_and_assign(spark, source, admin):
    topic, produced = source
    ends = {str(p): len(records) for p, records in produced.items()}
    bounded = read(spark, subscribe=topic,
                   startingOffsets={topic: {"0": 5, "1": -2, "2": -2}},
                   endingOffsets={topic: {"0": -1, "1": 7, "2": -1}})
    assert bounded.count() == (int(ends["0"]) - 5) + 7 + int(ends["2"])
    assert read(spark, subscribePattern="connector-sou.*").count() == RECORDS
    assert read(spark, subscribePattern="connector-sou").count() == 0  # matches whole names
    assigned = read(spark, assign={topic: [2]})
    assert {r.partition for r in assigned.select("partition").distinct().collect()} == {2}
    assert assigned.count() == int(ends["2"])


def test_starting_by_timestamp(spark, source):
    topic, produced = source
    cut = BASE_TS + 400  # records 400.. have timestamps at or after it
    assert read(spark, subscribe=topic, startingTimestamp=str(cut)).count() == RECORDS - 400
    by_partition = {topic: {str(p): cut for p in produced}}
    frame = read(spark, subscribe=topic, startingOffsetsByTimestamp=by_partition)
    assert frame.count() == RECORDS - 400
    late = {topic: {str(p): NOW_MS + 10_000_000 for p in produced}}
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        read(spark, subscribe=topic, startingOffsetsByTimestamp=late).count()
    assert read(spark, subscribe=topic, startingOffsetsByTimestamp=late,
                startingOffsetsByTimestampStrategy="latest").count() == 0


def test_out_of_range_starts_follow_fail_on_data_loss(spark, source):
    topic, produced = source
    beyond = {topic: {"0": 100_000, "1": -2, "2": -2}}
    with pytest.raises(Exception, match="failOnDataLoss") as raised:
        read(spark, subscribe=topic, startingOffsets=beyond).count()
    assert "beyond the offsets it holds" in str(raised.value)
    lenient = read(spark, subscribe=topic, startingOffsets=beyond, failOnDataLoss="false")
    assert lenient.count() == len(produced[1]) + len(produced[2])


def test_bad_options_are_refused_with_kafka_messages(spark, source):
    topic, _ = source
    cases = [({}, "One of the following options must be specified"),
             ({"subscribe": topic, "assign": {topic: [0]}}, "Only one of"),
             ({"subscribe": topic, "startingOffsets": "latest"}, "latest"),
             ({"subscribe": topic, "endingOffsets": "earliest"}, "earliest"),
             ({"subscribe": topic, "startingOffsets": "{not json"}, "startingOffsets"),
             ({"subscribe": topic, "startingOffsets": {topic: {"0": 1}}}, "every partition"),
             ({"subscribe": topic, "minPartitions": "0"}, "minPartitions"),
             ({"subscribe": "no-such-topic-here"}, "no-such-topic-here")]
    for options, message in cases:
        with pytest.raises(Exception, match=message):
            read(spark, **options).count()


def test_min_partitions_splits_ranges(spark, source):
    topic, _ = source
    frame = read(spark, subscribe=topic, minPartitions="7").select("offset", "partition")
    assert frame.rdd.getNumPartitions() >= 7
    rows = frame.collect()
    assert len(rows) == RECORDS == len({(r.partition, r.offset) for r in rows})
    capped = read(spark, subscribe=topic, maxRecordsPerPartition="50").select("offset")
    assert capped.rdd.getNumPartitions() >= RECORDS // 50


def test_count_from_offsets_and_column_pruning(spark, source, admin):
    topic, produced = source
    frame = read(spark, subscribe=topic)
    counted = frame.groupBy().count()
    assert "count by" in plan(counted)
    assert counted.collect()[0][0] == RECORDS
    per_partition = frame.groupBy("partition").count()
    assert "count by" in plan(per_partition)
    assert {r.partition: r["count"] for r in per_partition.collect()} == \
        {p: len(records) for p, records in produced.items()}
    pruned = frame.select("partition", "offset")
    assert "struct<partition:int,offset:bigint>" in plan(pruned)
    assert "value" not in plan(pruned).split("struct<")[1]
    compacted = "connector-compacted"
    admin.create_topic(compacted, partitions=1, configs={"cleanup.policy": "compact"})
    produce(compacted, 20)
    compacted_count = read(spark, subscribe=compacted).groupBy().count()
    assert "count by" not in plan(compacted_count)  # offsets have gaps there: scanned
    assert compacted_count.collect()[0][0] == 20


def test_streaming_available_now_resumes_from_its_checkpoint(spark, admin, tmp_path):
    topic = "connector-stream"
    admin.create_topic(topic, partitions=2)
    produce(topic, 300)
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "out")

    def run(**extra) -> list:
        stream = spark.readStream.format("raylog").option("subscribe", topic)
        for key, value in extra.items():
            stream = stream.option(key, value)
        query = (stream.load().selectExpr("partition", "offset", "CAST(value AS STRING) v")
                 .writeStream.format("parquet").option("checkpointLocation", checkpoint)
                 .option("path", out).trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None
        return query.recentProgress

    progress = run(maxOffsetsPerTrigger="100", startingOffsets="earliest")
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sum(sizes) == 300 and len(sizes) >= 3 and max(sizes) <= 100  # shares rounded down
    end = progress[-1]["sources"][0]["endOffset"]
    assert sum(end[topic].values()) == 300  # Kafka's offsets JSON: {"topic": {"0": n}}
    produce(topic, 250, first=300)
    run()  # restarted from the checkpoint: only the new records
    rows = spark.read.parquet(out).collect()
    assert sorted(int(r.v[6:]) for r in rows) == list(range(550))  # none skipped, none twice


def test_streaming_starts_where_the_checkpoint_says(spark, admin, tmp_path):
    """startingOffsets=latest is fixed at the first run: a restart before any batch keeps it."""
    topic = "connector-latest"
    admin.create_topic(topic, partitions=1)
    produce(topic, 40)
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> int:
        query = (read_stream(spark, topic).load()  # from the latest offsets, as Kafka's
                 .selectExpr("CAST(value AS STRING) v").writeStream.format("parquet")
                 .option("path", str(tmp_path / "out")).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None
        return sum(p["numInputRows"] for p in query.recentProgress)

    assert run() == 0
    produce(topic, 10, first=40)
    assert run() == 10
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.v for r in rows) == sorted(f"value-{i}" for i in range(40, 50))


def test_batch_and_streaming_writes_land_where_kafka_would(spark, admin, source, tmp_path):
    topic, _ = source
    target = "connector-sink"
    admin.create_topic(target, partitions=4)
    rows = [(f"user-{i % 17}", f"v{i}", [("h", b"x")] if i % 3 == 0 else []) for i in range(200)]
    frame = spark.createDataFrame(rows, "key string, value string, "
                                        "headers array<struct<key:string,value:binary>>")
    frame.write.format("raylog").option("topic", target).save()
    with pytest.raises(Exception, match="Save mode Overwrite not allowed"):
        frame.write.format("raylog").option("topic", target).mode("overwrite").save()
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        frame.select("key").write.format("raylog").option("topic", target).save()
    written = consume_all(target, 4, 200)
    assert len(written) == 200
    for record in written:
        assert record.partition == key_partition(record.key, 4)
        i = int(record.value[1:])
        assert (list(record.headers or []) == [("h", b"x")]) == (i % 3 == 0)

    query = (read_stream(spark, topic).option("startingOffsets", "earliest").load()
             .selectExpr("key", "value", "'connector-sink' AS topic")
             .writeStream.format("raylog").option("checkpointLocation", str(tmp_path / "c"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    assert len(consume_all(target, 4, 200 + RECORDS)) == 200 + RECORDS


def test_asking_again_for_a_nodes_writer_leaves_the_one_writing(admin, ray_cluster):
    """Each Spark task asks the controller for its node's writer gateway. An ask while
    another task writes through it must leave that gateway alive: were it destroyed
    mid-write, the task would send its rows again to a new one and write them twice. A
    gateway that died is replaced."""
    topic = "connector-gateway"
    admin.create_topic(topic, partitions=1)
    controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    node = ray_cluster.cluster.list_all_nodes()[0].node_id
    name = ray.get(controller.java_writer.remote(node))
    gateway = ray.get_actor(name, namespace=NAMESPACE)
    rows = pa.table({"value": [b"v%d" % i for i in range(10)]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as stream:
        stream.write_table(rows)
    batch = sink.getvalue().to_pybytes()
    writes = [gateway.java_write.remote(topic, "", batch)]
    assert all(ray.get(controller.java_writer.remote(node)) == name for _ in range(3))
    deadline = time.monotonic() + 3  # long past the moment a dropped handle takes it down
    while time.monotonic() < deadline or len(writes) < 5:
        writes.append(gateway.java_write.remote(topic, "", batch))
        ray.get(writes[-1], timeout=60)
    assert [json.loads(w)["records"] for w in ray.get(writes)] == [10] * len(writes)
    assert ray.get_actor(name, namespace=NAMESPACE)._actor_id == gateway._actor_id
    assert len(consume_all(topic, 1, 10 * len(writes))) == 10 * len(writes)
    # A gateway that died is replaced, under a new name (a lookup of the old one may still
    # find the dead actor for a while).
    ray.kill(gateway, no_restart=True)
    replacement = ray.get(controller.java_writer.remote(node))
    assert replacement != name
    answer = ray.get_actor(replacement, namespace=NAMESPACE).java_write.remote(topic, "", batch)
    assert json.loads(ray.get(answer, timeout=60))["records"] == 10
    assert ray.get(controller.java_writer.remote(node)) == replacement


def read_stream(spark, topic: str):
    return spark.readStream.format("raylog").option("subscribe", topic)


def test_python_wrappers_go_through_the_connector(spark, source, admin):
    from raylog.integrations import spark as raylog_spark

    topic, _ = source
    frame = raylog_spark.read(spark, topic, {topic: {"0": 3}}, "latest", include_headers=False)
    assert "BatchScan raylog" in plan(frame)
    assert frame.count() == RECORDS - 3
    target = "connector-wrapped"
    admin.create_topic(target, partitions=2)
    assert raylog_spark.write(frame.select("key", "value"), target,
                              producer_settings={"linger_ms": 5}) == RECORDS - 3
    fallback = raylog_spark.read(spark, topic, via="arrow")
    assert "BatchScan raylog" not in plan(fallback)
    assert fallback.count() == RECORDS


def test_a_broker_restarting_mid_scan_loses_nothing(spark, admin, ray_cluster):
    topic = "connector-restart"
    admin.create_topic(topic, partitions=1, replication_factor=3)
    total = 0
    with Producer(linger_ms=5, acks="all") as producer:
        for i in range(120_000):
            producer.send(topic, b"x" * 200, key=b"%d" % i)
        producer.flush(timeout=120)
    total = 120_000 * 200
    result: dict = {}
    frame = read(spark, subscribe=topic).selectExpr("sum(length(value)) s", "count(value) n")

    def scan() -> None:
        try:
            result["row"] = frame.collect()[0]
        except Exception as e:  # reported below
            result["error"] = e

    tracker = spark.sparkContext.statusTracker()
    worker = threading.Thread(target=scan)
    worker.start()
    wait_for(lambda: tracker.getActiveStageIds(), timeout=120, interval=0.02,
             what="the scan to start")
    ray.kill(leader_broker(admin, topic, 0), no_restart=False)
    worker.join(600)
    assert "error" not in result, result.get("error")
    assert (result["row"].s, result["row"].n) == (total, 120_000)
    wait_for(lambda: len(admin.describe_topic(topic)["partitions"][0]["isr"]) == 3,
             timeout=120, what="the restarted broker back in sync")


def test_a_read_planned_before_a_failover_reads_every_record(spark, admin, ray_cluster,
                                                             topic_name):
    """KIP-207 (issue 22 item 9): raylog.integrations.spark.read resolves its offsets at the old
    leader; the DataFrame is read after a clean failover, from a new leader whose high watermark is
    below the start of its epoch until its other in-sync follower (stopped) leaves the ISR
    (replica.lag.time.max.ms). The connector's planning is told the offsets are not
    available yet (retriable), asks again, and reads every record planned."""
    from raylog.integrations import spark as raylog_spark

    # Three brokers serving (an earlier test restarted one: the controller may not count it
    # back yet), for the three replicas.
    wait_for(lambda: sum(b["alive"] and not b["draining"]
                         for b in ray_cluster.brokers().values()) >= 3,
             timeout=120, what="three brokers serving")
    admin.create_topic(topic_name, partitions=1, replication_factor=3,
                       configs={"replica.lag.time.max.ms": 10_000})
    planned: dict = {}
    before, after = 300, 200
    with lagging_new_leader(admin, topic_name, before, after,
                            lambda: planned.update(frame=raylog_spark.read(spark, topic_name))
                            ) as failover:
        assert failover.new != failover.old
        rows = planned["frame"].select("offset", "value").collect()
    assert sorted((r.offset, bytes(r.value)) for r in rows) == \
        [(i, b"v%d" % i) for i in range(before)]
