"""The schema registry on a cluster: Confluent's client over the REST API, a registry actor
restarted (ids unchanged), Avro through Producer and Consumer, typed Ray Data columns, the
``raylog schemas`` commands, and ``raylog registry --embedded`` restarted on its data."""

from __future__ import annotations

import io
import json

import pytest
import ray
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.cli import main
from raylog.integrations.ray_data import read_topic
from raylog.schemas.client import SchemaRegistry
from raylog.schemas.errors import SubjectNotFoundError
from raylog.schemas.serde import AvroDeserializer, AvroSerializer
from raylog.util.cluster_names import NAMESPACE, REGISTRY_NAME
from tests.integration.conftest import restart_controller, wait_for
from tests.unit.registry_server import registry_server

USER = {"type": "record", "name": "User", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
USER_V2 = {**USER, "fields": [*USER["fields"],
                              {"name": "country", "type": "string", "default": "NL"}]}
NO_DEFAULT = {**USER, "fields": [*USER["fields"], {"name": "phone", "type": "string"}]}


def test_confluents_client_and_a_restarted_registry_actor(ray_cluster, topic_name):
    subject = f"{topic_name}-value"
    with registry_server(SchemaRegistry()) as server:
        client = SchemaRegistryClient({"url": server.url})
        first = client.register_schema(subject, Schema(json.dumps(USER), "AVRO"))
        second = client.register_schema(subject, Schema(json.dumps(USER_V2), "AVRO"))
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema(subject, Schema(json.dumps(NO_DEFAULT), "AVRO"))
        assert refused.value.error_code == 409 and "/phone" in refused.value.error_message
        assert client.get_versions(subject) == [1, 2]
        # The actor is killed; Ray restarts it, and it replays _schemas.
        ray.kill(ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE), no_restart=False)
        fresh = SchemaRegistryClient({"url": server.url})  # no cache
        latest = wait_for(lambda: fresh.get_latest_version(subject), timeout=60,
                          what="the restarted registry")
        assert (latest.version, latest.schema_id) == (2, second)
        assert json.loads(fresh.get_schema(first).schema_str) == USER
        # The replayed registry compares schemas parsed: other JSON text, the same version.
        spelled = Schema(json.dumps({k: USER[k] for k in reversed(list(USER))}, indent=4),
                         "AVRO")
        same = fresh.register_schema_full_response(subject, spelled)
        assert (same.schema_id, same.version) == (first, 1)
        # normalize=true: an empty doc is what Confluent's normalizer removes.
        blank_doc = Schema(json.dumps({**USER_V2, "doc": ""}), "AVRO")
        found = SchemaRegistryClient({"url": server.url}).lookup_schema(
            subject, blank_doc, normalize_schemas=True)
        assert (found.schema_id, found.version) == (second, 2)
        same = SchemaRegistryClient({"url": server.url}).register_schema_full_response(
            subject, blank_doc, normalize_schemas=True)
        assert (same.schema_id, same.version) == (second, 2)
        assert fresh.get_versions(subject) == [1, 2]
        third = fresh.register_schema(f"{subject}-other", Schema(json.dumps(NO_DEFAULT), "AVRO"))
        assert third > second  # ids are never handed out twice
        restart_controller()  # the registry needs it only to find _schemas' leader
        fourth = fresh.register_schema(f"{subject}-more", Schema(json.dumps(
            {"type": "record", "name": "More", "fields": []}), "AVRO"))
        assert fourth == third + 1
        assert fresh.get_latest_version(subject).schema_id == second
    described = Admin().describe_topic("_schemas")
    assert described["configs"]["cleanup_policy"] == "compact"
    assert described["replication_factor"] == 3


def test_avro_records_and_typed_ray_data_columns(ray_cluster, topic_name):
    Admin().create_topic(topic_name, partitions=2)
    registry = SchemaRegistry()
    old = AvroSerializer(registry, USER, topic=topic_name)
    new = AvroSerializer(registry, USER_V2, topic=topic_name)
    with Producer(value_serializer=old) as producer:
        for i in range(20):
            producer.send(topic_name, {"id": i, "name": f"u{i}"}, key=b"k%d" % i)
    with Producer(value_serializer=new) as producer:
        for i in range(20, 30):
            producer.send(topic_name, {"id": i, "name": f"u{i}", "country": "FR"},
                          key=b"k%d" % i)
    tps = [TopicPartition(topic_name, p) for p in range(2)]
    with Consumer(auto_offset_reset="earliest",
                  value_deserializer=AvroDeserializer(registry, USER_V2)) as consumer:
        consumer.assign(tps)
        seen = []
        wait_for(lambda: seen.extend(consumer.poll(timeout_ms=200)) or len(seen) >= 30,
                 what="30 Avro records")
    by_id = {r.value["id"]: r.value for r in seen}
    assert by_id[3] == {"id": 3, "name": "u3", "country": "NL"}  # v1 read as v2
    assert by_id[25]["country"] == "FR"

    ds = read_topic(topic_name, value_format="avro")
    table = ds.to_pandas()
    assert sorted(table["id"]) == list(range(30))
    assert list(ds.schema().names[:3]) == ["id", "name", "country"]
    assert {"key", "partition", "offset"} <= set(ds.schema().names)
    assert (table["country"] == "NL").sum() == 20
    nothing = read_topic(topic_name, value_format="avro", end_offset="earliest")
    assert nothing.count() == 0  # and typed all the same:
    assert (nothing.schema().names, nothing.schema().types) == (ds.schema().names,
                                                                 ds.schema().types)
    as_v1 = read_topic(topic_name, value_format="avro", value_schema=USER).take_all()
    assert {"id", "name"} <= set(as_v1[0]) and "country" not in as_v1[0]


def test_typed_spark_columns(ray_cluster, spark, topic_name):
    """valueFormat avro in the connector: v1 and v2 records read with the latest (v2) as
    reader, v1's showing v2's default; a tombstone a null value; a value not in the wire
    format failing the task (or null); streaming; raylog.integrations.spark.read over it."""
    from raylog.integrations import spark as raylog_spark

    Admin().create_topic(topic_name, partitions=2)
    registry = SchemaRegistry()
    with Producer(value_serializer=AvroSerializer(registry, USER, topic=topic_name)) as old:
        for i in range(5):
            old.send(topic_name, {"id": i, "name": f"u{i}"}, partition=i % 2)
    with Producer(value_serializer=AvroSerializer(registry, USER_V2, topic=topic_name)) as new:
        for i in range(5, 8):
            new.send(topic_name, {"id": i, "name": f"u{i}", "country": "FR"}, partition=i % 2)
        new.send(topic_name, None, key=b"gone", partition=0)
    def reader():  # a DataFrameReader keeps the options set on it: a fresh one each time
        return spark.read.format("raylog").option("subscribe", topic_name) \
            .option("valueFormat", "avro")

    frame = reader().load()
    assert frame.schema["value"].dataType.simpleString() == \
        "struct<id:bigint,name:string,country:string>"
    rows = frame.select("value.id", "value.country", "key").orderBy("offset", "partition") \
        .collect()
    assert sorted((r.id, r.country) for r in rows if r.id is not None) == \
        [(i, "NL") for i in range(5)] + [(i, "FR") for i in range(5, 8)]
    assert [r.key for r in rows if r.id is None] == [b"gone"]
    as_v1 = reader().option("valueSchemaVersion", "1").load()
    assert as_v1.schema["value"].dataType.simpleString() == "struct<id:bigint,name:string>"
    assert as_v1.where("value.name = 'u6'").count() == 1
    # A query that does not touch value decodes none: value is pruned from the scan.
    plan = frame.select("partition", "offset")._jdf.queryExecution().executedPlan().toString()
    assert "struct<partition:int,offset:bigint>" in plan

    stream = spark.readStream.format("raylog").option("subscribe", topic_name) \
        .option("startingOffsets", "earliest").option("valueFormat", "avro").load() \
        .select("value.*").writeStream.format("memory").queryName(f"avro_{topic_name[2:]}") \
        .trigger(availableNow=True).start()
    stream.awaitTermination(60)
    streamed = spark.sql(f"select id, country from avro_{topic_name[2:]} where id is not null")
    assert sorted(tuple(r) for r in streamed.collect()) == \
        [(i, "NL") for i in range(5)] + [(i, "FR") for i in range(5, 8)]

    with Producer() as raw:
        raw.send(topic_name, b"not avro", partition=1).result(30)
    with pytest.raises(Exception, match=f"{topic_name}-1 at offset 4: the value is not in"):
        reader().load().select("value.id").collect()
    tolerant = reader().option("valueFormatErrors", "null").load()
    assert tolerant.where("value is null").count() == 2  # the tombstone and b"not avro"

    typed = raylog_spark.read(spark, topic_name, value_format="avro", ending_offsets={
        TopicPartition(topic_name, 0): 5, TopicPartition(topic_name, 1): 4})
    types = dict(typed.dtypes)
    assert (types["id"], types["name"], types["country"]) == ("bigint", "string", "string")
    assert typed.columns[:3] == ["id", "name", "country"] and "headers" in types
    assert [(r["id"], r["country"]) for r in typed.orderBy("id").collect()] == \
        [(None, None)] + [(i, "NL") for i in range(5)] + [(i, "FR") for i in range(5, 8)]
    Admin().create_topic(f"{topic_name}-bare", partitions=1)
    with pytest.raises(SubjectNotFoundError, match=f"{topic_name}-bare-value"):
        raylog_spark.read(spark, f"{topic_name}-bare", value_format="avro")
    fallback = raylog_spark.read(spark, topic_name, value_format="avro", via="arrow",
                                 value_schema=USER, ending_offsets={
                                     TopicPartition(topic_name, 0): 5,
                                     TopicPartition(topic_name, 1): 4})
    assert sorted(r["id"] for r in fallback.collect() if r["id"] is not None) == list(range(8))


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_the_schemas_commands(ray_cluster, topic_name, tmp_path):
    subject = f"{topic_name}-value"
    for name, schema in (("v1", USER), ("v2", USER_V2), ("bad", NO_DEFAULT)):
        (tmp_path / f"{name}.avsc").write_text(json.dumps(schema, indent=2))
    code, out = run("schemas", "register", subject, str(tmp_path / "v1.avsc"))
    assert code == 0 and f"registered {subject} version 1 id " in out
    assert run("schemas", "check", subject, str(tmp_path / "v2.avsc")) == (0, "compatible\n")
    code, out = run("schemas", "check", subject, str(tmp_path / "bad.avsc"))
    assert code == 1 and "incompatible" in out and "/phone" in out
    assert run("schemas", "register", subject, str(tmp_path / "v2.avsc"))[0] == 0
    code, out = run("schemas", "list", "--json")
    assert {"subject": subject, "version": 2} in [
        {k: row[k] for k in ("subject", "version")} for row in json.loads(out)]
    code, out = run("schemas", "get", subject, "--version", "1")
    assert code == 0 and '"name": "User"' in out and "version 1" in out
    assert run("schemas", "config", subject, "--set", "forward") == (0, f"{subject}: FORWARD\n")
    assert run("schemas", "register", subject, str(tmp_path / "bad.avsc"))[0] == 0
    assert run("schemas", "delete", subject, "--version", "3")[1] == \
        f"soft-deleted {subject} versions 3\n"
    assert run("schemas", "delete", subject) == (0, f"soft-deleted {subject} versions 1, 2\n")
    assert run("schemas", "get", subject)[0] == 1
    assert run("schemas", "register", subject, str(tmp_path / "nope.avsc"))[0] == 1


@pytest.fixture
def registry_restart(scenarios) -> dict:
    """``raylog registry --embedded`` stopped and started again on its data, run early
    (tests/integration/registry_scenario.py): what it saw."""
    return scenarios.result("registry-restart")


def test_an_embedded_registry_keeps_its_ids_across_a_restart(registry_restart):
    seen = registry_restart
    ids = seen["ids"]
    assert seen["deleted_versions"] == [1]
    assert seen["first_stop"] == 0
    assert any("2 subjects, highest id 3" in line for line in seen["second_lines"])
    assert seen["version_ids"] == ids[:2]
    assert seen["subjects"] == ["a-value"]
    assert seen["deleted_schema"] == NO_DEFAULT
    assert seen["fresh_id"] == 4
    assert seen["second_stop"] == 0
