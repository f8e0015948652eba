"""Avro schemas as the registry keeps them: parsed, checked, with every named type known.

:func:`parse` reads a schema (JSON text or the decoded JSON) and returns an
:class:`AvroSchema`: ``text``, the schema as stored (Avro's own rendering of it, as
Confluent stores it), ``key`` and ``normalized``, what the registry compares (canonical.py
says what each form keeps); ``tree``, the schema with every name made a full name and every
reference to a named type written as that full name; ``names``, full name -> definition.
The compatibility checker walks ``tree`` through ``names``.

The rules are the Avro specification's (1.11): names are ``[A-Za-z_][A-Za-z0-9_]*`` joined
by dots, a name's namespace comes from a dotted name, else its own ``namespace``, else the
enclosing one; a name is defined once; unions hold no unions and no two branches of one
unnamed type; enum symbols are unique names and an enum's ``default`` is one of them;
record fields have unique names and a default that fits their type (a union's default fits
its first branch). Logical types are kept and do not change what a schema reads.

Plain Python, no I/O; safe to call from any thread.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from raylog.schemas.canonical import forms
from raylog.schemas.errors import InvalidSchemaError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_SCHEMA_CHARS = 1 << 20  # a bigger schema is refused before it is parsed


@dataclasses.dataclass(frozen=True)
class AvroSchema:
    """One parsed schema. ``text`` is its stored form; ``key``: equal for the same schema;
    ``normalized``: stored and compared with ``normalize=true``; ``tree`` and ``names`` as
    above."""

    text: str
    tree: Any
    names: dict[str, dict[str, Any]]
    key: str
    normalized: str

    def form(self, normalize: bool) -> str:
        """What the registry compares: ``normalized`` or ``key``."""
        return self.normalized if normalize else self.key

    def stored(self, normalize: bool) -> str:
        """What the registry stores for a new schema: ``normalized`` or ``text``."""
        return self.normalized if normalize else self.text

    def resolve(self, node: Any) -> Any:
        """A node with a named-type reference replaced by the named type's definition."""
        if isinstance(node, str) and node not in PRIMITIVES:
            return self.names[node]
        return node

    @property
    def name(self) -> str | None:
        """The full name of the top-level type, if it is a named type (record name
        strategies take it as the subject)."""
        top = self.resolve(self.tree)
        return top.get("name") if isinstance(top, dict) else None


def kind(node: Any) -> str:
    """``"union"``, a primitive's name, or a complex type's (``record`` for errors too)."""
    if isinstance(node, list):
        return "union"
    if isinstance(node, str):
        return node
    kind_ = node["type"]
    return "record" if kind_ == "error" else kind_


def parse(schema: str | dict | list) -> AvroSchema:
    """Parse and check an Avro schema; InvalidSchemaError says what is wrong and where."""
    if isinstance(schema, str):
        if len(schema) > MAX_SCHEMA_CHARS:
            raise InvalidSchemaError(f"the schema has {len(schema)} characters; the limit is "
                                     f"{MAX_SCHEMA_CHARS}")
        try:
            decoded = json.loads(schema)
        except ValueError as e:
            raise InvalidSchemaError(f"the schema is not JSON: {e}") from None
    elif isinstance(schema, dict | list):
        decoded = schema
    else:
        raise InvalidSchemaError(f"a schema is JSON text or its decoded form, got "
                                 f"{type(schema).__name__}")
    names: dict[str, dict[str, Any]] = {}
    tree = _Parser(names).node(decoded, None, "")
    rendered = forms(tree, names)
    return AvroSchema(rendered.text, tree, names, rendered.key, rendered.normalized)


class _Parser:
    def __init__(self, names: dict[str, dict[str, Any]]) -> None:
        self.names = names
        self.defaults: list[tuple[Any, Any, str]] = []

    def node(self, node: Any, namespace: str | None, path: str) -> Any:
        where = path or "/"
        if isinstance(node, str):
            if node in PRIMITIVES:
                return node
            full = _full_name(node, namespace, where)
            if full not in self.names:
                known = f" (known: {', '.join(sorted(self.names))})" if self.names else ""
                raise InvalidSchemaError(f"at {where}: unknown type {node!r}{known}")
            return full
        if isinstance(node, list):
            return self.union(node, namespace, path)
        if not isinstance(node, dict):
            raise InvalidSchemaError(f"at {where}: a type is a name, a union (list) or an "
                                     f"object, got {json.dumps(node)}")
        if "type" not in node:
            raise InvalidSchemaError(f"at {where}: a type object needs 'type'")
        kind_ = node["type"]
        if isinstance(kind_, dict | list) or (isinstance(kind_, str) and kind_ not in PRIMITIVES
                                              and kind_ not in NAMED
                                              and kind_ not in ("array", "map")):
            return self.node(kind_, namespace, path)  # {"type": <a type>}
        if kind_ in PRIMITIVES:
            extra = {k: v for k, v in node.items() if k != "type"}
            return {"type": kind_, **extra} if extra else kind_
        if kind_ == "array":
            return {**node, "items": self.node(_required(node, "items", where), namespace,
                                               f"{path}/items")}
        if kind_ == "map":
            return {**node, "values": self.node(_required(node, "values", where), namespace,
                                                f"{path}/values")}
        return self.named(node, namespace, path)

    def union(self, branches: list, namespace: str | None, path: str) -> list:
        out, seen = [], set()
        for i, branch in enumerate(branches):
            parsed = self.node(branch, namespace, f"{path}/{i}")
            kind_ = kind(self.names.get(parsed, parsed) if isinstance(parsed, str) else parsed)
            if kind_ == "union":
                raise InvalidSchemaError(f"at {path}/{i}: a union cannot hold a union")
            key = parsed if isinstance(parsed, str) and parsed not in PRIMITIVES else (
                parsed["name"] if kind_ in NAMED | {"record"} else kind_)
            if key in seen:
                raise InvalidSchemaError(f"at {path or '/'}: the union holds {key!r} twice")
            seen.add(key)
            out.append(parsed)
        return out

    def named(self, node: dict, namespace: str | None, path: str) -> str | dict:
        where = path or "/"
        name = _required(node, "name", where)
        own = node.get("namespace")
        if own is not None and not isinstance(own, str):
            raise InvalidSchemaError(f"at {where}: namespace must be a string")
        full = _full_name(name, own if own is not None else namespace, where)
        if full in self.names:
            raise InvalidSchemaError(f"at {where}: the name {full!r} is defined twice")
        inner = full.rpartition(".")[0] or None
        out: dict[str, Any] = {k: v for k, v in node.items() if k != "namespace"}
        out["name"] = full
        _check_aliases(out, inner, where)
        self.names[full] = out  # before the fields: a record may refer to itself
        kind_ = node["type"]
        if kind_ in ("record", "error"):
            out["fields"] = self.fields(node, inner, path)
        elif kind_ == "enum":
            _check_enum(node, where)
        else:
            size = node.get("size")
            if type(size) is not int or size < 0:
                raise InvalidSchemaError(f"at {where}: fixed {full!r} needs a size >= 0")
        return out

    def fields(self, node: dict, namespace: str | None, path: str) -> list[dict]:
        fields = _required(node, "fields", path or "/")
        if not isinstance(fields, list):
            raise InvalidSchemaError(f"at {path or '/'}: fields must be a list")
        out, seen = [], set()
        for i, field in enumerate(fields):
            if not isinstance(field, dict):
                raise InvalidSchemaError(f"at {path}/fields/{i}: a field is an object")
            name = _required(field, "name", f"{path}/fields/{i}")
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise InvalidSchemaError(f"at {path}/fields/{i}: bad field name {name!r}")
            if name in seen:
                raise InvalidSchemaError(f"at {path}: field {name!r} is defined twice")
            seen.add(name)
            field_path = f"{path}/{name}"
            parsed = {**field, "type": self.node(_required(field, "type", field_path),
                                                 namespace, field_path)}
            if "default" in field:
                check_default(field["default"], parsed["type"], self.names, field_path)
            out.append(parsed)
        return out


def check_default(value: Any, node: Any, names: dict[str, dict], path: str) -> None:
    """Refuse a field default that does not fit its type (a union's: its first branch)."""
    if isinstance(node, str) and node not in PRIMITIVES:
        node = names[node]
    kind_ = kind(node)
    ok = True
    if kind_ == "union":
        return check_default(value, node[0], names, path) if node else None
    if kind_ == "null":
        ok = value is None
    elif kind_ == "boolean":
        ok = isinstance(value, bool)
    elif kind_ in ("int", "long"):
        ok = type(value) is int
    elif kind_ in ("float", "double"):
        ok = type(value) in (int, float)
    elif kind_ in ("string", "bytes", "fixed"):
        ok = isinstance(value, str)
    elif kind_ == "enum":
        ok = value in node["symbols"]
    elif kind_ == "array":
        ok = isinstance(value, list)
        for item in value if ok else ():
            check_default(item, node["items"], names, path)
    elif kind_ == "map":
        ok = isinstance(value, dict)
        for item in value.values() if ok else ():
            check_default(item, node["values"], names, path)
    elif kind_ == "record":
        ok = isinstance(value, dict)
        for field in node["fields"] if ok else ():
            if field["name"] in value:
                check_default(value[field["name"]], field["type"], names, path)
            elif "default" not in field:
                ok = False
    if not ok:
        raise InvalidSchemaError(f"at {path}: the default {json.dumps(value)} does not fit the "
                                 f"type {kind_}")


def _required(node: dict, key: str, where: str) -> Any:
    if key not in node:
        raise InvalidSchemaError(f"at {where}: {node.get('type', 'the type')!s} needs {key!r}")
    return node[key]


def _full_name(name: object, namespace: str | None, where: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidSchemaError(f"at {where}: a name must be a non-empty string")
    full = name if "." in name or not namespace else f"{namespace}.{name}"
    if not all(_NAME.fullmatch(part) for part in full.split(".")):
        raise InvalidSchemaError(f"at {where}: {full!r} is not a valid Avro name")
    return full


def _check_aliases(node: dict, namespace: str | None, where: str) -> None:
    aliases = node.get("aliases", [])
    if not isinstance(aliases, list):
        raise InvalidSchemaError(f"at {where}: aliases must be a list of names")
    node["aliases"] = [_full_name(a, namespace, where) for a in aliases]
    if not node["aliases"]:
        del node["aliases"]


def _check_enum(node: dict, where: str) -> None:
    symbols = _required(node, "symbols", where)
    if not isinstance(symbols, list) or not all(
            isinstance(s, str) and _NAME.fullmatch(s) for s in symbols):
        raise InvalidSchemaError(f"at {where}: enum symbols must be a list of names")
    if len(set(symbols)) != len(symbols):
        raise InvalidSchemaError(f"at {where}: enum symbols must be unique")
    if "default" in node and node["default"] not in symbols:
        raise InvalidSchemaError(f"at {where}: the enum default {node['default']!r} is not "
                                 f"one of its symbols")
