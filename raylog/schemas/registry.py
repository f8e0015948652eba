"""The schema registry's operations over a log of records: Confluent Schema Registry's
rules, plain Python.

:class:`Registry` owns a :class:`RegistryState` and a :class:`RegistryLog` (in raylog the
topic ``_schemas``; :class:`MemoryLog` in tests). A change is decided on the state,
written to the log, and then *read back*: the registry replays the log up to its own
record before it answers, and answers from what the replay made of it. So what a caller is
told is what every later replay (a restart) will rebuild; and if another writer got a
record in first (two registries on one log: raylog runs one, but nothing here relies on
it), the replay rejects the loser's record (see state.py), the registry rewrites the key's
true value and tries again on the newer state.

Arguments are checked before anything is written: bad input changes nothing stored. Not
safe for concurrent use: the owner serializes calls (raylog's actor runs one at a time).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Protocol

from raylog.schemas.avro import parse
from raylog.schemas.compatibility import DEFAULT_LEVEL, Level, check_level
from raylog.schemas.errors import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    InvalidSubjectError,
    InvalidVersionError,
    RegistryStoreError,
    SchemaNotFoundError,
    SubjectConfigNotFoundError,
    SubjectNotFoundError,
    SubjectNotSoftDeletedError,
    SubjectSoftDeletedError,
    VersionNotFoundError,
    VersionNotSoftDeletedError,
    VersionSoftDeletedError,
)
from raylog.schemas.state import (
    AVRO,
    Record,
    RegistryState,
    Version,
    config_record,
    ids_record,
    schema_key,
    schema_record,
)

MAX_SUBJECT_CHARS = 1000
MAX_VERSION = 2**31 - 1
WRITE_ATTEMPTS = 5  # a write that loses to another writer's this many times fails
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RegistryLog(Protocol):
    """Where the records live: a single ordered log."""

    def append(self, records: list[Record]) -> int:
        """Append in order, durably; return the offset of the last one."""

    def read(self, start: int, until: int | None) -> Iterable[tuple[int, bytes, bytes | None]]:
        """Records from ``start``: up to and including ``until`` (waiting for them), or
        up to the end as it is now."""


class MemoryLog:
    """A RegistryLog in memory, for tests and single-process use."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []

    def append(self, records: list[Record]) -> int:
        for key, value in records:
            self.records.append((len(self.records), key, value))
        return len(self.records) - 1

    def read(self, start: int, until: int | None) -> list[tuple[int, bytes, bytes | None]]:
        return self.records[start:None if until is None else until + 1]


def check_subject(subject: object) -> str:
    if not isinstance(subject, str) or not subject.strip():
        raise InvalidSubjectError(f"a subject is a non-empty string, got {subject!r}")
    if len(subject) > MAX_SUBJECT_CHARS or _CONTROL.search(subject):
        raise InvalidSubjectError(f"subject {subject[:80]!r} is longer than "
                                  f"{MAX_SUBJECT_CHARS} characters or holds control characters")
    return subject


def version_number(spec: object) -> int | None:
    """A version as callers name it: a number from 1, or ``latest`` / -1 (None)."""
    if spec in ("latest", -1, "-1"):
        return None
    if isinstance(spec, str) and spec.isdigit():
        spec = int(spec)
    if type(spec) is not int or not 1 <= spec <= MAX_VERSION:
        raise InvalidVersionError(f"the version must be a number from 1 to {MAX_VERSION} or "
                                  f"'latest', got {spec!r}")
    return spec


def check_schema_type(schema_type: object, references: object) -> str:
    if schema_type is None:
        schema_type = AVRO
    if not isinstance(schema_type, str) or schema_type.upper() != AVRO:
        raise InvalidSchemaError(f"schema type {schema_type!r} is not supported: this "
                                 f"registry keeps Avro schemas")
    if references:
        raise InvalidSchemaError("schema references are not supported")
    return AVRO


class Registry:
    """Confluent Schema Registry's operations; see the module docstring."""

    def __init__(self, log: RegistryLog) -> None:
        self.log = log
        self.state = RegistryState()
        self.catch_up()
        if self.state.void:  # a writer that lost a race and stopped before repairing
            self._write([self.state.record_for(key) for key in list(self.state.void)])

    def catch_up(self, until: int | None = None) -> None:
        """Apply the log's records this registry has not applied, up to ``until``."""
        for offset, key, value in self.log.read(self.state.next_offset, until):
            self.state.apply(offset, key, value)

    def _write(self, records: list[Record]) -> list[bool]:
        """Append records, replay up to them; return whether each took effect."""
        try:
            last = self.log.append(records)
        except Exception as e:
            raise RegistryStoreError(f"writing to the registry's log failed: {e}") from e
        first = last - len(records) + 1
        self.catch_up(last)
        if self.state.next_offset <= last:
            raise RegistryStoreError(f"the registry's log did not give back offset {last}")
        return [offset not in self.state.void.values() for offset in range(first, last + 1)]

    def _write_until_taken(self, plan: Any) -> Any:
        """``plan()`` -> (records, result); written until every record takes effect."""
        for _ in range(WRITE_ATTEMPTS):
            records, result = plan()
            if not records:
                return result
            taken = self._write(records)
            if all(taken):
                return result
            self._write([self.state.record_for(key) for (key, _), ok in zip(records, taken,
                                                                        strict=True) if not ok])
        raise RegistryStoreError(f"another writer changed the registry {WRITE_ATTEMPTS} times "
                                 f"during one change; try again")

    # -- schemas ---------------------------------------------------------------------------------

    def register(self, subject: str, schema: str, schema_type: str | None = None,
                 references: list | None = None, normalize: bool = False) -> dict[str, Any]:
        """Register ``schema`` under ``subject``: ``{"id", "version"}``. A schema the subject
        has (not soft-deleted) keeps its version; one known elsewhere keeps its id. Schemas
        are compared parsed, not as text (canonical.py); ``normalize``: Confluent's
        ``normalize=true``, the schema stored and compared normalized."""
        check_subject(subject)
        schema_type = check_schema_type(schema_type, references)
        parsed = parse(schema)

        def plan() -> tuple[list[Record], dict[str, Any]]:
            state = self.state
            live = state.live_versions(subject)
            for version in live:
                if state.is_same(version, schema_type, parsed, normalize):
                    return [], {"id": version.schema_id, "version": version.version}
            problems = check_level(parsed, [(v.version, parse(v.schema)) for v in live],
                                   state.level(subject))
            if problems:
                raise IncompatibleSchemaError(
                    f"Schema being registered is incompatible with an earlier schema for "
                    f"subject {subject!r}: {'; '.join(problems)}", problems)
            known = state.id_of(schema_type, parsed, normalize)
            if known is None:  # a new schema, stored as Confluent stores it
                schema_id, text = state.max_id + 1, parsed.stored(normalize)
            else:  # an id names one text: the one it was given with
                schema_id, text = known, state.schemas[known][1]
            number = max(state.subjects.get(subject, {0: None}), default=0) + 1
            version = Version(subject, number, schema_id, text, schema_type)
            return [schema_record(version, new=known is None)], {"id": schema_id,
                                                                  "version": number}

        return self._write_until_taken(plan)

    def lookup(self, subject: str, schema: str, schema_type: str | None = None,
               references: list | None = None, deleted: bool = False,
               normalize: bool = False) -> dict[str, Any]:
        """The version of ``subject`` whose schema is ``schema`` (compared as
        :meth:`register` compares; the oldest if several are)."""
        check_subject(subject)
        schema_type = check_schema_type(schema_type, references)
        parsed = parse(schema)
        for version in self._versions(subject, deleted):
            if self.state.is_same(version, schema_type, parsed, normalize):
                return version.to_json()
        raise SchemaNotFoundError(f"Schema not found under subject {subject!r}")

    def schema(self, schema_id: int) -> dict[str, Any]:
        """``{"schema": text}`` of a global id."""
        found = self.state.schemas.get(schema_id) if type(schema_id) is int else None
        if found is None:
            raise SchemaNotFoundError(f"Schema {schema_id} not found")
        return {"schema": found[1]} if found[0] == AVRO else {"schema": found[1],
                                                              "schemaType": found[0]}

    def versions_of_id(self, schema_id: int, deleted: bool = False) -> list[dict[str, Any]]:
        """Every (subject, version) whose schema has this id."""
        self.schema(schema_id)
        return [{"subject": v.subject, "version": v.version}
                for subject in sorted(self.state.subjects)
                for v in self.state.all_versions(subject)
                if v.schema_id == schema_id and (deleted or not v.deleted)]

    # -- subjects and versions -------------------------------------------------------------------

    def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        return sorted(s for s in self.state.subjects if s.startswith(prefix)
                      and (deleted or self.state.live_versions(s)))

    def _versions(self, subject: str, deleted: bool) -> list[Version]:
        check_subject(subject)
        versions = self.state.all_versions(subject) if deleted else \
            self.state.live_versions(subject)
        if not versions:
            raise SubjectNotFoundError(f"Subject {subject!r} not found.")
        return versions

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        return [v.version for v in self._versions(subject, deleted)]

    def version(self, subject: str, spec: object, deleted: bool = False) -> dict[str, Any]:
        return self._version(subject, spec, deleted).to_json()

    def _version(self, subject: str, spec: object, deleted: bool) -> Version:
        number = version_number(spec)
        versions = self._versions(subject, deleted)
        if number is None:
            return versions[-1]
        for version in versions:
            if version.version == number:
                return version
        raise VersionNotFoundError(f"Version {number} not found for subject {subject!r}.")

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Soft-delete every version (a permanent delete needs a soft delete first)."""
        check_subject(subject)
        every = self.state.all_versions(subject)
        if not every:
            raise SubjectNotFoundError(f"Subject {subject!r} not found.")
        live = [v for v in every if not v.deleted]
        if not permanent:
            if not live:
                raise SubjectSoftDeletedError(
                    f"Subject {subject!r} was soft deleted. Set permanent=true to delete "
                    f"permanently")
            self._write([schema_record(_deleted(v), new=False) for v in live])
            return [v.version for v in live]
        if live:
            raise SubjectNotSoftDeletedError(
                f"Subject {subject!r} was not deleted first before being permanently deleted")
        self._write([ids_record(self.state.max_id),
                     *((schema_key(subject, v.version), None) for v in every)])
        return [v.version for v in every]

    def delete_version(self, subject: str, spec: object, permanent: bool = False) -> int:
        """Soft-delete one version (``latest``: the newest live one); a permanent delete
        needs a soft delete first."""
        number = version_number(spec)
        # "latest" is the newest live version for a soft delete, the newest for a permanent.
        version = self._version(subject, number or "latest",
                                deleted=permanent or number is not None)
        if not permanent:
            if version.deleted:
                raise VersionSoftDeletedError(f"Subject {subject!r} Version {version.version} "
                                              f"was soft deleted. Set permanent=true to delete "
                                              f"permanently")
            self._write([schema_record(_deleted(version), new=False)])
        else:
            if not version.deleted:
                raise VersionNotSoftDeletedError(
                    f"Subject {subject!r} Version {version.version} was not deleted first "
                    f"before being permanently deleted")
            self._write([ids_record(self.state.max_id),
                         (schema_key(subject, version.version), None)])
        return version.version

    # -- compatibility ---------------------------------------------------------------------------

    def check(self, subject: str, schema: str, spec: object | None = None,
              schema_type: str | None = None, references: list | None = None) -> list[str]:
        """What breaks if ``schema`` joined ``subject``: against version ``spec`` (both
        directions the subject's level asks for), or with no ``spec`` against the versions
        the level names. Empty: compatible."""
        check_subject(subject)
        check_schema_type(schema_type, references)
        parsed = parse(schema)
        level = self.state.level(subject)
        if spec is None:
            live = self.state.live_versions(subject)
            return check_level(parsed, [(v.version, parse(v.schema)) for v in live], level)
        version = self._version(subject, spec, deleted=False)
        one = Level(level.value.replace("_TRANSITIVE", ""))
        return check_level(parsed, [(version.version, parse(version.schema))], one)

    def config(self, subject: str | None = None, default_to_global: bool = False) -> str:
        if subject is None:
            return self.state.levels.get(None, DEFAULT_LEVEL).value
        check_subject(subject)
        if subject not in self.state.levels and not default_to_global:
            raise SubjectConfigNotFoundError(
                f"Subject {subject!r} does not have subject-level compatibility configured")
        return self.state.level(subject).value

    def set_config(self, subject: str | None, level: object) -> str:
        if subject is not None:
            check_subject(subject)
        chosen = Level.of(level)
        self._write([config_record(subject, chosen)])
        return chosen.value

    def delete_config(self, subject: str | None = None) -> str:
        """Remove the subject's level (global: back to BACKWARD); returns the one it had."""
        previous = self.config(subject)
        self._write([config_record(subject, None)])
        return previous


def _deleted(version: Version) -> Version:
    return Version(version.subject, version.version, version.schema_id, version.schema,
                   version.schema_type, deleted=True)
