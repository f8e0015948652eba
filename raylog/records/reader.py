"""Reading batches back: as Python records or as one Arrow table.

Both readers take a buffer of whole batches (what a log read or a fetch returns), verify
every batch (framing, both CRCs, payload) and raise CorruptRecordError at the first bad one.
``start_offset`` / ``end_offset`` trim records outside [start, end), since a read starts at the
batch that *contains* the wanted offset. Control batches (transaction markers, see
control.py) are skipped after their framing and CRCs: they are never a data record.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import repeat
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylog.records.header import BatchHeader, iter_headers
from raylog.records.payload import TABLE_SCHEMA, decode, offsets_of
from raylog.util.gc_pause import gc_paused

Buffer = bytes | bytearray | memoryview


class Record(NamedTuple):
    """One record as stored: its offset, timestamp (ms), key, value and headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


_tuple_new = tuple.__new__


def iter_batches(buf: Buffer, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each verified batch in ``buf``."""
    return iter_headers(buf, pos, verify=True)


def _row_range(header: BatchHeader, offsets: np.ndarray, start: int | None,
               end: int | None) -> tuple[int, int]:
    n = len(offsets)
    lo = 0 if start is None or start <= header.base_offset else int(
        np.searchsorted(offsets, start, "left"))
    hi = n if end is None or end > header.last_offset else int(
        np.searchsorted(offsets, end, "left"))
    return lo, hi


def _python_headers(column: pa.ChunkedArray | pa.Array, n: int):
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    # A batch without any header has no header entries at all: a length to read, where a
    # compute kernel per poll's slice cost a consumer 10% of its time.
    if n == 0 or all(len(chunk.values) == 0 for chunk in chunks) or \
            not pc.sum(pc.list_value_length(column)).as_py():
        return repeat((), n)
    return [
        tuple((h["key"], h["value"]) for h in entries) if entries else ()
        for entries in column.to_pylist()
    ]


def row_range(header: BatchHeader, payload: pa.Table, start_offset: int | None = None,
              end_offset: int | None = None) -> tuple[int, int]:
    """The rows [lo, hi) of a decoded payload whose offsets are in [start_offset, end_offset)."""
    if (start_offset is None or start_offset <= header.base_offset) and \
            (end_offset is None or end_offset > header.last_offset):
        return 0, payload.num_rows  # the whole batch: no offsets to search
    return _row_range(header, offsets_of(header, payload), start_offset, end_offset)


def row_columns(header: BatchHeader, payload: pa.Table, lo: int, hi: int) -> list:
    """Per-field Python sequences (offset, timestamp, key, value, headers) of rows [lo, hi)
    of a decoded payload; zip them to get records."""
    if lo >= hi:
        return [[], [], [], [], []]
    if lo or hi < payload.num_rows:
        payload = payload.slice(lo, hi - lo)
    if header.explicit_offsets:
        offset_values = offsets_of(header, payload).tolist()
    else:
        offset_values = range(header.base_offset + lo, header.base_offset + hi)
    keys = payload.column(1)
    return [
        offset_values,
        payload.column(0).to_numpy().tolist(),
        [None] * (hi - lo) if keys.null_count == len(keys) else keys.to_pylist(),
        payload.column(2).to_pylist(),
        _python_headers(payload.column(3), hi - lo),
    ]


def batch_records(header: BatchHeader, payload: pa.Table, start_offset: int | None = None,
                  end_offset: int | None = None) -> list[Record]:
    """Turn a decoded payload into records, keeping offsets in [start_offset, end_offset)."""
    lo, hi = row_range(header, payload, start_offset, end_offset)
    rows = zip(*row_columns(header, payload, lo, hi), strict=False)
    with gc_paused():
        return list(map(_tuple_new, repeat(Record), rows))


def read_records(buf: Buffer, start_offset: int | None = None,
                 end_offset: int | None = None) -> list[Record]:
    """Decode every batch in ``buf`` into records with offsets in [start_offset, end_offset)."""
    out: list[Record] = []
    with gc_paused():
        for pos, header in iter_batches(buf):
            if end_offset is not None and header.base_offset >= end_offset:
                break
            if (start_offset is not None and header.last_offset < start_offset) or \
                    header.control:
                continue
            out.extend(batch_records(header, decode(header, buf, pos), start_offset, end_offset))
    return out


def batch_table(header: BatchHeader, payload: pa.Table, start_offset: int | None = None,
                end_offset: int | None = None) -> pa.Table:
    """A decoded payload as a TABLE_SCHEMA table, trimmed to [start_offset, end_offset)."""
    offsets = offsets_of(header, payload)
    lo, hi = _row_range(header, offsets, start_offset, end_offset)
    columns = [pa.array(offsets[lo:hi]), *(payload.column(i).slice(lo, hi - lo)
                                            for i in range(4))]
    return pa.Table.from_arrays(columns, schema=TABLE_SCHEMA)


def read_table(buf: Buffer, start_offset: int | None = None,
               end_offset: int | None = None) -> pa.Table:
    """Decode every batch in ``buf`` into one Arrow table (TABLE_SCHEMA), zero-copy per batch."""
    tables = []
    for pos, header in iter_batches(buf):
        if end_offset is not None and header.base_offset >= end_offset:
            break
        if (start_offset is not None and header.last_offset < start_offset) or header.control:
            continue
        tables.append(batch_table(header, decode(header, buf, pos), start_offset, end_offset))
    if not tables:
        return TABLE_SCHEMA.empty_table()
    return pa.concat_tables(tables)
