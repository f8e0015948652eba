"""Spark's own Kafka source (``format("kafka")``: spark-sql-kafka-0-10 for the installed
Spark, from Maven Central) reading and writing raylog topics through the Kafka listener, in
the session's shared RayDP session, cross-read with ``format("raylog")`` and raylog's clients.

A module of its own, named to run after the other Spark tests: the source's jars are added
to the running session (ADD JAR), and the session is created by the first test that needs
it, which must come after the tests that remove broker nodes (test_restarts, the replication
scenarios), since an executor placed on a removed node takes the session down with it.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.java_deps import spark_kafka_jars
from tests.integration.test_kafka_clients import (
    java_partition,
    native_rows,
    produce_native,
    record,
)

pytestmark = [pytest.mark.cluster]


@pytest.fixture(scope="module")
def spark_kafka(spark) -> object:
    """The session's Spark with its Kafka source (spark-sql-kafka-0-10, from Maven Central)
    added to the running session: ADD JAR puts each jar on the driver's session class loader
    and ships it to the executors."""
    for jar in spark_kafka_jars():
        spark.sql(f"ADD JAR '{jar}'")
    return spark


def spark_rows(frame) -> list[tuple]:
    columns = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
               "headers"]
    return sorted(tuple(tuple(tuple(h) for h in r["headers"] or []) if c == "headers"
                        else r[c] for c in columns) for r in frame.select(*columns).collect())


@pytest.mark.spark
def test_spark_format_kafka_reads_what_format_raylog_reads(gateway, topic, spark_kafka):
    n = 240
    produce_native(topic, n)

    def read(source: str, **options: str):
        reader = spark_kafka.read.format(source).option("includeHeaders", "true")
        if source == "kafka":
            reader = reader.option("kafka.bootstrap.servers", gateway)
        for key, value in {"subscribe": topic, **options}.items():
            reader = reader.option(key, value)
        return reader.load()

    everything = read("kafka", startingOffsets="earliest", endingOffsets="latest")
    rows = spark_rows(everything)
    assert len(rows) == n
    assert rows == spark_rows(read("raylog", startingOffsets="earliest",
                                   endingOffsets="latest"))
    for key, value, _, partition, _, _, timestamp_type, headers in rows:
        i = int(key.split(b"-")[1])
        assert (bytes(value), partition, timestamp_type) == (record(i)[1],
                                                             java_partition(key), 0)
        assert [(k, bytes(v)) for k, v in headers] == record(i)[2]

    # offsets per partition, -2 earliest and -1 latest, as Spark's Kafka source takes them
    starting = json.dumps({topic: {"0": 5, "1": -2, "2": 3}})
    ending = json.dumps({topic: {"0": 20, "1": 7, "2": -1}})
    bounded = spark_rows(read("kafka", startingOffsets=starting, endingOffsets=ending))
    assert bounded == spark_rows(read("raylog", startingOffsets=starting,
                                      endingOffsets=ending))
    assert {(r[3], r[4]) for r in bounded} == {(r[3], r[4]) for r in rows if
                                               (r[3] == 0 and 5 <= r[4] < 20) or
                                               (r[3] == 1 and r[4] < 7) or
                                               (r[3] == 2 and r[4] >= 3)}


@pytest.mark.spark
def test_spark_format_kafka_writes_through_the_listener(gateway, topic, spark_kafka):
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        StringType,
        StructField,
        StructType,
    )

    n = 150
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                         StructField("headers", ArrayType(StructType([
                             StructField("key", StringType()),
                             StructField("value", BinaryType())])))])
    frame = spark_kafka.createDataFrame([record(i)[:3] for i in range(n)], schema)
    (frame.write.format("kafka").option("kafka.bootstrap.servers", gateway)
     .option("topic", topic).option("kafka.acks", "all").save())
    rows = native_rows(topic, n)
    for i in range(n):
        key, value, headers, _ = record(i)
        assert rows[key][:2] == (value, headers)
        assert rows[key][3] == java_partition(key)  # Spark's producer: the Java client's pick
