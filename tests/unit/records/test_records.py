"""The record batch codec: round trips, stamping, trimming, corruption, bad input, the builder."""

from __future__ import annotations

import contextlib
import os
import random
import struct
from collections.abc import Sequence

import lz4.frame
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylog.errors import CorruptRecordError, InvalidRecordError
from raylog.records import (
    HEADER_SIZE,
    PAYLOAD_SCHEMA,
    TABLE_SCHEMA,
    BatchBuilder,
    Codec,
    Record,
    TimestampType,
    encode,
    iter_batches,
    read_records,
    read_table,
    stamp,
    stamped_prefix,
    validate_batch,
)
from raylog.records.header import CRC_POS, crc32c, pack_header
from raylog.records.payload import EXPLICIT_SCHEMA, HEADERS_TYPE

CODECS = pytest.mark.parametrize("codec", list(Codec), ids=lambda c: c.name)
MAX_INT64 = 2**63 - 1  # the largest timestamp and the largest offset

# A record as the tests write it: (timestamp, key, value, headers).
Input = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]] | None]

optional_bytes = st.none() | st.binary(max_size=40)
headers_strategy = st.none() | st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3)
record_strategy = st.tuples(
    st.integers(0, MAX_INT64), optional_bytes, optional_bytes, headers_strategy
)
records_strategy = st.lists(record_strategy, min_size=1, max_size=20)
codec_strategy = st.sampled_from(list(Codec))


# --- helpers -------------------------------------------------------------------------------


def build(records: Sequence[Input], codec: Codec = Codec.LZ4, **options) -> bytes:
    builder = BatchBuilder(max_bytes=64 << 20, codec=codec, **options)
    for record in records:
        assert builder.append(*record)
    return builder.build()


def stamped(batch: bytes, base_offset: int, leader_epoch: int = 0) -> bytes:
    out = bytearray(batch)
    stamp(out, base_offset, leader_epoch)
    return bytes(out)


def expected(records: Sequence[Input], base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, ts, key, value, tuple(tuple(h) for h in headers or ()))
        for i, (ts, key, value, headers) in enumerate(records)
    ]


def table_records(table: pa.Table) -> list[Record]:
    """A read_table result as Records, so both readers are compared against one expectation."""
    assert table.schema.equals(TABLE_SCHEMA)
    return [
        Record(row["offset"], row["timestamp"], row["key"], row["value"],
               tuple((h["key"], h["value"]) for h in row["headers"] or ()))
        for row in table.to_pylist()
    ]


def ipc_stream(columns: pa.Table | pa.RecordBatch | None,
               schema: pa.Schema | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema or columns.schema) as writer:
        if columns is not None:
            writer.write(columns)
    return sink.getvalue().to_pybytes()


def lz4_frame(data: bytes) -> bytes:
    return lz4.frame.compress(data, compression_level=0, store_size=True)


def seal(payload: bytes, *, attributes: int = Codec.NONE, record_count: int = 1,
         last_offset_delta: int | None = None) -> bytes:
    """A batch around ``payload`` whose checksums are valid whatever the payload holds."""
    if last_offset_delta is None:
        last_offset_delta = record_count - 1
    return pack_header(
        payload=payload, attributes=attributes, last_offset_delta=last_offset_delta,
        first_timestamp=0, max_timestamp=0, record_count=record_count,
    ) + payload


def with_prefix(batch: bytes, *, batch_length: int | None = None,
                magic: int | None = None) -> bytes:
    """``batch`` with its length or magic replaced and the header CRC recomputed to match."""
    out = bytearray(batch)
    if batch_length is not None:
        struct.pack_into(">i", out, 8, batch_length)
    if magic is not None:
        out[16] = magic
    struct.pack_into(">I", out, 17, crc32c(bytes(out[:17])))
    return bytes(out)


def assert_readers_refuse(buf: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        read_records(buf)
    with pytest.raises(CorruptRecordError):
        read_table(buf)


def assert_corrupt(batch: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        validate_batch(batch)
    assert_readers_refuse(batch)


SMALL = [
    (1_700_000_000_000, b"k1", b"v1", [("trace", b"abc"), ("ключ", None)]),
    (1_700_000_000_005, None, None, None),
    (1_700_000_000_003, b"", b"", [("🔑", b"")]),
]
UNCOMPRESSED_PAYLOAD = build(SMALL, Codec.NONE)[HEADER_SIZE:]


# --- 1. round trips ------------------------------------------------------------------------

ROUND_TRIPS = {
    "one-null-record": [(0, None, None, None)],
    "empty-key-and-value": [(1, b"", b"", None), (2, None, b"", []), (3, b"", None, None)],
    "timestamp-extremes": [(MAX_INT64, b"k", b"v", None), (0, b"k", b"v", None)],
    "unicode-headers": [
        (5, b"k", b"v", [("", b""), ("ключ", b"\x00\xff"), ("🔑 name", None), ("a", b"x")]),
        (6, None, b"no headers", None),
        (7, b"k", None, [["list-pair", b"y"]]),
    ],
    "binary-values": [(i, bytes([i]) * i, bytes(range(256)) * (i % 3), None) for i in range(50)],
    "many-records": [(1_700_000_000_000 + i, b"key-%d" % (i % 7), b"value-%d" % i, None)
                     for i in range(2000)],
    "large-incompressible": [(9, os.urandom(16), os.urandom(1 << 20), [("h", os.urandom(99))])],
}


@CODECS
@pytest.mark.parametrize("name", list(ROUND_TRIPS))
def test_round_trip(codec, name):
    records = ROUND_TRIPS[name]
    batch = build(records, codec)
    header = validate_batch(batch)
    assert header.size == len(batch)
    assert (header.base_offset, header.leader_epoch, header.magic) == (0, -1, 1)
    assert header.record_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.first_timestamp == records[0][0]
    assert header.max_timestamp == max(r[0] for r in records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.codec == codec and not header.explicit_offsets
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert read_records(batch) == expected(records)
    assert table_records(read_table(batch)) == expected(records)


@CODECS
def test_builder_writes_producer_fields_and_timestamp_type(codec):
    batch = build(SMALL, codec, producer_id=2**62, producer_epoch=7, base_sequence=2**31 - 1,
                  timestamp_type=TimestampType.LOG_APPEND_TIME)
    header = validate_batch(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (2**62, 7,
                                                                                 2**31 - 1)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert read_records(batch) == expected(SMALL)


@CODECS
@pytest.mark.parametrize("writable", [bytearray, lambda b: memoryview(bytearray(b))])
def test_stamp_sets_offset_and_epoch_without_touching_payload(codec, writable):
    batch = build(SMALL, codec)
    before = validate_batch(batch)
    out = writable(batch)
    stamp(out, 1000, 42)
    out = bytes(out)
    assert out[CRC_POS:] == batch[CRC_POS:]
    assert stamped_prefix(batch, 1000, 42) + batch[CRC_POS:] == out
    header = validate_batch(out)
    assert (header.base_offset, header.leader_epoch) == (1000, 42)
    assert header._replace(base_offset=0, leader_epoch=-1, header_crc=0) == before._replace(
        header_crc=0)
    assert header.next_offset == 1000 + len(SMALL)
    assert read_records(out) == expected(SMALL, base_offset=1000)
    assert table_records(read_table(out)) == expected(SMALL, base_offset=1000)
    restamped = stamped(out, 7, 1)  # a batch can be stamped again, e.g. by a new leader
    assert [r.offset for r in read_records(restamped)] == [7, 8, 9]


@settings(max_examples=100, deadline=None)
@given(records=records_strategy, codec=codec_strategy, base_offset=st.integers(0, 2**53),
       leader_epoch=st.integers(0, 2**31 - 1))
def test_round_trip_property(records, codec, base_offset, leader_epoch):
    batch = build(records, codec)
    header = validate_batch(batch)
    assert header.record_count == len(records) == header.last_offset_delta + 1
    assert header.first_timestamp == records[0][0]
    assert header.max_timestamp == max(r[0] for r in records)
    assert read_records(batch) == expected(records)
    assert table_records(read_table(batch)) == expected(records)
    out = stamped(batch, base_offset, leader_epoch)
    assert out[CRC_POS:] == batch[CRC_POS:]
    assert stamped_prefix(batch, base_offset, leader_epoch) == out[:CRC_POS]
    assert validate_batch(out).leader_epoch == leader_epoch
    assert read_records(out) == expected(records, base_offset)
    assert table_records(read_table(out)) == expected(records, base_offset)


# --- 2. several batches and offset trimming ------------------------------------------------


def log_of(codec: Codec) -> tuple[bytes, list[Record]]:
    """Three stamped batches at offsets 0-2, 3 and 10-13 (a gap, as after compaction)."""
    parts = [
        (0, [(10, b"a", b"0", None), (11, None, b"1", [("h", b"x")]), (12, b"c", None, None)]),
        (3, [(13, b"d", b"3", None)]),
        (10, [(20 + i, b"k", b"%d" % i, None) for i in range(4)]),
    ]
    buf = b"".join(stamped(build(records, codec), base, 5) for base, records in parts)
    return buf, [r for base, records in parts for r in expected(records, base)]


@CODECS
@pytest.mark.parametrize("as_buffer", [bytes, bytearray, memoryview])
def test_reads_concatenated_batches(codec, as_buffer):
    buf, records = log_of(codec)
    assert [h.base_offset for _, h in iter_batches(buf)] == [0, 3, 10]
    assert read_records(as_buffer(buf)) == records
    assert table_records(read_table(as_buffer(buf))) == records


@CODECS
def test_start_and_end_offsets_trim_at_any_offset(codec):
    buf, records = log_of(codec)
    bounds = [None, *range(-1, 16)]
    for start in bounds:
        for end in bounds:
            want = [r for r in records
                    if (start is None or r.offset >= start) and (end is None or r.offset < end)]
            assert read_records(buf, start, end) == want, (start, end)
            assert table_records(read_table(buf, start, end)) == want, (start, end)


@CODECS
def test_a_bad_batch_after_good_ones_fails_the_whole_read(codec):
    buf, _ = log_of(codec)
    last = len(buf) - 10
    flipped = bytearray(buf)
    flipped[last] ^= 0x01
    assert_readers_refuse(bytes(flipped))
    assert_readers_refuse(buf[:last])  # a torn tail
    assert_readers_refuse(buf + b"\x00" * 30)  # trailing bytes too short for a header


# --- 3. any single flipped or cut byte is detected -----------------------------------------


@settings(max_examples=200, deadline=None)
@given(records=st.lists(record_strategy, min_size=1, max_size=5), codec=codec_strategy,
       data=st.data())
def test_any_flipped_byte_is_detected(records, codec, data):
    batch = stamped(build(records, codec), data.draw(st.integers(0, 2**40)), 3)
    position = data.draw(st.integers(0, len(batch) - 1), label="position")
    flipped = bytearray(batch)
    flipped[position] ^= data.draw(st.integers(1, 255), label="xor")
    assert_corrupt(bytes(flipped))


@settings(max_examples=200, deadline=None)
@given(records=st.lists(record_strategy, min_size=1, max_size=5), codec=codec_strategy,
       data=st.data())
def test_any_cut_is_detected(records, codec, data):
    batch = build(records, codec)
    cut = batch[:data.draw(st.integers(0, len(batch) - 1), label="length")]
    with pytest.raises(CorruptRecordError):
        validate_batch(cut)
    if cut:  # an empty buffer is an empty read, not a corrupt one
        assert_readers_refuse(cut)


@CODECS
def test_every_flipped_or_cut_byte_of_a_small_batch_is_detected(codec):
    batch = stamped(build(SMALL, codec), 77, 2)
    for position in range(len(batch)):
        for xor in (0x01, 0x80, 0xFF):
            flipped = bytearray(batch)
            flipped[position] ^= xor
            assert_corrupt(bytes(flipped))
    for length in range(len(batch)):
        with pytest.raises(CorruptRecordError):
            validate_batch(batch[:length])
        if length:
            assert_readers_refuse(batch[:length])
    assert read_records(b"") == [] and read_table(b"").num_rows == 0


# --- 4. malformed input with valid checksums -----------------------------------------------


@pytest.mark.parametrize("magic", [0, 2, 255])
def test_bad_magic(magic):
    assert_corrupt(with_prefix(build(SMALL), magic=magic))


def test_bad_batch_length():
    batch = build(SMALL)
    right = len(batch) - 12
    too_small = [-(2**31), -1, 0, 52]  # less than the header after the length field
    wrong = [53, right - 1, right + 1, right + 1000, 2**31 - 1]
    for batch_length in too_small + wrong:
        assert_corrupt(with_prefix(batch, batch_length=batch_length))


def test_trailing_bytes_after_one_batch():
    batch = build(SMALL)
    with pytest.raises(CorruptRecordError):
        validate_batch(batch + b"\x00")


@pytest.mark.parametrize("attributes", [2, 3, 7, 0x20, 0x40, 0x100, 0x4000, -1, -(2**15)])
def test_unknown_attribute_bits(attributes):
    assert_corrupt(seal(UNCOMPRESSED_PAYLOAD, attributes=attributes, record_count=len(SMALL)))


@pytest.mark.parametrize(("record_count", "last_offset_delta"), [
    (0, -1), (0, 0), (-1, -2), (3, 1), (3, 3), (2, 0), (2**31 - 1, 0),
], ids=str)
def test_header_counts_must_agree(record_count, last_offset_delta):
    assert_corrupt(seal(UNCOMPRESSED_PAYLOAD, record_count=record_count,
                        last_offset_delta=last_offset_delta))


@CODECS
@pytest.mark.parametrize("record_count", [1, 2, 4, 2**31 - 1])
def test_record_count_must_match_the_payload(codec, record_count):
    payload = UNCOMPRESSED_PAYLOAD if codec == Codec.NONE else lz4_frame(UNCOMPRESSED_PAYLOAD)
    assert_readers_refuse(seal(payload, attributes=codec, record_count=record_count))


def test_negative_base_offset():
    assert_corrupt(stamped(build(SMALL), -1))


def test_batch_whose_offsets_pass_int64_is_refused():
    # A dense batch stamped at 2**63 - 2 holds offsets up to 2**63, beyond an int64:
    # read_records returns Python ints past the range while read_table wraps them negative.
    batch = stamped(build(SMALL), MAX_INT64 - 1)
    assert_corrupt(batch)


def ipc_payloads() -> dict[str, bytes]:
    """Uncompressed payloads that are not a valid SMALL-sized payload stream."""
    stream = UNCOMPRESSED_PAYLOAD
    good = BatchBuilder()
    for record in SMALL:
        good.append(*record)
    columns = good.columns()
    reordered = columns.select([1, 0, 2, 3])
    large_values = pa.RecordBatch.from_arrays(
        [columns.column(0), columns.column(1), columns.column(2).cast(pa.large_binary()),
         columns.column(3)], names=PAYLOAD_SCHEMA.names)
    nullable_ts = pa.RecordBatch.from_arrays(
        columns.columns, schema=PAYLOAD_SCHEMA.set(0, pa.field("timestamp", pa.int64())))
    explicit = pa.RecordBatch.from_arrays(
        [*columns.columns, pa.array([0, 1, 2], pa.int32())], schema=EXPLICIT_SCHEMA)
    # Arrow checks types, not nullability: these claim PAYLOAD_SCHEMA yet hold nulls where
    # it says none may be, which readers would hand out as a None timestamp or header name.
    null_timestamp = pa.RecordBatch.from_arrays(
        [pa.array([1, None, 3], pa.int64()), *columns.columns[1:]], schema=PAYLOAD_SCHEMA)
    null_header_name = pa.RecordBatch.from_arrays(
        [*columns.columns[:3], pa.array([[{"key": None, "value": b"x"}], [], []], HEADERS_TYPE)],
        schema=PAYLOAD_SCHEMA)
    rng = random.Random(7)
    return {
        "empty": b"",
        "text": b"not an arrow stream at all",
        "zeros": bytes(64),
        "random": rng.randbytes(256),
        "ff": b"\xff" * 64,
        "negative-metadata-length": b"\xff\xff\xff\xff\xf0\xff\xff\xff" + bytes(56),
        "huge-metadata-length": b"\xff\xff\xff\xff\xff\xff\xff\x7f" + bytes(56),
        "truncated-1": stream[:-1],
        # stream[:-8] drops only the end-of-stream marker, which Arrow allows; cut one more.
        "truncated-9": stream[:-9],
        "first-half": stream[: len(stream) // 2],
        "cut-at-200": stream[:200],
        "middle-cut-out": stream[:300] + stream[400:],
        "one-column": ipc_stream(pa.table({"x": [1, 2, 3]})),
        "reordered-columns": ipc_stream(reordered),
        "value-as-large-binary": ipc_stream(large_values),
        "nullable-timestamp": ipc_stream(nullable_ts),
        "explicit-schema-without-bit": ipc_stream(explicit),
        "no-record-batch": ipc_stream(None, PAYLOAD_SCHEMA),
        "null-timestamp": ipc_stream(null_timestamp),
        "null-header-name": ipc_stream(null_header_name),
    }


IPC_PAYLOADS = ipc_payloads()


@pytest.mark.parametrize("name", list(IPC_PAYLOADS))
def test_garbage_uncompressed_payload(name):
    assert_readers_refuse(seal(IPC_PAYLOADS[name], record_count=len(SMALL)))


@pytest.mark.parametrize("name", list(IPC_PAYLOADS))
def test_garbage_inside_a_valid_lz4_frame(name):
    assert_readers_refuse(seal(lz4_frame(IPC_PAYLOADS[name]), attributes=Codec.LZ4,
                               record_count=len(SMALL)))


def lz4_payloads() -> dict[str, bytes]:
    frame = lz4_frame(UNCOMPRESSED_PAYLOAD)
    frame_size = len(UNCOMPRESSED_PAYLOAD)

    def claiming(size: int) -> bytes:
        # A frame's descriptor (magic, flags, content size, checksum) is its first 15 bytes;
        # one taken from a frame of another size makes a frame that lies about its size.
        return lz4_frame(bytes(size))[:15] + frame[15:]

    return {
        **{f"cut-to-{n}": frame[:n] for n in (0, 3, 4, 6, 10, 14, 15, 20, len(frame) - 5,
                                              len(frame) - 1)},
        "garbage": b"\x04\x22\x4d\x18" + random.Random(3).randbytes(100),
        "no-content-size": lz4.frame.compress(UNCOMPRESSED_PAYLOAD, store_size=False),
        "size-too-small": claiming(frame_size - 1),
        "size-too-large": claiming(frame_size + 1),
        "size-far-too-large": claiming(100 * frame_size),
        "size-beyond-ratio": claiming(1 << 22),
        "two-frames": frame + frame,
        "trailing-bytes": frame + b"\x00",
        "uncompressed-payload": UNCOMPRESSED_PAYLOAD,
    }


LZ4_PAYLOADS = lz4_payloads()


@pytest.mark.parametrize("name", list(LZ4_PAYLOADS))
def test_bad_lz4_frame(name):
    assert_readers_refuse(seal(LZ4_PAYLOADS[name], attributes=Codec.LZ4,
                               record_count=len(SMALL)))


def test_explicit_offsets_bit_without_offset_column():
    assert_readers_refuse(seal(UNCOMPRESSED_PAYLOAD, attributes=0x10, record_count=len(SMALL)))


def test_uncompressed_codec_over_an_lz4_payload():
    assert_readers_refuse(seal(lz4_frame(UNCOMPRESSED_PAYLOAD), record_count=len(SMALL)))


@settings(max_examples=200, deadline=None)
@given(payload=st.binary(max_size=300), codec=codec_strategy, count=st.integers(1, 3),
       timestamp_type_bit=st.sampled_from([0, 0x08]))
def test_arbitrary_payload_bytes_are_refused(payload, codec, count, timestamp_type_bit):
    assert_readers_refuse(seal(payload, attributes=codec | timestamp_type_bit,
                               record_count=count))


@settings(max_examples=200, deadline=None)
@given(codec=codec_strategy,
       flips=st.lists(st.tuples(st.integers(0, len(UNCOMPRESSED_PAYLOAD) - 1),
                                st.integers(1, 255)), min_size=1, max_size=3))
def test_damaged_arrow_stream_with_valid_checksums_decodes_or_is_refused(codec, flips):
    # A producer may checksum a damaged stream; the CRC cannot help, the decoder must.
    payload = bytearray(UNCOMPRESSED_PAYLOAD)
    for position, xor in flips:
        payload[position] ^= xor
    payload = bytes(payload) if codec == Codec.NONE else lz4_frame(bytes(payload))
    batch = seal(payload, attributes=codec, record_count=len(SMALL))
    for read in (read_records, read_table):
        with contextlib.suppress(CorruptRecordError):
            assert len(read(batch)) == len(SMALL)


# --- explicit offsets (compacted batches) --------------------------------------------------


def explicit_batch(deltas: Sequence[int], codec: Codec = Codec.LZ4,
                   last_offset_delta: int | None = None) -> bytes:
    records = [(i, b"k%d" % d, b"v%d" % d, None) for i, d in enumerate(deltas)]
    builder = BatchBuilder()
    for record in records:
        builder.append(*record)
    table = pa.Table.from_arrays([*builder.columns().columns, pa.array(deltas, pa.int32())],
                                 schema=EXPLICIT_SCHEMA)
    return encode(table, codec=codec, last_offset_delta=last_offset_delta)


@CODECS
def test_explicit_offsets_round_trip_and_trim(codec):
    batch = stamped(explicit_batch([0, 2, 5], codec), 100)
    header = validate_batch(batch)
    assert header.explicit_offsets and header.next_offset == 106
    assert [r.offset for r in read_records(batch)] == [100, 102, 105]
    assert [r.value for r in read_records(batch)] == [b"v0", b"v2", b"v5"]
    assert read_table(batch).column("offset").to_pylist() == [100, 102, 105]
    assert [r.offset for r in read_records(batch, 101, 105)] == [102]
    assert read_table(batch, 103, 106).column("offset").to_pylist() == [105]
    assert read_records(batch, 103, 105) == []


@CODECS
def test_compacted_batch_keeps_its_range_after_losing_its_last_records(codec):
    # header.py: "last_offset_delta keeps a batch's offset range after compaction removed
    # its last records" -- so a batch whose records sit at deltas 0, 2 and 3 may still
    # cover deltas up to 7, which is what the cleaner writes when it drops the last record.
    batch = stamped(explicit_batch([0, 2, 3], codec, last_offset_delta=7), 100)
    header = validate_batch(batch)
    assert header.next_offset == 108
    assert [r.offset for r in read_records(batch)] == [100, 102, 103]
    assert read_table(batch).column("offset").to_pylist() == [100, 102, 103]


@pytest.mark.parametrize(("deltas", "last_offset_delta"), [
    ([1, 1], None), ([2, 1], None), ([-1, 0], None), ([0, 5], 3), ([0, 1, 1], 4),
], ids=str)
def test_bad_explicit_offsets(deltas, last_offset_delta):
    assert_readers_refuse(explicit_batch(deltas, last_offset_delta=last_offset_delta))


# --- 5. BatchBuilder -----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    max_bytes=st.integers(2_000, 64 << 10),
    codec=codec_strategy,
    seed=st.integers(0, 2**32 - 1),
    shapes=st.lists(
        st.tuples(st.integers(0, 5_000), st.booleans(), st.integers(0, 40), st.integers(0, 3)),
        min_size=1, max_size=60),
)
def test_builder_batches_stay_within_max_bytes(max_bytes, codec, seed, shapes):
    """Producer loop: append until refused, build, start a new builder with the refused record."""
    rng = random.Random(seed)
    records = [
        (i,
         rng.randbytes(key_size) if key_size else None,
         rng.randbytes(size) if incompressible else bytes([i % 256]) * size,
         [(f"h{j}", rng.randbytes(j * 10)) for j in range(header_count)])
        for i, (size, incompressible, key_size, header_count) in enumerate(shapes)
    ]
    built = []  # (record count, estimated size, batch)
    builder = BatchBuilder(max_bytes, codec)
    for record in records:
        room = builder.has_room_for(*record[1:])
        count = len(builder)
        accepted = builder.append(*record)
        assert accepted == (count + 1 if room else 0)  # the record's index + 1, or 0
        if not accepted:
            assert len(builder) == count
            built.append((count, builder.estimated_size, builder.build()))
            builder = BatchBuilder(max_bytes, codec)
            assert builder.append(*record)
    built.append((len(builder), builder.estimated_size, builder.build()))
    log, base = [], 0
    for count, estimate, batch in built:
        assert len(batch) <= estimate
        if count > 1:
            assert len(batch) <= max_bytes
        log.append(stamped(batch, base))
        base += count
    assert read_records(b"".join(log)) == expected(records)


@CODECS
def test_incompressible_values_fill_a_megabyte_batch(codec):
    max_bytes = 1 << 20
    builder = BatchBuilder(max_bytes, codec)
    while builder.append(0, os.urandom(8), os.urandom(4000)):
        pass
    assert len(builder) > 200
    assert len(builder.build()) <= max_bytes


@CODECS
def test_many_null_header_values_stay_within_max_bytes(codec):
    # Each header entry with a None value costs a validity bit that record_size() does not
    # count; with many of them a batch outgrows max_bytes.
    max_bytes = 1 << 20
    builder = BatchBuilder(max_bytes, codec)
    while builder.append(0, None, None, [("", None)] * 1000):
        pass
    assert len(builder) > 1
    assert len(builder.build()) <= max_bytes


@CODECS
def test_full_builder_refuses_and_does_not_add(codec):
    builder = BatchBuilder(max_bytes=8192, codec=codec)
    accepted = []
    while builder.append(len(accepted), None, b"x" * 500):
        accepted.append((len(accepted), None, b"x" * 500, None))
    before = builder.build()
    assert len(builder) == len(accepted) > 1
    assert not builder.append(99, b"rejected", b"y" * 5000, [("h", b"z")])
    assert not builder.has_room_for(b"rejected", b"y" * 5000)
    assert len(builder) == len(accepted)
    assert builder.build() == before
    assert read_records(before) == expected(accepted)


@CODECS
def test_empty_builder_accepts_an_oversized_record(codec):
    builder = BatchBuilder(max_bytes=100, codec=codec)
    value = os.urandom(10_000)
    assert builder.has_room_for(None, value)
    assert builder.append(1, b"k", value)
    assert not builder.append(2, None, None)
    batch = builder.build()
    assert len(batch) > 100
    assert read_records(batch) == [Record(0, 1, b"k", value)]


BAD_RECORDS = {
    "value-str": (0, None, "text", None),
    "value-int": (0, None, 5, None),
    "value-bytearray": (0, None, bytearray(b"x"), None),
    "value-memoryview": (0, None, memoryview(b"x"), None),
    "key-str": (0, "key", b"v", None),
    "key-int": (0, 1, b"v", None),
    "key-bytearray": (0, bytearray(b"k"), b"v", None),
    "timestamp-negative": (-1, None, b"v", None),
    "timestamp-float": (1.0, None, b"v", None),
    "timestamp-too-large": (2**63, None, b"v", None),
    "timestamp-bool": (True, None, b"v", None),
    "timestamp-none": (None, None, b"v", None),
    "timestamp-str": ("0", None, b"v", None),
    "header-value-str": (0, None, b"v", [("h", "text")]),
    "header-value-int": (0, None, b"v", [("h", 5)]),
    "header-name-bytes": (0, None, b"v", [(b"h", b"x")]),
    "header-name-none": (0, None, b"v", [(None, b"x")]),
    "header-one-element": (0, None, b"v", [("h",)]),
    "header-three-elements": (0, None, b"v", [("h", b"x", b"y")]),
    "header-not-a-pair": (0, None, b"v", ["h"]),
    "header-second-bad": (0, None, b"v", [("ok", b"x"), ("bad", 1)]),
    "headers-dict": (0, None, b"v", {"h": b"x"}),
    "headers-int": (0, None, b"v", 5),
    "header-name-lone-surrogate": (0, None, b"v", [("\ud800", b"x")]),
}


@CODECS
@pytest.mark.parametrize("name", list(BAD_RECORDS))
def test_bad_record_is_refused_and_builder_unchanged(codec, name):
    good = (1, b"k", b"v", [("h", b"x")])
    builder, reference = BatchBuilder(codec=codec), BatchBuilder(codec=codec)
    assert builder.append(*good) and reference.append(*good)
    with pytest.raises(InvalidRecordError):
        builder.append(*BAD_RECORDS[name])
    assert len(builder) == 1
    assert builder.estimated_size == reference.estimated_size
    assert builder.build() == reference.build()
    empty = BatchBuilder(codec=codec)
    with pytest.raises(InvalidRecordError):
        empty.append(*BAD_RECORDS[name])
    assert len(empty) == 0


def test_build_on_an_empty_builder_raises():
    with pytest.raises(ValueError):
        BatchBuilder().build()


# --- 6. encode() from an Arrow table -------------------------------------------------------


def payload_table() -> pa.Table:
    return pa.table(
        {
            "timestamp": [5, 3, MAX_INT64, 0],
            "key": [b"a", None, b"", b"d"],
            "value": [None, b"v", b"", b"x" * 1000],
            "headers": [[{"key": "ключ", "value": b"1"}], None, [],
                        [{"key": "a", "value": None}, {"key": "b", "value": b""}]],
        },
        schema=PAYLOAD_SCHEMA,
    )


@CODECS
@pytest.mark.parametrize("shape", ["table", "record-batch", "two-chunks"])
def test_encode_from_arrow_round_trips(codec, shape):
    table = payload_table()
    columns = {
        "table": table,
        "record-batch": table.to_batches()[0],
        "two-chunks": pa.concat_tables([table.slice(0, 1), table.slice(1)]),
    }[shape]
    batch = stamped(encode(columns, codec=codec, producer_id=9, producer_epoch=1,
                           base_sequence=40), 50)
    header = validate_batch(batch)
    assert (header.record_count, header.last_offset_delta) == (4, 3)
    assert (header.first_timestamp, header.max_timestamp) == (5, MAX_INT64)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 1, 40)
    out = read_table(batch)
    assert out.schema.equals(TABLE_SCHEMA)
    assert out.column("offset").to_pylist() == [50, 51, 52, 53]
    assert out.drop_columns(["offset"]).equals(table)
    assert [r.headers for r in read_records(batch)] == [
        (("ключ", b"1"),), (), (), (("a", None), ("b", b"")),
    ]
    assert read_table(batch, 51, 53).drop_columns(["offset"]).equals(table.slice(1, 2))


def test_encode_refuses_empty_or_foreign_columns():
    with pytest.raises(ValueError):
        encode(payload_table().slice(0, 0))
    with pytest.raises(ValueError):
        encode(pa.table({"x": [1]}))


@pytest.mark.parametrize("timestamps", [[None, 1], [1, None]], ids=str)
def test_encode_refuses_null_timestamps(timestamps):
    table = pa.table({"timestamp": timestamps, "key": [None, None], "value": [b"a", b"b"],
                      "headers": [[], []]}, schema=PAYLOAD_SCHEMA)
    with pytest.raises(ValueError):
        encode(table)
