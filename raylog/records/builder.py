"""Accumulating records into one batch under a byte limit."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from raylog.errors import InvalidRecordError
from raylog.records.append import Columns, arrays
from raylog.records.header import HEADER_SIZE, Codec, TimestampType
from raylog.records.payload import HEADERS_TYPE, PAYLOAD_SCHEMA, empty_headers, encode

# Fixed cost of a batch beyond its records: the 65-byte header, the IPC schema and message
# framing (about 1.1 KB for this schema) and the LZ4 frame header and end mark.
BATCH_OVERHEAD = HEADER_SIZE + 2048
# Per record: timestamp (8), three 4-byte list/binary offsets, validity bits, padding.
RECORD_OVERHEAD = 24
# Per header: two 4-byte offsets (name, value) and three validity bits, rounded up.
HEADER_ENTRY_OVERHEAD = 10
# LZ4 stores incompressible input with a little framing: at most about 1 byte in 250.
_LZ4_EXPANSION = 251 / 250


def batch_capacity(max_bytes: int) -> int:
    """Bytes of records (as :func:`record_size` counts them) a batch of ``max_bytes`` holds."""
    return int((max_bytes - BATCH_OVERHEAD) / _LZ4_EXPANSION)


def record_size(key: bytes | None, value: bytes | None,
                headers: Sequence[tuple[str, bytes]] | None = None) -> int:
    """Upper bound of the bytes a record adds to an uncompressed batch."""
    size = RECORD_OVERHEAD
    if value is not None:
        size += len(value)
    if key is not None:
        size += len(key)
    if headers:
        for name, data in headers:
            size += HEADER_ENTRY_OVERHEAD + len(name.encode()) + (len(data) if data else 0)
    return size


def _check_bytes(what: str, data: object) -> None:
    if data is not None and type(data) is not bytes:
        raise InvalidRecordError(f"record {what} must be bytes or None, got {type(data).__name__}")


def check_headers(headers: Sequence[tuple[str, bytes]]) -> list[tuple[str, bytes | None]]:
    """Validate record headers: a sequence of (str, bytes or None) pairs."""
    if not isinstance(headers, list | tuple):
        raise InvalidRecordError(
            f"record headers must be a list of (str, bytes) pairs, got {type(headers).__name__}")
    checked = []
    for entry in headers:
        if not (isinstance(entry, tuple | list) and len(entry) == 2 and isinstance(entry[0], str)):
            raise InvalidRecordError(f"a record header must be a (str, bytes) pair, got {entry!r}")
        try:
            entry[0].encode()
        except UnicodeEncodeError as e:
            raise InvalidRecordError(f"header name {entry[0]!r} is not valid Unicode") from e
        _check_bytes("header value", entry[1])
        checked.append((entry[0], entry[1]))
    return checked


class BatchBuilder(Columns):
    """Collects records for one partition and encodes them once into a batch.

    Owns Python lists of the columns (its base, ``Columns``: C where built, see
    raylog/records/append.py); ``build()`` turns them into Arrow arrays in bulk, so the
    per-record cost is a few list appends. The ``keys`` and ``headers`` lists exist only once
    a record has a key or headers: a keyless record without headers costs two appends, which
    the producer's hot path makes itself (while ``plain``: take ``room``, append to
    ``timestamps`` and ``values``; see Producer.send, and PlainSend in _append.c, which does
    it in C); every other record goes through :meth:`append`, whose changes to the columns
    are one call (``Columns._put``), so that the C path, which takes no lock, never sees a
    record half added. The byte limit is a conservative bound on the encoded batch: a builder
    never produces a batch larger than ``max_bytes`` unless a single record alone exceeds it
    (the log then refuses it with RecordTooLargeError). Not safe for concurrent use; a
    builder builds one batch.

    >>> b = BatchBuilder(max_bytes=1 << 20)
    >>> b.append(1700000000000, b"user-1", b"clicked")
    1
    >>> batch = b.build()
    """

    __slots__ = ("_capacity", "_codec", "_producer", "_timestamp_type", "_transactional",
                 "max_bytes")

    def __init__(
        self,
        max_bytes: int = 1 << 20,
        codec: Codec = Codec.LZ4,
        *,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
    ) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self._capacity = batch_capacity(max_bytes)
        self._codec = codec
        self._timestamp_type = timestamp_type
        self._producer = (producer_id, producer_epoch, base_sequence)
        self._transactional = False
        # The columns (Columns): timestamps, values, and keys and headers, None until a
        # record has a key (headers), then one entry per record; plain while none has.
        # Record bytes (as record_size counts them) the batch can still take; below zero
        # only when a single record alone exceeds the capacity.
        self.room = self._capacity

    @property
    def estimated_size(self) -> int:
        """Upper bound of the size of the batch ``build()`` would return now."""
        return BATCH_OVERHEAD + int((self._capacity - self.room) * _LZ4_EXPANSION)

    def has_room_for(self, key: bytes | None, value: bytes | None,
                     headers: Sequence[tuple[str, bytes]] | None = None) -> bool:
        return not self.values or record_size(key, value, headers) <= self.room

    def append(self, timestamp: int, key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes]] | None = None) -> int:
        """Add a record; return how many records the batch now holds (so the new record's
        index is that minus one), or 0, adding nothing, when the batch is full.

        An empty builder always accepts a record, however large.
        """
        size = RECORD_OVERHEAD
        if type(value) is bytes:
            size += len(value)
        elif value is not None:
            _check_bytes("value", value)
        if key is not None:
            if type(key) is not bytes:
                _check_bytes("key", key)
            size += len(key)
        if type(timestamp) is not int or not 0 <= timestamp < 1 << 63:
            raise InvalidRecordError(f"record timestamp must be an int >= 0 ms, got {timestamp!r}")
        if headers:
            headers = check_headers(headers)
            size = record_size(key, value, headers)
        else:
            headers = None
        return self._put(size, timestamp, key, value, headers)

    def set_producer(self, producer_id: int, producer_epoch: int, base_sequence: int,
                     transactional: bool = False) -> None:
        """Stamp the producer id, epoch and first sequence the batch will carry, and
        whether it is written inside a transaction."""
        self._producer = (producer_id, producer_epoch, base_sequence)
        self._transactional = transactional

    def columns(self) -> pa.RecordBatch:
        """The accumulated records as payload columns (PAYLOAD_SCHEMA)."""
        n = len(self.values)
        headers = (
            pa.array([h or [] for h in self.headers], HEADERS_TYPE)
            if self.headers is not None else empty_headers(n)
        )
        keys = self.keys
        timestamps, values = arrays(self.timestamps, self.values)
        return pa.RecordBatch.from_arrays(
            [
                timestamps,
                pa.array(keys, pa.binary()) if keys is not None and keys.count(None) < n
                else pa.nulls(n, pa.binary()),
                values,
                headers,
            ],
            schema=PAYLOAD_SCHEMA,
        )

    def build(self) -> bytes:
        """Encode the accumulated records into one batch (base offset 0, no leader epoch)."""
        if not self.values:
            raise ValueError("cannot build an empty batch")
        producer_id, producer_epoch, base_sequence = self._producer
        return encode(
            self.columns(),
            codec=self._codec,
            timestamp_type=self._timestamp_type,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            first_timestamp=self.timestamps[0],
            transactional=self._transactional,
        )
