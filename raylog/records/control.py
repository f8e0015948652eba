"""Control batches: the commit and abort markers that end a transaction in a partition.

A transaction coordinator ends a producer's transaction in each of its partitions by
appending a marker there. A marker is a batch with the control and transactional bits set,
the producer id and epoch of the transaction in its header, no sequence (-1), and one record
in the ordinary payload schema, laid out as Kafka's control records are so that the Kafka
listener can hand it on as a Kafka control batch unchanged::

    key    int16 version (0), int16 type (0 abort, 1 commit)        4 bytes, big-endian
    value  int16 version (0), int32 coordinator epoch                6 bytes, big-endian

Being an ordinary payload, a marker passes every check a batch gets (CRCs, Arrow payload,
recovery, replication, compaction's reading); being a control batch, every reader that turns
batches into records skips it (``raylog.records.reader``, the consumer, the Kafka fetch path
maps it to a Kafka control batch).
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

import pyarrow as pa

from raylog.errors import CorruptRecordError, InvalidArgumentError
from raylog.records.header import (
    CONTROL_BIT,
    MAX_PRODUCER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
    Codec,
)
from raylog.records.payload import PAYLOAD_SCHEMA, decode, empty_headers, encode

_KEY = struct.Struct(">hh")  # version, marker type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
CONTROL_RECORD_VERSION = 0


class MarkerType(enum.IntEnum):
    """How a transaction ended (Kafka's ControlRecordType: ABORT 0, COMMIT 1)."""

    ABORT = 0
    COMMIT = 1


class Marker(NamedTuple):
    """What a control batch says: the transaction's outcome and the epoch of the coordinator
    that wrote it (a marker from an older coordinator is fenced)."""

    type: MarkerType
    coordinator_epoch: int


def control_batch(marker_type: MarkerType, *, producer_id: int, producer_epoch: int,
                  coordinator_epoch: int, timestamp: int) -> bytes:
    """A marker ending ``producer_id``'s transaction (at ``producer_epoch``), unstamped.

    >>> batch = control_batch(MarkerType.COMMIT, producer_id=7, producer_epoch=0,
    ...                       coordinator_epoch=3, timestamp=1000)
    >>> from raylog.records import validate_batch
    >>> read_marker(validate_batch(batch), batch)
    Marker(type=<MarkerType.COMMIT: 1>, coordinator_epoch=3)
    """
    if producer_id < 0 or not 0 <= producer_epoch <= MAX_PRODUCER_EPOCH:
        raise InvalidArgumentError(f"a marker needs a producer id >= 0 and an epoch in "
                                   f"[0, {MAX_PRODUCER_EPOCH}], got {producer_id}, "
                                   f"{producer_epoch}")
    if not 0 <= coordinator_epoch < 2**31:
        raise InvalidArgumentError(f"coordinator epoch must be an int32 >= 0, "
                                   f"got {coordinator_epoch}")
    record = pa.record_batch([
        pa.array([timestamp], pa.int64()),
        pa.array([_KEY.pack(CONTROL_RECORD_VERSION, MarkerType(marker_type))], pa.binary()),
        pa.array([_VALUE.pack(CONTROL_RECORD_VERSION, coordinator_epoch)], pa.binary()),
        empty_headers(1),
    ], schema=PAYLOAD_SCHEMA)
    return encode(record, codec=Codec.NONE, producer_id=producer_id,
                  producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE,
                  transactional=True, attributes=CONTROL_BIT)


def read_marker(header: BatchHeader, batch: bytes | bytearray | memoryview,
                pos: int = 0) -> Marker:
    """The marker the control batch at ``pos`` holds (its header checked already). Raises
    CorruptRecordError if it is not a control batch or its record is not a marker."""
    if not header.control:
        raise CorruptRecordError(f"batch at offset {header.base_offset} is not a control "
                                 f"batch (attributes {header.attributes:#x})")
    payload = decode(header, batch, pos)
    key, value = payload.column(1)[0].as_py(), payload.column(2)[0].as_py()
    if key is None or value is None or len(key) != _KEY.size or len(value) != _VALUE.size:
        raise CorruptRecordError(f"control batch at offset {header.base_offset} holds no "
                                 f"marker record")
    version, kind = _KEY.unpack(key)
    value_version, coordinator_epoch = _VALUE.unpack(value)
    if version != CONTROL_RECORD_VERSION or value_version != CONTROL_RECORD_VERSION or \
            kind not in (MarkerType.ABORT, MarkerType.COMMIT):
        raise CorruptRecordError(f"control batch at offset {header.base_offset}: unknown "
                                 f"marker (version {version}/{value_version}, type {kind})")
    return Marker(MarkerType(kind), coordinator_epoch)
