"""Whether data written with one Avro schema can be read with another, and the
registry's compatibility levels built on that.

:func:`can_read` applies the Avro specification's schema resolution rules (reader against
writer) and returns every problem it finds with where it is (a path of field names from
the top of the reader's schema, ``/items`` and ``/values`` for arrays and maps, the branch
number in a union), as Avro's Java ``SchemaCompatibility`` does:

- records match by unqualified name or a reader alias; a reader field is found in the
  writer by name or by one of its aliases; a reader field the writer lacks needs a
  default; writer fields the reader lacks are skipped;
- enums match by name; a writer symbol the reader lacks needs the reader's enum default;
- fixed types match by name and size; arrays and maps by their items and values;
- a writer's int reads as long, float or double, long as float or double, float as
  double, string as bytes and bytes as string;
- every branch of a writer's union must be readable; a writer's non-union type must be
  readable by some branch of a reader's union.

Levels (Confluent's names): BACKWARD, the new schema reads data of the latest version;
FORWARD, the latest reads the new one's data; FULL, both; the ``_TRANSITIVE`` forms check
every version, not only the latest; NONE checks nothing. Plain Python.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, NamedTuple

from raylog.schemas.avro import PRIMITIVES, AvroSchema, kind
from raylog.schemas.errors import InvalidCompatibilityLevelError

PROMOTIONS = frozenset({("int", "long"), ("int", "float"), ("int", "double"),
                        ("long", "float"), ("long", "double"), ("float", "double"),
                        ("string", "bytes"), ("bytes", "string")})  # (writer, reader)


class Level(enum.Enum):
    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def of(cls, value: object) -> Level:
        """A level from its name (any case); InvalidCompatibilityLevelError otherwise."""
        if isinstance(value, Level):
            return value
        if isinstance(value, str):
            try:
                return cls(value.upper())
            except ValueError:
                pass
        raise InvalidCompatibilityLevelError(
            f"invalid compatibility level {value!r}: one of "
            f"{', '.join(level.value for level in cls)}")

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


DEFAULT_LEVEL = Level.BACKWARD


class Incompatibility(NamedTuple):
    """One problem: its kind (Avro Java's names), where in the reader's schema, and why."""

    kind: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.path or '/'}: {self.message}"


def can_read(reader: AvroSchema, writer: AvroSchema) -> list[Incompatibility]:
    """Every reason why ``reader`` cannot read data written with ``writer`` (none: it can)."""
    return _Resolver(reader, writer).check(reader.tree, writer.tree, "")


def check_level(new: AvroSchema, versions: Sequence[tuple[int, AvroSchema]],
                level: Level) -> list[str]:
    """What breaks if ``new`` joins a subject whose live versions are ``versions`` (oldest
    first, as (version, schema)) under ``level``: one line per problem, naming the version
    and the direction. An empty list means compatible."""
    if level is Level.NONE or not versions:
        return []
    against = versions if level.transitive else versions[-1:]
    out = []
    for version, old in reversed(against):  # the latest first
        if level.backward:
            out.extend(f"the new schema cannot read data written with version {version} "
                       f"(BACKWARD): {problem}" for problem in can_read(new, old))
        if level.forward:
            out.extend(f"version {version} cannot read data written with the new schema "
                       f"(FORWARD): {problem}" for problem in can_read(old, new))
    return out


class _Resolver:
    def __init__(self, reader: AvroSchema, writer: AvroSchema) -> None:
        self.reader, self.writer = reader, writer
        self.in_progress: set[tuple[str, str]] = set()  # record pairs being checked

    def check(self, r: Any, w: Any, path: str) -> list[Incompatibility]:
        r, w = self.reader.resolve(r), self.writer.resolve(w)
        rk, wk = kind(r), kind(w)
        if wk == "union":
            out = []
            for i, branch in enumerate(w):
                for problem in self.check(r, branch, path):
                    out.append(problem._replace(
                        message=f"the writer's union branch {i} ({_describe(self.writer, branch)})"
                                f" cannot be read: {problem.message}"))
            return out
        if rk == "union":
            for branch in r:
                if not self.check(branch, w, path):
                    return []
            return [Incompatibility("MISSING_UNION_BRANCH", path,
                                    f"no branch of the reader's union "
                                    f"[{', '.join(_describe(self.reader, b) for b in r)}] "
                                    f"reads the writer's {_describe(self.writer, w)}")]
        if rk != wk:
            if (wk, rk) in PROMOTIONS:
                return []
            return [Incompatibility("TYPE_MISMATCH", path,
                                    f"the reader's type {_describe(self.reader, r)} cannot read "
                                    f"the writer's {_describe(self.writer, w)}")]
        if rk in PRIMITIVES:
            return []
        if rk == "array":
            return self.check(r["items"], w["items"], f"{path}/items")
        if rk == "map":
            return self.check(r["values"], w["values"], f"{path}/values")
        mismatch = self.name_mismatch(r, w, path)
        if mismatch:
            return [mismatch]
        if rk == "fixed":
            if r["size"] != w["size"]:
                return [Incompatibility("FIXED_SIZE_MISMATCH", path,
                                        f"fixed {r['name']} has size {r['size']} in the reader "
                                        f"and {w['size']} in the writer")]
            return []
        if rk == "enum":
            return self.enum(r, w, path)
        return self.record(r, w, path)

    def name_mismatch(self, r: dict, w: dict, path: str) -> Incompatibility | None:
        writer_name = w["name"]
        if (r["name"].rpartition(".")[2] == writer_name.rpartition(".")[2]
                or writer_name in r.get("aliases", ())):
            return None
        return Incompatibility("NAME_MISMATCH", path,
                               f"the reader's {kind(r)} {r['name']} does not match the writer's "
                               f"{writer_name} (names differ and no reader alias names it)")

    def enum(self, r: dict, w: dict, path: str) -> list[Incompatibility]:
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if not missing or "default" in r:
            return []
        return [Incompatibility("MISSING_ENUM_SYMBOLS", path,
                                f"the reader's enum {r['name']} lacks the writer's symbols "
                                f"{', '.join(missing)} and has no default")]

    def record(self, r: dict, w: dict, path: str) -> list[Incompatibility]:
        pair = (r["name"], w["name"])
        if pair in self.in_progress:  # a recursive type: assumed good while it is checked
            return []
        self.in_progress.add(pair)
        try:
            writer_fields = {f["name"]: f for f in w["fields"]}
            out = []
            for field in r["fields"]:
                field_path = f"{path}/{field['name']}"
                found = writer_fields.get(field["name"])
                for alias in field.get("aliases", ()) if found is None else ():
                    found = writer_fields.get(alias, found)
                if found is not None:
                    out.extend(self.check(field["type"], found["type"], field_path))
                elif "default" not in field:
                    out.append(Incompatibility(
                        "READER_FIELD_MISSING_DEFAULT_VALUE", field_path,
                        f"the reader's field {field['name']!r} of {r['name']} is not in the "
                        f"writer's schema and has no default"))
            return out
        finally:
            self.in_progress.discard(pair)


def _describe(schema: AvroSchema, node: Any) -> str:
    node = schema.resolve(node)
    kind_ = kind(node)
    if kind_ in ("record", "enum", "fixed"):
        return f"{kind_} {node['name']}"
    if kind_ == "union":
        return "union"
    return kind_
