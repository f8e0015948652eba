"""Schema registry: REST latency of registrations and lookups, and Avro produce/consume
throughput against the same bytes produced and consumed raw.

Run from the repository root::

    .venv/bin/python benchmarks/schemas.py [--quick] [--json PATH]

``--quick`` takes about a minute and a half on this shared 2-core machine. The script prints a
Markdown table and writes JSON (default ``benchmarks/results/schemas.json``).

Setup: ``raylog.init(address="local", data_dir=<temporary directory>)`` starts an embedded
one-node cluster; the registry actor keeps ``_schemas`` on it (one replica: one broker).
The REST server (``raylog.schemas.rest.RegistryHTTPServer`` over ``raylog.schemas.client.
SchemaRegistry``, as ``raylog registry`` runs it) listens on localhost; requests go over one
keep-alive ``http.client`` connection, one at a time, so each figure is one request's time
from the client's send to its parsed answer.

Measurements, all in one run:

register    ``register_p50_ms`` / ``register_p99_ms``: ``POST /subjects/{s}/versions`` of
            a new schema under a new subject (a new id: a record written to ``_schemas``
            with acks=all and read back before the answer).
lookup      ``lookup_id_p50_ms`` / ``_p99_ms``: ``GET /schemas/ids/{id}`` (what a
            deserializer asks, once per id, as clients cache it), ids drawn at random;
            ``lookup_latest_p50_ms`` / ``_p99_ms``: ``GET /subjects/{s}/versions/latest``.
throughput  The same records (a 6-field record; Avro about 40 bytes each) produced to a
            3-partition topic with ``Producer(value_serializer=AvroSerializer(...))``
            (``produce_avro_records_per_s``) and as the bytes that serializer makes, made
            beforehand (``produce_raw_records_per_s``); read back by a ``Consumer`` with
            ``AvroDeserializer`` (``consume_avro_records_per_s``) and without
            (``consume_raw_records_per_s``). Alternated, best of the rounds. The ratios say
            what the Avro work in Python costs on each side.
spark       ``spark_records`` of the same records in another topic, read as typed columns in
            one RayDP session (1 executor, 1 core, 1 GB) by the same aggregate over every
            field (``SPARK_QUERY``): ``spark_connector_records_per_s`` through
            ``format("raylog").option("valueFormat", "avro")`` (decoded in the JVM, Avro's Java
            library) and ``spark_python_records_per_s`` through
            ``raylog.integrations.spark.read(..., value_format="avro", via="arrow")``
            (Spark's Python workers, fastavro); alternated after a warm-up round, best of
            the rounds; both must give the same answer.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import ray

import raylog
from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.client.connection import reset_default
from raylog.schemas.client import SchemaRegistry
from raylog.schemas.rest import RegistryHTTPServer
from raylog.schemas.serde import AvroDeserializer, AvroSerializer
from raylog.util.cluster_names import DATA_DIR_ENV

from common import (
    RESULTS_DIR,
    SEED,
    alternate,
    machine_info,
    markdown_table,
    result_document,
    run_benchmark,
    timed,
)

DEFAULT_JSON = RESULTS_DIR / "schemas.json"
PARTITIONS = 3
PAGE_VIEW = {"type": "record", "name": "PageView", "namespace": "bench", "fields": [
    {"name": "user", "type": "long"}, {"name": "page", "type": "string"},
    {"name": "service", "type": "string"}, {"name": "ms", "type": "int"},
    {"name": "status", "type": "int"}, {"name": "at", "type": "long"}]}


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    registrations: int
    lookups: int
    records: int
    rounds: int
    spark_records: int


QUICK = Mode("quick", registrations=200, lookups=1000, records=50_000, rounds=2,
             spark_records=200_000)
FULL = Mode("full", registrations=1000, lookups=5000, records=200_000, rounds=3,
            spark_records=1_000_000)
SPARK_QUERY = ("count(user)", "sum(ms)", "sum(length(page))", "max(service)",
               "max(status)", "max(at)")


class Rest:
    """One keep-alive connection to the REST server."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def timed(self, method: str, path: str, body: Any = None) -> float:
        data = None if body is None else json.dumps(body)
        headers = {} if data is None else {"Content-Type": "application/json"}
        start = time.perf_counter()
        self.connection.request(method, path, data, headers)
        response = self.connection.getresponse()
        answer = json.loads(response.read())
        elapsed = time.perf_counter() - start
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {answer}")
        return elapsed


def percentiles(name: str, seconds: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(seconds, n=100)
    return {f"{name}_p50_ms": 1000 * statistics.median(seconds),
            f"{name}_p99_ms": 1000 * cuts[98]}


def latencies(mode: Mode, rest: Rest) -> tuple[dict[str, float], dict[str, list[float]]]:
    register = []
    for i in range(mode.registrations):
        schema = {**PAGE_VIEW, "name": f"R{i}"}
        register.append(rest.timed("POST", f"/subjects/bench-{i}-value/versions",
                                   {"schema": json.dumps(schema)}))
    rng = random.Random(SEED)
    by_id = [rest.timed("GET", f"/schemas/ids/{rng.randint(1, mode.registrations)}")
             for _ in range(mode.lookups)]
    latest = [rest.timed("GET", f"/subjects/bench-{rng.randrange(mode.registrations)}"
                                f"-value/versions/latest") for _ in range(mode.lookups)]
    figures = {**percentiles("register", register), **percentiles("lookup_id", by_id),
               **percentiles("lookup_latest", latest)}
    return figures, {"register": register, "lookup_id": by_id, "lookup_latest": latest}


def page_views(n: int) -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    return [{"user": rng.randrange(1 << 30), "page": f"/p/{rng.randrange(10_000):05d}",
             "service": f"web-{i % 8}", "ms": rng.randrange(5000),
             "status": rng.choice((200, 200, 200, 404, 500)), "at": 1_767_225_600_000 + i}
            for i in range(n)]


def throughput(mode: Mode, registry: SchemaRegistry) -> tuple[dict[str, float], dict]:
    admin = Admin()
    topics = {name: f"bench-{name}-{os.getpid()}" for name in ("raw", "avro", "read")}
    for topic in topics.values():
        admin.create_topic(topic, PARTITIONS)
    values = page_views(mode.records)
    serializer = AvroSerializer(registry, PAGE_VIEW, topic=topics["read"])
    framed = [serializer(v) for v in values]
    with Producer() as producer:
        for data in framed:
            producer.send(topics["read"], data)
    avro_producer = Producer(value_serializer=AvroSerializer(registry, PAGE_VIEW,
                                                             topic=topics["avro"]))
    raw_producer = Producer()
    tps = [TopicPartition(topics["read"], p) for p in range(PARTITIONS)]

    def produce(producer: Producer, topic: str, items: list) -> float:
        def send_all() -> None:
            send = producer.send
            for item in items:
                send(topic, item)
            producer.flush()
        return timed(send_all)[0]

    def consume(deserializer: Any) -> float:
        with Consumer(auto_offset_reset="earliest", max_poll_records=5000,
                      value_deserializer=deserializer) as consumer:
            consumer.assign(tps)

            def read_all() -> None:
                seen = 0
                while seen < mode.records:
                    seen += len(consumer.poll(timeout_ms=30_000) or
                                _stalled(seen, mode.records))
            return timed(read_all)[0]

    seconds = alternate(mode.rounds, {
        "produce_raw": lambda: produce(raw_producer, topics["raw"], framed),
        "produce_avro": lambda: produce(avro_producer, topics["avro"], values),
        "consume_raw": lambda: consume(None),
        "consume_avro": lambda: consume(AvroDeserializer(registry)),
    })
    raw_producer.close()
    avro_producer.close()
    figures = {f"{name}_records_per_s": mode.records / min(s) for name, s in seconds.items()}
    figures["produce_avro_vs_raw"] = (figures["produce_avro_records_per_s"]
                                      / figures["produce_raw_records_per_s"])
    figures["consume_avro_vs_raw"] = (figures["consume_avro_records_per_s"]
                                      / figures["consume_raw_records_per_s"])
    figures["avro_value_bytes"] = sum(map(len, framed)) / len(framed)
    return figures, seconds


def spark_typed(mode: Mode, registry: SchemaRegistry) -> tuple[dict[str, float], dict]:
    """Typed columns in Spark: the JVM's decoding against the Python workers' (see the
    module docstring), over the same records, in one session."""
    from raylog.integrations import spark as raylog_spark

    topic = f"bench-spark-{os.getpid()}"
    Admin().create_topic(topic, PARTITIONS)
    serializer = AvroSerializer(registry, PAGE_VIEW, topic=topic)
    with Producer() as producer:
        for value in page_views(mode.spark_records):
            producer.send(topic, serializer(value))
    spark = raylog_spark.session("raylog-bench-schemas", executors=1, cores=1, memory="1GB",
                                 configs={"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    frames = {
        "spark_connector": lambda: spark.read.format("raylog").option("subscribe", topic)
        .option("valueFormat", "avro").load().select("value.*"),
        "spark_python": lambda: raylog_spark.read(spark, topic, value_format="avro",
                                                  via="arrow"),
    }
    answers: dict[str, tuple] = {}

    def step(name: str) -> Any:
        def query() -> float:
            elapsed, row = timed(lambda: frames[name]().selectExpr(*SPARK_QUERY).first())
            answers.setdefault(name, tuple(row))
            return elapsed
        return query

    try:
        seconds = alternate(mode.rounds, {name: step(name) for name in frames})
    finally:
        raylog_spark.stop()
    if answers["spark_connector"] != answers["spark_python"] or \
            answers["spark_connector"][0] != mode.spark_records:
        raise RuntimeError(f"the two paths disagree: {answers}")
    figures = {f"{name}_records_per_s": mode.spark_records / min(s)
               for name, s in seconds.items()}
    figures["spark_connector_vs_python"] = (figures["spark_connector_records_per_s"]
                                            / figures["spark_python_records_per_s"])
    return figures, seconds


def _stalled(seen: int, expected: int) -> list:
    raise RuntimeError(f"no record for 30 s after {seen:,} of {expected:,}")


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load_at_start = time.perf_counter(), os.getloadavg()
    try:
        raylog.init(address="local", data_dir=root)
        registry = SchemaRegistry()
        registry.ready()
        with RegistryHTTPServer(registry, port=0).running() as server:
            latency, latency_seconds = latencies(mode, Rest(server.server_address[1]))
        rates, rate_seconds = throughput(mode, registry)
        spark_rates, spark_seconds = spark_typed(mode, registry)
    finally:
        ray.shutdown()
        reset_default()
        os.environ.pop(DATA_DIR_ENV, None)
    return result_document(
        {**latency, **rates, **spark_rates}, {}, mode=mode.name, started=started,
        load_at_start=load_at_start, machine=machine_info(ray=ray.__version__),
        data={"description": "page views: user (long), page, service (strings), ms, status "
                             "(ints), at (long); random with a fixed seed",
              "records": mode.records, "spark_records": mode.spark_records,
              "registrations": mode.registrations,
              "lookups": mode.lookups},
        sections={"config": {"cluster": 'raylog.init(address="local"): one node, embedded',
                             "partitions": PARTITIONS, "rounds": mode.rounds,
                             "rest": "one keep-alive http.client connection, sequential",
                             "spark": "RayDP, 1 executor, 1 core, 1 GB",
                             "spark_query": list(SPARK_QUERY)},
                  "seconds": {**rate_seconds, **spark_seconds,
                              **{f"{k}_median": statistics.median(v)
                                 for k, v in latency_seconds.items()}}})


def table(result: dict[str, Any]) -> str:
    rows = [
        ("register a new schema, p50 / p99 (ms)",
         f"{result['register_p50_ms']:.2f} / {result['register_p99_ms']:.2f}"),
        ("GET /schemas/ids/{id}, p50 / p99 (ms)",
         f"{result['lookup_id_p50_ms']:.2f} / {result['lookup_id_p99_ms']:.2f}"),
        ("GET latest version, p50 / p99 (ms)",
         f"{result['lookup_latest_p50_ms']:.2f} / {result['lookup_latest_p99_ms']:.2f}"),
        ("produce raw bytes (records/s)", f"{result['produce_raw_records_per_s']:,.0f}"),
        ("produce with AvroSerializer (records/s)",
         f"{result['produce_avro_records_per_s']:,.0f}"),
        ("Avro / raw, produce", f"{result['produce_avro_vs_raw']:.2f}"),
        ("consume raw bytes (records/s)", f"{result['consume_raw_records_per_s']:,.0f}"),
        ("consume with AvroDeserializer (records/s)",
         f"{result['consume_avro_records_per_s']:,.0f}"),
        ("Avro / raw, consume", f"{result['consume_avro_vs_raw']:.2f}"),
        ("Avro value size, with its 5-byte header (bytes)", f"{result['avro_value_bytes']:.1f}"),
        ("Spark typed columns, connector valueFormat avro (records/s)",
         f"{result['spark_connector_records_per_s']:,.0f}"),
        ('Spark typed columns, Python workers via="arrow" (records/s)',
         f"{result['spark_python_records_per_s']:,.0f}"),
        ("connector / Python workers, Spark", f"{result['spark_connector_vs_python']:.2f}"),
    ]
    return markdown_table(["measurement", "value"], rows, "lr")


def headline(mode: Mode, result: dict[str, Any]) -> str:
    machine = result["machine"]
    return (f"schema registry, {mode.name} mode: {mode.registrations} registrations, "
            f"{mode.lookups} lookups of each kind, {mode.records:,} records per throughput "
            f"run, {mode.spark_records:,} per Spark query, best of {mode.rounds}; "
            f"{machine['cpu_count']} CPUs, Ray {machine['ray']}, "
            f"load {machine['load_average_1m']['start']:.1f} at start")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON, "fewer requests and records (about a "
                         "minute)", (QUICK, FULL), run, headline, table)


if __name__ == "__main__":
    sys.exit(main())
