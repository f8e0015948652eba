"""Records as Spark's Kafka source shows them, so code written against it ports directly.

Columns: ``key`` and ``value`` (binary), ``topic`` (string), ``partition`` (int32),
``offset`` (int64), ``timestamp`` (timestamp, ms), ``timestampType`` (int32: 0 CreateTime,
1 LogAppendTime) and ``headers`` (list of struct<key: string, value: binary>).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from raylog.records.header import TimestampType
from raylog.records.payload import HEADERS_TYPE
from raylog.util.ray_inline import inline_limit

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


# Spark's Kafka source columns, in its order: what the Java connector may ask for by name.
SPARK_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
                 "headers")
# Spark's Arrow bridge reads TimestampType as microseconds since the epoch, UTC.
SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")
# Decoded stored batches are often small (a producer's batch); a columnar reader pays per
# Arrow batch, so chunks below this many rows on average are merged before shipping.
MIN_ROWS_PER_SPARK_BATCH = 4096


def spark_table(table: pa.Table, topic: str, partition: int, columns: list[str] | tuple[str, ...],
                timestamp_type: TimestampType = TimestampType.CREATE_TIME) -> pa.Table:
    """Only ``columns`` (names of SPARK_COLUMNS, any order) of a TABLE_SCHEMA table, laid out
    as Spark's columnar readers take them: timestamps in microseconds UTC. With no column
    asked for, the ``offset`` column alone (a reader counting rows needs the row count, which
    an Arrow batch without columns does not carry). Columns that repeat one value (topic,
    partition, timestampType) are built only when asked for."""
    unknown = [c for c in columns if c not in SPARK_COLUMNS]
    if unknown:
        raise ValueError(f"unknown columns {unknown}; expected some of {list(SPARK_COLUMNS)}")
    n = table.num_rows
    if n and table.num_columns and table.column(0).num_chunks > 1 and \
            n / table.column(0).num_chunks < MIN_ROWS_PER_SPARK_BATCH:
        table = table.combine_chunks()

    def column(name: str) -> pa.ChunkedArray | pa.Array:
        if name == "topic":
            return pa.repeat(pa.scalar(topic, pa.string()), n)
        if name == "partition":
            return pa.repeat(pa.scalar(partition, pa.int32()), n)
        if name == "timestampType":
            return pa.repeat(pa.scalar(int(timestamp_type), pa.int32()), n)
        if name == "timestamp":
            return pc.multiply(table.column("timestamp"), 1000).cast(SPARK_TIMESTAMP)
        if name == "headers":
            return _null_when_empty(table.column("headers"))
        return table.column(name)

    names = list(columns) or ["offset"]
    # Columns may be chunked differently: the IPC writer cuts batches where any column does.
    return pa.Table.from_arrays([column(name) for name in names], names=names)


def _null_when_empty(headers: pa.ChunkedArray) -> pa.ChunkedArray:
    """Headers with null for a record without any, as Spark's Kafka source shows them."""
    chunks = []
    for chunk in headers.chunks:
        empty = pc.equal(pc.list_value_length(chunk), 0)
        if not pc.any(empty).as_py():
            chunks.append(chunk)
            continue
        offsets = chunk.offsets  # of a slice: rebased onto its own values, flatten()
        offsets = pc.subtract(offsets, offsets[0])
        chunks.append(pa.ListArray.from_arrays(offsets, chunk.flatten(), type=chunk.type,
                                               mask=pc.or_kleene(empty, pc.is_null(chunk))))
    return pa.chunked_array(chunks, type=headers.type)


def analytics_block(table: pa.Table, limit: int | None = None) -> pa.Table | bytes:
    """``table`` as an actor answers it to analytics readers (a Ray Data block, a Spark
    worker's range): as an Arrow IPC stream in ``bytes`` (:func:`ipc_bytes`) when it is
    small enough for Ray to keep the answer inline (at most ``limit`` bytes: this
    process's raylog.util.ray_inline.inline_limit unless given), else as it is. Ray Data
    reads either as the table.

    Ray writes a table's out-of-band buffers at aligned addresses and leaves the gaps between
    them unwritten. An inline answer is written into memory the answering process
    allocates, so its gaps hold what that process freed there (seen: the access key and
    session token of a gateway's signed S3 requests), and its owner keeps those bytes,
    which an ObjectRef pickled with a Dataset carries. ``bytes`` Ray writes whole, and
    Arrow's IPC writer pads with zeros. A larger answer Ray writes into its object store's
    shared memory, not this process's heap, and an ObjectRef pickled does not carry it: it
    goes as the table, without the stream's copies (docs/tiered.md). A table's
    ``nbytes`` counts what its serialized form holds at least, so one Ray keeps inline is
    never above the limit here."""
    return ipc_bytes(table) if table.nbytes <= (inline_limit() if limit is None else limit) \
        else table


def ipc_bytes(table: pa.Table) -> bytes:
    """``table`` as an uncompressed Arrow IPC stream (what Arrow Java's ArrowStreamReader
    reads), one record batch per chunk."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
