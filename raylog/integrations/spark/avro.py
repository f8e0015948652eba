"""Spark: a topic's Avro values (Confluent's wire format) as typed columns.

``raylog.integrations.spark.read(spark, topic, value_format="avro")`` is the connector's option
``valueFormat`` ``avro``, which decodes in the JVM with Apache Avro's Java library (in
pyspark's jars; Spark's own ``from_avro`` is in ``spark-avro``, which pyspark does not ship
and nothing may download): :func:`value_fields_first` only lays its columns out.

``via="arrow"`` is the fallback without the connector, through Spark's Python workers
(``mapInArrow``): each worker gets its ranges from the nearest in-sync replica as Arrow
tables and decodes the values with fastavro into the reader schema's columns
(raylog/integrations/ray_data/avro.py), resolving each value's writer schema (by its id)
against the reader schema, the latest of ``<topic>-value`` unless given: Python, one value
at a time.
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa

from raylog.records.kafka_columns import KAFKA_SCHEMA
from raylog.types import TopicPartition


def _spark_ready(table: pa.Table, include_headers: bool) -> pa.Table:
    """What Spark's Arrow bridge takes: timestamps in microseconds UTC, times as integers
    (Spark has no time type), and no headers unless asked for."""
    if not include_headers and "headers" in table.column_names:
        table = table.drop_columns(["headers"])
    for i, field in enumerate(table.schema):
        target = None
        if pa.types.is_timestamp(field.type):
            target = pa.timestamp("us", tz="UTC")
        elif pa.types.is_time32(field.type):
            target = pa.int32()
        elif pa.types.is_time64(field.type):
            target = pa.int64()
        if target is not None:
            table = table.set_column(i, field.name, table.column(i).cast(target))
    return table


def value_fields_first(frame: Any) -> Any:
    """The connector's frame with a typed ``value`` as the Python path lays it out: a
    record's fields, then the Kafka columns they do not shadow (any other value type stays
    the column ``value``, first)."""
    from pyspark.sql.types import StructType

    value_type = frame.schema["value"].dataType
    if isinstance(value_type, StructType):
        first = [frame["value"].getField(f).alias(f) for f in value_type.fieldNames()]
        shadowed = set(value_type.fieldNames())
    else:
        first, shadowed = [frame["value"]], set()
    return frame.select(*first, *[frame[c] for c in frame.columns
                                  if c != "value" and c not in shadowed])


def avro_frame(spark: Any, ranges: dict[TopicPartition, tuple[int, int]],
               max_records_per_task: int, include_headers: bool, reader: str) -> Any:
    """The DataFrame of these offset ranges, values decoded with ``reader`` (a schema)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from raylog.integrations.spark.workers import python_frame

    convert = functools.partial(_avro_for_spark, include_headers, reader)
    empty = convert(KAFKA_SCHEMA.empty_table())
    return python_frame(spark, ranges, max_records_per_task, from_arrow_schema(empty.schema),
                        convert)


def _avro_for_spark(include_headers: bool, reader: str, table: pa.Table) -> pa.Table:
    """In a Spark Python worker: a range's Kafka table, values decoded into typed columns,
    as Spark's Arrow bridge takes it."""
    from raylog.integrations.ray_data.avro import decode_block

    return _spark_ready(decode_block(table, reader), include_headers)
