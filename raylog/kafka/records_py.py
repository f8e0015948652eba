"""Kafka records (inside a v2 batch, decompressed) to columns and back: the pure-Python
reference of what ``raylog.kafka._records`` (C) does faster. Both take and return the same
shapes, so the tests run every case through each.

One record, all varints zigzag-encoded (Kafka's varint and varlong)::

    length            varint   bytes of the rest of the record
    attributes        int8     unused, 0
    timestamp_delta   varlong  from the batch's base_timestamp
    offset_delta      varint   from the batch's base_offset
    key_length        varint   -1 for a null key
    key               bytes
    value_length      varint   -1 for a null value
    value             bytes
    header_count      varint
    headers           per header: key_length varint, key (UTF-8), value_length varint
                      (-1 for null), value

The columns (``Columns``) are flat buffers, as Arrow lays out binary arrays: native-endian
int32 offsets (n + 1), one validity byte per item (1 valid, 0 null) and the bytes; headers
as per-record entry offsets into flat header-name and header-value columns.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

from raylog.errors import CorruptRecordError


class Columns(NamedTuple):
    """The records of one batch as flat buffers (see the module docstring). ``n`` records,
    ``m`` headers in all."""

    timestamp_deltas: bytes  # int64[n]
    offset_deltas: bytes  # int64[n]
    key_offsets: bytes  # int32[n + 1]
    key_valid: bytes  # uint8[n]
    key_data: bytes
    value_offsets: bytes  # int32[n + 1]
    value_valid: bytes  # uint8[n]
    value_data: bytes
    header_offsets: bytes  # int32[n + 1]: record i's headers are entries [o[i], o[i+1])
    name_offsets: bytes  # int32[m + 1]
    name_data: bytes
    hvalue_offsets: bytes  # int32[m + 1]
    hvalue_valid: bytes  # uint8[m]
    hvalue_data: bytes


_MAX_VARINT_BYTES = 10  # a varlong of 64 bits takes at most 10 bytes


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    """The zigzag varint at ``pos`` and the position after it."""
    shift = raw = 0
    while True:
        if pos >= end or shift >= 7 * _MAX_VARINT_BYTES:
            raise CorruptRecordError("truncated or overlong varint in a Kafka record")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> 64:
                raise CorruptRecordError("varint of more than 64 bits in a Kafka record")
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _bytes_field(buf, pos: int, end: int, offsets: array, valid: bytearray,
                 data: bytearray) -> int:
    """Read one length-prefixed field (-1: null) into a column; the position after it."""
    length, pos = _varint(buf, pos, end)
    if length < 0:
        if length != -1:
            raise CorruptRecordError(f"negative length {length} in a Kafka record")
        valid.append(0)
    else:
        if pos + length > end:
            raise CorruptRecordError("a Kafka record's field runs past the record")
        valid.append(1)
        data += buf[pos:pos + length]
        pos += length
    offsets.append(len(data))
    return pos


def decode_records(buf: bytes | bytearray | memoryview, count: int) -> Columns:
    """The ``count`` records in ``buf`` (exactly: no bytes may follow) as Columns.

    Raises CorruptRecordError for anything malformed: truncated records, lengths past a
    record's end, a record longer or shorter than its length says, trailing bytes.
    """
    buf = memoryview(buf).cast("B")
    total = len(buf)
    ts, deltas = array("q"), array("q")
    key_offsets, key_valid, key_data = array("i", [0]), bytearray(), bytearray()
    value_offsets, value_valid, value_data = array("i", [0]), bytearray(), bytearray()
    header_offsets = array("i", [0])
    name_offsets, name_valid, name_data = array("i", [0]), bytearray(), bytearray()
    hvalue_offsets, hvalue_valid, hvalue_data = array("i", [0]), bytearray(), bytearray()
    pos = 0
    for _ in range(count):
        length, pos = _varint(buf, pos, total)
        end = pos + length
        if length < 1 or end > total:
            raise CorruptRecordError(f"Kafka record at byte {pos} claims {length} bytes")
        pos += 1  # attributes
        delta, pos = _varint(buf, pos, end)
        ts.append(delta)
        delta, pos = _varint(buf, pos, end)
        deltas.append(delta)
        pos = _bytes_field(buf, pos, end, key_offsets, key_valid, key_data)
        pos = _bytes_field(buf, pos, end, value_offsets, value_valid, value_data)
        headers, pos = _varint(buf, pos, end)
        if headers < 0:
            raise CorruptRecordError(f"negative header count {headers} in a Kafka record")
        for _ in range(headers):
            pos = _bytes_field(buf, pos, end, name_offsets, name_valid, name_data)
            if not name_valid[-1]:
                raise CorruptRecordError("a Kafka record header has a null name")
            pos = _bytes_field(buf, pos, end, hvalue_offsets, hvalue_valid, hvalue_data)
        header_offsets.append(len(hvalue_valid))
        if pos != end:
            raise CorruptRecordError(f"Kafka record ending at byte {pos} says it ends at {end}")
    if pos != total:
        raise CorruptRecordError(f"{total - pos} bytes after the last of {count} Kafka records")
    return Columns(ts.tobytes(), deltas.tobytes(), key_offsets.tobytes(), bytes(key_valid),
                   bytes(key_data), value_offsets.tobytes(), bytes(value_valid),
                   bytes(value_data), header_offsets.tobytes(), name_offsets.tobytes(),
                   bytes(name_data), hvalue_offsets.tobytes(), bytes(hvalue_valid),
                   bytes(hvalue_data))


def _put_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)  # zigzag of a 64-bit value
    raw &= 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _put_bytes(out: bytearray, offsets, valid, data, i: int) -> None:
    if not valid[i]:
        _put_varint(out, -1)
        return
    lo, hi = offsets[i], offsets[i + 1]
    _put_varint(out, hi - lo)
    out += data[lo:hi]


def _ints(buf, fmt: str) -> memoryview:
    return memoryview(buf).cast("B").cast(fmt)


def encode_records(c: Columns) -> bytes:
    """Columns as Kafka records, in order. Offsets need not start at 0 (a slice of an
    Arrow array); a null item's offsets are ignored."""
    ts = _ints(c.timestamp_deltas, "q")
    deltas = _ints(c.offset_deltas, "q")
    key_offsets = _ints(c.key_offsets, "i")
    value_offsets = _ints(c.value_offsets, "i")
    header_offsets = _ints(c.header_offsets, "i")
    name_offsets = _ints(c.name_offsets, "i")
    hvalue_offsets = _ints(c.hvalue_offsets, "i")
    key_data, value_data = memoryview(c.key_data), memoryview(c.value_data)
    name_data, hvalue_data = memoryview(c.name_data), memoryview(c.hvalue_data)
    out, body = bytearray(), bytearray()
    for i in range(len(ts)):
        body.clear()
        body.append(0)  # attributes
        _put_varint(body, ts[i])
        _put_varint(body, deltas[i])
        _put_bytes(body, key_offsets, c.key_valid, key_data, i)
        _put_bytes(body, value_offsets, c.value_valid, value_data, i)
        first, last = header_offsets[i], header_offsets[i + 1]
        _put_varint(body, last - first)
        for h in range(first, last):
            lo, hi = name_offsets[h], name_offsets[h + 1]
            _put_varint(body, hi - lo)
            body += name_data[lo:hi]
            _put_bytes(body, hvalue_offsets, c.hvalue_valid, hvalue_data, h)
        _put_varint(out, len(body))
        out += body
    return bytes(out)
