"""to_raylog and to_kafka: one Kafka batch is one raylog batch, checked against batches built
independently (kafka-python's kafka.record, raylog's BatchBuilder), with both
implementations of the per-record work."""

from __future__ import annotations

import contextlib
import struct

import lz4.frame
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylog.errors import CorruptRecordError, InvalidKafkaBatchError, InvalidTimestampError
from raylog.kafka import records_py
from raylog.kafka.batch import HEADER_SIZE, KafkaCodec, kafka_batches, pack_header
from raylog.kafka.compression import compress, decompress
from raylog.kafka.error_codes import kafka_error_code
from raylog.kafka.records import _LZ4_LEVEL, kafka_to_raylog, to_kafka, to_raylog
from raylog.records import Codec, TimestampType, encode, parse_header, read_records
from raylog.records.header import HEADER_SIZE as RAYLOG_HEADER_SIZE
from raylog.records.payload import EXPLICIT_SCHEMA, check_payload
from raylog.records.payload import compress as compress_payload
from tests.unit.kafka.builders import (
    CODER_NAMES,
    coder_module,
    kafka_batch,
    raylog_batch,
    read_kafka,
    stamped,
    using,
    with_attributes,
)

CODERS = pytest.mark.parametrize("coder", CODER_NAMES)
KAFKA_CODECS = pytest.mark.parametrize("kcodec", list(KafkaCodec), ids=lambda c: c.name)
T0 = 1_767_225_600_000

MIXED = [
    (T0, None, b"plain", []),
    (T0 + 5, b"key", None, []),  # a tombstone
    (T0 - 3, b"", b"", [("empty", b""), ("null", None)]),  # empty is not null
    (T0 + 1, None, b"x" * 300, [("h\u00e9", b"\x00\xff")]),
    (T0, b"k" * 200, b"v", []),
]
PAGE_VIEWS = [(T0 + i, None, b'{"page":"/p/%05d","user":%08d}' % (i % 97, i * 31), [])
              for i in range(1000)]


def opened(batch: bytes) -> tuple[tuple, bytes]:
    """A raylog batch's header fields but its length and checksums, and its Arrow stream
    uncompressed: what two batches of the same records share however LZ4 compressed them."""
    header = parse_header(batch)
    fields = header._replace(batch_length=0, header_crc=0, crc=0)
    payload = batch[RAYLOG_HEADER_SIZE:]
    if header.codec == Codec.LZ4:
        payload = lz4.frame.decompress(payload)
    return fields, payload


def as_records(recs, base_offset=0):
    """The test records as raylog's readers return them."""
    return [(base_offset + i, ts, key, value, tuple(headers))
            for i, (ts, key, value, headers) in enumerate(recs)]


@CODERS
@KAFKA_CODECS
@pytest.mark.parametrize("recs", [MIXED, PAGE_VIEWS], ids=["mixed", "pageviews"])
def test_to_raylog_is_what_raylogs_producer_sends(coder, kcodec, recs):
    data = kafka_batch(recs, kcodec, producer_id=12345, producer_epoch=2, base_sequence=70)
    with using(coder):
        (batch,) = kafka_batches(data)
        out = to_raylog(batch)
    assert opened(out) == opened(raylog_batch(recs, producer_id=12345, producer_epoch=2,
                                              base_sequence=70))


@CODERS
def test_to_raylog_compresses_at_the_listeners_lz4_level(coder):
    """The payload is LZ4 in its faster mode (_LZ4_LEVEL): one frame that every reader
    reads as any other, a little larger than the producer's for these records."""
    with using(coder):
        (batch,) = kafka_batches(kafka_batch(PAGE_VIEWS, KafkaCodec.LZ4))
        out = to_raylog(batch)
    _, stream = opened(out)
    assert out[RAYLOG_HEADER_SIZE:] == compress_payload(stream, _LZ4_LEVEL) != \
        compress_payload(stream)
    assert [tuple(r) for r in read_records(out)] == as_records(PAGE_VIEWS)


@CODERS
def test_to_raylog_keeps_no_producer_and_takes_a_codec(coder):
    with using(coder):
        (batch,) = kafka_batches(kafka_batch(MIXED))
        out = to_raylog(batch, Codec.NONE)
    header = parse_header(out)
    assert header.codec == Codec.NONE
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    check_payload(header, out)
    assert [tuple(r) for r in read_records(out)] == as_records(MIXED)


@CODERS
def test_a_transactional_kafka_batch_is_a_transactional_raylog_batch(coder):
    """Kafka's transactional bit (0x10) becomes raylog's (0x20), and back on the way out."""
    data = with_attributes(kafka_batch(MIXED, producer_id=77, producer_epoch=3,
                                       base_sequence=5), 0x10)
    with using(coder):
        (batch,) = kafka_batches(data)
        out = to_raylog(batch)
        header = parse_header(out)
        assert header.transactional and not header.control
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 5)
        assert [tuple(r) for r in read_records(out)] == as_records(MIXED)
        (back,) = kafka_batches(to_kafka(stamped(out, 10, 0)))
    assert back.attributes & 0x30 == 0x10
    plain = parse_header(to_raylog(kafka_batches(kafka_batch(MIXED, producer_id=77,
                                                             producer_epoch=3))[0]))
    assert not plain.transactional


@CODERS
@KAFKA_CODECS
@pytest.mark.parametrize("recs", [MIXED, PAGE_VIEWS], ids=["mixed", "pageviews"])
def test_to_kafka_reads_as_kafka_python_reads_a_brokers_batch(coder, kcodec, recs):
    stored = stamped(raylog_batch(recs, producer_id=9, producer_epoch=0, base_sequence=3),
                     4000, 7)
    with using(coder):
        out = to_kafka(stored, kcodec)
    ((fields, got),) = read_kafka(out)
    assert fields == (4000, 7, len(recs) - 1, kcodec, 0, recs[0][0],
                      max(r[0] for r in recs), 9, 0, 3, len(recs))
    assert got == [(o, ts, k, v, list(h)) for o, ts, k, v, h in as_records(recs, 4000)]


@CODERS
def test_to_kafka_is_byte_for_byte_a_kafka_clients_batch(coder):
    """Uncompressed, the records are the bytes kafka-python writes; only base offset and
    leader epoch (set by the broker) differ, and the CRC does not cover them."""
    for recs in (MIXED, PAGE_VIEWS):
        client = kafka_batch(recs, producer_id=3, producer_epoch=1, base_sequence=0)
        with using(coder):
            out = to_kafka(stamped(raylog_batch(recs, producer_id=3, producer_epoch=1,
                                                base_sequence=0), 0, 0))
        assert out == client
    for kcodec in KafkaCodec:
        client = kafka_batch(PAGE_VIEWS, kcodec)
        with using(coder):
            out = to_kafka(stamped(raylog_batch(PAGE_VIEWS), 0, 0), kcodec)
        assert decompress(kcodec, out[HEADER_SIZE:]) == decompress(kcodec,
                                                                   client[HEADER_SIZE:])
        # the same header but for the length and CRC of differently compressed records
        assert out[:8] + out[12:17] + out[21:HEADER_SIZE] == \
            client[:8] + client[12:17] + client[21:HEADER_SIZE]


@CODERS
def test_to_kafka_translates_every_batch_of_a_fetch(coder):
    first = stamped(raylog_batch(MIXED), 10, 1)
    second = stamped(raylog_batch(PAGE_VIEWS[:7], producer_id=5, producer_epoch=0,
                                  base_sequence=0), 15, 2)
    with using(coder):
        out = to_kafka(first + second, KafkaCodec.LZ4)
        batches = kafka_batches(out)
    assert [(b.base_offset, b.partition_leader_epoch, b.record_count) for b in batches] == \
        [(10, 1, 5), (15, 2, 7)]
    assert to_kafka(b"") == b""


@CODERS
def test_a_compacted_batch_keeps_its_offsets(coder):
    """A compacted raylog batch (explicit offsets, gaps) is a Kafka batch with the same
    offset deltas and last offset delta, as a compacted Kafka log's."""
    columns = pa.record_batch(
        [[T0, T0 + 2, T0 + 9], [b"a", b"c", b"j"], [b"1", b"3", None], [[], [], []],
         pa.array([0, 2, 9], pa.int32())], schema=EXPLICIT_SCHEMA)
    stored = stamped(encode(columns, last_offset_delta=11), 100, 4)
    with using(coder):
        out = to_kafka(stored)
    ((fields, got),) = read_kafka(out)
    assert fields[2] == 11 and fields[10] == 3
    assert [(r[0], r[2], r[3]) for r in got] == [(100, b"a", b"1"), (102, b"c", b"3"),
                                                  (109, b"j", None)]


@CODERS
def test_log_append_time(coder):
    """A LogAppendTime batch's records all carry its max timestamp, both ways."""
    data = with_attributes(kafka_batch(MIXED), 0x08)
    with using(coder):
        (batch,) = kafka_batches(data)
        out = to_raylog(batch)
        header = parse_header(out)
        assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
        assert {r.timestamp for r in read_records(out)} == {batch.max_timestamp}
        check_payload(header, out)
        back = to_kafka(stamped(out, 0, 0))
    ((fields, got),) = read_kafka(back)
    assert fields[4] == 1 and {r[1] for r in got} == {batch.max_timestamp}


def rebuilt(recs_bytes: bytes, count: int, codec: KafkaCodec = KafkaCodec.NONE, *,
            last_offset_delta: int | None = None, base_timestamp: int = T0) -> bytes:
    """A Kafka batch around hand-made record bytes, CRC right: as a buggy client sends it."""
    body = compress(codec, recs_bytes)
    return pack_header(records=body, base_offset=0, partition_leader_epoch=-1,
                       attributes=int(codec), base_timestamp=base_timestamp,
                       max_timestamp=base_timestamp, producer_id=-1, producer_epoch=-1,
                       base_sequence=-1, record_count=count,
                       last_offset_delta=count - 1 if last_offset_delta is None
                       else last_offset_delta) + body


def hand_made(offset_deltas, timestamp_deltas=None, names=None) -> bytes:
    n = len(offset_deltas)
    names = names or [b""] * n
    return records_py.encode_records(records_py.Columns(
        np.asarray(timestamp_deltas or [0] * n, np.int64).tobytes(),
        np.asarray(offset_deltas, np.int64).tobytes(),
        np.zeros(n + 1, np.int32).tobytes(), bytes(n), b"",
        np.zeros(n + 1, np.int32).tobytes(), bytes(n), b"",
        np.arange(n + 1, dtype=np.int32).tobytes(),
        np.cumsum([0] + [len(x) for x in names], dtype=np.int32).tobytes(), b"".join(names),
        np.zeros(n + 1, np.int32).tobytes(), bytes(n), b"",
    ))


@CODERS
@pytest.mark.parametrize("deltas", [[0, 0], [1, 2], [0, 2, 1]])
def test_offset_deltas_other_than_0_to_n_minus_1_are_refused(coder, deltas):
    (batch,) = kafka_batches(rebuilt(hand_made(deltas), len(deltas)))
    with using(coder), pytest.raises(InvalidKafkaBatchError, match="offset deltas") as caught:
        to_raylog(batch)
    assert kafka_error_code(caught.value) == 87


@CODERS
def test_negative_timestamps_are_refused(coder):
    (batch,) = kafka_batches(rebuilt(hand_made([0, 1], [0, -5]), 2, base_timestamp=3))
    with using(coder), pytest.raises(InvalidTimestampError) as caught:
        to_raylog(batch)
    assert kafka_error_code(caught.value) == 32


@CODERS
def test_a_header_name_that_is_not_utf8_is_refused(coder):
    (batch,) = kafka_batches(rebuilt(hand_made([0], names=[b"\xff\xfe"]), 1))
    with using(coder), pytest.raises(InvalidKafkaBatchError, match="UTF-8"):
        to_raylog(batch)


@CODERS
def test_records_that_disagree_with_their_batch_are_corrupt(coder):
    good = hand_made([0, 1, 2])
    cases = {
        "fewer records than counted": rebuilt(good, 4, last_offset_delta=3),
        "more records than counted": rebuilt(good, 2),
        "a record cut short": rebuilt(good[:-1], 3),
        "a length past the end": rebuilt(b"\x7e" + good[1:], 3),
        "not a varint": rebuilt(b"\xff" * 12, 1),
        "a negative key length": rebuilt(b"\x08\x00\x00\x00\x03\x00", 1),
        "a varint past 64 bits": rebuilt(b"\x1e\x00" + b"\xff" * 9 + b"\x02\x00\x01\x01\x00", 1),
    }
    for name, data in cases.items():
        (batch,) = kafka_batches(data)
        with using(coder), pytest.raises(CorruptRecordError):
            to_raylog(batch)
            pytest.fail(f"{name}: translated")


@CODERS
def test_random_record_bytes_raise_only_typed_errors(coder):
    rng = np.random.default_rng(7)
    good = hand_made([0, 1, 2], names=[b"a", b"bb", b""])
    for _ in range(500):
        body = bytearray(good)
        for pos in rng.integers(0, len(body), 3):
            body[pos] = int(rng.integers(0, 256))
        (batch,) = kafka_batches(rebuilt(bytes(body), 3))
        with using(coder), contextlib.suppress(CorruptRecordError, InvalidKafkaBatchError,
                                               InvalidTimestampError):
            to_raylog(batch)


def test_both_implementations_read_garbage_alike():
    """Mutated records: the C helper and records_py give the same columns, or both refuse."""
    rng = np.random.default_rng(11)
    good = kafka_batch(MIXED)[HEADER_SIZE:]
    coders = [coder_module(name) for name in CODER_NAMES]
    for _ in range(2000):
        body = bytearray(good)
        for pos in rng.integers(0, len(body), int(rng.integers(1, 4))):
            body[pos] = int(rng.integers(0, 256))
        count = int(rng.choice([len(MIXED), len(MIXED) - 1, len(MIXED) + 1]))
        outcomes = []
        for coder in coders:
            try:
                outcomes.append(coder.decode_records(bytes(body), count))
            except CorruptRecordError:
                outcomes.append("corrupt")
        assert all(o == outcomes[0] for o in outcomes), bytes(body).hex()


def test_both_implementations_write_the_same_bytes():
    stored = stamped(raylog_batch(MIXED + PAGE_VIEWS), 0, 0)
    outs = []
    for coder in CODER_NAMES:
        with using(coder):
            outs.append(to_kafka(stored))
    assert len(set(outs)) == 1


def test_kafka_to_raylog_takes_a_whole_records_field():
    data = kafka_batch(MIXED[:2]) + kafka_batch(MIXED[2:], KafkaCodec.ZSTD)
    out = kafka_to_raylog(data)
    assert [tuple(r) for r in read_records(b"".join(stamped(b, 0, 0) for b in out))][2:] == \
        [(i, *r[1:]) for i, r in enumerate(as_records(MIXED[2:]))]


# -- properties ------------------------------------------------------------------------------

_header = st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8))
_record = st.tuples(
    st.integers(0, 2**50), st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=80),
    st.lists(_header, max_size=3),
)
_producer = st.sampled_from([(-1, -1, -1), (1, 0, 0), (2**62, 2**15 - 1, 2**31 - 1000)])


@pytest.mark.parametrize("coder", CODER_NAMES)
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(recs=st.lists(_record, min_size=1, max_size=30), kcodec=st.sampled_from(list(KafkaCodec)),
       producer=_producer, base_offset=st.integers(0, 2**40), epoch=st.integers(-1, 2**31 - 1))
def test_round_trip_raylog_kafka_raylog(coder, recs, kcodec, producer, base_offset, epoch):
    """Stored raylog batch -> Kafka batch -> raylog batch: the same batch (but for the
    stamped fields, which the leader sets), byte for byte once uncompressed."""
    original = raylog_batch(recs, producer_id=producer[0], producer_epoch=producer[1],
                            base_sequence=producer[2])
    with using(coder):
        (batch,) = kafka_batches(to_kafka(stamped(original, base_offset, epoch), kcodec))
        assert (batch.base_offset, batch.partition_leader_epoch) == (base_offset, epoch)
        assert opened(to_raylog(batch)) == opened(original)


@pytest.mark.parametrize("coder", CODER_NAMES)
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(recs=st.lists(_record, min_size=1, max_size=30), kcodec=st.sampled_from(list(KafkaCodec)),
       producer=_producer)
def test_round_trip_kafka_raylog_kafka(coder, recs, kcodec, producer):
    """A client's Kafka batch -> raylog -> Kafka: the records a Kafka client reads back are
    the ones it wrote, and uncompressed the batch is the client's own bytes."""
    client = kafka_batch(recs, 0, producer_id=producer[0], producer_epoch=producer[1],
                         base_sequence=producer[2])
    with using(coder):
        (batch,) = kafka_batches(compressed_like(client, kcodec))
        back = to_kafka(stamped(to_raylog(batch), 0, 0), kcodec)
    ((fields, got),) = read_kafka(back)
    ((client_fields, wrote),) = read_kafka(client)
    assert got == wrote
    assert fields == (*client_fields[:3], kcodec, *client_fields[4:])
    if kcodec == KafkaCodec.NONE:
        assert back == client


def compressed_like(batch: bytes, codec: KafkaCodec) -> bytes:
    """An uncompressed Kafka batch with its records compressed by ``codec`` (kafka-python
    falls back to none when compressing does not shrink, so it cannot be asked)."""
    body = compress(codec, batch[HEADER_SIZE:])
    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(body))
    struct.pack_into(">h", head, 21, int(codec))
    return with_attributes(bytes(head) + body, int(codec))
