"""Avro schema resolution, rule by rule, each verdict cross-checked by writing data with the
writer's schema and reading it with the reader's through fastavro; then the registry's
compatibility levels, transitive ones included."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from raylog.schemas.avro import AvroSchema, kind, parse
from raylog.schemas.compatibility import Level, can_read, check_level
from raylog.schemas.errors import InvalidCompatibilityLevelError, InvalidSchemaError

SAMPLES = 6  # data per check: each union branch and each enum symbol of the test schemas


def record(name: str, *fields: dict, **extra) -> dict:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def field(name: str, type_, **extra) -> dict:
    return {"name": name, "type": type_, **extra}


def datum(schema: AvroSchema, node, i: int, depth: int = 0):
    """Data of the schema's type; ``i`` picks union branches and enum symbols in turn, so
    the SAMPLES data cover every branch and symbol of small schemas."""
    node = schema.resolve(node)
    k = kind(node)
    simple = {"null": None, "boolean": i % 2 == 0, "int": i + 1, "long": (i + 1) * 1000,
              "float": 1.5, "double": 2.25, "bytes": b"by", "string": f"s{i}"}
    if k in simple:
        return simple[k]
    if k == "union":
        branches = node if depth < 3 else [b for b in node if b == "null"] or node
        return datum(schema, branches[i % len(branches)], i, depth + 1)
    if k == "enum":
        return node["symbols"][i % len(node["symbols"])]
    if k == "fixed":
        return b"\0" * node["size"]
    if k == "array":
        return [datum(schema, node["items"], i, depth + 1)] if depth < 3 else []
    if k == "map":
        return {"k": datum(schema, node["values"], i, depth + 1)} if depth < 3 else {}
    return {f["name"]: datum(schema, f["type"], i, depth + 1) for f in node["fields"]}


def fastavro_reads(reader: AvroSchema, writer: AvroSchema) -> bool:
    """Whether fastavro reads every sample written with ``writer`` using ``reader``."""
    w = fastavro.parse_schema(json.loads(writer.text))
    r = fastavro.parse_schema(json.loads(reader.text))
    for i in range(SAMPLES):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, w, datum(writer, writer.tree, i))
        try:
            fastavro.schemaless_reader(io.BytesIO(out.getvalue()), w, r)
        except Exception:
            return False
    return True


def verdict(reader, writer) -> list:
    """can_read's problems, after checking that fastavro agrees."""
    r, w = parse(json.dumps(reader)), parse(json.dumps(writer))
    problems = can_read(r, w)
    assert (not problems) == fastavro_reads(r, w), (problems, reader, writer)
    return problems


V1 = record("User", field("id", "long"), field("name", "string"))

CASES = [
    # (what, reader, writer, compatible)
    ("a field added with a default", record("User", field("id", "long"), field("name", "string"),
                                            field("email", "string", default="")), V1, True),
    ("a field added without a default", record("User", field("id", "long"),
                                               field("name", "string"), field("email", "string")),
     V1, False),
    ("a field removed", record("User", field("id", "long")), V1, True),
    ("int read as long", "long", "int", True),
    ("int read as float", "float", "int", True),
    ("int read as double", "double", "int", True),
    ("long read as float", "float", "long", True),
    ("long read as double", "double", "long", True),
    ("float read as double", "double", "float", True),
    ("string read as bytes", "bytes", "string", True),
    ("bytes read as string", "string", "bytes", True),
    ("long read as int", "int", "long", False),
    ("double read as float", "float", "double", False),
    ("string read as int", "int", "string", False),
    ("a field's type promoted", record("User", field("id", "double"), field("name", "string")),
     V1, True),
    ("a field's type narrowed", record("User", field("id", "int"), field("name", "string")),
     V1, False),
    ("a type read by a union that has it", ["null", "int"], "int", True),
    ("a type read by a union through a promotion", ["null", "long"], "int", True),
    ("a union read by a type", "int", ["null", "int"], False),
    ("a union read by a wider union", ["string", "int", "null"], ["int", "string"], True),
    ("a union read by a narrower union", ["int"], ["int", "string"], False),
    ("a type no union branch reads", ["null", "string"], "int", False),
    ("a nullable field made optional with a default",
     record("User", field("id", "long"), field("name", "string"),
            field("age", ["null", "int"], default=None)), V1, True),
    ("an enum with the writer's symbols", {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, True),
    ("an enum lacking a writer symbol", {"type": "enum", "name": "E", "symbols": ["A"]},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, False),
    ("an enum lacking a writer symbol, with a default",
     {"type": "enum", "name": "E", "symbols": ["A", "U"], "default": "U"},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, True),
    ("an enum renamed", {"type": "enum", "name": "F", "symbols": ["A"]},
     {"type": "enum", "name": "E", "symbols": ["A"]}, False),
    ("a record renamed", record("Person", field("id", "long"), field("name", "string")), V1,
     False),
    ("a record renamed with an alias",
     record("Person", field("id", "long"), field("name", "string"), aliases=["User"]), V1, True),
    ("a record in another namespace", record("User", field("id", "long"),
                                             field("name", "string"), namespace="com.acme"),
     V1, True),
    ("a field renamed", record("User", field("id", "long"), field("full_name", "string")), V1,
     False),
    ("a field renamed with an alias",
     record("User", field("id", "long"), field("full_name", "string", aliases=["name"])), V1,
     True),
    ("fixed of the same size", {"type": "fixed", "name": "H", "size": 4},
     {"type": "fixed", "name": "H", "size": 4}, True),
    ("fixed of another size", {"type": "fixed", "name": "H", "size": 8},
     {"type": "fixed", "name": "H", "size": 4}, False),
    ("arrays of promoted items", {"type": "array", "items": "long"},
     {"type": "array", "items": "int"}, True),
    ("maps of narrowed values", {"type": "map", "values": "int"},
     {"type": "map", "values": "long"}, False),
    ("an array read as a map", {"type": "map", "values": "int"},
     {"type": "array", "items": "int"}, False),
]

NESTED_V1 = record("Order", field("id", "long"),
                   field("address", record("Address", field("street", "string"))),
                   field("lines", {"type": "array", "items": record(
                       "Line", field("sku", "string"), field("qty", "int"))}))


def nested(address_fields, line_fields):
    return record("Order", field("id", "long"),
                  field("address", record("Address", *address_fields)),
                  field("lines", {"type": "array", "items": record("Line", *line_fields)}))


CASES += [
    ("a nested record's field added with a default",
     nested([field("street", "string"), field("zip", "string", default="")],
            [field("sku", "string"), field("qty", "int")]), NESTED_V1, True),
    ("a nested record's field added without a default",
     nested([field("street", "string"), field("zip", "string")],
            [field("sku", "string"), field("qty", "int")]), NESTED_V1, False),
    ("a field of records in an array promoted",
     nested([field("street", "string")], [field("sku", "string"), field("qty", "long")]),
     NESTED_V1, True),
    ("a field of records in an array narrowed",
     nested([field("street", "string")], [field("sku", "string"), field("qty", "boolean")]),
     NESTED_V1, False),
    ("a recursive list read by itself with a new defaulted field",
     record("Node", field("value", "int"), field("label", "string", default=""),
            field("next", ["null", "Node"], default=None)),
     record("Node", field("value", "int"), field("next", ["null", "Node"])), True),
]


@pytest.mark.parametrize("what,reader,writer,compatible", CASES, ids=[c[0] for c in CASES])
def test_schema_resolution_rule_agrees_with_fastavro(what, reader, writer, compatible):
    problems = verdict(reader, writer)
    assert (not problems) is compatible, problems


def test_a_refusal_says_what_breaks_and_where():
    problems = verdict(nested([field("street", "string"), field("zip", "string")],
                              [field("sku", "string"), field("qty", "boolean")]), NESTED_V1)
    assert [(p.kind, p.path) for p in problems] == [
        ("READER_FIELD_MISSING_DEFAULT_VALUE", "/address/zip"),
        ("TYPE_MISMATCH", "/lines/items/qty")]
    assert "'zip' of Address is not in the writer's schema and has no default" in str(problems[0])
    assert "boolean cannot read the writer's int" in problems[1].message
    union = can_read(parse('"int"'), parse(["null", "int"]))
    assert "the writer's union branch 0 (null) cannot be read" in union[0].message


# -- levels ----------------------------------------------------------------------------------

def versions(*schemas) -> list:
    return [(i + 1, parse(s)) for i, s in enumerate(schemas)]


def test_a_schema_is_json_text_or_decoded_json():
    assert parse('"long"').tree == parse({"type": "long"}).tree == "long"
    with pytest.raises(InvalidSchemaError, match="not JSON"):
        parse("long")


WITH_EMAIL = record("User", field("id", "long"), field("name", "string"),
                    field("email", "string", default=""))
WITH_EMAIL_NO_DEFAULT = record("User", field("id", "long"), field("name", "string"),
                               field("email", "string"))


def test_adding_a_field_with_a_default_is_backward_compatible():
    assert check_level(parse(WITH_EMAIL), versions(V1), Level.BACKWARD) == []
    assert check_level(parse(WITH_EMAIL), versions(V1), Level.FULL) == []


def test_adding_a_field_without_a_default_is_refused_backward_and_accepted_forward():
    problems = check_level(parse(WITH_EMAIL_NO_DEFAULT), versions(V1), Level.BACKWARD)
    assert len(problems) == 1
    assert "cannot read data written with version 1 (BACKWARD)" in problems[0]
    assert "/email" in problems[0]
    assert check_level(parse(WITH_EMAIL_NO_DEFAULT), versions(V1), Level.FORWARD) == []
    assert check_level(parse(WITH_EMAIL_NO_DEFAULT), versions(V1), Level.FULL) != []
    assert check_level(parse(WITH_EMAIL_NO_DEFAULT), versions(V1), Level.NONE) == []


def test_removing_a_field_without_a_default_is_refused_forward():
    problems = check_level(parse(record("User", field("id", "long"))), versions(V1),
                           Level.FORWARD)
    assert problems and "version 1 cannot read data written with the new schema" in problems[0]


def test_transitive_levels_check_every_earlier_version():
    # v1 has b as a string; v2 drops it; v3 brings b back as an int with a default: it reads
    # v2's data (b from the default) but not v1's (a string where it wants an int).
    v1 = record("R", field("a", "int"), field("b", "string"))
    v2 = record("R", field("a", "int"))
    v3 = record("R", field("a", "int"), field("b", "int", default=0))
    history = versions(v1, v2)
    assert check_level(parse(v3), history, Level.BACKWARD) == []
    transitive = check_level(parse(v3), history, Level.BACKWARD_TRANSITIVE)
    assert len(transitive) == 1 and "version 1" in transitive[0] and "/b" in transitive[0]
    assert check_level(parse(v3), history, Level.FULL) == []
    assert len(check_level(parse(v3), history, Level.FULL_TRANSITIVE)) == 2  # both ways
    # Forward: v1 (b without default) cannot read what v2 writes; FORWARD looks at v2 only.
    assert check_level(parse(v2), versions(v1), Level.FORWARD) != []
    assert check_level(parse(v3), history, Level.FORWARD) == []
    assert check_level(parse(v3), history, Level.FORWARD_TRANSITIVE) != []


def test_levels_parse_by_name():
    assert Level.of("full_transitive") is Level.FULL_TRANSITIVE
    with pytest.raises(InvalidCompatibilityLevelError, match="one of NONE, BACKWARD"):
        Level.of("SIDEWAYS")


# -- parsing ---------------------------------------------------------------------------------

@pytest.mark.parametrize("schema,message", [
    ("{not json", "not JSON"),
    ('{"type": "record", "name": "R"}', "needs 'fields'"),
    ('{"type": "record", "name": "1R", "fields": []}', "not a valid Avro name"),
    ('{"type": "nope"}', "unknown type 'nope'"),
    ('["int", "int"]', "holds 'int' twice"),
    ('["int", ["string"]]', "cannot hold a union"),
    ('{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "unique"),
    ('{"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}', "not one of its symbols"),
    ('{"type": "fixed", "name": "F"}', "needs a size"),
    (json.dumps(record("R", field("a", "int", default="x"))), "does not fit the type int"),
    (json.dumps(record("R", field("a", ["null", "int"], default=1))), "does not fit the type null"),
    (json.dumps(record("R", field("a", "int"), field("a", "long"))), "defined twice"),
    (json.dumps(record("R", field("a", "R2"))), "unknown type 'R2'"),
])
def test_bad_schemas_are_refused_saying_why(schema, message):
    with pytest.raises(InvalidSchemaError, match=message):
        parse(schema)


def test_parse_keeps_the_schema_minified_and_names_full():
    schema = parse('{ "type": "record", "name": "User", "namespace": "com.acme",\n'
                   '  "fields": [ {"name": "friend", "type": ["null", "User"]} ] }')
    assert schema.text == ('{"type":"record","name":"User","namespace":"com.acme",'
                           '"fields":[{"name":"friend","type":["null","User"]}]}')
    assert schema.name == "com.acme.User"
    assert schema.tree["fields"][0]["type"] == ["null", "com.acme.User"]
    assert parse('"string"').name is None
