"""The forms in which the registry stores and compares an Avro schema, as Confluent Schema
Registry does.

Confluent never compares the JSON text a client sent. It parses the schema and stores
Avro's own rendering of it (Java's ``Schema.toString()``): that is :attr:`Forms.text`
here. Two schemas are then the same one when their parsed forms are equal (Avro's
``Schema.equals`` plus doc and aliases): :attr:`Forms.key`. With ``normalize=true`` the
schema is first rewritten by Confluent's normalizer (``AvroSchemaUtils.toNormalizedString``):
:attr:`Forms.normalized`, both what is stored and what is compared.

==========================  ===========  ===========  ================
difference between texts     ``text``     ``key``      ``normalized``
==========================  ===========  ===========  ================
whitespace, key order        ignored      ignored      ignored
a name with its namespace    ignored      ignored      ignored
  or fully qualified; a
  type written as
  ``{"type": "int"}``;
  ``"order": "ascending"``
custom property order,       kept         ignored      ignored
  alias order, key order
  inside JSON values
``"doc": ""`` on a named     kept         kept         ignored
  type; ``1`` for ``1.0``
  as a float/double default
doc, default, aliases,       kept         kept         kept
  logicalType, custom
  properties, order of
  fields, symbols, branches
==========================  ===========  ===========  ================

Keys Avro reserves and does not keep on a type are dropped (``doc`` on a primitive,
``size`` on a record, ...), as Avro drops them.

The layout is Avro's: ``type``, ``name``, ``namespace`` (only where it differs from the
enclosing one), ``doc``, then ``fields`` / ``symbols`` (and the enum ``default``) /
``size`` / ``items`` / ``values``, then custom properties, then ``aliases``; fields as
``name``, ``type``, ``doc``, ``default``, ``order``, ``aliases``, properties; a named type
written once and referred to by name after. Plain functions of a parsed schema's tree (see
avro.py); no I/O, safe from any thread.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

# What Avro's parser reserves (org.apache.avro.Schema): not kept as properties.
_TYPE_RESERVED = frozenset({"doc", "fields", "items", "name", "namespace", "size", "symbols",
                            "values", "type", "aliases"})
_ENUM_RESERVED = _TYPE_RESERVED | {"default"}
_FIELD_RESERVED = frozenset({"default", "doc", "name", "order", "type", "aliases"})
# Type names a short reference may not take (Avro writes such a name in full).
_TYPE_NAMES = frozenset({"record", "enum", "array", "map", "union", "fixed", "string", "bytes",
                         "int", "long", "float", "double", "boolean", "null"})


@dataclasses.dataclass(frozen=True)
class Forms:
    """``text``: stored; ``key``: equal for the same schema; ``normalized``: stored and
    compared with ``normalize=true``."""

    text: str
    key: str
    normalized: str


def forms(tree: Any, names: dict[str, dict[str, Any]]) -> Forms:
    """The three forms of a parsed schema (``tree`` and ``names`` as avro.py makes them)."""
    return Forms(_render(tree, names, sort=False, normalize=False),
                 _render(tree, names, sort=True, normalize=False),
                 _render(tree, names, sort=True, normalize=True))


def _render(tree: Any, names: dict[str, dict[str, Any]], sort: bool, normalize: bool) -> str:
    return json.dumps(_Writer(names, sort, normalize).node(tree, None), separators=(",", ":"),
                      ensure_ascii=False)


def _space(full: str) -> str | None:
    return full.rpartition(".")[0] or None


class _Writer:
    """One rendering. ``sort``: properties, aliases and keys inside JSON values in order;
    ``normalize``: Confluent's normalizer on top (empty docs of named types dropped,
    defaults written as their type holds them)."""

    def __init__(self, names: dict[str, dict[str, Any]], sort: bool, normalize: bool) -> None:
        self.names = names
        self.sort = sort
        self.normalize = normalize

    def node(self, node: Any, space: str | None) -> Any:
        if isinstance(node, list):
            return [self.node(branch, space) for branch in node]
        if isinstance(node, str):
            return node if node not in self.names else self.reference(node, space)
        kind = node["type"]
        if kind in ("record", "error", "enum", "fixed"):
            return self.named(node, space)
        out: dict[str, Any] = {"type": kind}
        if kind == "array":
            out["items"] = self.node(node["items"], space)
        elif kind == "map":
            out["values"] = self.node(node["values"], space)
        out.update(self.properties(node, _TYPE_RESERVED))
        return out if len(out) > 1 else kind

    def reference(self, full: str, space: str | None) -> str:
        short = full.rpartition(".")[2]
        return short if _space(full) == space and space and short not in _TYPE_NAMES else full

    def named(self, node: dict[str, Any], space: str | None) -> dict[str, Any]:
        full = node["name"]
        own = _space(full)
        out: dict[str, Any] = {"type": node["type"], "name": full.rpartition(".")[2]}
        if own != space:
            out["namespace"] = own or ""  # "": no namespace inside one that has one
        doc = node.get("doc")
        if isinstance(doc, str) and not (self.normalize and not doc):
            out["doc"] = doc
        kind = node["type"]
        if kind == "enum":
            out["symbols"] = node["symbols"]
            if "default" in node:
                out["default"] = node["default"]
        elif kind == "fixed":
            out["size"] = node["size"]
        else:
            out["fields"] = [self.field(field, own) for field in node["fields"]]
        out.update(self.properties(node, _ENUM_RESERVED if kind == "enum" else _TYPE_RESERVED))
        aliases = self.aliases(node.get("aliases", []))
        if aliases:
            out["aliases"] = [self.reference(alias, own) for alias in aliases]
        return out

    def field(self, field: dict[str, Any], space: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": field["name"], "type": self.node(field["type"], space)}
        if isinstance(field.get("doc"), str):
            out["doc"] = field["doc"]
        if "default" in field:
            value = field["default"]
            out["default"] = self.value(self.typed(value, field["type"]) if self.normalize
                                        else value)
        if field.get("order", "ascending") != "ascending":
            out["order"] = field["order"]
        aliases = self.aliases(field.get("aliases") or [])
        if aliases:
            out["aliases"] = aliases
        out.update(self.properties(field, _FIELD_RESERVED))
        return out

    def aliases(self, aliases: list[str]) -> list[str]:
        unique = list(dict.fromkeys(aliases))  # Avro keeps a set, in the order given
        return sorted(unique) if self.sort else unique

    def properties(self, node: dict[str, Any], reserved: frozenset[str]) -> dict[str, Any]:
        keys = [key for key in node if key not in reserved]
        return {key: self.value(node[key]) for key in (sorted(keys) if self.sort else keys)}

    def value(self, value: Any) -> Any:
        """A JSON value (a default, a property's value); its keys in order when sorting."""
        if not self.sort:
            return value
        if isinstance(value, dict):
            return {key: self.value(value[key]) for key in sorted(value)}
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value

    def typed(self, value: Any, node: Any) -> Any:
        """A default as its type holds it: an integer default of a float or double is that
        float (Avro reads ``1`` as ``1.0``), in nested defaults too."""
        node = self.names.get(node, node) if isinstance(node, str) else node
        if isinstance(node, list):
            return self.typed(value, node[0]) if node else value
        kind = node if isinstance(node, str) else node["type"]
        if kind in ("float", "double"):
            return float(value) if type(value) is int else value
        if kind == "array" and isinstance(value, list):
            return [self.typed(item, node["items"]) for item in value]
        if kind == "map" and isinstance(value, dict):
            return {key: self.typed(item, node["values"]) for key, item in value.items()}
        if kind in ("record", "error") and isinstance(value, dict):
            types = {field["name"]: field["type"] for field in node["fields"]}
            return {key: self.typed(item, types[key]) if key in types else item
                    for key, item in value.items()}
        return value
