"""Kafka record batches v2 (magic 2): the header, its checks, and walking a records field.

A batch is a 61-byte header followed by its records, compressed as a whole per the codec
bits. All integers are big-endian::

    offset  size  field                    notes
         0     8  base_offset              0 from a producer; the broker's on the way out
         8     4  batch_length             bytes that follow this field (batch size - 12)
        12     4  partition_leader_epoch   -1 from a producer
        16     1  magic                    2; 0 and 1 are the older message sets
        17     4  crc                      CRC-32C of bytes [21, end)
        21     2  attributes               bits 0-2 codec, 3 timestamp type, 4 transactional,
                                           5 control, 6 delete horizon set
        23     4  last_offset_delta        offset of the last record minus base_offset
        27     8  base_timestamp           ms; records carry deltas from it
        35     8  max_timestamp            ms; every record's time under LogAppendTime
        43     8  producer_id              -1 when not idempotent
        51     2  producer_epoch           -1 when not idempotent
        53     4  base_sequence            -1 when not idempotent
        57     4  record_count
        61     -  records                  see records_py.py for one record's layout

Where a Kafka batch and a raylog batch share a field, they share its meaning: the two
headers differ in raylog's header CRC, its Arrow payload and the codecs it knows.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from crc32c import crc32c

from raylog.errors import (
    CorruptRecordError,
    InvalidKafkaBatchError,
    UnsupportedMessageFormatError,
)
from raylog.records import TimestampType

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LENGTH_PREFIX_SIZE = 12  # base_offset and batch_length: enough to find the next batch
MAGIC_POS = 16
CRC_POS = 17
CRC_START = 21  # the CRC covers [21, end)
# The smallest header of the old message sets (magic 0: offset, size, crc, magic, attributes,
# key and value lengths): a batch shorter than this is truncated whatever its magic.
_MIN_LEGACY_SIZE = 26

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20


class KafkaCodec(enum.IntEnum):
    """Compression of a Kafka batch's records (attribute bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class KafkaBatch(NamedTuple):
    """The parsed header of one Kafka v2 batch and a view of its bytes (``data``, header
    included). Immutable; ``data`` shares the caller's buffer, so that buffer must outlive
    the batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    data: memoryview

    @property
    def size(self) -> int:
        """Size of the whole batch in bytes, header included."""
        return self.batch_length + LENGTH_PREFIX_SIZE

    @property
    def codec(self) -> KafkaCodec:
        return KafkaCodec(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_BIT else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def records(self) -> memoryview:
        """The records as stored: compressed unless the codec is NONE."""
        return self.data[HEADER_SIZE:]


def _parse(buf: memoryview, pos: int) -> KafkaBatch:
    """The batch at ``pos``: framing, magic and CRC checked; fields not yet judged."""
    left = len(buf) - pos
    if left < LENGTH_PREFIX_SIZE + 5:  # through the magic byte
        raise CorruptRecordError(f"truncated Kafka batch at byte {pos}: {left} bytes")
    (batch_length,) = struct.unpack_from(">i", buf, 8 + pos)
    magic = buf[pos + MAGIC_POS]
    if magic in (0, 1):
        raise UnsupportedMessageFormatError(
            f"Kafka message format v{magic} at byte {pos}: raylog takes record batches v2 "
            "(magic 2) only; set the client's api.version.request / message format to >= 0.11"
        )
    if magic != MAGIC:
        raise CorruptRecordError(f"bad Kafka batch magic {magic} at byte {pos}")
    size = batch_length + LENGTH_PREFIX_SIZE
    if batch_length < HEADER_SIZE - LENGTH_PREFIX_SIZE or size > left:
        raise CorruptRecordError(
            f"truncated Kafka batch at byte {pos}: length says {size} bytes, {left} present"
        )
    fields = HEADER.unpack_from(buf, pos)
    data = buf[pos:pos + size]
    if crc32c(data[CRC_START:]) != fields[4]:
        raise CorruptRecordError(f"CRC mismatch in Kafka batch at byte {pos}")
    return KafkaBatch(*fields, data)


def _check(batch: KafkaBatch, pos: int) -> None:
    """Refuse a well-framed batch raylog cannot store as it is."""
    if batch.is_control:
        raise InvalidKafkaBatchError(
            f"control batch at byte {pos}: clients may not write control records")
    if batch.is_transactional and batch.producer_id < 0:
        # A transaction's batch names its producer: the partition checks it is in one.
        raise InvalidKafkaBatchError(
            f"transactional batch at byte {pos} has no producer id")
    if batch.attributes & CODEC_MASK > max(KafkaCodec):
        raise CorruptRecordError(f"unknown Kafka codec {batch.attributes & CODEC_MASK} "
                                 f"in batch at byte {pos}")
    if batch.record_count < 1:
        raise InvalidKafkaBatchError(f"Kafka batch at byte {pos} holds no records")
    if batch.last_offset_delta != batch.record_count - 1:
        raise InvalidKafkaBatchError(
            f"Kafka batch at byte {pos} has {batch.record_count} records but last offset "
            f"delta {batch.last_offset_delta}: a producer's offsets are 0..n-1"
        )


def kafka_batches(records: bytes | bytearray | memoryview) -> list[KafkaBatch]:
    """The batches of a Produce request's ``records`` field, each checked: framing, magic,
    CRC-32C, and what raylog refuses (control batches, transactional batches without a
    producer id, empty batches, offset deltas other than 0..n-1). The batches' ``data``
    are views of ``records``.

    Raises UnsupportedMessageFormatError (Kafka 43) for magic 0/1, CorruptRecordError
    (Kafka 2) for truncated or corrupt bytes, InvalidKafkaBatchError (87) for batches raylog
    does not store.

    >>> kafka_batches(b"")
    []
    """
    buf = memoryview(records).cast("B")
    out, pos = [], 0
    while pos < len(buf):
        if len(buf) - pos < _MIN_LEGACY_SIZE:
            raise CorruptRecordError(f"truncated Kafka batch at byte {pos}: "
                                     f"{len(buf) - pos} bytes")
        batch = _parse(buf, pos)
        _check(batch, pos)
        out.append(batch)
        pos += batch.size
    return out


def pack_header(*, records: bytes | bytearray | memoryview, base_offset: int,
                partition_leader_epoch: int, attributes: int, last_offset_delta: int,
                base_timestamp: int, max_timestamp: int, producer_id: int,
                producer_epoch: int, base_sequence: int, record_count: int) -> bytes:
    """The 61 header bytes of a batch whose records (as stored, compressed or not) are
    ``records``, CRC filled in."""
    head = bytearray(HEADER.pack(
        base_offset, HEADER_SIZE - LENGTH_PREFIX_SIZE + len(records), partition_leader_epoch,
        MAGIC, 0, attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
        producer_epoch, base_sequence, record_count,
    ))
    crc = crc32c(records, crc32c(memoryview(head)[CRC_START:]))
    struct.pack_into(">I", head, CRC_POS, crc)
    return bytes(head)
