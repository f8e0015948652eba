"""The registry's rules over an in-memory log: versions, ids, deletes, levels, replays (with
compaction), and two writers on one log."""

from __future__ import annotations

import json

import pytest

from raylog.schemas import errors
from raylog.schemas.avro import parse
from raylog.schemas.registry import MemoryLog, Registry


def user(*extra: dict) -> str:
    return json.dumps({"type": "record", "name": "User", "fields": [
        {"name": "id", "type": "long"}, *extra]}, separators=(",", ":"))


V1 = user()
V2 = user({"name": "email", "type": "string", "default": ""})
V3 = user({"name": "email", "type": "string", "default": ""},
          {"name": "age", "type": "int", "default": 0})
NO_DEFAULT = user({"name": "phone", "type": "string"})


def compacted(log: MemoryLog, drop_tombstones: bool = False) -> MemoryLog:
    """What compaction leaves: the last record of each key, at its offset."""
    last = {key: offset for offset, key, _ in log.records}
    out = MemoryLog()
    out.records = [(o, k, v) for o, k, v in log.records
                   if last[k] == o and not (drop_tombstones and v is None)]
    return out


class _OffsetLog(MemoryLog):
    """A compacted log keeps offsets: reads go by offset, appends continue after the last."""

    def __init__(self, records, next_offset):
        super().__init__()
        self.records, self.next = list(records), next_offset

    def append(self, records):
        for key, value in records:
            self.records.append((self.next, key, value))
            self.next += 1
        return self.next - 1

    def read(self, start, until):
        return [r for r in self.records if r[0] >= start and (until is None or r[0] <= until)]


def reopened(log: MemoryLog, compact: bool = False) -> Registry:
    if compact:
        shrunk = compacted(log, drop_tombstones=True)
        return Registry(_OffsetLog(shrunk.records, len(log.records)))
    return Registry(log)


def test_versions_and_ids():
    registry = Registry(MemoryLog())
    assert registry.register("users-value", V1) == {"id": 1, "version": 1}
    assert registry.register("users-value", V1) == {"id": 1, "version": 1}  # again: same
    assert registry.register("users-value", V2) == {"id": 2, "version": 2}
    # The same schema in another subject keeps its id, whitespace aside.
    spaced = json.dumps(json.loads(V1), indent=2)
    assert registry.register("audit-value", spaced) == {"id": 1, "version": 1}
    assert registry.subjects() == ["audit-value", "users-value"]
    assert registry.versions("users-value") == [1, 2]
    assert registry.version("users-value", "latest") == {
        "subject": "users-value", "version": 2, "id": 2, "schema": V2}
    assert registry.version("users-value", 1)["schema"] == V1
    assert registry.schema(2) == {"schema": V2}
    assert registry.lookup("users-value", spaced)["version"] == 1
    assert registry.versions_of_id(1) == [{"subject": "audit-value", "version": 1},
                                          {"subject": "users-value", "version": 1}]


def test_incompatible_schemas_are_refused_and_nothing_is_written():
    log = MemoryLog()
    registry = Registry(log)
    registry.register("s", V1)
    before = len(log.records)
    with pytest.raises(errors.IncompatibleSchemaError) as refused:
        registry.register("s", NO_DEFAULT)
    assert refused.value.error_code == 409
    assert "/phone" in str(refused.value) and "version 1" in str(refused.value)
    for bad, error in [("{", errors.InvalidSchemaError), ("", errors.InvalidSchemaError)]:
        with pytest.raises(error):
            registry.register("s", bad)
    with pytest.raises(errors.InvalidSubjectError):
        registry.register("", V1)
    with pytest.raises(errors.InvalidSchemaError, match="not supported"):
        registry.register("s", V1, schema_type="PROTOBUF")
    with pytest.raises(errors.InvalidCompatibilityLevelError):
        registry.set_config("s", "MOSTLY")
    assert len(log.records) == before
    registry.set_config("s", "FORWARD")
    assert registry.register("s", NO_DEFAULT)["version"] == 2


def test_check_against_a_version_or_all():
    registry = Registry(MemoryLog())
    registry.register("s", V1)
    assert registry.check("s", V2, "latest") == []
    assert registry.check("s", NO_DEFAULT, 1) != []
    assert registry.check("s", NO_DEFAULT) != []
    assert registry.check("new-subject", NO_DEFAULT) == []
    with pytest.raises(errors.SubjectNotFoundError):
        registry.check("new-subject", V1, "latest")
    with pytest.raises(errors.InvalidVersionError):
        registry.check("s", V1, 0)


def test_configs():
    registry = Registry(MemoryLog())
    assert registry.config() == "BACKWARD"
    with pytest.raises(errors.SubjectConfigNotFoundError):
        registry.config("s")
    assert registry.config("s", default_to_global=True) == "BACKWARD"
    assert registry.set_config(None, "full") == "FULL"
    assert registry.set_config("s", "NONE") == "NONE"
    assert registry.config("s") == "NONE"
    assert registry.delete_config("s") == "NONE"
    assert registry.config("s", default_to_global=True) == "FULL"
    assert registry.delete_config() == "FULL"
    assert registry.config() == "BACKWARD"


def test_soft_and_permanent_deletes():
    registry = Registry(MemoryLog())
    registry.register("s", V1)
    registry.register("s", V2)
    registry.register("s", V3)
    with pytest.raises(errors.VersionNotSoftDeletedError):
        registry.delete_version("s", 2, permanent=True)
    assert registry.delete_version("s", 2) == 2
    with pytest.raises(errors.VersionSoftDeletedError):
        registry.delete_version("s", 2)
    assert registry.versions("s") == [1, 3]
    assert registry.versions("s", deleted=True) == [1, 2, 3]
    assert registry.schema(2) == {"schema": V2}  # a soft-deleted version's id still reads
    with pytest.raises(errors.VersionNotFoundError):
        registry.version("s", 2)
    assert registry.version("s", 2, deleted=True)["id"] == 2
    assert registry.delete_version("s", 2, permanent=True) == 2
    with pytest.raises(errors.SchemaNotFoundError):
        registry.schema(2)
    with pytest.raises(errors.SubjectNotSoftDeletedError):
        registry.delete_subject("s", permanent=True)
    assert registry.delete_subject("s") == [1, 3]
    with pytest.raises(errors.SubjectSoftDeletedError):
        registry.delete_subject("s")
    assert registry.subjects() == [] and registry.subjects(deleted=True) == ["s"]
    with pytest.raises(errors.SubjectNotFoundError):
        registry.versions("s")
    assert registry.delete_subject("s", permanent=True) == [1, 3]
    assert registry.subjects(deleted=True) == []
    with pytest.raises(errors.SubjectNotFoundError):
        registry.delete_subject("s")


@pytest.mark.parametrize("compact", [False, True], ids=["replayed", "compacted"])
def test_a_replay_rebuilds_the_same_registry_and_never_reuses_an_id(compact):
    log = MemoryLog()
    registry = Registry(log)
    registry.register("a", V1)
    registry.register("a", V2)
    registry.register("b", V3)
    registry.set_config("b", "NONE")
    registry.delete_version("a", 2)
    registry.delete_subject("b")
    registry.delete_subject("b", permanent=True)  # id 3 is named nowhere now
    again = reopened(log, compact)
    assert again.subjects(deleted=True) == ["a"]
    assert again.version("a", 2, deleted=True)["id"] == 2
    assert again.config("b") == "NONE"
    assert again.state.max_id == 3
    assert again.register("c", V3) == {"id": 4, "version": 1}  # not 3 again


def test_two_writers_on_one_log_never_give_one_id_to_two_schemas():
    log = MemoryLog()
    first = Registry(log)
    first.register("s", V1)
    second = Registry(log)  # both have seen version 1
    assert first.register("s", V2) == {"id": 2, "version": 2}
    # The second writer thinks the next id is 2 and the next version 2: its record loses,
    # it repairs the key and registers again on the newer state.
    other_schema = user({"name": "nick", "type": "string", "default": ""})
    assert second.register("s", other_schema) == {"id": 3, "version": 3}
    first.catch_up()
    for registry in (first, second, Registry(log), reopened(log, compact=True)):
        assert registry.schema(2) == {"schema": V2}
        assert registry.version("s", 2)["schema"] == V2
        assert registry.version("s", 3)["schema"] == other_schema
    # The losing record's key was written again with the winner's value, so a compacted
    # log keeps the winner.
    assert not Registry(log).state.void


def test_a_void_record_left_behind_is_repaired_on_load():
    log = MemoryLog()
    Registry(log).register("s", V1)
    # A writer that died right after losing: its record names id 1 for another schema.
    log.append([(b'["schema","t",1]', json.dumps(
        {"id": 1, "schema": V2, "schemaType": "AVRO", "deleted": False, "new": True}).encode())])
    loaded = Registry(log)
    assert loaded.subjects() == ["s"] and not loaded.state.void
    assert log.records[-1][2] is None  # the key's true value (none) written after it


def scrambled(text: str) -> str:
    """The same schema as other JSON text: indented, Avro's keys in reverse order."""
    def reverse(node):
        if isinstance(node, dict):
            return {k: reverse(node[k]) for k in reversed(list(node))}
        return [reverse(item) for item in node] if isinstance(node, list) else node
    return json.dumps(reverse(json.loads(text)), indent=4)


# A double with an integer default and an empty doc: Confluent's normalizer writes the
# default as 1.0 and drops the doc; without normalize=true they make another schema.
SCORED = user({"name": "score", "type": "double", "default": 1.0})
SCORED_SPELLED = json.dumps({**json.loads(user({"name": "score", "type": "double",
                                                "default": 1})), "doc": ""})


def test_the_same_schema_as_other_json_text_keeps_its_id_and_version():
    log = MemoryLog()
    registry = Registry(log)
    assert registry.register("s", V1) == {"id": 1, "version": 1}
    written = len(log.records)
    assert registry.register("s", scrambled(V1)) == {"id": 1, "version": 1}
    assert len(log.records) == written  # nothing new
    assert registry.lookup("s", scrambled(V1))["version"] == 1
    assert registry.register("s", V2) == {"id": 2, "version": 2}  # not version 3
    assert registry.register("t", scrambled(V2)) == {"id": 2, "version": 1}
    # Properties and aliases in another order: another text, the same schema.
    tagged = json.dumps({**json.loads(V3), "x-a": 1, "x-b": 2, "aliases": ["P", "Q"]})
    retagged = json.dumps({**json.loads(V3), "aliases": ["Q", "P"], "x-b": 2, "x-a": 1})
    assert registry.register("s", tagged) == {"id": 3, "version": 3}
    assert registry.register("u", retagged) == {"id": 3, "version": 1}
    assert registry.schema(3)["schema"] == parse(tagged).text  # an id keeps its first text
    # A doc is part of the schema.
    documented = json.dumps({**json.loads(V3), "doc": "a user"})
    assert registry.register("s", documented) == {"id": 4, "version": 4}


def test_normalize_stores_and_compares_the_normalized_schema():
    registry = Registry(MemoryLog())
    assert registry.register("s", SCORED) == {"id": 1, "version": 1}
    with pytest.raises(errors.SchemaNotFoundError):
        registry.lookup("s", SCORED_SPELLED)
    assert registry.lookup("s", SCORED_SPELLED, normalize=True)["version"] == 1
    assert registry.register("s", SCORED_SPELLED, normalize=True) == {"id": 1, "version": 1}
    # Without normalize=true the empty doc and the 1 for 1.0 make another schema.
    assert registry.register("s", SCORED_SPELLED) == {"id": 2, "version": 2}
    assert registry.schema(2)["schema"] == parse(SCORED_SPELLED).text
    # A new schema registered with normalize=true is stored normalized.
    other = json.dumps({**json.loads(SCORED_SPELLED), "name": "Other"})
    assert registry.register("t", other, normalize=True) == {"id": 3, "version": 1}
    assert registry.schema(3)["schema"] == parse(other).normalized
    assert registry.lookup("t", other, normalize=True)["id"] == 3
    with pytest.raises(errors.SchemaNotFoundError):
        registry.lookup("t", other)  # stored normalized: the empty doc is gone


@pytest.mark.parametrize("compact", [False, True], ids=["replayed", "compacted"])
def test_a_replay_compares_schemas_as_before(compact):
    log = MemoryLog()
    registry = Registry(log)
    registry.register("s", V1)
    registry.register("s", SCORED_SPELLED, normalize=True)
    registry.register("t", V2)
    registry.delete_subject("t")  # soft-deleted: its id stays the schema's
    again = reopened(log, compact)
    written = len(again.log.records)
    assert again.register("s", scrambled(V1)) == {"id": 1, "version": 1}
    assert again.register("s", SCORED, normalize=True) == {"id": 2, "version": 2}
    assert again.lookup("s", SCORED_SPELLED, normalize=True)["version"] == 2
    assert len(again.log.records) == written
    assert again.register("u", scrambled(V2)) == {"id": 3, "version": 1}


def test_a_log_that_holds_one_schema_under_two_ids_replays_unchanged():
    """Before schemas were compared parsed, the same schema sent as other text got another
    version and id. Such a log replays as it is (no record is void, no id changes); a new
    registration of the schema is given its lowest id and writes nothing."""
    log = MemoryLog()
    # What the registry stored then: the text minified, in the order it was sent.
    for version, text in ((1, V1), (2, json.dumps(json.loads(scrambled(V1)),
                                                  separators=(",", ":")))):
        log.append([(f'["schema","s",{version}]'.encode(), json.dumps(
            {"id": version, "schema": text, "schemaType": "AVRO", "deleted": False,
             "new": True}).encode())])
    registry = Registry(log)
    assert not registry.state.void and len(log.records) == 2
    assert [registry.version("s", v)["id"] for v in (1, 2)] == [1, 2]
    assert registry.register("s", scrambled(V1)) == {"id": 1, "version": 1}
    assert registry.lookup("s", V1)["version"] == 1
    assert registry.register("t", scrambled(V1)) == {"id": 1, "version": 1}
    assert registry.register("s", V2) == {"id": 3, "version": 3}
