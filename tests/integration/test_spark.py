"""Ray Data and Spark on Ray (a real RayDP session) reading and writing topics."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
import ray

from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.errors import (
    InvalidOffsetRangeError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    UnknownTopicError,
)
from raylog.integrations import spark as raylog_spark
from raylog.integrations.ray_data import read_topic, write_dataset
from raylog.integrations.ray_data.ranges import Timestamp
from raylog.records.partitioner import key_partition

# An hour ago, whenever the tests run: the topic keeps the default 7-day retention, which
# would delete records stamped with any fixed date once that date is a week old.
BASE_TS = time.time_ns() // 1_000_000 - 3_600_000


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


@pytest.fixture(scope="module")
def filled(admin) -> tuple[str, dict[TopicPartition, list[dict]]]:
    """A 3-partition topic with 900 known records (keys, headers, timestamps)."""
    topic = "spark-source"
    admin.create_topic(topic, partitions=3)
    expected: dict[TopicPartition, list[dict]] = {}
    with Producer(linger_ms=1) as producer:
        futures = []
        for i in range(900):
            record = {"key": b"user-%d" % (i % 13), "value": b"view-%d" % i,
                      "headers": [("service", b"web-%d" % (i % 3))] if i % 2 else [],
                      "timestamp": BASE_TS + i * 10}
            futures.append((record, producer.send(topic, record["value"], key=record["key"],
                                                  headers=record["headers"] or None,
                                                  timestamp=record["timestamp"])))
        for record, future in futures:
            meta = future.result(timeout=60)
            expected.setdefault(TopicPartition(topic, meta.partition), []).append(
                {**record, "offset": meta.offset})
    return topic, expected


def rows_of(rows: list[dict]) -> list[tuple]:
    """Comparable (partition, offset, key, value, headers, timestamp ms) tuples."""
    out = []
    for r in rows:
        ts = r["timestamp"]
        ms = int(ts.replace(tzinfo=UTC).timestamp() * 1000) if isinstance(ts, datetime) else ts
        headers = [(h["key"], bytes(h["value"])) for h in r["headers"] or []]
        out.append((r["partition"], r["offset"], bytes(r["key"]) if r["key"] else None,
                    bytes(r["value"]), headers, ms))
    return sorted(out)


def expected_rows(expected, start=None, end=None) -> list[tuple]:
    out = []
    for tp, records in expected.items():
        for r in records:
            if (start is None or r["offset"] >= start.get(tp, 0)) and \
                    (end is None or r["offset"] < end.get(tp, 1 << 62)):
                out.append((tp.partition, r["offset"], r["key"], r["value"],
                            list(r["headers"]), r["timestamp"]))
    return sorted(out)


def test_dataset_holds_exactly_what_was_produced(filled):
    topic, expected = filled
    dataset = read_topic(topic, max_records_per_block=128)
    assert dataset.count() == 900
    rows = dataset.take_all()
    assert {r["topic"] for r in rows} == {topic}
    assert {r["timestampType"] for r in rows} == {0}
    assert rows_of(rows) == expected_rows(expected)


def test_bounded_reads_by_offset_and_time(filled):
    topic, expected = filled
    start = {tp: 7 for tp in expected}
    end = {tp: 7 + 50 for tp in expected}
    assert rows_of(read_topic(topic, start, end).take_all()) == \
        expected_rows(expected, start, end)
    # -2/-1 per partition as in Spark's Kafka source; an int applies to every partition.
    spark_style = {topic: {"0": 3, "1": -2}}
    rows = read_topic(topic, spark_style, -1).take_all()
    assert rows_of(rows) == expected_rows(expected, {TopicPartition(topic, 0): 3})
    # Timestamps: records at or after the time, up to (excluding) the end time.
    middle = Timestamp(BASE_TS + 4500)
    rows = read_topic(topic, middle, {"timestamp": BASE_TS + 6000}).take_all()
    assert sorted(r["value"] for r in rows) == sorted(
        b"view-%d" % i for i in range(450, 600))
    # As ray.data.read_kafka takes them: datetimes, and {topic: {partition: ...}} maps.
    at = datetime.fromtimestamp((BASE_TS + 4500) / 1000, UTC)
    until = datetime.fromtimestamp((BASE_TS + 6000) / 1000, UTC)
    by_name = read_topic(topics=topic, start_offset=at, end_offset=until, timeout_ms=60_000)
    assert sorted(r["value"] for r in by_name.take_all()) == sorted(r["value"] for r in rows)
    mapped = read_topic(topic, start_offset={topic: {0: 3, 1: "earliest"}}, end_offset="latest")
    assert rows_of(mapped.take_all()) == expected_rows(expected, {TopicPartition(topic, 0): 3})


def test_override_num_blocks_sets_the_blocks(filled):
    topic, expected = filled
    dataset = read_topic(topic, override_num_blocks=6)
    blocks = dataset.materialize().num_blocks()
    assert len(expected) <= blocks <= 6 + len(expected) - 1
    assert dataset.count() == 900


def test_bad_bounds_and_topics_are_refused(filled):
    topic, _ = filled
    with pytest.raises(UnknownTopicError):
        read_topic("no-such-topic")
    with pytest.raises(OffsetOutOfRangeError, match="past the end"):
        read_topic(topic, "earliest", {TopicPartition(topic, 0): 10_000})
    with pytest.raises(InvalidOffsetRangeError, match="before start"):
        read_topic(topic, 20, 10)
    with pytest.raises(InvalidOffsetRangeError):
        read_topic(topic, "yesterday")


def test_spark_dataframe_holds_exactly_what_was_produced(spark, filled):
    topic, expected = filled
    frame = raylog_spark.read(spark, topic)
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType", "headers"]
    assert frame.count() == 900
    rows = [r.asDict(recursive=True) for r in frame.collect()]
    assert rows_of(rows) == expected_rows(expected)
    start = {tp: 100 for tp in expected}
    bounded = raylog_spark.read(spark, topic, start, "latest")
    assert bounded.count() == sum(len(v) - 100 for v in expected.values())
    assert raylog_spark.read(spark, topic, "latest", "latest").count() == 0
    # Ranges cut into many small tasks read the same records; headers can be left out.
    cut = raylog_spark.read(spark, topic, max_records_per_task=70, include_headers=False)
    assert cut.rdd.getNumPartitions() >= 900 // 70
    assert "headers" not in cut.columns
    assert sorted(tuple(r) for r in cut.select("partition", "offset", "value").collect()) == \
        sorted((p, o, v) for p, o, _, v, _, _ in expected_rows(expected))


def test_dataframe_and_dataset_write_back(spark, admin, filled, topic_name):
    topic, expected = filled
    admin.create_topic(topic_name, partitions=4)
    frame = raylog_spark.read(spark, topic).selectExpr("key", "value", "headers")
    assert raylog_spark.write(frame, topic_name) == 900
    back = read_topic(topic_name).take_all()
    assert Counter(bytes(r["value"]) for r in back) == Counter(
        r["value"] for rs in expected.values() for r in rs)
    for r in back:  # partitioned as the producer would
        assert r["partition"] == key_partition(bytes(r["key"]), 4)
    dataset = ray.data.from_arrow(pa.table({"value": [f"extra-{i}" for i in range(30)]}))
    assert write_dataset(dataset, topic_name) == 30
    assert read_topic(topic_name).count() == 930


def test_writing_without_a_value_column_is_refused(spark, admin, topic_name):
    admin.create_topic(topic_name)
    frame = spark.createDataFrame([("k", "v")], ["key", "payload"])
    with pytest.raises(InvalidRecordError, match="value"):
        raylog_spark.write(frame, topic_name)
    with pytest.raises(InvalidRecordError, match="value"):
        write_dataset(ray.data.from_items([{"payload": b"x"}]), topic_name)
    with pytest.raises(UnknownTopicError):
        write_dataset(ray.data.from_items([{"value": b"x"}]), "no-such-topic")
    assert read_topic(topic_name).count() == 0


class Crash(Exception):
    pass


def test_micro_batches_resume_after_a_crash_without_skipping(spark, admin, topic_name):
    admin.create_topic(topic_name, partitions=2)
    with Producer() as producer:
        for i in range(200):
            producer.send(topic_name, b"%d" % i, partition=i % 2)
    group = f"mb-{topic_name}"
    processed: list[list[int]] = []

    def batches():
        return raylog_spark.micro_batches(spark, topic_name, group, stop_when_idle=True,
                                          max_records_per_partition=40)

    with pytest.raises(Crash):
        for k, frame in enumerate(batches()):
            values = sorted(int(r.value) for r in frame.select("value").collect())
            if k == 2:
                raise Crash  # dies while processing the third batch
            processed.append(values)
    assert len(processed) == 2
    crashed_at = len(processed)
    for frame in batches():  # the restarted job
        processed.append(sorted(int(r.value) for r in frame.select("value").collect()))
    everything = [v for batch in processed for v in batch]
    assert sorted(everything) == list(range(200))  # nothing skipped, nothing twice
    assert len(processed) == crashed_at + 1  # the interrupted batch, whole, came again
    with Consumer(group_id=group) as consumer:
        committed = consumer.committed([TopicPartition(topic_name, p) for p in (0, 1)])
    assert committed == {TopicPartition(topic_name, 0): 100, TopicPartition(topic_name, 1): 100}


def test_the_analytics_example_writes_top_pages(spark, admin, topic_name):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import pageview_analytics

    admin.create_topic(topic_name, partitions=3)
    minute = 60_000
    start = (int(time.time() * 1000) // minute) * minute - 5 * minute
    views = [("web", "/home")] * 5 + [("web", "/cart")] * 3 + [("web", "/help")] * 2 + \
        [("web", "/blog")] * 1 + [("mobile", "/home")] * 2 + [("mobile", "/deals")] * 4
    with Producer() as producer:
        for m in range(2):
            for i, (service, page) in enumerate(views):
                doc = {"service": service, "user": f"u{i}", "page": page, "duration_ms": 10}
                producer.send(topic_name, json.dumps(doc).encode(), key=b"u%d" % i,
                              timestamp=start + m * minute + i)
    output = f"{topic_name}-stats"
    written = pageview_analytics.run(spark, topic_name, output, top_n=2)
    assert written == 2 * (2 + 2)  # 2 minutes x (web: 2 pages, mobile: 2 pages)
    results = [json.loads(r["value"]) for r in read_topic(output).take_all()]
    web = sorted((r["minute"], r["rank"], r["page"], r["views"]) for r in results
                 if r["service"] == "web")
    minutes = sorted({r["minute"] for r in results})
    assert len(minutes) == 2
    assert web == sorted([(m, 1, "/home", 5) for m in minutes] +
                         [(m, 2, "/cart", 3) for m in minutes])
    mobile = {(r["rank"], r["page"], r["views"]) for r in results if r["service"] == "mobile"}
    assert mobile == {(1, "/deals", 4), (2, "/home", 2)}
