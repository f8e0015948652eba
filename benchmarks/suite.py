"""The benchmark suite: raylog's throughput and latency next to Redis Streams and Ray's queue.

Run from the repository root (or as ``raylog bench``)::

    .venv/bin/python benchmarks/suite.py [--quick] [--out DIR] [--publish]

``--quick`` takes about two minutes on this shared 2-core machine without Kafka, about five
with it (Kafka's rounds, its 3 nodes and a Spark session; it must stay under six; the
listener's and the limits' rounds add about 50 s of that, added up from their rounds' seconds
in a run); the full
run (more records, rounds and curve points) about twice that. It writes ``results.json``,
``results.md`` (Markdown tables) and ``throughput.png``, ``latency.png``, ``curve.png`` into
DIR (default ``benchmarks/results/suite``); ``--publish`` also regenerates
``benchmarks/RESULTS.md``, its plots in ``benchmarks/plots/`` and the README's benchmark
section from this run.

Two clusters, one after the other, each started and stopped by the suite:

one node   ``raylog.init(address="local")``: an embedded single-node Ray cluster whose node
           is a broker (what a user gets on one machine). Topics of 6 partitions,
           replication factor 1, ``retention.ms=-1``. Measured here, rounds alternated so
           that raylog and its peers share the machine's load alike:
           - produce: one producer process (a Ray actor) ``send``s each 100-byte value, then
             ``flush``es (acks=1, the defaults otherwise); ``send_batch`` of an Arrow table
             from the driver; Redis XADD pipelined; the queue's ``put_nowait_batch``.
           - consume: one consumer process reading a pre-filled topic from the start, a
             group of three reading it together (``groups.py``'s members); Redis XRANGE;
             the queue's ``get_nowait_batch``.
           - end-to-end latency at a fixed offered load, ``linger_ms=0`` and the default;
           - the curve: each ``linger_ms`` and ``batch_size`` point's unthrottled throughput
             and its latency at a fixed offered load.
3 brokers  a ``ray.cluster_utils.Cluster`` (a head and 3 broker nodes on this machine): 100-byte
           and 1 KB values, 1 and 3 producer processes, replication factor 1 with acks=1 and
           3 with acks=all (``min.insync.replicas=2``), and one cell (100 B, 1 producer) of
           replication factor 3 with acks=all to a topic with ``flush.messages=1`` (every
           replica fsyncs each append before it counts), all cells alternated round by round.

Apache Kafka (kafka_peer.py, suite_kafka.py) runs beside raylog when Java and Maven (or its
cached jars) are here: one combined broker+controller next to the single node, alternated
round by round with raylog's produce and consume and measured at the same offered latency
load, then Spark (``format("kafka")`` against ``format("raylog")``, one RayDP session) and
Ray Data (``read_kafka`` against ``read_topic``) over the same ``analytics_records`` records
on both; and 3 nodes next to the 3 brokers, one cell of rf 3 acks=all alternated with the
matrix. Its ratios are ``vs_kafka_*`` in results.json. Without Java or Maven the suite says
so and runs without Kafka.

raylog's Kafka listener (``raylog gateway`` in its own process, gateway.py's ``Gateway``)
runs while Kafka does: confluent-kafka's produce and consume rounds run against it too,
alternated with the others, beside confluent-kafka -> Kafka and raylog's own clients
(``vs_kafka_listener_*``: listener / Kafka).

The machine's limits beside them (issue 25): ``send_batch`` of the same Arrow table
uncompressed, to a topic of its own; ``lz4`` alone compressing the batches ``send_batch``
would compress, on one core (``vs_lz4_limit``: send_batch's rate over it); writing the
uncompressed batches' streams into a new file on the brokers' disk, one core, no fsync, as a
log's append does (``vs_page_cache_limit``: uncompressed send_batch's rate over it); these
alternated with the produce rounds; an empty async Ray actor call's round trip, right after
the latency runs (``vs_actor_call_p50``: e2e p50 at ``linger_ms=0`` over the call's p50).

Every figure is the best of its timed rounds after one warm-up round; the JSON keeps every
round's seconds. Checks outside the timed regions: each produce round grew its topic by
exactly the records sent; each consume round read exactly the topic's records of 100 bytes;
the queue gave back what was put; Redis read back the records it was given; each latency run
received every record sent.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite_report import headline_figures, latency_summary, targets_report, write_results

from common import RESULTS_DIR, Timing, alternate, machine_info

if TYPE_CHECKING:
    from raylog.client.producer import ProducerConfig

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = RESULTS_DIR / "suite"
PARTITIONS = 6
KEEP = {"retention.ms": -1}
# The 3 brokers' topics: name -> (replication factor, configs).
KAFKA_RF3 = "kafka-100B-1p-rf3"   # the matrix's step of Kafka's 3 nodes
MATRIX_TOPICS = {
    "rf1": (1, KEEP),
    "rf3": (3, {**KEEP, "min.insync.replicas": 2}),
    "rf3fsync": (3, {**KEEP, "min.insync.replicas": 2, "flush.messages": 1}),
}


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    records: int            # per produce round, one producer, 100 B
    arrow_records: int      # per send_batch round
    peer_records: int       # per Redis / queue round (a multiple of 1,000)
    consume_records: int    # in the pre-filled consume topic
    rounds: int             # timed rounds, after one warm-up round
    latency_rate: int       # records/s offered in the latency runs
    latency_seconds: float
    curve_linger_ms: tuple[int, ...]
    curve_batch_sizes: tuple[int, ...]
    curve_records: int      # per unthrottled curve run
    curve_rate: int         # records/s offered for the curve's latency
    curve_seconds: float
    matrix_records: int     # per producer per round, 100 B (a tenth of that for 1 KB)
    matrix_rounds: int
    analytics_records: int  # Spark and Ray Data on raylog and on Kafka (when Kafka runs)


KIB = 1024
ACTOR_CALLS = 2_000     # empty actor calls timed, one at a time, beside the latency runs
QUICK = Mode("quick", records=1_000_000, arrow_records=2_000_000, peer_records=400_000,
             consume_records=1_000_000, rounds=3, latency_rate=10_000, latency_seconds=4,
             curve_linger_ms=(0, 5, 50), curve_batch_sizes=(16 * KIB, 256 * KIB, 4096 * KIB),
             curve_records=300_000, curve_rate=50_000, curve_seconds=1.5,
             matrix_records=250_000, matrix_rounds=1, analytics_records=500_000)
FULL = Mode("full", records=3_000_000, arrow_records=6_000_000, peer_records=1_000_000,
            consume_records=3_000_000, rounds=3, latency_rate=10_000, latency_seconds=15,
            curve_linger_ms=(0, 1, 5, 20, 50, 100),
            curve_batch_sizes=(16 * KIB, 64 * KIB, 256 * KIB, 1024 * KIB, 4096 * KIB,
                               8192 * KIB),  # 8 MiB: a topic's max.message.bytes
            curve_records=1_000_000, curve_rate=50_000, curve_seconds=4,
            matrix_records=600_000, matrix_rounds=3, analytics_records=2_000_000)


class Steps:
    """The suite's progress bar: one step per workload."""

    def __init__(self, total: int) -> None:
        from raylog.util.progress import progress

        self.bar = progress(total, "benchmark suite", "steps")

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        print(f"-- {what}", file=sys.stderr, flush=True)
        yield
        self.bar.update()


def best_rates(seconds: dict[str, list[float]], amounts: dict[str, int]) -> dict[str, float]:
    """The best rate of each step that ran (``alternate``'s seconds), over its amount."""
    return {name: Timing(amounts[name], runs).best_rate for name, runs in seconds.items()}


# -- the single node: raylog and its peers -----------------------------------------------------

def single_node(mode: Mode, root: Path, steps: Steps) -> dict[str, Any]:
    import pyarrow as pa
    import ray
    from groups import ConsumeGroups
    from kafka_peer import kafka_or_none
    from produce_consume import (
        CONSUMER_SETTINGS,
        QUEUE_BATCH,
        Topic,
        consume_all,
        produce_table,
        queue_get,
        queue_put,
    )
    from ray.util.queue import Queue
    from suite_kafka import kafka_consume, kafka_produce, producer, raylog_listener
    from suite_peers import redis_consume, redis_info, redis_or_none, redis_produce
    from suite_raylog import (
        compress_all,
        make_values,
        produce_round,
        start_workers,
        stop_workers,
        uncompressed_payloads,
        write_fresh,
    )

    import raylog
    from raylog import Consumer, Producer
    from raylog.client.connection import reset_default
    from raylog.kafka.records import compiled
    from raylog.records.append import compiled as append_compiled
    from raylog.util.cluster_names import DATA_DIR_ENV

    from common import binary_array, generate_values, input_frozen, split_values, timed

    out: dict[str, Any] = {}
    try:
        cluster = raylog.init(address="local", data_dir=root / "single")
        node = ray.get_runtime_context().get_node_id()
        queue = Queue(maxsize=0, actor_options={"num_cpus": 0})
        workers = start_workers(1, node)
        # raylog's Kafka listener runs while Kafka does: confluent-kafka against both
        with redis_or_none() as (redis, missing), \
                kafka_or_none(1) as (kafka, kafka_missing), \
                (contextlib.nullcontext() if kafka is None else raylog_listener(
                    ray.get_runtime_context().gcs_address)) as listener, \
                input_frozen():
            out["redis"] = redis_info(redis, missing)
            out["kafka"] = {"available": False, "reason": kafka_missing} if kafka is None \
                else {"available": True, **kafka.settings,
                      "raylog_listener": listener_note(compiled())}
            with steps.step("producing: raylog send and send_batch (LZ4 and uncompressed), "
                            "lz4 alone, Redis XADD, Ray queue"):
                peer_values = make_values(mode.peer_records, 100, seed=1)
                chunks = [peer_values[i:i + QUEUE_BATCH]
                          for i in range(0, len(peer_values), QUEUE_BATCH)]
                table = pa.table({"value": binary_array(generate_values(mode.arrow_records))})
                payloads = uncompressed_payloads(table, PARTITIONS)  # what LZ4 compresses
                ray.get(workers[0].prepare.remote(mode.records, 100, 0))
                produced, arrowed = Topic(cluster, "produce"), Topic(cluster, "arrow")
                raw = Topic(cluster, "arrow-uncompressed")
                cpu: list[float] = []
                with Producer() as arrow_producer, \
                        Producer(compression_type="none") as raw_producer:
                    def raylog_send() -> float:
                        before = produced.end_offsets()
                        run = produce_round(workers, "produce", 100, {})
                        produced.check_grew(before, mode.records)
                        cpu.append(run["cpu_seconds"])
                        return run["seconds"]

                    def send_batch(client: Producer, topic: Topic) -> Callable[[], float]:
                        def run() -> float:
                            before = topic.end_offsets()
                            seconds, _ = timed(lambda: produce_table(client, topic.name, table))
                            topic.check_grew(before, mode.arrow_records)
                            return seconds
                        return run

                    produce_steps: dict[str, Callable[[], float]] = {
                        "raylog": raylog_send,
                        "raylog_arrow": send_batch(arrow_producer, arrowed),
                        "raylog_arrow_uncompressed": send_batch(raw_producer, raw),
                        "lz4_alone": lambda: timed(lambda: compress_all(payloads))[0],
                        "page_cache_write": lambda: timed(lambda: write_fresh(payloads,
                                                                              root))[0],
                        "queue": lambda: timed(lambda: queue_put(queue, chunks))[0]}
                    if redis is not None:
                        produce_steps["redis"] = \
                            lambda: timed(lambda: redis_produce(redis, peer_values))[0]
                    kafka_cpu: dict[str, list[float]] = {}
                    if kafka is not None:  # the raylog worker's values: seed 0
                        produce_steps |= kafka_produce_steps(
                            kafka.bootstrap, make_values(mode.records, 100, seed=0),
                            listener, kafka, kafka_cpu)
                    seconds = alternate(mode.rounds, produce_steps)
                    # the confluent-kafka clients go now, not after Kafka and the listener
                    # stopped (they would try to reconnect until then)
                    produce_steps.clear()
                rates = best_rates(seconds, {"raylog": mode.records,
                                             "raylog_arrow": mode.arrow_records,
                                             "raylog_arrow_uncompressed": mode.arrow_records,
                                             "lz4_alone": mode.arrow_records,
                                             "page_cache_write": mode.arrow_records,
                                             "queue": mode.peer_records,
                                             "redis": mode.peer_records,
                                             "kafka": mode.records,
                                             "kafka_listener": mode.records})
                out["produce_seconds"] = seconds
                out["produce_records_per_s"] = rates["raylog"]
                out["produce_records_per_cpu_s"] = mode.records / min(cpu[1:])
                # Whether send was the C call (raylog/records/_append.c built) or Python's.
                out["produce_send_compiled"] = append_compiled()
                out["produce_arrow_records_per_s"] = rates["raylog_arrow"]
                out["produce_arrow_uncompressed_records_per_s"] = \
                    rates["raylog_arrow_uncompressed"]
                out["lz4_compress_records_per_s"] = rates["lz4_alone"]
                out["page_cache_write_records_per_s"] = rates["page_cache_write"]
                out["queue_produce_records_per_s"] = rates["queue"]
                out["redis_produce_records_per_s"] = rates.get("redis")
                out["kafka_produce_records_per_s"] = rates.get("kafka")
                out["kafka_produce_records_per_cpu_s"] = (
                    mode.records / min(kafka_cpu["produce"][1:]) if kafka is not None else None)
                out["kafka_listener_produce_records_per_s"] = rates.get("kafka_listener")

            with steps.step("consuming: one raylog consumer and a group of 3, Redis XRANGE, "
                            "Ray queue"):
                consume_values = generate_values(mode.consume_records, seed=2)
                groups = ConsumeGroups(cluster, consume_values,
                                       single=False)  # one consumer reads in the driver
                if kafka is not None:  # the same records, before any round
                    kafka.create_topic("consume", PARTITIONS, 1)
                    kafka_produce(producer(kafka.bootstrap), "consume",
                                  split_values(consume_values.tobytes()))
                try:
                    def queue_get_step() -> float:
                        seconds, got = timed(lambda: queue_get(queue, mode.peer_records))
                        if got != peer_values:
                            raise RuntimeError("the Ray queue gave back other values")
                        return seconds

                    def redis_read() -> float:
                        seconds, (seen, size) = timed(
                            lambda: redis_consume(redis, mode.peer_records))
                        if (seen, size) != (mode.peer_records, 100 * mode.peer_records):
                            raise RuntimeError(f"Redis read {seen:,} records, {size:,} bytes")
                        return seconds

                    def raylog_read() -> float:
                        consumer = Consumer(**CONSUMER_SETTINGS)
                        try:
                            seconds, (seen, size) = timed(lambda: consume_all(
                                consumer, groups.partitions, mode.consume_records))
                        finally:
                            consumer.close()
                        if (seen, size) != (mode.consume_records, 100 * mode.consume_records):
                            raise RuntimeError(f"read {seen:,} records, {size:,} bytes")
                        return seconds

                    consume_steps: dict[str, Callable[[], float]] = {
                        "raylog": raylog_read,
                        "raylog_group": lambda: groups.run(groups.group).seconds,
                        "queue": queue_get_step}
                    if redis is not None:
                        consume_steps["redis"] = redis_read
                    def kafka_read(bootstrap: str) -> Callable[[], float]:
                        def run() -> float:  # the same records in both "consume" topics
                            seconds, (seen, size) = timed(lambda: kafka_consume(
                                bootstrap, "consume", PARTITIONS, mode.consume_records))
                            if (seen, size) != (mode.consume_records, 100 * mode.consume_records):
                                raise RuntimeError(f"confluent-kafka at {bootstrap}: read "
                                                   f"{seen:,} records, {size:,} bytes")
                            return seconds
                        return run

                    if kafka is not None:
                        consume_steps["kafka"] = kafka_read(kafka.bootstrap)
                        consume_steps["kafka_listener"] = kafka_read(listener)
                    seconds = alternate(mode.rounds, consume_steps)
                finally:
                    groups.close()
                rates = best_rates(seconds, {"raylog": mode.consume_records,
                                             "raylog_group": mode.consume_records,
                                             "queue": mode.peer_records,
                                             "redis": mode.peer_records,
                                             "kafka": mode.consume_records,
                                             "kafka_listener": mode.consume_records})
                out["consume_seconds"] = seconds
                out["consume_records_per_s"] = rates["raylog"]
                out["consume_group_records_per_s"] = rates["raylog_group"]
                out["queue_consume_records_per_s"] = rates["queue"]
                out["redis_consume_records_per_s"] = rates.get("redis")  # None: not measured
                out["kafka_consume_records_per_s"] = rates.get("kafka")
                out["kafka_listener_consume_records_per_s"] = rates.get("kafka_listener")
            stop_workers(workers)
            queue.shutdown()
            out.update(latency_and_curve(mode, cluster, steps, kafka))
            if kafka is not None:
                with steps.step(f"Spark and Ray Data: raylog and Kafka, "
                                f"{mode.analytics_records:,} records"):
                    out["kafka_analytics"] = analytics_vs_kafka(mode, cluster, kafka)
    finally:
        reset_default()
        ray.shutdown()
        os.environ.pop(DATA_DIR_ENV, None)
    return out


def listener_note(compiled: bool) -> str:
    """How raylog's Kafka listener ran in the suite."""
    return ("`raylog gateway` in a process of its own (as a user runs it), speaking for the "
            "single node's broker; record translation "
            + ("compiled (raylog/kafka/_records.c)" if compiled else
               "**pure Python** (the C extension was not built: `python -m raylog.kafka.build`)"))


def kafka_produce_steps(bootstrap: str, values: list[bytes], listener: str | None,
                        kafka: Any, cpu_seconds: dict[str, list[float]]
                        ) -> dict[str, Callable[[], float]]:
    """Produce rounds of confluent-kafka to Kafka and (``listener``: raylog's Kafka-protocol
    address) to raylog; each checks that its topic grew by every value and appends the
    driver's CPU seconds to ``cpu_seconds["produce"]`` (or ``["listener"]``)."""
    from suite_kafka import end_offsets, kafka_produce, producer

    from common import timed

    kafka.create_topic("produce", PARTITIONS, 1)

    def step(address: str, topic: str) -> Callable[[], float]:
        client = producer(address)

        def run() -> float:
            before = end_offsets(address, topic, PARTITIONS)
            cpu_start = time.process_time()
            seconds, _ = timed(lambda: kafka_produce(client, topic, values))
            cpu_seconds.setdefault(topic if address == bootstrap else "listener", []).append(
                time.process_time() - cpu_start)
            if (grown := end_offsets(address, topic, PARTITIONS) - before) != len(values):
                raise RuntimeError(f"{topic} at {address} grew by {grown:,} records, "
                                   f"{len(values):,} were sent")
            return seconds
        return run

    steps = {"kafka": step(bootstrap, "produce")}
    if listener is not None:
        steps["kafka_listener"] = step(listener, "produce")
    return steps


def analytics_vs_kafka(mode: Mode, cluster: Any, kafka: Any) -> dict[str, Any]:
    """Spark (one RayDP session: format("kafka") and format("raylog")) and Ray Data
    (read_kafka and read_topic) over the same records on both, rounds alternated."""
    import pyarrow as pa
    import ray
    from analytics import scan_dataset, sum_lengths
    from kafka_peer import SPARK_POM, fetch
    from produce_consume import Topic, produce_table
    from suite_kafka import kafka_frame, kafka_produce, producer, read_kafka_dataset, spark_configs

    from raylog import Producer
    from raylog.integrations import ray_data
    from raylog.integrations import spark as raylog_spark

    from common import binary_array, generate_values, split_values, timed

    records, topic = mode.analytics_records, "analytics"
    rows = generate_values(records, seed=4)
    Topic(cluster, topic)
    with Producer() as fill:
        produce_table(fill, topic, pa.table({"value": binary_array(rows)}))
    kafka.create_topic(topic, PARTITIONS, 1)
    kafka_produce(producer(kafka.bootstrap, **{"linger.ms": 50}), topic,
                  split_values(rows.tobytes()))
    ray.data.DataContext.get_current().enable_progress_bars = False

    def check(name: str, found: int, expected: int) -> None:
        if found != expected:
            raise RuntimeError(f"{name}: {found:,}, {expected:,} expected")

    def count(make: Callable[[], Any], name: str) -> Callable[[], float]:
        def run() -> float:
            seconds, rows = timed(lambda: make().count())
            check(f"{name} count()", rows, records)
            return seconds
        return run

    def total(make: Callable[[], Any], name: str) -> Callable[[], float]:
        def run() -> float:
            seconds, size = timed(lambda: sum_lengths(make()))
            check(f"{name} sum(length(value))", size, 100 * records)
            return seconds
        return run

    def scan(make: Callable[[], Any], name: str) -> Callable[[], float]:
        def run() -> float:
            seconds, (rows, size) = timed(lambda: scan_dataset(make()))
            check(f"{name} rows", rows, records)
            check(f"{name} value bytes", size, 100 * records)
            return seconds
        return run

    seconds = alternate(mode.rounds, {
        "ray_data_raylog": scan(lambda: ray_data.read_topic(topic, cluster=cluster),
                                "read_topic"),
        "ray_data_kafka": scan(lambda: read_kafka_dataset(kafka.bootstrap, topic),
                               "read_kafka")})
    started = time.perf_counter()
    spark = raylog_spark.session("raylog-bench-kafka", executors=1, cores=1, memory="1GB",
                                 configs=spark_configs(fetch(SPARK_POM)))
    try:
        session_seconds = time.perf_counter() - started
        spark.sparkContext.setLogLevel("ERROR")

        def on_raylog() -> Any:
            return spark.read.format("raylog").option("subscribe", topic).load()

        def on_kafka() -> Any:
            return kafka_frame(spark, kafka.bootstrap, topic)

        seconds |= alternate(mode.rounds, {
            "spark_count_raylog": count(on_raylog, 'format("raylog")'),
            "spark_count_kafka": count(on_kafka, 'format("kafka")'),
            "spark_sum_raylog": total(on_raylog, 'format("raylog")'),
            "spark_sum_kafka": total(on_kafka, 'format("kafka")')})
        spark_version = spark.version
    finally:
        raylog_spark.stop()
    rates = best_rates(seconds, dict.fromkeys(seconds, records))
    return {"records": records, "seconds": seconds,
            **{f"{name}_records_per_s": rate for name, rate in rates.items()},
            "spark": {"version": spark_version, "session_start_seconds": session_seconds,
                      "executors": 1, "cores": 1, "memory": "1GB",
                      "kafka_source": "org.apache.spark:spark-sql-kafka-0-10_2.12 "
                                      "(benchmarks/kafka/spark/pom.xml)"}}


def latency_and_curve(mode: Mode, cluster: Any, steps: Steps, kafka: Any = None
                      ) -> dict[str, Any]:
    import ray
    from produce_consume import Topic, produce_records
    from suite_raylog import LatencyProbe, actor_call_latencies, make_values, measure_latency

    from raylog import Producer
    from raylog.client.producer import ProducerConfig

    from common import timed

    defaults = ProducerConfig()  # what the latency runs compare with and the curve varies around
    Topic(cluster, "latency")
    curve_topic = Topic(cluster, "curve")
    probe = LatencyProbe.remote("latency", PARTITIONS)
    out: dict[str, Any] = {}
    try:
        with steps.step(f"end-to-end latency at {mode.latency_rate:,} records/s"):
            # A warm-up run first, as every other figure has: the first records through a
            # new probe and a new topic's fetch path are slower than the rest.
            measure_latency(probe, "latency", mode.latency_rate, 1.0, {"linger_ms": 0})
            runs = []
            for linger_ms in (0, defaults.linger_ms):
                latencies = measure_latency(probe, "latency", mode.latency_rate,
                                            mode.latency_seconds, {"linger_ms": linger_ms})
                runs.append({"linger_ms": linger_ms,
                             "offered_records_per_s": mode.latency_rate,
                             **latency_summary(latencies.tolist())})
            out["latency"] = {"runs": runs}
            out["e2e_p50_ms"], out["e2e_p99_ms"], out["e2e_p999_ms"] = (
                runs[0]["p50_ms"], runs[0]["p99_ms"], runs[0]["p999_ms"])
            out["e2e_default_p50_ms"], out["e2e_default_p99_ms"], out["e2e_default_p999_ms"] = (
                runs[1]["p50_ms"], runs[1]["p99_ms"], runs[1]["p999_ms"])
            # the floor of a record's path through Ray, right after it was measured
            calls = latency_summary(actor_call_latencies(ACTOR_CALLS))
            out["actor_call"] = calls
            out["actor_call_p50_ms"] = calls["p50_ms"]
            if kafka is not None:
                out["kafka_latency"] = kafka_latency(mode, kafka)

        with steps.step("the latency/throughput curve"):
            values = make_values(mode.curve_records, 100, seed=3)
            settings = sorted(
                {(linger, defaults.batch_size) for linger in mode.curve_linger_ms}
                | {(defaults.linger_ms, size) for size in mode.curve_batch_sizes})
            points = []
            for linger_ms, batch_size in settings:
                config = {"linger_ms": linger_ms, "batch_size": batch_size}
                with Producer(**config) as producer:
                    produce_records(producer, "curve", values[:1000])  # warm-up
                    before = curve_topic.end_offsets()
                    seconds = min(timed(lambda: produce_records(producer, "curve", values))[0]
                                  for _ in range(2))
                    curve_topic.check_grew(before, 2 * len(values))
                latencies = measure_latency(probe, "latency", mode.curve_rate,
                                            mode.curve_seconds, config)
                summary = latency_summary(latencies.tolist())
                points.append({**config, "records_per_s": len(values) / seconds,
                               "p50_ms": summary["p50_ms"], "p99_ms": summary["p99_ms"],
                               "p999_ms": summary["p999_ms"]})
            out["curve"] = {"points": points, "offered_records_per_s": mode.curve_rate,
                            "defaults": {"linger_ms": defaults.linger_ms,
                                         "batch_size": defaults.batch_size}}
    finally:
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(probe.close.remote(), timeout=30)
        ray.kill(probe, no_restart=True)
    return out


def kafka_latency(mode: Mode, kafka: Any) -> list[dict[str, Any]]:
    """Kafka's end-to-end latency as raylog's runs: linger.ms=0, then raylog's default
    linger (librdkafka's too), after a warm-up run."""
    import ray
    from suite_kafka import KafkaLatencyProbe, measure_kafka_latency

    from raylog.client.producer import ProducerConfig

    kafka.create_topic("latency", PARTITIONS, 1)
    probe = KafkaLatencyProbe.remote(kafka.bootstrap, "latency", PARTITIONS)
    runs = []
    try:
        measure_kafka_latency(probe, kafka.bootstrap, "latency", mode.latency_rate, 1.0,
                              {"linger.ms": ProducerConfig().linger_ms})
        for linger_ms in (0, ProducerConfig().linger_ms):
            latencies = measure_kafka_latency(probe, kafka.bootstrap, "latency",
                                              mode.latency_rate, mode.latency_seconds,
                                              {"linger.ms": linger_ms})
            runs.append({"linger_ms": linger_ms, "offered_records_per_s": mode.latency_rate,
                         **latency_summary(latencies.tolist())})
    finally:
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(probe.close.remote(), timeout=30)
        ray.kill(probe, no_restart=True)
    return runs


# -- three brokers: the replication matrix -----------------------------------------------------

def replicated(mode: Mode, root: Path, steps: Steps) -> dict[str, Any]:
    import ray
    from kafka_peer import kafka_or_none
    from ray.cluster_utils import Cluster
    from replication import NODE_ARGS, in_sync, wait_until
    from suite_raylog import make_values, produce_round, start_workers, stop_workers

    import raylog
    from raylog import Admin
    from raylog.client.connection import reset_default
    from raylog.util.cluster_names import BROKER_RESOURCE, DATA_DIR_ENV

    sizes = {100: mode.matrix_records, 1000: mode.matrix_records // 10}
    cluster = None
    kafka_stack = contextlib.ExitStack()
    try:
        with steps.step("starting 3 brokers (ray.cluster_utils.Cluster)"):
            cluster = Cluster(initialize_head=True, head_node_args={
                **NODE_ARGS, "include_dashboard": False,
                "env_vars": {DATA_DIR_ENV: str(root / "head")}})
            for i in range(3):
                cluster.add_node(**NODE_ARGS, resources={BROKER_RESOURCE: 1},
                                 env_vars={DATA_DIR_ENV: str(root / f"broker-{i}")})
            cluster.wait_for_nodes()
            raylog.init(address=cluster.address)
            admin = Admin()
            for topic, (factor, configs) in MATRIX_TOPICS.items():
                admin.create_topic(topic, PARTITIONS, factor, configs)
            for topic in MATRIX_TOPICS:
                wait_until(lambda t=topic: in_sync(admin, t), 120, f"{topic} in sync")
            workers = start_workers(3, ray.get_runtime_context().get_node_id())
            ray.get([w.prepare.remote(count, size, seed)
                     for seed, w in enumerate(workers) for size, count in sizes.items()])
            kafka, kafka_missing = kafka_stack.enter_context(kafka_or_none(3))
        with steps.step("the replication matrix: 100 B and 1 KB, 1 and 3 producers, "
                        "rf 1 acks=1 and rf 3 acks=all; rf 3 acks=all flush.messages=1"):
            cells = {}
            for size in sizes:
                for producers in (1, 3):
                    for topic, acks in (("rf1", 1), ("rf3", "all")):
                        cells[f"{size}B-{producers}p-{topic}"] = (size, producers, topic, acks)
            cells["100B-1p-rf3fsync"] = (100, 1, "rf3fsync", "all")
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in cells}

            def cell_step(name: str) -> Callable[[], float]:
                size, producers, topic, acks = cells[name]

                def step() -> float:
                    run = produce_round(workers[:producers], topic, size, {"acks": acks})
                    runs[name].append(run)
                    return run["seconds"]
                return step

            matrix_steps = {name: cell_step(name) for name in cells}
            if kafka is not None:  # the first worker's values: seed 0
                matrix_steps[KAFKA_RF3] = kafka_rf3_step(
                    kafka, make_values(mode.matrix_records, 100, seed=0))
            seconds = alternate(mode.matrix_rounds, matrix_steps)
            stop_workers(workers)
            check_matrix(admin, cells, runs)
    finally:
        kafka_stack.close()
        reset_default()
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    kafka_seconds = seconds.pop(KAFKA_RF3, None)
    kafka_settings = kafka.settings if kafka is not None else {}
    rates = best_rates(seconds, {name: runs[name][0]["records"] for name in cells})
    out_cells = {name: {"value_bytes": size, "producers": producers,
                        "replication_factor": MATRIX_TOPICS[topic][0], "acks": acks,
                        "flush_messages": MATRIX_TOPICS[topic][1].get("flush.messages"),
                        "records_per_s": rates[name],
                        "records_per_cpu_s": runs[name][0]["records"] / min(
                            r["cpu_seconds"] for r in runs[name][1:])}
                 for name, (size, producers, topic, acks) in cells.items()}
    return {"cells": list(out_cells.values()), "seconds": seconds,
            "rf1_acks1_records_per_s": out_cells["100B-1p-rf1"]["records_per_s"],
            "rf3_acksall_records_per_s": out_cells["100B-1p-rf3"]["records_per_s"],
            "rf3_acksall_fsync_records_per_s": out_cells["100B-1p-rf3fsync"]["records_per_s"],
            "kafka": {"available": False, "reason": kafka_missing} if kafka is None else {
                "available": True, **kafka_settings,
                "rf3_acksall_seconds": kafka_seconds,
                "rf3_acksall_records_per_s": Timing(mode.matrix_records,
                                                    kafka_seconds).best_rate}}


def kafka_rf3_step(kafka: Any, values: list[bytes]) -> Callable[[], float]:
    """confluent-kafka, acks=all, to a topic of replication factor 3 (min.insync.replicas=2)
    on Kafka's 3 nodes; checks the topic grew by every value."""
    from suite_kafka import end_offsets, kafka_produce, producer

    from common import timed

    kafka.create_topic("rf3", PARTITIONS, 3, {"min.insync.replicas": "2"})
    client = producer(kafka.bootstrap, acks="all")

    def run() -> float:
        before = end_offsets(kafka.bootstrap, "rf3", PARTITIONS)
        seconds, _ = timed(lambda: kafka_produce(client, "rf3", values))
        if (grown := end_offsets(kafka.bootstrap, "rf3", PARTITIONS) - before) != len(values):
            raise RuntimeError(f"Kafka rf3 grew by {grown:,} records, {len(values):,} sent")
        return seconds
    return run


def check_matrix(admin: Any, cells: dict[str, tuple[Any, ...]],
                 runs: dict[str, list[dict[str, float]]]) -> None:
    """Each topic holds exactly the records its cells sent: nothing lost, nothing twice."""
    from raylog import Consumer, TopicPartition

    sent = dict.fromkeys(MATRIX_TOPICS, 0)
    for name, (_, _, topic, _) in cells.items():
        sent[topic] += sum(r["records"] for r in runs[name])
    with Consumer() as consumer:
        for topic, count in sent.items():
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            if (held := sum(consumer.end_offsets(tps).values())) != count:
                raise RuntimeError(f"{topic} holds {held:,} records, {count:,} were sent")


# -- the run -----------------------------------------------------------------------------------

def method(defaults: ProducerConfig) -> list[str]:
    """How each figure was measured; ``defaults``: the ProducerConfig the producers start from."""
    return [
        "Values: common.py's 100-byte JSON page views (seeded, varied, so LZ4 does real work); "
        "1 KB values are ten of them back to back. No keys, no headers.",
        f"Producers: `Producer` with its defaults (acks={defaults.acks}, linger_ms="
        f"{defaults.linger_ms}, batch_size={defaults.batch_size / KIB / KIB:g} MiB, "
        f"{defaults.compression_type.upper()}) unless stated; each producer is its own process "
        "(a Ray actor on the driver's node) calling `send(topic, value)` per record, then "
        "`flush()`; timed from the first send to the last flush's return. Records per "
        "CPU-second: the producing process's CPU time (all its threads, Ray's included) over "
        "the same span.",
        "send_batch: the driver sends one Arrow table (`value` column only) and waits for it; "
        "uncompressed: the same table from a producer with `compression_type=\"none\"` to a "
        "topic of its own.",
        "The machine's limits: `lz4` alone compressing the batches that send_batch would "
        "compress (the same table cut by the producer's `partition_rows` at its default "
        "batch_size, each batch's Arrow IPC stream compressed by raylog's `payload.compress`), "
        "one after the other in the driver (one core), alternated with the produce rounds; "
        "the page cache: the same batches' uncompressed streams written one after the other "
        "into a new file on the brokers' disk (one core, no fsync, the file deleted after), "
        "alternated the same way; "
        f"an empty Ray actor call: {ACTOR_CALLS:,} calls, one at a time, of an async actor's "
        "method that does nothing (the broker is an async actor), from the driver, right after "
        "the latency runs; the ratio is the linger_ms=0 run's end-to-end p50 over its p50.",
        "One consumer: a `Consumer(auto_offset_reset=\"earliest\", max_poll_records=500)` in the "
        "driver (as the peers' readers), assigned the pre-filled topic's 6 partitions, polling "
        "until it has every record, touching every value (`len`). A group of 3: groups.py's "
        "members, each its own process, reading their partitions from the beginning to the end "
        "offsets; timed from the driver's call until the last member finished.",
        "Ray queue: `ray.util.queue.Queue(maxsize=0)`, `put_nowait_batch` / "
        "`get_nowait_batch` of 1,000 values from the driver.",
        "Latency: a probe consumer in its own process on every partition; the driver sends "
        "100-byte values at the offered rate, each starting with `time.monotonic_ns()` at its "
        "`send` call; latency is the probe's clock when `poll` returned the record minus that. "
        "A one-second warm-up run comes first and is not counted; each run then uses a new "
        "producer with the `linger_ms` shown (the defaults otherwise).",
        "Curve: for each (linger_ms, batch_size) a producer in the driver sends the curve's "
        "values unthrottled (best of 2) for the throughput, then the latency probe measures it "
        "at the curve's offered rate.",
        "Every figure is the best of the timed rounds after one warm-up round; raylog and its "
        "peers alternate round by round, so ratios compare the same moments of a shared machine.",
    ]


def run(mode: Mode) -> dict[str, Any]:
    import ray

    from raylog.client.producer import ProducerConfig

    started, load_at_start = time.perf_counter(), os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="raylog-bench-suite-"))
    from kafka_peer import missing_tools

    steps = Steps(6 if missing_tools() else 7)
    try:
        single = single_node(mode, root, steps)
        matrix = replicated(mode, root, steps)
    finally:
        steps.bar.close()
        shutil.rmtree(root, ignore_errors=True)
    figures = headline_figures(single, matrix)
    return {
        **figures,
        "targets": targets_report(figures),
        "mode": mode.name,
        "finished_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "config": dataclasses.asdict(mode),
        "single_node": {k: v for k, v in single.items()
                        if k not in figures and k not in ("redis", "kafka", "latency", "curve")},
        "replicated": matrix,
        "latency": single["latency"],
        "curve": single["curve"],
        "redis": single["redis"],
        "kafka": kafka_info(mode, single["kafka"]),
        "queue": {"workload": "`put_nowait_batch` / `get_nowait_batch` of 1,000 values, "
                              "`maxsize=0`, from the driver"},
        "method": method(ProducerConfig()),
        "machine": {**machine_info(ray=ray.__version__),
                    "load_average_1m": {"start": load_at_start[0],
                                        "end": os.getloadavg()[0]}},
        "wall_seconds": time.perf_counter() - started,
    }


def kafka_info(mode: Mode, kafka: dict[str, Any]) -> dict[str, Any]:
    """What the report says of Kafka: its version and settings, the clients, the workloads."""
    if not kafka.get("available"):
        return kafka
    import confluent_kafka
    from suite_kafka import PRODUCER_SETTINGS

    client = (f"confluent-kafka {confluent_kafka.__version__} (librdkafka "
              f"{confluent_kafka.libversion()[0]})")
    return {**kafka, "latency_offered_records_per_s": mode.latency_rate, "client": client,
            "workload": (
                f"Clients: {client} in the driver; producer settings "
                f"{PRODUCER_SETTINGS} (raylog's defaults where both have one; acks=all for rf "
                f"3), `produce` per record, then `flush`; the consumer assigned every partition "
                f"from the beginning, `consume(500)` until every record, `len` of each value "
                f"(fetch.queue.backoff.ms 10, fetch.wait.max.ms 100: librdkafka's 1 s backoff "
                f"left the brokers idle between fetches); "
                f"the same client, settings and values against raylog's Kafka listener (the "
                f"listener rows), alternated round by round with the others. "
                f"Latency: a confluent-kafka consumer in its own process (a Ray actor) "
                f"taking each record as `poll` returns it; linger.ms=0 and 5 as raylog's two "
                f"runs, measured after raylog's (not alternated); the ratio is of the linger 5 "
                f"runs, as librdkafka at linger.ms=0 sends one request per record, which "
                f"Kafka answers one at a time per connection, and falls behind 10,000/s here. "
                f"Records per CPU-second: the driver's CPU time (librdkafka's threads "
                f"included) over the produce round. Spark: one RayDP session (1 "
                f"executor, 1 core, 1 GB) reading `format(\"kafka\")` (Spark's own source) and "
                f"`format(\"raylog\")`, {mode.analytics_records:,} records; Ray Data: "
                f"`ray.data.read_kafka` and `raylog.data.read_topic`, every block read as Arrow "
                f"with its value bytes summed. Topics of {PARTITIONS} partitions on both")}


def _commit() -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return done.stdout.strip() or None


def publish(results: dict[str, Any], out: Path, argv: list[str]) -> None:
    """Regenerate benchmarks/RESULTS.md, benchmarks/plots/ and the README's section."""
    from suite_others import other_sections
    from suite_report import PLOTS, readme_section, replace_section, results_document

    plots = REPO / "benchmarks" / "plots"
    plots.mkdir(exist_ok=True)
    for name in PLOTS:
        shutil.copyfile(out / name, plots / name)
    shown = [a for a in argv if a != "--publish"]
    if "--out" in shown:  # where this run wrote its files says nothing about the figures
        del shown[shown.index("--out"):shown.index("--out") + 2]
    command = " ".join(["python benchmarks/suite.py", *shown])
    commands = ["make bench  # installs redis-server if it can, fetches Kafka's jars with "
                "Maven, then runs the suite",
                f".venv/bin/{command}"]
    (REPO / "benchmarks" / "RESULTS.md").write_text(
        results_document(results, "plots", commands, other_sections()))
    readme = REPO / "README.md"
    readme.write_text(replace_section(readme.read_text(),
                                      readme_section(results, "benchmarks/plots", commands)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer records and points (about two minutes here)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help=f"where to write results.json, results.md and the plots "
                             f"(default: {DEFAULT_OUT})")
    parser.add_argument("--publish", action="store_true",
                        help="also regenerate benchmarks/RESULTS.md, benchmarks/plots/ and "
                             "the README's benchmark section from this run")
    args = parser.parse_args(argv)
    # A terminated suite unwinds like an interrupted one: its finally blocks stop the
    # redis-server and the Ray clusters it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = run(QUICK if args.quick else FULL)
    written = write_results(args.out, results)
    if args.publish:
        publish(results, args.out, sys.argv[1:] if argv is None else argv)
    print((args.out / "results.md").read_text())
    if not results["redis"]["available"]:
        print(f"NOTE: Redis Streams not measured: {results['redis']['reason']}",
              file=sys.stderr)
    if not results["kafka"]["available"]:
        print(f"NOTE: Apache Kafka not measured: {results['kafka']['reason']}",
              file=sys.stderr)
    if not results["single_node"].get("produce_send_compiled", True):
        print("NOTE: Producer.send ran in Python, about half as fast: build raylog/records/"
              "_append.c (make install, or PYTHONPATH=$PWD python -m raylog.kafka.build)",
              file=sys.stderr)
    print(f"wrote {', '.join(str(p) for p in written)} ({results['wall_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
