"""Confluent's wire format, raylog's Avro serializers against confluent-kafka's (byte for
byte), and Avro values as typed Arrow columns: no Ray."""

from __future__ import annotations

import datetime
import decimal
import json

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry import avro as confluent_avro
from confluent_kafka.serialization import MessageField, SerializationContext

from raylog.schemas.arrow import AvroColumns, arrow_schema, avro_schema_of, avro_values
from raylog.schemas.avro import parse
from raylog.schemas.errors import SerializationError, SubjectNotFoundError
from raylog.schemas.registry import MemoryLog, Registry
from raylog.schemas.serde import AvroDeserializer, AvroSerializer, frame, subject_name, unframe
from tests.unit.registry_server import registry_server

USER = {"type": "record", "name": "User", "namespace": "com.acme", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "score", "type": ["null", "double"], "default": None}]}
USER_V2 = {**USER, "fields": [*USER["fields"],
                              {"name": "country", "type": "string", "default": "NL"}]}
ALICE = {"id": 1, "name": "alice", "tags": ["a", "b"], "score": 0.5}


@pytest.fixture
def server():
    with registry_server() as server:
        yield server


def test_the_wire_format():
    assert frame(258, b"xy") == b"\x00\x00\x00\x01\x02xy"
    schema_id, payload = unframe(b"\x00\x00\x00\x01\x02xy")
    assert (schema_id, bytes(payload)) == (258, b"xy")
    with pytest.raises(SerializationError, match="at least 5 bytes"):
        unframe(b"\x00\x00")
    with pytest.raises(SerializationError, match="magic byte 1"):
        unframe(b"\x01\x00\x00\x00\x01")


def test_subject_strategies():
    schema = parse(USER)
    assert subject_name("topic", "users", schema) == "users-value"
    assert subject_name("topic", "users", schema, is_key=True) == "users-key"
    assert subject_name("record", None, schema) == "com.acme.User"
    assert subject_name("topic_record", "users", schema) == "users-com.acme.User"
    with pytest.raises(SerializationError, match="named schema"):
        subject_name("record", "t", parse('"string"'))


def test_byte_for_byte_as_confluent_kafkas_serializers(server):
    registry = server.registry
    ours = AvroSerializer(registry, USER, topic="users")
    client = SchemaRegistryClient({"url": server.url})
    theirs = confluent_avro.AvroSerializer(client, json.dumps(USER))
    context = SerializationContext("users", MessageField.VALUE)
    mine = ours(ALICE)
    assert mine == theirs(ALICE, context)
    assert ours.schema_id == 1 and registry.subjects() == ["users-value"]
    assert confluent_avro.AvroDeserializer(client)(mine, context) == ALICE
    assert AvroDeserializer(registry)(theirs(ALICE, context)) == ALICE
    assert ours(None) is None
    with pytest.raises(SerializationError, match="does not fit the schema"):
        ours({"id": "not a number"})


def test_reading_with_a_newer_schema_resolves_the_writers():
    registry = Registry(MemoryLog())
    old = AvroSerializer(registry, USER, topic="users")(ALICE)
    new = AvroSerializer(registry, USER_V2, topic="users")({**ALICE, "country": "FR"})
    reader = AvroDeserializer(registry, reader_schema=USER_V2)
    assert reader(old) == {**ALICE, "country": "NL"}  # the default fills what v1 lacks
    assert reader(new)["country"] == "FR"
    assert AvroDeserializer(registry)(old) == ALICE  # as written
    lookup_only = AvroSerializer(registry, USER_V2, topic="other", auto_register=False)
    with pytest.raises(SubjectNotFoundError, match="other-value"):
        lookup_only(ALICE)


TYPED = {"type": "record", "name": "Event", "fields": [
    {"name": "id", "type": "long"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                               "scale": 2}},
    {"name": "where", "type": {"type": "record", "name": "Place", "fields": [
        {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}},
    {"name": "counts", "type": {"type": "map", "values": "int"}},
    {"name": "either", "type": ["int", "string"]},
]}
EVENT = {"id": 5, "kind": "B", "at": datetime.datetime(2026, 1, 2, 3, 4, 5, 6000,
                                                      tzinfo=datetime.UTC),
         "day": datetime.date(2026, 1, 2), "price": decimal.Decimal("12.34"),
         "where": {"city": "Delft", "zip": None}, "counts": {"x": 1}, "either": "text"}


def test_values_become_typed_columns():
    registry = Registry(MemoryLog())
    serialize = AvroSerializer(registry, TYPED, topic="events")
    columns = AvroColumns(registry, json.dumps(TYPED))
    table = columns.decode([serialize(EVENT), None, serialize({**EVENT, "either": 3})])
    assert table.schema == arrow_schema(parse(TYPED))
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("at").type == pa.timestamp("ms", tz="UTC")
    assert table.schema.field("price").type == pa.decimal128(9, 2)
    assert table.schema.field("where").type == pa.struct([("city", pa.string()),
                                                          ("zip", pa.int32())])
    rows = table.to_pylist()
    assert rows[0]["where"] == {"city": "Delft", "zip": None}
    assert rows[0]["price"] == decimal.Decimal("12.34") and rows[0]["kind"] == "B"
    assert rows[0]["counts"] == [("x", 1)]
    assert rows[1] == dict.fromkeys(table.column_names)  # a tombstone: a row of nulls
    assert (rows[0]["either"], rows[2]["either"]) == ('"text"', "3")  # JSON of the value


def test_typed_columns_resolve_each_writer_against_the_reader():
    registry = Registry(MemoryLog())
    old = AvroSerializer(registry, USER, topic="users")(ALICE)
    table = AvroColumns(registry, json.dumps(USER_V2)).decode([old])
    assert table.column("country").to_pylist() == ["NL"]


def test_an_arrow_table_round_trips_through_avro_values():
    table = pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", None],
                      "n": pa.array([1, 2], pa.int32()),
                      "tags": pa.array([["x"], []], pa.list_(pa.string())),
                      "at": pa.array([1000, 2000], pa.timestamp("ms"))})
    schema = avro_schema_of(table.schema, "Row", "com.acme")
    registry = Registry(MemoryLog())
    produced = avro_values(table, AvroSerializer(registry, schema, topic="rows"), key="id")
    assert produced.column_names == ["value", "key"]
    back = AvroColumns(registry, json.dumps(schema)).decode(produced.column("value").to_pylist())
    assert back.column("name").to_pylist() == ["a", None]
    assert back.column("tags").to_pylist() == [["x"], []]
    assert back.column("n").type == pa.int32()
    assert back.column("at").cast(pa.int64()).to_pylist() == [1000, 2000]
