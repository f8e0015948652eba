"""Produce requests (key 0, versions 3-11) decoded by hand, the records left in the frame.

kafka-python's generic decoder (``protocol.decode_request``, the reference and the fallback
for every other request) builds the request field by field and copies each partition's
records out of the frame into bytes of their own. Here the few small fields are read with
``struct`` and each partition's ``records`` is a memoryview of the frame: the Kafka batches
are read where they arrived (``kafka_batches`` and ``to_raylog`` take views). The frame
must outlive the request, which it does: the listener keeps it until the handler is done.

The layout, per Kafka's ``ProduceRequest.json`` (flexible from v9: compact arrays, strings
and bytes, tagged fields after the request header, each struct and the body)::

    request header    api_key int16, api_version int16, correlation_id int32,
                      client_id nullable string (int16 length in every version),
                      tagged fields (v9+)
    transactional_id  nullable string
    acks              int16
    timeout_ms        int32
    topic_data        [name string,
                       partition_data [index int32, records nullable bytes]]

The decoded request has the fields and names kafka-python's has (``request.topic_data[0]
.partition_data[0].records``), so the handler reads either. Tagged fields are skipped (no
version up to 11 defines one), bytes after the body ignored, as kafka-python does; a frame
that ends early or has a negative size raises MalformedRequest. The unit tests check the
decoding against kafka-python's for every version. Plain Python, no state.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from raylog.kafka.gateway.protocol import MalformedRequest, Request

API_KEY = 0
MIN_VERSION, MAX_VERSION = 3, 11
FLEXIBLE_FROM = 9

Buffer = bytes | bytearray | memoryview

_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


class PartitionData(NamedTuple):
    index: int
    records: memoryview | None  # a view of the frame


class TopicData(NamedTuple):
    name: str | None
    partition_data: list[PartitionData]


class ProduceBody(NamedTuple):
    """A Produce request's body, its fields named as kafka-python's ProduceRequest's."""

    version: int
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicData]


def decodes(api_key: int, api_version: int) -> bool:
    """Whether :func:`decode` reads requests of this key and version."""
    return api_key == API_KEY and MIN_VERSION <= api_version <= MAX_VERSION


def decode(frame: Buffer) -> Request:
    """The Produce request in ``frame`` (the bytes after the length prefix; ``decodes``
    said yes to its key and version)."""
    try:
        return _Reader(frame).request()
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise MalformedRequest(f"cannot decode a Produce request: {type(e).__name__}: "
                               f"{e}") from e


class _Reader:
    """A position in one frame; each method reads one field there and moves past it."""

    __slots__ = ("buf", "flexible", "pos")

    def __init__(self, frame: Buffer) -> None:
        self.buf = memoryview(frame).cast("B")
        self.pos = 0
        self.flexible = False

    def request(self) -> Request:
        api_key, version, correlation_id, length = _HEADER.unpack_from(self.buf, 0)
        self.pos = _HEADER.size
        client_id = self._text(length)  # an int16 length in every header version
        self.flexible = version >= FLEXIBLE_FROM
        self._tags()
        transactional_id = self._string()
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(self.buf, self.pos)
        self.pos += _ACKS_TIMEOUT.size
        topics = []
        for _ in range(self._count()):
            name = self._string()
            partitions = []
            for _ in range(self._count()):
                (index,) = _I32.unpack_from(self.buf, self.pos)
                self.pos += 4
                partitions.append(PartitionData(index, self._bytes()))
                self._tags()
            topics.append(TopicData(name, partitions))
            self._tags()
        self._tags()
        body = ProduceBody(version, transactional_id, acks, timeout_ms, topics)
        return Request(api_key, version, correlation_id, client_id, body)

    def _uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise MalformedRequest("a varint longer than 5 bytes")

    def _size(self) -> int:
        """A nullable string's or bytes' size: -1 for null."""
        if self.flexible:
            return self._uvarint() - 1
        (size,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return size

    def _take(self, size: int, what: str) -> memoryview | None:
        """The next ``size`` bytes (-1: null) as a view of the frame."""
        if size < 0:
            if size != -1:
                raise MalformedRequest(f"{what} of length {size}")
            return None
        end = self.pos + size
        if end > len(self.buf):
            raise MalformedRequest(f"{what} runs past the frame")
        view = self.buf[self.pos:end]
        self.pos = end
        return view

    def _text(self, size: int) -> str | None:
        data = self._take(size, "a string")
        return None if data is None else str(data, "utf-8")

    def _string(self) -> str | None:
        return self._text(self._size())

    def _count(self) -> int:
        if self.flexible:
            n = self._uvarint() - 1
        else:
            (n,) = _I32.unpack_from(self.buf, self.pos)
            self.pos += 4
        if n < 0:
            raise MalformedRequest("a null array in a Produce request")
        return n

    def _bytes(self) -> memoryview | None:
        if self.flexible:
            size = self._uvarint() - 1
        else:
            (size,) = _I32.unpack_from(self.buf, self.pos)
            self.pos += 4
        return self._take(size, "records")

    def _tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self._uvarint()):
            self._uvarint()  # the tag
            size = self._uvarint()
            if self.pos + size > len(self.buf):
                raise MalformedRequest("a tagged field runs past the frame")
            self.pos += size
