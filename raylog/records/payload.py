"""The batch payload: an Arrow IPC stream of the batch's columns, LZ4-compressed or not.

Payload schema (one IPC stream holding one record batch)::

    timestamp     int64                                   record timestamp, ms since epoch
    key           binary                                  null when the record has no key
    value         binary                                  null for a tombstone
    headers       list<struct<key: string, value: binary>>
    offset_delta  int32   only with the explicit-offsets attribute bit (compacted batches)

Decoding checks everything the CRC cannot vouch for (a producer may have checksummed
garbage): frame sizes, the schema, the row count against the header, offsets within the
header's range, and full Arrow validation, so that a bad payload raises CorruptRecordError
instead of reading out of bounds.
"""

from __future__ import annotations

import lz4.frame
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylog.errors import CorruptRecordError, InternalError
from raylog.records.header import (
    EXPLICIT_OFFSETS_BIT,
    HEADER_SIZE,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Codec,
    TimestampType,
    pack_header,
    validate_batch,
)

HEADER_ENTRY = pa.struct(
    [pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]
)
HEADERS_TYPE = pa.list_(HEADER_ENTRY)
PAYLOAD_SCHEMA = pa.schema(
    [
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
    ]
)
EXPLICIT_SCHEMA = PAYLOAD_SCHEMA.append(pa.field("offset_delta", pa.int32(), nullable=False))
# What readers return: the payload columns with each record's absolute offset first.
TABLE_SCHEMA = pa.schema([pa.field("offset", pa.int64(), nullable=False), *PAYLOAD_SCHEMA])

# LZ4 cannot shrink data by more than about 255:1; a frame claiming more is a lie.
_MAX_LZ4_RATIO = 256
_MAX_PAYLOAD_BYTES = 2**31 - 1
# Not pa.array([]): converting anything to Arrow makes pyarrow import pandas if it can (to
# ask whether it is a Series). Broker processes forbid that (actors/broker.py), but only
# after their modules are imported: at import time nothing may convert.
_EMPTY_HEADERS_VALUES = pa.nulls(0, HEADER_ENTRY)
# Compression uses the lz4 package; decompression uses Arrow's codec (the same LZ4 frame
# format), which decodes into Arrow's pooled memory: several times faster than fresh pages.
_LZ4 = pa.Codec("lz4_frame")


def empty_headers(n: int) -> pa.Array:
    """A headers column of ``n`` empty lists, built without touching Python objects."""
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), _EMPTY_HEADERS_VALUES)


def encode(
    columns: pa.RecordBatch | pa.Table,
    *,
    codec: Codec = Codec.LZ4,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    last_offset_delta: int | None = None,
    first_timestamp: int | None = None,
    max_timestamp: int | None = None,
    transactional: bool = False,
    attributes: int = 0,
    lz4_level: int = 0,
) -> bytes:
    """Encode payload columns (PAYLOAD_SCHEMA or EXPLICIT_SCHEMA) into one batch.

    Base offset 0 and no leader epoch: the leader stamps both when it appends.
    ``transactional`` sets the transactional bit (the batch then needs a producer id and
    epoch); ``attributes`` adds other bits (raylog.records.control sets the control bit).
    ``lz4_level`` as in :func:`compress`.
    """
    fields = _batch_fields(columns, last_offset_delta, first_timestamp, max_timestamp)
    payload = _stream(columns)
    if codec == Codec.LZ4:
        payload = compress(payload, lz4_level)
    elif codec != Codec.NONE:
        raise ValueError(f"unknown codec {codec!r}")
    return _header(payload, columns, fields, codec, timestamp_type, producer_id,
                   producer_epoch, base_sequence, transactional, attributes) + payload


def encode_buffer(
    columns: pa.RecordBatch | pa.Table,
    *,
    codec: Codec = Codec.LZ4,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> pa.Buffer:
    """:func:`encode` (create-time timestamps, dense offsets) into one buffer of Arrow's
    memory pool, byte for byte the same batch.

    For the columnar producer, whose batches are megabytes: ``encode`` writes the stream
    into a growing buffer and then copies it behind the header into fresh memory, which
    costs more than the encoding (page faults on every new batch); here an uncompressed
    stream is written once, in place behind the header, into pooled memory that is reused
    batch after batch. A ``pa.Buffer`` also crosses a Ray call without being copied into the
    receiving process (pickle's out-of-band buffers).
    """
    fields = _batch_fields(columns, None, None, None)
    if codec == Codec.LZ4:
        compressed = compress(_stream(columns))
        size = len(compressed)
    elif codec == Codec.NONE:
        counter = pa.MockOutputStream()
        _write_stream(counter, columns)
        size = counter.size()
    else:
        raise ValueError(f"unknown codec {codec!r}")
    out = pa.allocate_buffer(HEADER_SIZE + size)
    view = memoryview(out).cast("B")
    if codec == Codec.LZ4:
        view[HEADER_SIZE:] = compressed
    else:
        sink = pa.FixedSizeBufferWriter(pa.py_buffer(view[HEADER_SIZE:]))
        _write_stream(sink, columns)
        if sink.tell() != size:  # Arrow wrote another stream than it counted
            raise InternalError(f"Arrow IPC stream of {sink.tell()} bytes, {size} counted")
    view[:HEADER_SIZE] = _header(view[HEADER_SIZE:], columns, fields, codec,
                                 TimestampType.CREATE_TIME, producer_id, producer_epoch,
                                 base_sequence, transactional, 0)
    return out


def _batch_fields(columns: pa.RecordBatch | pa.Table, last_offset_delta: int | None,
                  first_timestamp: int | None, max_timestamp: int | None
                  ) -> tuple[bool, int, int, int]:
    """(explicit offsets, last offset delta, first timestamp, max timestamp) of a batch of
    ``columns``, the given ones kept; ValueError for columns no batch can hold."""
    n = columns.num_rows
    if n < 1:
        raise ValueError("a batch needs at least one record")
    explicit = columns.schema.equals(EXPLICIT_SCHEMA)
    if not explicit and not columns.schema.equals(PAYLOAD_SCHEMA):
        raise ValueError(f"payload columns must match {PAYLOAD_SCHEMA}, got {columns.schema}")
    ts = columns.column(0)
    if ts.null_count:
        raise ValueError("record timestamps cannot be null")
    if first_timestamp is None:
        first_timestamp = ts[0].as_py()
    if max_timestamp is None:
        max_timestamp = pc.max(ts).as_py()
    if last_offset_delta is None:
        last_offset_delta = int(columns.column(4)[-1].as_py()) if explicit else n - 1
    return explicit, last_offset_delta, first_timestamp, max_timestamp


def _write_stream(sink: pa.NativeFile, columns: pa.RecordBatch | pa.Table) -> None:
    with pa.ipc.new_stream(sink, columns.schema) as writer:
        writer.write(columns)


def _stream(columns: pa.RecordBatch | pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    _write_stream(sink, columns)
    return sink.getvalue()


def _header(payload: bytes | pa.Buffer | memoryview, columns: pa.RecordBatch | pa.Table,
            fields: tuple[bool, int, int, int], codec: Codec, timestamp_type: TimestampType,
            producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool,
            attributes: int) -> bytes:
    explicit, last_offset_delta, first_timestamp, max_timestamp = fields
    attributes |= int(codec) | (int(timestamp_type) << 3) | \
        (EXPLICIT_OFFSETS_BIT if explicit else 0) | (TRANSACTIONAL_BIT if transactional else 0)
    return pack_header(
        payload=payload,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        record_count=columns.num_rows,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def compress(data: bytes | pa.Buffer, lz4_level: int = 0) -> bytes:
    """``data`` (a batch's Arrow IPC stream) as an LZ4 batch's payload: one LZ4 frame.

    ``lz4_level`` 0 is LZ4's default; below 0, LZ4's faster modes (acceleration 1 - level),
    which find fewer matches. Every level writes the same frame format, read alike."""
    # Independent blocks compress faster than linked ones at the same ratio here. 64 KiB
    # blocks (LZ4's default) also decompress faster in Arrow than larger ones (a 940 KB
    # stream: 0.2 ms against 0.52 ms with 1 or 4 MiB blocks), which every reader pays.
    return lz4.frame.compress(data, compression_level=lz4_level, store_size=True,
                              block_linked=False)


def _decompress(header: BatchHeader, payload: memoryview) -> pa.Buffer:
    if header.codec == Codec.NONE:
        return pa.py_buffer(payload)
    try:
        size = lz4.frame.get_frame_info(payload)["content_size"]
    except (RuntimeError, ValueError, KeyError) as e:
        raise CorruptRecordError(f"bad LZ4 frame in batch at offset {header.base_offset}") from e
    if not 0 < size <= min(_MAX_PAYLOAD_BYTES, _MAX_LZ4_RATIO * len(payload) + 1024):
        raise CorruptRecordError(
            f"LZ4 frame in batch at offset {header.base_offset} claims {size} bytes "
            f"from {len(payload)}"
        )
    try:
        data = _LZ4.decompress(payload, decompressed_size=size)
    except (pa.ArrowException, OSError) as e:
        raise CorruptRecordError(
            f"LZ4 payload of batch at offset {header.base_offset} does not decompress"
        ) from e
    if data.size != size:
        raise CorruptRecordError(f"LZ4 payload of batch at offset {header.base_offset} is short")
    return data


def decode(header: BatchHeader, batch: bytes | bytearray | memoryview, pos: int = 0) -> pa.Table:
    """Decode the payload of the (already header-checked) batch at ``pos`` in ``batch``.

    Returns the payload columns, checked against the header. Raises CorruptRecordError.
    """
    payload = memoryview(batch)[pos + HEADER_SIZE:pos + header.size]
    data = _decompress(header, payload)
    where = f"batch at offset {header.base_offset}"
    try:
        table = pa.ipc.open_stream(data).read_all()
        expected = EXPLICIT_SCHEMA if header.explicit_offsets else PAYLOAD_SCHEMA
        if not table.schema.equals(expected):
            raise CorruptRecordError(f"unexpected payload schema in {where}: {table.schema}")
        if table.num_rows != header.record_count:
            raise CorruptRecordError(
                f"{where} header says {header.record_count} records, payload has {table.num_rows}"
            )
        table.validate(full=True)
        entries = pc.list_flatten(table.column(3))
        if table.column(0).null_count or entries.null_count or \
                pc.struct_field(entries, [0]).null_count:
            raise CorruptRecordError(f"{where} has nulls where its schema allows none")
    except (pa.ArrowException, OSError) as e:
        raise CorruptRecordError(f"payload of {where} is not a valid Arrow stream: {e}") from e
    if header.explicit_offsets:
        deltas = table.column(4).to_numpy()
        if deltas[0] < 0 or deltas[-1] > header.last_offset_delta or (
            len(deltas) > 1 and not (np.diff(deltas) > 0).all()
        ):
            raise CorruptRecordError(f"offset deltas of {where} are not increasing in range")
    return table


def check_payload(header: BatchHeader, batch: bytes | bytearray | memoryview,
                  pos: int = 0) -> pa.Table:
    """Check a producer's batch before a log stores it: :func:`decode`, then the header's
    timestamps against the records'. Returns the decoded payload.

    Everything :func:`decode` checks (codec, Arrow stream, schema, record count, offsets)
    plus: ``first_timestamp`` is the first record's and ``max_timestamp`` the largest. A log
    trusts both for its time index, time lookups and retention, so a batch whose header lies
    about them is refused like any malformed one, with CorruptRecordError. The cost is one
    decompression and a vectorised min/max; no per-record Python.

    >>> from raylog.records import validate_batch
    >>> batch = encode(pa.record_batch([[5, 9], [None, None], [b"a", b"b"], [[], []]],
    ...                                schema=PAYLOAD_SCHEMA))
    >>> check_payload(validate_batch(batch), batch).num_rows
    2
    """
    payload = decode(header, batch, pos)
    timestamps = payload.column(0)
    first = timestamps[0].as_py()
    largest = pc.max(timestamps).as_py()
    if first != header.first_timestamp or largest != header.max_timestamp:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset}: header says first timestamp "
            f"{header.first_timestamp} and max {header.max_timestamp}, records have first "
            f"{first} and max {largest}"
        )
    return payload


def check_ahead(batch: bytes | bytearray | memoryview | pa.Buffer) -> pa.Table | Exception:
    """:func:`check_payload` of a whole batch, for a caller that checks it on another thread
    before its append (LZ4 and Arrow's reader release the GIL): the decoded payload, or the
    error the check raised (a bad header's included), returned instead of raised so that the
    append raises it in its place among the append's other checks
    (``PartitionLog.append``'s ``checked``)."""
    try:
        return check_payload(validate_batch(batch), batch)
    except Exception as e:  # raised by the append it stands for, in its order of checks
        return e


def offsets_of(header: BatchHeader, payload: pa.Table) -> np.ndarray:
    """Absolute offsets of the records in a decoded payload."""
    if header.explicit_offsets:
        return payload.column(4).to_numpy().astype(np.int64) + header.base_offset
    return np.arange(header.base_offset, header.base_offset + payload.num_rows, dtype=np.int64)
