"""Records as Spark's Kafka source shows them, so code written against it ports directly.

Columns: ``key`` and ``value`` (binary), ``topic`` (string), ``partition`` (int32),
``offset`` (int64), ``timestamp`` (timestamp, ms), ``timestampType`` (int32: 0 CreateTime,
1 LogAppendTime) and ``headers`` (list of struct<key: string, value: binary>).
"""

from __future__ import annotations

import pyarrow as pa

from raylog.records.header import TimestampType
from raylog.records.payload import HEADERS_TYPE

KAFKA_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("ms"), nullable=False),
    pa.field("timestampType", pa.int32(), nullable=False),
    pa.field("headers", HEADERS_TYPE),
])


def kafka_table(table: pa.Table, topic: str, partition: int,
                timestamp_type: TimestampType = TimestampType.CREATE_TIME) -> pa.Table:
    """A TABLE_SCHEMA table of one partition as KAFKA_SCHEMA columns; no per-row Python."""
    n = table.num_rows
    return pa.Table.from_arrays(
        [
            table.column("key"),
            table.column("value"),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            table.column("offset"),
            table.column("timestamp").cast(pa.timestamp("ms")),
            pa.repeat(pa.scalar(int(timestamp_type), pa.int32()), n),
            table.column("headers"),
        ],
        schema=KAFKA_SCHEMA,
    )
