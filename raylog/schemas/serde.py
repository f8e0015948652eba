"""Avro serializers in Confluent's wire format, for ``Producer(value_serializer=...)`` and
``Consumer(value_deserializer=...)``.

The wire format: byte 0 is the magic byte 0, bytes 1-4 the schema's global id (big
endian), the rest the value in Avro's binary encoding, with no schema and no container
(fastavro's schemaless encoding). It is what confluent-kafka's ``AvroSerializer`` writes
and its ``AvroDeserializer`` reads, byte for byte, so either side may be either client.

Subjects are named as Confluent's strategies name them: ``<topic>-value`` or
``<topic>-key`` (TopicNameStrategy, the default), the record's full name
(RecordNameStrategy) or ``<topic>-<full name>`` (TopicRecordNameStrategy).

A serializer or deserializer takes any registry with the methods of
:class:`raylog.schemas.registry.Registry` (``register``, ``lookup``, ``schema``,
``version``): raylog's ``SchemaRegistry`` client, or a Registry. They cache what they
learn (ids never change their schema) and are safe to share between threads.
"""

from __future__ import annotations

import io
import json
import struct
import threading
from typing import Any

import fastavro

from raylog.schemas.avro import AvroSchema, parse
from raylog.schemas.errors import SerializationError

MAGIC = 0
HEADER = struct.Struct(">bI")  # magic byte, schema id
STRATEGIES = ("topic", "record", "topic_record")


def frame(schema_id: int, payload: bytes) -> bytes:
    """A payload in Confluent's wire format."""
    return HEADER.pack(MAGIC, schema_id) + payload


def unframe(data: bytes) -> tuple[int, memoryview]:
    """(schema id, payload) of a framed value; SerializationError if it is not framed."""
    if not isinstance(data, bytes | bytearray | memoryview) or len(data) < HEADER.size:
        raise SerializationError(f"expected at least {HEADER.size} bytes in Confluent's wire "
                                 f"format (magic byte 0, schema id), got "
                                 f"{len(data) if isinstance(data, bytes) else type(data).__name__}")
    magic, schema_id = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SerializationError(f"unknown magic byte {magic}: not written by a Confluent "
                                 f"schema registry serializer")
    return schema_id, memoryview(data)[HEADER.size:]


def subject_name(strategy: str, topic: str | None, schema: AvroSchema,
                 is_key: bool = False) -> str:
    """The subject a value (or key) of ``topic`` written with ``schema`` goes under."""
    if strategy not in STRATEGIES:
        raise SerializationError(f"subject strategy must be one of {STRATEGIES}, got "
                                 f"{strategy!r}")
    if strategy != "topic" and schema.name is None:
        raise SerializationError(f"the {strategy} strategy needs a named schema (a record)")
    if strategy == "record":
        return schema.name
    if topic is None:
        raise SerializationError(f"the {strategy} strategy needs the topic")
    if strategy == "topic":
        return f"{topic}-{'key' if is_key else 'value'}"
    return f"{topic}-{schema.name}"


def fastavro_schema(schema: AvroSchema) -> Any:
    """fastavro's parsed form of a schema, whose logical type ``uuid`` reads as the string
    it is written as (fastavro would make a UUID object, which Arrow cannot take)."""
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            if node.get("logicalType") == "uuid":
                node = {k: v for k, v in node.items() if k != "logicalType"}
            return {k: strip(v) for k, v in node.items()}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    return fastavro.parse_schema(strip(json.loads(schema.text)))


class AvroSerializer:
    """``value -> bytes``: Avro in Confluent's wire format, with ``schema``'s id.

    The schema is registered under its subject on first use (``auto_register``; else it
    must be registered already, and is looked up); ``normalize``: as Confluent's
    ``normalize.schemas``, registered and looked up with ``normalize=true``. ``None`` stays
    None (a tombstone).

    >>> serializer = AvroSerializer(SchemaRegistry(), USER_SCHEMA, topic="users")
    >>> producer = Producer(value_serializer=serializer)
    """

    def __init__(self, registry: Any, schema: str | dict, *, topic: str | None = None,
                 subject: str | None = None, is_key: bool = False, strategy: str = "topic",
                 auto_register: bool = True, normalize: bool = False) -> None:
        self.registry = registry
        self.schema = parse(schema)
        self.subject = subject or subject_name(strategy, topic, self.schema, is_key)
        self.auto_register = auto_register
        self.normalize = normalize
        self._parsed = fastavro_schema(self.schema)
        self._header: bytes | None = None
        self._lock = threading.Lock()

    @property
    def schema_id(self) -> int:
        if self._header is None:
            with self._lock:
                if self._header is None:
                    found = self.registry.register(
                        self.subject, self.schema.text, normalize=self.normalize) \
                        if self.auto_register else self.registry.lookup(
                            self.subject, self.schema.text, normalize=self.normalize)
                    self._header = HEADER.pack(MAGIC, found["id"])
        return HEADER.unpack(self._header)[1]

    def __call__(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if self._header is None:
            self.schema_id  # noqa: B018 (registers the schema once)
        out = io.BytesIO()
        out.write(self._header)
        try:
            fastavro.schemaless_writer(out, self._parsed, value)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise SerializationError(f"the value does not fit the schema of subject "
                                     f"{self.subject!r}: {e!r}") from e
        return out.getvalue()


class WriterSchemas:
    """Writer schemas by id, fetched from the registry once each."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self._by_id: dict[int, tuple[AvroSchema, Any]] = {}

    def get(self, schema_id: int) -> tuple[AvroSchema, Any]:
        found = self._by_id.get(schema_id)
        if found is None:
            schema = parse(self.registry.schema(schema_id)["schema"])
            found = self._by_id[schema_id] = (schema, fastavro_schema(schema))
        return found


class AvroDeserializer:
    """``bytes -> value``: reads a value in Confluent's wire format with the writer's
    schema (found by its id), resolved against ``reader_schema`` if given (Avro's rules:
    fields added with defaults, promotions, ...), else as it was written."""

    def __init__(self, registry: Any, reader_schema: str | dict | None = None) -> None:
        self.writers = WriterSchemas(registry)
        self.reader = None if reader_schema is None else fastavro_schema(parse(reader_schema))

    def __call__(self, data: bytes | None) -> Any:
        if data is None:
            return None
        schema_id, payload = unframe(data)
        writer = self.writers.get(schema_id)[1]
        try:
            return fastavro.schemaless_reader(io.BytesIO(payload), writer, self.reader)
        except Exception as e:  # fastavro raises many kinds for bytes it cannot read
            raise SerializationError(f"cannot read a value written with schema {schema_id}: "
                                     f"{e!r}") from e
