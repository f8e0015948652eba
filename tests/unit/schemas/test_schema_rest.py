"""The REST API as Confluent's own client sees it (confluent-kafka's SchemaRegistryClient,
AvroSerializer, AvroDeserializer), served over an in-memory registry: no Ray."""

from __future__ import annotations

import json
import urllib.request

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from raylog.schemas.rest import handle
from tests.unit.registry_server import registry_server

V1 = json.dumps({"type": "record", "name": "User", "fields": [{"name": "id", "type": "long"}]})
V2 = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "id", "type": "long"}, {"name": "email", "type": "string", "default": ""}]})
NO_DEFAULT = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "id", "type": "long"}, {"name": "phone", "type": "string"}]})


@pytest.fixture
def server():
    with registry_server() as server:
        yield server


@pytest.fixture
def client(server):
    return SchemaRegistryClient({"url": server.url})


def code(call) -> int:
    with pytest.raises(SchemaRegistryError) as refused:
        call()
    return refused.value.error_code


def test_register_get_lookup_through_confluents_client(client):
    first = client.register_schema("users-value", Schema(V1, "AVRO"))
    second = client.register_schema("users-value", Schema(V2, "AVRO"))
    assert (first, second) == (1, 2)
    assert client.get_subjects() == ["users-value"]
    assert client.get_versions("users-value") == [1, 2]
    latest = client.get_latest_version("users-value")
    assert (latest.version, latest.schema_id) == (2, 2)
    assert json.loads(latest.schema.schema_str) == json.loads(V2)
    assert json.loads(client.get_version("users-value", 1).schema.schema_str) == json.loads(V1)
    assert json.loads(client.get_schema(1).schema_str) == json.loads(V1)
    found = client.lookup_schema("users-value", Schema(V1, "AVRO"))
    assert (found.version, found.schema_id) == (1, 1)
    assert client.get_subjects_by_schema_id(2) == ["users-value"]
    assert client.get_schema_types() == ["AVRO"]


def test_confluents_error_codes(client):
    client.register_schema("s", Schema(V1, "AVRO"))
    assert code(lambda: client.get_versions("nope")) == 40401
    assert code(lambda: client.get_version("s", 7)) == 40402
    assert code(lambda: client.get_schema(99)) == 40403
    assert code(lambda: client.lookup_schema("s", Schema(V2, "AVRO"))) == 40403
    assert code(lambda: client.register_schema("s", Schema(NO_DEFAULT, "AVRO"))) == 409
    assert code(lambda: client.register_schema("s", Schema("{nope", "AVRO"))) == 42201
    assert code(lambda: client.register_schema("s", Schema("{}", "PROTOBUF"))) == 42201
    assert code(lambda: client.set_compatibility("s", "SIDEWAYS")) == 42203
    assert code(lambda: client.get_compatibility("s")) == 40408
    assert code(lambda: client.delete_version("s", 1, permanent=True)) == 40407
    assert code(lambda: client.delete_subject("s", permanent=True)) == 40405


def test_compatibility_and_config(client):
    client.register_schema("s", Schema(V1, "AVRO"))
    assert client.test_compatibility("s", Schema(V2, "AVRO")) is True
    assert client.test_compatibility("s", Schema(NO_DEFAULT, "AVRO")) is False
    assert client.get_compatibility() == "BACKWARD"
    assert client.set_compatibility("s", "FORWARD") == {"compatibility": "FORWARD"}
    assert client.get_compatibility("s") == "FORWARD"
    assert client.test_compatibility("s", Schema(NO_DEFAULT, "AVRO")) is True
    assert client.register_schema("s", Schema(NO_DEFAULT, "AVRO")) == 2
    assert client.set_compatibility(level="NONE") == {"compatibility": "NONE"}
    assert client.get_compatibility() == "NONE"


def test_verbose_compatibility_says_what_breaks(server):
    registry = server.registry
    registry.register("s", V1)
    status, answer = handle(registry, "POST", "/compatibility/subjects/s/versions/latest"
                            "?verbose=true", json.dumps({"schema": NO_DEFAULT}).encode())
    assert status == 200 and answer["is_compatible"] is False
    assert "/phone" in answer["messages"][0]
    assert handle(registry, "GET", "/nowhere")[0] == 404
    assert handle(registry, "PUT", "/subjects")[0] == 405
    assert handle(registry, "POST", "/subjects/s/versions", b"[")[0] == 400
    encoded = handle(registry, "POST", "/subjects/a%2Fb/versions",
                     json.dumps({"schema": V1}).encode())
    assert encoded == (200, {"id": 1, "version": 1})
    assert "a/b" in registry.subjects()


def test_deletes(client):
    client.register_schema("s", Schema(V1, "AVRO"))
    client.register_schema("s", Schema(V2, "AVRO"))
    assert client.delete_version("s", 1) == 1
    assert client.get_versions("s") == [2]
    assert client.delete_subject("s") == [2]
    assert client.get_subjects() == []
    assert client.delete_subject("s", permanent=True) == [1, 2]
    assert code(lambda: client.get_schema(1)) == 40403


def test_avro_serializer_and_deserializer_round_trip(client, server):
    context = SerializationContext("users", MessageField.VALUE)
    serializer = AvroSerializer(client, V2)
    data = serializer({"id": 7, "email": "a@b"}, context)
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == 1
    assert server.registry.subjects() == ["users-value"]
    assert AvroDeserializer(SchemaRegistryClient({"url": server.url}))(data, context) == {
        "id": 7, "email": "a@b"}


def test_the_http_answers_carry_the_registry_content_type(server):
    with urllib.request.urlopen(f"{server.url}/config") as response:
        assert response.headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
        assert json.load(response) == {"compatibilityLevel": "BACKWARD"}


def test_lists_page_and_filter_deleted_as_confluents(client):
    for subject in ("a", "b", "c"):
        client.register_schema(subject, Schema(V1, "AVRO"))
    client.register_schema("a", Schema(V2, "AVRO"))
    client.delete_subject("b")
    client.delete_version("a", 1)
    assert client.get_subjects() == ["a", "c"]
    assert client.get_subjects(deleted=True) == ["a", "b", "c"]
    assert client.get_subjects(deleted_only=True) == ["b"]
    assert client.get_subjects(offset=1, limit=1) == ["c"]
    assert client.get_subjects(subject_prefix="b", deleted=True) == ["b"]
    assert client.get_versions("a", deleted_only=True) == [1]
    assert client.get_versions("b", deleted_only=True) == [1]
    assert client.get_versions("a", deleted=True, offset=1) == [2]



# V2 as other JSON text: indented, keys in another order.
V2_SPELLED = json.dumps({"fields": [{"type": "long", "name": "id"},
                                    {"default": "", "type": "string", "name": "email"}],
                         "name": "User", "type": "record"}, indent=4)
# V2 differing only in what Confluent's normalizer removes: an empty doc, 1 for 1.0.
SCORED = json.dumps({"type": "record", "name": "Score", "fields": [
    {"name": "value", "type": "double", "default": 1.0}]})
SCORED_SPELLED = json.dumps({"type": "record", "name": "Score", "doc": "", "fields": [
    {"name": "value", "type": "double", "default": 1}]})


def test_the_same_schema_as_other_json_text_has_one_id_and_version(server):
    # A fresh client per call where its cache would answer instead of the server.
    first = SchemaRegistryClient({"url": server.url})
    first.register_schema("users-value", Schema(V1, "AVRO"))
    registered = first.register_schema_full_response("users-value", Schema(V2, "AVRO"))
    again = SchemaRegistryClient({"url": server.url}).register_schema_full_response(
        "users-value", Schema(V2_SPELLED, "AVRO"))
    assert (again.schema_id, again.version) == (registered.schema_id, registered.version) \
        == (2, 2)
    found = SchemaRegistryClient({"url": server.url}).lookup_schema(
        "users-value", Schema(V2_SPELLED, "AVRO"))
    assert (found.schema_id, found.version) == (2, 2)
    client = SchemaRegistryClient({"url": server.url})
    assert client.get_versions("users-value") == [1, 2]
    v3 = json.dumps({**json.loads(V2), "fields": [*json.loads(V2)["fields"], {
        "name": "phone", "type": "string", "default": ""}]})
    assert client.register_schema("users-value", Schema(v3, "AVRO")) == 3
    assert client.get_versions("users-value") == [1, 2, 3]  # not [1, 2, 4]
    assert client.register_schema("audit-value", Schema(V2_SPELLED, "AVRO")) == 2


def test_normalize_through_confluents_client(server):
    SchemaRegistryClient({"url": server.url}).register_schema("s", Schema(SCORED, "AVRO"))
    plain = SchemaRegistryClient({"url": server.url})
    assert code(lambda: plain.lookup_schema("s", Schema(SCORED_SPELLED, "AVRO"))) == 40403
    normalizing = SchemaRegistryClient({"url": server.url})
    found = normalizing.lookup_schema("s", Schema(SCORED_SPELLED, "AVRO"),
                                      normalize_schemas=True)
    assert (found.schema_id, found.version) == (1, 1)
    registered = SchemaRegistryClient({"url": server.url}).register_schema_full_response(
        "s", Schema(SCORED_SPELLED, "AVRO"), normalize_schemas=True)
    assert (registered.schema_id, registered.version) == (1, 1)
    assert plain.get_versions("s") == [1]
    # Without normalize=true the same text is another schema, as in Confluent's registry.
    other = plain.register_schema_full_response("s", Schema(SCORED_SPELLED, "AVRO"))
    assert (other.schema_id, other.version) == (2, 2)
