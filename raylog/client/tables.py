"""Turning a user's Arrow table into per-partition payload columns, without per-row Python."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylog.errors import InvalidRecordError, UnknownPartitionError
from raylog.records.builder import HEADER_ENTRY_OVERHEAD, RECORD_OVERHEAD, batch_capacity
from raylog.records.partitioner import StickyPartitioner, key_partitions
from raylog.records.payload import HEADERS_TYPE, PAYLOAD_SCHEMA, empty_headers
from raylog.util.clocks import wall_clock_ms


def _column(table: pa.Table, name: str, cast_to: pa.DataType) -> pa.ChunkedArray | None:
    if name not in table.column_names:
        return None
    try:
        return table.column(name).cast(cast_to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise InvalidRecordError(
            f"column {name!r} of type {table.schema.field(name).type} cannot be used as "
            f"{cast_to}: {e}") from e


def _timestamps(table: pa.Table) -> pa.ChunkedArray:
    now = wall_clock_ms()
    if "timestamp" not in table.column_names:
        return pa.chunked_array([np.full(table.num_rows, now, dtype=np.int64)], pa.int64())
    column = table.column("timestamp")
    try:
        if pa.types.is_timestamp(column.type):
            # Records carry milliseconds: finer timestamps (pandas' ns) are cut to whole ms.
            column = column.cast(pa.timestamp("ms"), safe=False).cast(pa.int64())
        elif pa.types.is_integer(column.type):
            column = column.cast(pa.int64())
        else:
            raise InvalidRecordError(
                f"column 'timestamp' must hold ms since the epoch or timestamps, "
                f"got {column.type}")
    except pa.ArrowInvalid as e:
        raise InvalidRecordError(f"column 'timestamp' does not fit int64 ms: {e}") from e
    if column.null_count:
        column = column.fill_null(now)
    if len(column) and pc.min(column).as_py() < 0:
        raise InvalidRecordError("column 'timestamp' has negative values")
    return column


def payload_table(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """The payload columns (PAYLOAD_SCHEMA) of a user table with a ``value`` column."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise InvalidRecordError(f"expected a pyarrow Table, got {type(table).__name__}")
    value = _column(table, "value", pa.binary())
    if value is None:
        raise InvalidRecordError(
            f"a table to produce needs a 'value' column; it has {table.column_names}")
    key = _column(table, "key", pa.binary())
    headers = _column(table, "headers", HEADERS_TYPE)
    n = table.num_rows
    return pa.Table.from_arrays(
        [
            _timestamps(table),
            key if key is not None else pa.nulls(n, pa.binary()),
            value,
            headers if headers is not None else empty_headers(n),
        ],
        schema=PAYLOAD_SCHEMA,
    )


def _row_sizes(payload: pa.Table, has_headers: bool) -> np.ndarray:
    sizes = pc.binary_length(payload.column("value")).fill_null(0).to_numpy().astype(np.int64)
    sizes += pc.binary_length(payload.column("key")).fill_null(0).to_numpy()
    sizes += RECORD_OVERHEAD
    if has_headers:
        # Headers are rare on the columnar path; bound them by their flattened bytes.
        flat = pc.list_flatten(payload.column("headers"))
        per_entry = (pc.binary_length(pc.struct_field(flat, [0])).fill_null(0).to_numpy()
                     + pc.binary_length(pc.struct_field(flat, [1])).fill_null(0).to_numpy()
                     + HEADER_ENTRY_OVERHEAD)
        owners = pc.list_parent_indices(payload.column("headers")).to_numpy()
        np.add.at(sizes, owners, per_entry)
    return sizes


def _chunks(payload: pa.Table, batch_size: int) -> list[pa.Table]:
    """Consecutive slices whose records fit one batch of ``batch_size`` bytes each."""
    capacity = batch_capacity(batch_size)
    has_headers = bool(len(pc.list_flatten(payload.column("headers"))))
    ends = np.cumsum(_row_sizes(payload, has_headers))
    # Arrow's IPC writer writes a sliced list column's whole child offsets: copy the rows
    # of each chunk out when there are headers, so a batch carries only its own.
    out, start, base = [], 0, 0
    while start < payload.num_rows:
        end = max(int(np.searchsorted(ends, base + capacity, "right")), start + 1)
        out.append(payload.take(pa.array(np.arange(start, end))) if has_headers
                   else payload.slice(start, end - start))
        base = int(ends[end - 1])
        start = end
    return out


def _rows(payload: pa.Table, indices: np.ndarray) -> pa.Table:
    """The rows at ``indices``: the table itself when that is all of them."""
    return payload if len(indices) == payload.num_rows else payload.take(pa.array(indices))


def partition_rows(table: pa.Table | pa.RecordBatch, num_partitions: int, batch_size: int,
                   *, partition: int | None, topic: str) -> list[tuple[int | None, pa.Table]]:
    """Partition the rows of ``table`` like the producer would and cut them into batches.

    An explicit ``partition``, else a ``partition`` column, else the key's murmur2 partition.
    Returns (partition, payload columns) pairs, each small enough for one batch; keyless rows
    come last with partition None, for :func:`assign_sticky` to place.
    """
    user = pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table
    payload = payload_table(user)
    if partition is not None:
        parts = np.full(payload.num_rows, partition, dtype=np.int64)
    elif "partition" in user.column_names:
        column = user.column("partition")
        if not pa.types.is_integer(column.type) or column.null_count:
            raise InvalidRecordError("column 'partition' must hold integers without nulls")
        parts = column.to_numpy().astype(np.int64)
    elif payload.column("key").null_count < payload.num_rows:
        parts = key_partitions(payload.column("key"), num_partitions)
    else:
        parts = None
    if parts is not None and len(parts) and (parts.min() < -1 or parts.max() >= num_partitions
                                             or (partition is not None and partition < 0)):
        raise UnknownPartitionError(
            f"topic {topic!r} has partitions 0..{num_partitions - 1}; rows ask for "
            f"{int(parts.min())}..{int(parts.max())}")
    out: list[tuple[int | None, pa.Table]] = []
    if parts is not None:
        for part in np.unique(parts[parts >= 0]):
            rows = _rows(payload, np.flatnonzero(parts == part))
            out.extend((int(part), chunk) for chunk in _chunks(rows, batch_size))
        keyless = np.flatnonzero(parts < 0)
        payload = _rows(payload, keyless) if len(keyless) else None
    if payload is not None and payload.num_rows:
        out.extend((None, chunk) for chunk in _chunks(payload, batch_size))
    return out


def assign_sticky(pieces: list[tuple[int | None, pa.Table]], sticky: StickyPartitioner,
                  topic: str, num_partitions: int) -> list[tuple[int, pa.Table]]:
    """Give the keyless pieces (partition None) the sticky partition, one batch each."""
    out = []
    for part, chunk in pieces:
        if part is None:
            part = sticky.partition(topic, num_partitions)
            sticky.next_batch(topic, num_partitions, part)
        out.append((part, chunk))
    return out


def split_for_partitions(table: pa.Table | pa.RecordBatch, num_partitions: int,
                         batch_size: int, *, partition: int | None, sticky: StickyPartitioner,
                         topic: str) -> list[tuple[int, pa.Table]]:
    """:func:`partition_rows`, with keyless rows going batch by batch to the sticky
    partition."""
    return assign_sticky(partition_rows(table, num_partitions, batch_size, partition=partition,
                                        topic=topic), sticky, topic, num_partitions)
