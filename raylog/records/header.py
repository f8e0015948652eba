"""The fixed batch header: layout, parsing, validation and stamping.

A batch is a 65-byte header followed by a payload. All integers are big-endian::

    offset  size  field               notes
         0     8  base_offset         offset of the first record; stamped by the leader
         8     4  batch_length        bytes that follow this field (batch size - 12)
        12     4  leader_epoch        epoch of the leader that appended it; stamped by the leader
        16     1  magic               format version, MAGIC
        17     4  header_crc          CRC32C of bytes [0, 17): the fields above
        21     4  crc                 CRC32C of bytes [25, end): everything after this field
        25     2  attributes          bits 0-2 codec, bit 3 timestamp type, bit 4 explicit
                                      offsets, bit 5 transactional, bit 6 control
        27     4  last_offset_delta   offset of the last record minus base_offset
        31     8  first_timestamp     timestamp (ms) of the first record
        39     8  max_timestamp       largest timestamp (ms) in the batch
        47     8  producer_id         -1 when not idempotent
        55     2  producer_epoch      -1 when not idempotent
        57     4  base_sequence       -1 when not idempotent
        61     4  record_count        records in the payload
        65     -  payload             Arrow IPC stream, compressed per the codec bits

The two checksums together cover every byte: the leader rewrites base_offset and
leader_epoch, so they sit under a small header CRC that stamping recomputes, while the
payload CRC, computed once by the producer, is never recomputed on the way to disk or to a
consumer. ``last_offset_delta`` keeps a batch's offset range after compaction removed its
last records. With the explicit-offsets bit set, the payload carries an ``offset_delta``
column (written by the compactor); otherwise record i has offset base_offset + i.

Transactions (docs/storage.md, "Transactions in the log"): the transactional bit marks a
data batch written inside a transaction; the control bit marks a transaction marker (commit
or abort, built by :mod:`raylog.records.control`), which is never a data record. Both need a
producer id and epoch; a control batch is also transactional and holds exactly one record.
Any other combination is refused with InvalidBatchAttributesError.
"""

from __future__ import annotations

import enum
import random
import struct
from typing import NamedTuple

from crc32c import crc32c as _crc32c

from raylog.errors import CorruptRecordError, InvalidBatchAttributesError, InvalidRecordError

MAGIC = 1
HEADER = struct.Struct(">qiiBIIhiqqqhii")
HEADER_SIZE = HEADER.size  # 65
LENGTH_PREFIX = struct.Struct(">qi")  # base_offset, batch_length: enough to walk a log
LENGTH_PREFIX_SIZE = LENGTH_PREFIX.size  # 12
_STAMPED = struct.Struct(">qiiB")  # base_offset, batch_length, leader_epoch, magic
_STAMPED_END = _STAMPED.size  # 17: header_crc covers [0, 17)
_CRC_FIELD = struct.Struct(">I")
HEADER_CRC_POS = 17
CRC_POS = 21
CRC_START = 25  # the payload CRC covers [25, end)

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
EXPLICIT_OFFSETS_BIT = 0x10
TRANSACTIONAL_BIT = 0x20  # a data batch written inside a transaction (or a marker)
CONTROL_BIT = 0x40  # a transaction marker, not data (raylog.records.control)
KNOWN_ATTRIBUTE_BITS = CODEC_MASK | TIMESTAMP_TYPE_BIT | EXPLICIT_OFFSETS_BIT | \
    TRANSACTIONAL_BIT | CONTROL_BIT

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
MAX_SEQUENCE = 2**31 - 1  # base_sequence is an int32: no sequence goes past this
MAX_PRODUCER_EPOCH = 2**15 - 1  # producer_epoch is an int16
NO_LEADER_EPOCH = -1
MAX_OFFSET = 2**63 - 1


def random_producer_id() -> int:
    """A new producer id: raylog's writers pick their own (63 random bits make a clash
    between two of a cluster's producers negligible), where Kafka's ask a coordinator."""
    return random.getrandbits(63)


class Codec(enum.IntEnum):
    """Compression of a batch payload (attribute bits 0-2)."""

    NONE = 0
    LZ4 = 1


class TimestampType(enum.IntEnum):
    """Whether timestamps were set by the producer or by the leader on append."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    """The parsed fixed header of one batch."""

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    header_crc: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Size of the whole batch in bytes, header included."""
        return self.batch_length + LENGTH_PREFIX_SIZE

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset right after this batch's range."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_BIT else 0)

    @property
    def explicit_offsets(self) -> bool:
        return bool(self.attributes & EXPLICIT_OFFSETS_BIT)

    @property
    def transactional(self) -> bool:
        """Written inside a transaction (data or marker): the producer fields say whose."""
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def control(self) -> bool:
        """A transaction marker (raylog.records.control): never shown as a data record."""
        return bool(self.attributes & CONTROL_BIT)


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing from ``value``; hardware-accelerated."""
    return _crc32c(data, value)


def pack_header(
    *,
    payload: bytes | memoryview,
    attributes: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    record_count: int,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    base_offset: int = 0,
    leader_epoch: int = NO_LEADER_EPOCH,
) -> bytes:
    """Return the 65 header bytes for ``payload``, both checksums filled in."""
    batch_length = HEADER_SIZE - LENGTH_PREFIX_SIZE + len(payload)
    tail = HEADER.pack(
        0, 0, 0, 0, 0, 0,
        attributes, last_offset_delta, first_timestamp, max_timestamp,
        producer_id, producer_epoch, base_sequence, record_count,
    )[CRC_START:]
    crc = _crc32c(payload, _crc32c(tail))
    return stamped_prefix_for(base_offset, batch_length, leader_epoch) + (
        _CRC_FIELD.pack(crc) + tail
    )


def stamped_prefix_for(base_offset: int, batch_length: int, leader_epoch: int) -> bytes:
    """The first CRC_POS bytes of a batch: the stamped fields, magic and their CRC."""
    head = _STAMPED.pack(base_offset, batch_length, leader_epoch, MAGIC)
    return head + _CRC_FIELD.pack(_crc32c(head))


def stamped_prefix(batch: bytes | bytearray | memoryview, base_offset: int,
                   leader_epoch: int) -> bytes:
    """The first CRC_POS bytes ``batch`` would have after :func:`stamp`, without copying it.

    A log writes this prefix followed by ``batch[CRC_POS:]`` to store a stamped batch
    without touching the rest of its bytes.
    """
    (batch_length,) = struct.unpack_from(">i", batch, 8)
    return stamped_prefix_for(base_offset, batch_length, leader_epoch)


def stamp(batch: bytearray | memoryview, base_offset: int, leader_epoch: int) -> None:
    """Set base offset and leader epoch of a finished batch in place; no re-encoding."""
    batch[:CRC_POS] = stamped_prefix(batch, base_offset, leader_epoch)


_PRODUCER = struct.Struct(">qhi")  # producer_id, producer_epoch, base_sequence
_PRODUCER_POS = 47


def with_producer(batch: bytes | bytearray | memoryview, producer_id: int,
                  producer_epoch: int, base_sequence: int) -> bytes:
    """A copy of a finished batch that carries other producer fields.

    The fields sit under the payload CRC, so it is recomputed: a producer renumbering its
    batches after an epoch bump pays one CRC pass, the payload is not re-encoded.
    """
    out = bytearray(batch)
    _PRODUCER.pack_into(out, _PRODUCER_POS, producer_id, producer_epoch, base_sequence)
    _CRC_FIELD.pack_into(out, CRC_POS, _crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def batch_view(batch: object) -> bytes | bytearray | memoryview:
    """A received batch as bytes to read: ``bytes``, ``bytearray`` and ``memoryview`` as
    they are, any other object with the buffer protocol (a ``pa.Buffer`` from a producer,
    a view of Ray's object store) as a flat byte view of its memory, not copied. Raises
    InvalidRecordError for anything else."""
    if isinstance(batch, (bytes, bytearray, memoryview)):
        return batch
    try:
        return memoryview(batch).cast("B")
    except TypeError as e:
        raise InvalidRecordError(
            f"a batch is bytes or a buffer, got {type(batch).__name__}") from e


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos`` without checking anything but its size."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated batch header at byte {pos}: {len(buf) - pos} bytes, need {HEADER_SIZE}"
        )
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def check_prefix(header: BatchHeader, buf: bytes | bytearray | memoryview, pos: int) -> None:
    """Check what the header CRC covers: magic, batch length, base offset, leader epoch.

    Needs only the header's first bytes at ``buf[pos:]``, not the payload, so a log can
    trust a header's position fields (where a batch starts, which offset it holds) without
    reading the batch. Raises CorruptRecordError.
    """
    if header.magic != MAGIC:
        raise CorruptRecordError(f"bad magic {header.magic} at byte {pos}, expected {MAGIC}")
    if header.batch_length < HEADER_SIZE - LENGTH_PREFIX_SIZE:
        raise CorruptRecordError(f"bad batch length {header.batch_length} at byte {pos}")
    if _crc32c(memoryview(buf)[pos:pos + _STAMPED_END]) != header.header_crc:
        raise CorruptRecordError(f"header CRC mismatch in batch at byte {pos}")


def check_crcs(header: BatchHeader, buf: bytes | bytearray | memoryview, pos: int) -> None:
    """Check that the batch is all there and both CRCs match: its bytes are as its producer
    built them (so its producer id and sequence can be trusted). Raises CorruptRecordError."""
    check_prefix(header, buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(
            f"truncated batch at byte {pos}: length says {header.size} bytes, "
            f"{len(buf) - pos} present"
        )
    if _crc32c(memoryview(buf)[pos + CRC_START:end]) != header.crc:
        raise CorruptRecordError(f"CRC mismatch in batch at byte {pos}")


def check_header(header: BatchHeader, buf: bytes | bytearray | memoryview, pos: int) -> None:
    """Check one header against the bytes that hold it: magic, lengths, both CRCs, fields.

    ``buf[pos:pos + header.size]`` must hold the batch; raises CorruptRecordError otherwise.
    """
    check_crcs(header, buf, pos)
    # Past the CRCs a batch is as its producer built it; these checks refuse a producer's bug.
    if header.attributes & ~KNOWN_ATTRIBUTE_BITS or header.attributes & CODEC_MASK not in (
        Codec.NONE, Codec.LZ4,
    ):
        raise CorruptRecordError(f"unknown attributes {header.attributes:#x} at byte {pos}")
    if header.record_count < 1 or header.last_offset_delta < header.record_count - 1:
        raise CorruptRecordError(
            f"bad counts at byte {pos}: {header.record_count} records, "
            f"last offset delta {header.last_offset_delta}"
        )
    if not header.explicit_offsets and header.last_offset_delta != header.record_count - 1:
        raise CorruptRecordError(
            f"dense batch at byte {pos} has {header.record_count} records "
            f"but last offset delta {header.last_offset_delta}"
        )
    if not 0 <= header.base_offset <= MAX_OFFSET - header.last_offset_delta:
        raise CorruptRecordError(
            f"offsets {header.base_offset}+{header.last_offset_delta} at byte {pos} "
            f"are outside [0, 2**63)"
        )
    if header.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT):  # one test for the others
        check_transaction_bits(header, pos)


def check_transaction_bits(header: BatchHeader, pos: int = 0) -> None:
    """Refuse inconsistent transaction attributes with InvalidBatchAttributesError: a
    control batch that is not transactional or holds other than one record, or a
    transactional batch without a producer id and epoch (readers of a transaction's outcome
    and the producer state find the transaction by them)."""
    if header.control and not header.transactional:
        raise InvalidBatchAttributesError(
            f"control batch at byte {pos} is not marked transactional "
            f"(attributes {header.attributes:#x})")
    if header.transactional and (header.producer_id < 0 or header.producer_epoch < 0):
        raise InvalidBatchAttributesError(
            f"transactional batch at byte {pos} has no producer (id {header.producer_id}, "
            f"epoch {header.producer_epoch})")
    if header.control and (header.record_count != 1 or header.last_offset_delta != 0):
        raise InvalidBatchAttributesError(
            f"control batch at byte {pos} holds {header.record_count} records over "
            f"{header.last_offset_delta + 1} offsets; a marker is one record")


def validate_batch(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Check that ``batch`` holds exactly one well-framed batch; return its header."""
    header = parse_header(batch)
    check_header(header, batch, 0)
    if header.size != len(batch):
        raise CorruptRecordError(
            f"batch length says {header.size} bytes but {len(batch)} were given"
        )
    return header


def iter_headers(buf: bytes | bytearray | memoryview, pos: int = 0, *, verify: bool = True):
    """Yield ``(position, header)`` for each batch in ``buf`` from ``pos``.

    Stops cleanly at the end of ``buf``; raises CorruptRecordError at the first malformed or
    truncated batch, so callers that recover a torn tail catch it and cut there.
    """
    end = len(buf)
    while pos < end:
        header = parse_header(buf, pos)
        if verify:
            check_header(header, buf, pos)
        elif pos + header.size > end or header.batch_length < HEADER_SIZE - LENGTH_PREFIX_SIZE:
            raise CorruptRecordError(f"truncated batch at byte {pos}")
        yield pos, header
        pos += header.size
