"""Avro values as typed Arrow columns, and Arrow tables as Avro values.

Types, Avro to Arrow: boolean, int (int32), long (int64), float, double, string, bytes
(binary), fixed (fixed-size binary), enum (string), array (list), map (map of string),
record (struct; the top-level record's fields become the columns), a union of null and one
type (that type, nullable); any other union becomes its value as a JSON string, as no
Arrow or Spark type holds it. Logical types: date (date32), time-millis/-micros (time32/64),
timestamp-millis/-micros (timestamp, UTC), decimal (decimal128), uuid (string). Arrow to
Avro goes the other way; a nullable Arrow field becomes ``["null", T]`` with default null.

Decoding is fastavro's, one value at a time, then one ``pa.Table.from_pylist`` per block:
Python per record, in whichever worker decodes the block. Plain Python (no Ray).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from typing import Any

import fastavro
import pyarrow as pa

from raylog.schemas.avro import AvroSchema, kind, parse
from raylog.schemas.errors import InvalidSchemaError
from raylog.schemas.serde import AvroSerializer, WriterSchemas, fastavro_schema, unframe

_PRIMITIVE_TYPES = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(),
                    "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
                    "bytes": pa.binary(), "string": pa.string()}
_LOGICAL_TYPES = {("int", "date"): pa.date32(), ("int", "time-millis"): pa.time32("ms"),
                  ("long", "time-micros"): pa.time64("us"),
                  ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
                  ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
                  ("string", "uuid"): pa.string()}


def arrow_type(schema: AvroSchema, node: Any) -> pa.DataType:
    """The Arrow type of an Avro type (see the module docstring)."""
    node = schema.resolve(node)
    k = kind(node)
    if isinstance(node, dict):
        logical = _LOGICAL_TYPES.get((k, node.get("logicalType")))
        if logical is not None:
            return logical
        if node.get("logicalType") == "decimal" and k in ("bytes", "fixed"):
            return pa.decimal128(node["precision"], node.get("scale", 0))
    if k in _PRIMITIVE_TYPES:
        return _PRIMITIVE_TYPES[k]
    if k == "enum":
        return pa.string()
    if k == "fixed":
        return pa.binary(node["size"])
    if k == "array":
        return pa.list_(arrow_type(schema, node["items"]))
    if k == "map":
        return pa.map_(pa.string(), arrow_type(schema, node["values"]))
    if k == "union":
        rest = [b for b in node if b != "null"]
        return arrow_type(schema, rest[0]) if len(rest) == 1 else pa.string()
    return pa.struct([pa.field(f["name"], arrow_type(schema, f["type"])) for f in node["fields"]])


def arrow_schema(schema: AvroSchema) -> pa.Schema:
    """Columns for values of ``schema``: a record's fields, else one column ``value``."""
    top = schema.resolve(schema.tree)
    if kind(top) == "record":
        return pa.schema([pa.field(f["name"], arrow_type(schema, f["type"]))
                          for f in top["fields"]])
    return pa.schema([pa.field("value", arrow_type(schema, top))])


def _converter(schema: AvroSchema, node: Any, depth: int = 0) -> Callable | None:
    """What turns fastavro's value of ``node`` into Arrow's (None: it is Arrow's already)."""
    node = schema.resolve(node)
    k = kind(node)
    if depth > 32:  # a recursive type: deeper values are taken as they are
        return None
    if k == "union":
        rest = [b for b in node if b != "null"]
        if len(rest) != 1:
            return lambda v: None if v is None else json.dumps(v, default=str)
        inner = _converter(schema, rest[0], depth + 1)
        return None if inner is None else (lambda v: None if v is None else inner(v))
    if k == "array":
        inner = _converter(schema, node["items"], depth + 1)
        return None if inner is None else (lambda v: [inner(x) for x in v])
    if k == "map":
        inner = _converter(schema, node["values"], depth + 1)
        return None if inner is None else (lambda v: {a: inner(x) for a, x in v.items()})
    if k == "record":
        fields = {f["name"]: _converter(schema, f["type"], depth + 1) for f in node["fields"]}
        fields = {name: f for name, f in fields.items() if f is not None}
        if not fields:
            return None
        return lambda v: {**v, **{n: f(v[n]) for n, f in fields.items() if n in v}}
    return None


class AvroColumns:
    """Decodes framed Avro values into a table of ``reader``'s columns, resolving each
    value's writer schema (by its id, from ``registry``) against ``reader``."""

    def __init__(self, registry: Any, reader: str | AvroSchema) -> None:
        self.reader = reader if isinstance(reader, AvroSchema) else parse(reader)
        self.schema = arrow_schema(self.reader)
        self.writers = WriterSchemas(registry)
        self._reader = fastavro_schema(self.reader)
        self._record = kind(self.reader.resolve(self.reader.tree)) == "record"
        self._convert = _converter(self.reader, self.reader.tree)

    def decode(self, values: Iterable[bytes | None]) -> pa.Table:
        """A table with a row per value (a None value: a row of nulls)."""
        rows = []
        for data in values:
            if data is None:
                rows.append({})
                continue
            schema_id, payload = unframe(data)
            writer = self.writers.get(schema_id)[1]
            value = fastavro.schemaless_reader(io.BytesIO(payload), writer, self._reader)
            if self._convert is not None:
                value = self._convert(value)
            rows.append(value if self._record else {"value": value})
        return pa.Table.from_pylist(rows, schema=self.schema)


# -- Arrow to Avro -------------------------------------------------------------------------------

def avro_type(arrow: pa.DataType, name: str) -> Any:
    """The Avro type of an Arrow type; ``name`` names a struct's record."""
    t = pa.types
    simple = [(t.is_boolean, "boolean"), (t.is_int8, "int"), (t.is_int16, "int"),
              (t.is_int32, "int"), (t.is_uint8, "int"), (t.is_uint16, "int"),
              (t.is_int64, "long"), (t.is_uint32, "long"), (t.is_float32, "float"),
              (t.is_float64, "double"), (t.is_string, "string"), (t.is_large_string, "string"),
              (t.is_binary, "bytes"), (t.is_large_binary, "bytes")]
    for test, avro in simple:
        if test(arrow):
            return avro
    if t.is_fixed_size_binary(arrow):
        return {"type": "fixed", "name": name, "size": arrow.byte_width}
    if t.is_date32(arrow):
        return {"type": "int", "logicalType": "date"}
    if t.is_timestamp(arrow) and arrow.unit in ("ms", "us"):
        unit = "millis" if arrow.unit == "ms" else "micros"
        return {"type": "long", "logicalType": f"timestamp-{unit}"}
    if t.is_decimal128(arrow):
        return {"type": "bytes", "logicalType": "decimal", "precision": arrow.precision,
                "scale": arrow.scale}
    if t.is_list(arrow) or t.is_large_list(arrow):
        return {"type": "array", "items": _nullable(arrow.value_field, f"{name}_item")}
    if t.is_map(arrow) and t.is_string(arrow.key_type):
        return {"type": "map", "values": _nullable(arrow.item_field, f"{name}_value")}
    if t.is_struct(arrow):
        return {"type": "record", "name": name, "fields": [
            _field(arrow.field(i), f"{name}_{arrow.field(i).name}")
            for i in range(arrow.num_fields)]}
    raise InvalidSchemaError(f"Arrow type {arrow} has no Avro type here")


def _nullable(field: pa.Field, name: str) -> Any:
    inner = avro_type(field.type, name)
    return ["null", inner] if field.nullable else inner


def _field(field: pa.Field, name: str) -> dict[str, Any]:
    out = {"name": field.name, "type": _nullable(field, name)}
    if field.nullable:
        out["default"] = None
    return out


def avro_schema_of(schema: pa.Schema, name: str = "Row",
                   namespace: str | None = None) -> dict[str, Any]:
    """An Avro record schema for the rows of an Arrow schema."""
    out: dict[str, Any] = {"type": "record", "name": name}
    if namespace:
        out["namespace"] = namespace
    out["fields"] = [_field(field, f"{name}_{field.name}") for field in schema]
    parse(out)  # the names Arrow gave must be valid Avro names
    return out


def avro_values(table: pa.Table, serializer: AvroSerializer,
                key: str | None = None) -> pa.Table:
    """A table for ``Producer.send_batch``: a ``value`` column of ``table``'s rows (minus
    the ``key`` column, if named, which becomes the key) in Confluent's wire format."""
    rows = table.drop_columns([key]).to_pylist() if key else table.to_pylist()
    columns = {"value": pa.array([serializer(row) for row in rows], pa.binary())}
    if key:
        columns["key"] = table.column(key)
    return pa.table(columns)
