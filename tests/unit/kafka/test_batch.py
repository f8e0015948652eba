"""kafka_batches: a Produce request's records field split into checked Kafka v2 batches."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from raylog.errors import (
    CorruptRecordError,
    InvalidKafkaBatchError,
    UnsupportedMessageFormatError,
)
from raylog.kafka.batch import HEADER_SIZE, KafkaBatch, KafkaCodec, kafka_batches, pack_header
from raylog.kafka.error_codes import kafka_error_code
from raylog.records import TimestampType
from tests.unit.kafka.builders import kafka_batch, with_attributes

RECS = [(1_700_000_000_000 + i, b"k%d" % i, b"v" * 40, [("h", b"x")]) for i in range(10)]


def test_header_fields_as_a_kafka_client_wrote_them():
    data = kafka_batch(RECS, 1, producer_id=77, producer_epoch=3, base_sequence=40)
    (batch,) = kafka_batches(data)
    assert isinstance(batch, KafkaBatch)
    assert (batch.base_offset, batch.magic, batch.attributes, batch.last_offset_delta) == \
        (0, 2, 1, 9)
    assert (batch.base_timestamp, batch.max_timestamp) == (1_700_000_000_000,
                                                           1_700_000_000_009)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence,
            batch.record_count) == (77, 3, 40, 10)
    assert batch.codec == KafkaCodec.GZIP and batch.timestamp_type == TimestampType.CREATE_TIME
    assert not batch.is_transactional and not batch.is_control
    assert batch.size == len(data) == batch.batch_length + 12
    assert bytes(batch.data) == data and bytes(batch.records) == data[HEADER_SIZE:]
    assert batch.crc == struct.unpack_from(">I", data, 17)[0]


def test_several_batches_and_none():
    first, second = kafka_batch(RECS[:3]), kafka_batch(RECS[3:], 3)
    batches = kafka_batches(memoryview(first + second))
    assert [b.record_count for b in batches] == [3, 7]
    assert [b.codec for b in batches] == [KafkaCodec.NONE, KafkaCodec.LZ4]
    assert kafka_batches(b"") == []


def test_pack_header_matches_a_kafka_client():
    data = kafka_batch(RECS, producer_id=5, producer_epoch=0, base_sequence=0)
    (b,) = kafka_batches(data)
    assert pack_header(
        records=b.records, base_offset=0, partition_leader_epoch=b.partition_leader_epoch,
        attributes=b.attributes, last_offset_delta=9, base_timestamp=b.base_timestamp,
        max_timestamp=b.max_timestamp, producer_id=5, producer_epoch=0, base_sequence=0,
        record_count=10,
    ) == data[:HEADER_SIZE]


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_are_refused(magic):
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1 if magic else None, key=b"k", value=b"v")
    with pytest.raises(UnsupportedMessageFormatError) as caught:
        kafka_batches(bytes(builder.build()))
    assert kafka_error_code(caught.value) == 43


def test_every_truncation_is_corrupt():
    data = kafka_batch(RECS[:2]) + kafka_batch(RECS[2:4])
    first = len(data) // 2
    for cut in range(1, len(data)):
        if cut == first:
            continue  # exactly the first batch: whole
        with pytest.raises(CorruptRecordError) as caught:
            kafka_batches(data[:cut])
        assert kafka_error_code(caught.value) == 2


def test_a_flipped_byte_anywhere_is_corrupt():
    data = kafka_batch(RECS)
    for pos in range(len(data)):
        if 0 <= pos < 8 or 12 <= pos < 16:
            continue  # base offset and leader epoch: outside the CRC, set by the broker
        bad = bytearray(data)
        bad[pos] ^= 0x40
        with pytest.raises(CorruptRecordError):
            kafka_batches(bytes(bad))


def test_bad_magic_is_corrupt():
    bad = bytearray(kafka_batch(RECS))
    bad[16] = 3
    with pytest.raises(CorruptRecordError, match="magic 3"):
        kafka_batches(bytes(bad))


def test_transactional_batches_are_taken():
    data = with_attributes(kafka_batch(RECS, producer_id=1, producer_epoch=0,
                                       base_sequence=0), 0x10)
    (batch,) = kafka_batches(data)
    assert batch.is_transactional and not batch.is_control


def test_a_transactional_batch_without_a_producer_is_refused():
    with pytest.raises(InvalidKafkaBatchError, match="no producer id") as caught:
        kafka_batches(with_attributes(kafka_batch(RECS), 0x10))
    assert kafka_error_code(caught.value) == 87


def test_control_batches_are_refused():
    with pytest.raises(InvalidKafkaBatchError, match="control") as caught:
        kafka_batches(with_attributes(kafka_batch(RECS), 0x30))
    assert kafka_error_code(caught.value) == 87


def test_unknown_codec_is_corrupt():
    with pytest.raises(CorruptRecordError, match="codec 5"):
        kafka_batches(with_attributes(kafka_batch(RECS), 5))


def test_offset_range_other_than_0_to_n_minus_1_is_refused():
    data = kafka_batch(RECS[:2], offsets=[0, 2])  # last offset delta 2 for 2 records
    with pytest.raises(InvalidKafkaBatchError, match="last offset delta 2"):
        kafka_batches(data)


def test_an_empty_batch_is_refused():
    data = bytearray(pack_header(records=b"", base_offset=0, partition_leader_epoch=0,
                                 attributes=0, last_offset_delta=-1, base_timestamp=0,
                                 max_timestamp=0, producer_id=-1, producer_epoch=-1,
                                 base_sequence=-1, record_count=0))
    assert crc32c(memoryview(data)[21:]) == struct.unpack_from(">I", data, 17)[0]
    with pytest.raises(InvalidKafkaBatchError, match="no records"):
        kafka_batches(bytes(data))
