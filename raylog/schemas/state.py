"""The registry's state, rebuilt by replaying the records of the compacted topic
``_schemas`` in offset order. Every change the registry makes is a record written there
first; this class never decides anything a replay could decide differently.

Records (keys are compact JSON, so one key is always the same bytes and compaction keeps
its last record):

- ``["schema", subject, version]`` -> ``{"id", "schema", "schemaType", "deleted", "new"}``:
  a version of a subject (``deleted``: soft-deleted); a tombstone deletes it permanently.
  ``new`` marks the record that allocated ``id``; a record that reuses an id (the same
  schema in another subject, a soft delete, a repair) says ``"new": false``.
- ``["config", subject or null]`` -> ``{"compatibilityLevel": LEVEL}``; a tombstone removes
  the subject's level (or resets the global one to BACKWARD).
- ``["ids"]`` -> ``{"max_id": N}``: the highest id ever handed out, written before a
  permanent delete removes the last record naming an id, so that no replay, even after
  compaction, hands that id out again.

Besides the stored texts, the state indexes each id by the forms of its schema that say
when two texts are the same schema (``key``, and ``normalized`` for ``normalize=true``; see
canonical.py), computed from the stored text as a record is applied: a replay computes them
again from the same texts, so it answers "is this schema known, under which id" as before.
A log written before raylog compared forms may hold one schema under two ids (two texts);
both stay as they are, and the lower id is the one a new registration is given.

A record that contradicts what is already known takes no effect and is listed in
``void`` (key -> offset): one that names an id already given to another schema, one that
gives a schema known under one id another id, one that allocates an id at or below the
highest id handed out, or one that gives an existing version another id. In normal
operation there is one writer and no such record; they can only come from two writers that
did not see each other's records, and the writer that finds its record void writes the
key's true value again (:meth:`record_for`), so compaction keeps the right one.

Values are of format RECORD_VERSION (0: no ``format_version`` member); a value of a newer
format stops the replay with UnsupportedFormatVersionError (a key of a kind this raylog
does not know is void, as above: a later raylog may add kinds).

Plain Python; not safe for concurrent use (its owner serializes calls).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from raylog.schemas.avro import AvroSchema, parse
from raylog.schemas.compatibility import DEFAULT_LEVEL, Level
from raylog.schemas.errors import InvalidSchemaError
from raylog.storage.formats import JSON_VERSION_FIELD, json_version

SCHEMAS_TOPIC = "_schemas"
RECORD_VERSION = 0  # of the values this raylog writes and reads
_KINDS = ("schema", "config", "ids")  # of the keys this raylog reads
AVRO = "AVRO"

Record = tuple[bytes, bytes | None]


@dataclasses.dataclass
class Version:
    """One version of a subject."""

    subject: str
    version: int
    schema_id: int
    schema: str
    schema_type: str = AVRO
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        """As Confluent's REST API shows a version (schemaType only when not Avro)."""
        out: dict[str, Any] = {"subject": self.subject, "version": self.version,
                               "id": self.schema_id, "schema": self.schema}
        if self.schema_type != AVRO:
            out["schemaType"] = self.schema_type
        return out


def _key(*parts: Any) -> bytes:
    return json.dumps(list(parts), separators=(",", ":")).encode()


def _value(key: bytes, value: bytes) -> Any:
    """A record's value, decoded; UnsupportedFormatVersionError if a newer raylog wrote it."""
    fields = json.loads(value)
    json_version(f"{SCHEMAS_TOPIC}: the record of {key[:200]!r}", fields, RECORD_VERSION)
    if isinstance(fields, dict):
        fields.pop(JSON_VERSION_FIELD, None)
    return fields


def schema_key(subject: str, version: int) -> bytes:
    return _key("schema", subject, version)


def config_key(subject: str | None) -> bytes:
    return _key("config", subject)


IDS_KEY = _key("ids")


def schema_record(version: Version, new: bool) -> Record:
    value = {"id": version.schema_id, "schema": version.schema,
             "schemaType": version.schema_type, "deleted": version.deleted, "new": new}
    return schema_key(version.subject, version.version), json.dumps(value).encode()


def config_record(subject: str | None, level: Level | None) -> Record:
    if level is None:
        return config_key(subject), None
    return config_key(subject), json.dumps({"compatibilityLevel": level.value}).encode()


def ids_record(max_id: int) -> Record:
    return IDS_KEY, json.dumps({"max_id": max_id}).encode()


class RegistryState:
    """Subjects and their versions, ids and their schemas, compatibility levels.

    Invariants: an id names one schema text forever (``max_id`` only grows, and an id is
    allocated only above it); a schema text has at most one id at a time; a subject's
    versions keep their ids.
    """

    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, Version]] = {}
        self.schemas: dict[int, tuple[str, str]] = {}  # id -> (schema type, text)
        self.ids: dict[tuple[str, str], int] = {}      # (schema type, text) -> id
        self.references: dict[int, int] = {}           # id -> versions naming it
        self.forms: dict[int, tuple[str, str]] = {}    # id -> its schema's (key, normalized)
        self.same: dict[tuple[str, bool, str], set[int]] = {}  # (type, normalize, form) -> ids
        self.max_id = 0
        self.levels: dict[str | None, Level] = {}
        self.next_offset = 0
        self.void: dict[bytes, int] = {}

    # -- replay ----------------------------------------------------------------------------------

    def apply(self, offset: int, key: bytes, value: bytes | None) -> bool:
        """Apply the record at ``offset``; False if it took no effect (void). Records are
        applied in offset order, each once."""
        self.next_offset = offset + 1
        kind, *rest = json.loads(key)
        fields = None if value is None or kind not in _KINDS else _value(key, value)
        if kind == "schema":
            took = self._apply_schema(rest[0], rest[1], fields)
        elif kind == "config":
            took = True
            if fields is None:
                self.levels.pop(rest[0], None)
            else:
                self.levels[rest[0]] = Level.of(fields["compatibilityLevel"])
        elif kind == "ids":
            took = fields is not None
            if took:
                self.max_id = max(self.max_id, fields["max_id"])
        else:
            took = False  # a kind a later raylog may write: not ours to interpret
        if took:
            self.void.pop(key, None)
        else:
            self.void[key] = offset
        return took

    def _apply_schema(self, subject: str, number: int, value: dict | None) -> bool:
        versions = self.subjects.get(subject, {})
        existing = versions.get(number)
        if value is None:
            if existing is not None:
                self._unreference(existing.schema_id)
                del versions[number]
                if not versions:
                    del self.subjects[subject]
            return True
        schema_id, schema = value["id"], (value.get("schemaType", AVRO), value["schema"])
        known = self.schemas.get(schema_id)
        if known is not None and known != schema:
            return False  # the id belongs to another schema
        if self.ids.get(schema, schema_id) != schema_id:
            return False  # the schema has another id
        if known is None and value.get("new") and schema_id <= self.max_id:
            return False  # an id handed out before is never handed out again
        if existing is not None and (existing.schema_id, existing.schema_type,
                                     existing.schema) != (schema_id, *schema):
            return False  # a version keeps its schema
        if existing is None:
            self.references[schema_id] = self.references.get(schema_id, 0) + 1
        self.subjects.setdefault(subject, {})[number] = Version(
            subject, number, schema_id, schema[1], schema[0], bool(value.get("deleted")))
        if known is None:
            self._index(schema_id, *schema)
        self.schemas[schema_id] = schema
        self.ids[schema] = schema_id
        self.max_id = max(self.max_id, schema_id)
        return True

    def _unreference(self, schema_id: int) -> None:
        left = self.references[schema_id] - 1
        if left:
            self.references[schema_id] = left
            return
        del self.references[schema_id]
        schema_type = self.schemas[schema_id][0]
        self.ids.pop(self.schemas.pop(schema_id), None)
        for normalize, form in enumerate(self.forms.pop(schema_id, ())):
            ids = self.same[(schema_type, bool(normalize), form)]
            ids.discard(schema_id)
            if not ids:
                del self.same[(schema_type, bool(normalize), form)]

    def _index(self, schema_id: int, schema_type: str, text: str) -> None:
        if schema_type != AVRO:
            return  # a type a later raylog may keep: known by its text alone
        try:
            parsed = parse(text)
        except InvalidSchemaError:
            return  # accepted by an older parser: known by its text alone
        self.forms[schema_id] = (parsed.key, parsed.normalized)
        for normalize in (False, True):
            self.same.setdefault((schema_type, normalize, parsed.form(normalize)),
                                 set()).add(schema_id)

    def record_for(self, key: bytes) -> Record:
        """The record that states what this state holds for ``key`` (a repair of a void
        record: written after it, so compaction keeps this one)."""
        kind, *rest = json.loads(key)
        if kind == "schema":
            version = self.subjects.get(rest[0], {}).get(rest[1])
            return schema_record(version, new=False) if version else (key, None)
        if kind == "config":
            return config_record(rest[0], self.levels.get(rest[0]))
        return ids_record(self.max_id)

    # -- questions -------------------------------------------------------------------------------

    def is_same(self, version: Version, schema_type: str, parsed: AvroSchema,
                normalize: bool) -> bool:
        """Is ``version``'s schema ``parsed`` (compared as ``normalize`` says)?"""
        forms = self.forms.get(version.schema_id)
        return (version.schema_type == schema_type and forms is not None
                and forms[normalize] == parsed.form(normalize))

    def id_of(self, schema_type: str, parsed: AvroSchema, normalize: bool) -> int | None:
        """The id ``parsed`` has if the registry knows it: the id of the very text it would
        be stored as, else the lowest id of the same schema."""
        exact = self.ids.get((schema_type, parsed.stored(normalize)))
        if exact is not None:
            return exact
        same = self.same.get((schema_type, normalize, parsed.form(normalize)))
        return min(same) if same else None

    def live_versions(self, subject: str) -> list[Version]:
        """The subject's versions that are not soft-deleted, oldest first."""
        return [v for _, v in sorted(self.subjects.get(subject, {}).items()) if not v.deleted]

    def all_versions(self, subject: str) -> list[Version]:
        return [v for _, v in sorted(self.subjects.get(subject, {}).items())]

    def level(self, subject: str | None) -> Level:
        """The subject's level, else the global one, else BACKWARD."""
        if subject is not None and subject in self.levels:
            return self.levels[subject]
        return self.levels.get(None, DEFAULT_LEVEL)
