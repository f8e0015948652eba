"""Kafka record batches v2 to raylog's batches and back: one Kafka batch is one raylog batch.

``to_raylog`` turns a producer's Kafka batch into the batch raylog's own producer would have
sent for the same records (unstamped, LZ4 by default): same records in the same order,
key and value (null and empty kept apart), headers, timestamps and timestamp type, and the
producer id, epoch and base sequence, so that raylog's idempotence sees a Kafka client's
retry as the retry it is, and the transactional bit (a transaction's batch stays one: the
partition opens the producer's transaction with it, read_committed readers filter it).
``to_kafka`` turns stored batches (what a broker's fetch returns) into Kafka batches for a
Fetch answer: same base offset and offset range (also of compacted batches, whose offsets
have gaps), leader epoch, timestamps, producer fields, any codec; a transaction's batches
keep their transactional bit and its markers are Kafka control batches.

The per-record work (varints, copying keys and values into columns and out of them) is done
by ``records_c`` (``_records.c``, a small C extension built by ``pip install``), or by
``records_py`` where that was not built; both give the same bytes. Everything else is a few
numpy and Arrow calls per batch. Functions here keep no state: safe from several threads.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from raylog.errors import InvalidKafkaBatchError, InvalidTimestampError
from raylog.kafka import records_py
from raylog.kafka.batch import (
    CONTROL_BIT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    KafkaBatch,
    KafkaCodec,
    kafka_batches,
    pack_header,
)
from raylog.kafka.compression import compress, decompress
from raylog.kafka.records_py import Columns
from raylog.records import Codec, TimestampType
from raylog.records.header import iter_headers
from raylog.records.payload import HEADER_ENTRY, PAYLOAD_SCHEMA, decode, empty_headers, encode

try:
    from raylog.kafka import records_c as _native
except ImportError:  # _records.c not built (a checkout without `pip install -e .`)
    _native = None

# What does the per-record work: the C extension when it is there.
coder = _native if _native is not None else records_py

__all__ = ["KafkaBatch", "KafkaCodec", "compiled", "kafka_batches", "kafka_to_raylog",
           "to_kafka", "to_kafka_pieces", "to_raylog"]


def compiled() -> bool:
    """Whether the per-record work is the C extension's (the pure-Python twin is several
    times slower: a listener or benchmark says so)."""
    return coder is not records_py

_MAX_TIMESTAMP = 2**63 - 1
# LZ4's level for the batches to_raylog writes: acceleration 3. On the benchmark's records
# (100-byte JSON, 8,000-record batches, a 960 KB Arrow stream) it compresses in 0.78 ms
# against 1.01 ms at level 0 (the listener's largest cost per produced record) for a
# payload 1.1% larger (2.65:1 against 2.68:1); lower levels gained little more and lost
# more of the ratio (-4: 0.75 ms, 2.55:1). Decompression costs the same.
_LZ4_LEVEL = -2
# Arrays are immutable: the headers column of n records without headers is built once per n.
_no_headers = functools.lru_cache(maxsize=64)(empty_headers)
_dense_deltas = np.arange(1 << 14, dtype=np.int64)  # grown (replaced, never changed) as needed


def _dense(n: int) -> np.ndarray:
    """The offset deltas 0..n-1 of a producer's batch of ``n`` records."""
    global _dense_deltas
    if n > len(_dense_deltas):
        _dense_deltas = np.arange(n, dtype=np.int64)
    return _dense_deltas[:n]


def _binary(n: int, offsets: bytes, valid: bytes, data: bytes, type_: pa.DataType) -> pa.Array:
    """A binary (or string) array of ``n`` items over flat buffers; all-null as raylog's
    producer writes it (no data), a bitmap only when something is null."""
    nulls = n - valid.count(1) if n else 0
    if nulls == n and n:
        return pa.nulls(n, type_)
    bitmap = None
    if nulls:
        bitmap = pa.py_buffer(np.packbits(np.frombuffer(valid, np.uint8), bitorder="little"))
    return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def _headers(n: int, c: Columns) -> pa.Array:
    m = len(c.hvalue_valid)
    if not m:
        return _no_headers(n)
    names = _binary(m, c.name_offsets, b"\x01" * m, c.name_data, pa.string())
    try:
        names.validate(full=True)
    except pa.ArrowInvalid as e:
        raise InvalidKafkaBatchError(f"a Kafka record header name is not UTF-8: {e}") from e
    values = _binary(m, c.hvalue_offsets, c.hvalue_valid, c.hvalue_data, pa.binary())
    entries = pa.StructArray.from_arrays([names, values], fields=list(HEADER_ENTRY))
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(c.header_offsets)])
    return pa.ListArray.from_arrays(offsets, entries)


def _timestamps(batch: KafkaBatch, n: int, deltas: np.ndarray) -> tuple[np.ndarray, int]:
    """The records' timestamps and the largest of them."""
    if batch.attributes & TIMESTAMP_TYPE_BIT:
        # LogAppendTime: every record's time is the batch's max_timestamp (Kafka's rule).
        lowest = highest = batch.max_timestamp
    else:
        lowest = batch.base_timestamp + int(deltas.min())
        highest = batch.base_timestamp + int(deltas.max())
    if lowest < 0 or highest > _MAX_TIMESTAMP:
        raise InvalidTimestampError(
            f"Kafka batch has record timestamps from {lowest} to {highest} ms: raylog's are "
            f"in [0, 2**63)")
    if batch.attributes & TIMESTAMP_TYPE_BIT:
        return np.full(n, batch.max_timestamp, np.int64), highest
    return deltas + np.int64(batch.base_timestamp), highest


def to_raylog(batch: KafkaBatch, codec: Codec = Codec.LZ4) -> bytes:
    """One raylog batch, unstamped, holding ``batch``'s records (see the module docstring).

    Raises CorruptRecordError (Kafka 2) when the records do not decompress or parse,
    InvalidKafkaBatchError (87) for offset deltas other than 0..n-1 or a header name that is
    not UTF-8, InvalidTimestampError (32) for a negative timestamp.
    """
    n = batch.record_count
    c = coder.decode_records(decompress(batch.codec, batch.records), n)
    deltas = np.frombuffer(c.offset_deltas, np.int64)
    if not (deltas == _dense(n)).all():
        raise InvalidKafkaBatchError(
            f"Kafka batch's offset deltas are not 0..{n - 1}: a producer's records are dense")
    timestamps, highest = _timestamps(batch, n, np.frombuffer(c.timestamp_deltas, np.int64))
    columns = pa.RecordBatch.from_arrays(
        [
            pa.array(timestamps, pa.int64()),
            _binary(n, c.key_offsets, c.key_valid, c.key_data, pa.binary()),
            _binary(n, c.value_offsets, c.value_valid, c.value_data, pa.binary()),
            _headers(n, c),
        ],
        schema=PAYLOAD_SCHEMA,
    )
    return encode(columns, codec=codec, timestamp_type=batch.timestamp_type,
                  producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                  base_sequence=batch.base_sequence, first_timestamp=int(timestamps[0]),
                  max_timestamp=highest, transactional=batch.is_transactional,
                  lz4_level=_LZ4_LEVEL)


def _chunk(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _flat(array: pa.Array) -> tuple[bytes | memoryview, bytes, bytes | memoryview]:
    """(offsets, validity bytes, data) of a binary or string array, as Columns wants them."""
    n, start = len(array), array.offset
    bitmap, offsets, data = array.buffers()[:3]
    offsets = np.frombuffer(offsets, np.int32)[start:start + n + 1] if offsets is not None \
        else np.zeros(n + 1, np.int32)
    if array.null_count == 0:
        valid = b"\x01" * n
    elif array.null_count == n:
        valid = bytes(n)
    else:
        bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")
        valid = bits[start:start + n].tobytes()
    return memoryview(offsets), valid, memoryview(data) if data is not None else b""


def _columns(first_timestamp: int, offset_deltas: np.ndarray, payload: pa.Table) -> Columns:
    n = payload.num_rows
    timestamps = _chunk(payload.column(0)).to_numpy()
    key_offsets, key_valid, key_data = _flat(_chunk(payload.column(1)))
    value_offsets, value_valid, value_data = _flat(_chunk(payload.column(2)))
    headers = _chunk(payload.column(3))
    list_offsets = np.frombuffer(headers.buffers()[1], np.int32)[
        headers.offset:headers.offset + n + 1]
    if list_offsets[0] == list_offsets[-1]:  # no record has headers
        names = hvalues = (memoryview(np.zeros(1, np.int32)), b"", b"")
    else:
        name_array, value_array = headers.values.flatten()
        names, hvalues = _flat(name_array), _flat(value_array)
    return Columns(
        memoryview(timestamps - np.int64(first_timestamp)), memoryview(offset_deltas),
        key_offsets, key_valid, key_data, value_offsets, value_valid, value_data,
        memoryview(np.ascontiguousarray(list_offsets)), names[0], names[2],
        hvalues[0], hvalues[1], hvalues[2],
    )


def to_kafka(data: bytes | bytearray | memoryview, codec: KafkaCodec = KafkaCodec.NONE) -> bytes:
    """Every raylog batch in ``data`` (whole stored batches, as a broker's fetch returns
    them) as one Kafka v2 batch each, records compressed with ``codec``.

    Each batch is verified as any reader verifies it (both CRCs, the Arrow payload); raises
    CorruptRecordError at the first bad one.
    """
    return b"".join(to_kafka_pieces(data, codec))


def to_kafka_pieces(data: bytes | bytearray | memoryview,
                    codec: KafkaCodec = KafkaCodec.NONE) -> list[bytes]:
    """As :func:`to_kafka`, not joined: each batch's 61 header bytes and its records, in
    order. A Fetch answer writes them as they are (joining them was a copy of every byte
    of the answer)."""
    out = []
    for pos, header in iter_headers(data, verify=True):
        payload = decode(header, data, pos)
        n = payload.num_rows
        deltas = (_chunk(payload.column(4)).to_numpy().astype(np.int64)
                  if header.explicit_offsets else np.arange(n, dtype=np.int64))
        records = compress(codec, coder.encode_records(
            _columns(header.first_timestamp, deltas, payload)))
        timestamp_bit = TIMESTAMP_TYPE_BIT if header.timestamp_type == \
            TimestampType.LOG_APPEND_TIME else 0
        # A raylog marker's record is laid out as Kafka's control record (records/control.py):
        # with the two bits it is a Kafka control batch as it is.
        timestamp_bit |= (TRANSACTIONAL_BIT if header.transactional else 0) | \
            (CONTROL_BIT if header.control else 0)
        out.append(pack_header(
            records=records, base_offset=header.base_offset,
            partition_leader_epoch=header.leader_epoch, attributes=int(codec) | timestamp_bit,
            last_offset_delta=header.last_offset_delta, base_timestamp=header.first_timestamp,
            max_timestamp=header.max_timestamp, producer_id=header.producer_id,
            producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
            record_count=n,
        ))
        out.append(records)
    return out


def kafka_to_raylog(records: bytes | bytearray | memoryview,
                    codec: Codec = Codec.LZ4) -> list[bytes]:
    """Each batch of a Produce request's ``records`` as a raylog batch (kafka_batches, then
    to_raylog); raises as those do."""
    return [to_raylog(batch, codec) for batch in kafka_batches(records)]
