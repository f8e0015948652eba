"""Compaction beside produce: a partition's produce latency while the same broker compacts
another partition, against the same load without compaction.

Run from the repository root::

    .venv/bin/python benchmarks/compaction.py [--quick] [--json PATH]

``--quick`` takes about two minutes on this shared 2-core machine, the full run about five.
The script prints a Markdown table and writes JSON (default
``benchmarks/results/compaction.json``).

Setup: a ``ray.cluster_utils.Cluster`` on this machine, a head (the controller's) and one
broker node: every partition below lives on that broker, in one process. Three topics of one
partition, replication factor 1, ``retention.ms=-1``: ``latency`` (the probe's), and two for
the background load, alike but for their cleanup policy: ``compacted``
(``cleanup.policy=compact``) and ``kept`` (``delete``); both roll 1 MiB segments
(``segment.bytes``) so that the cleaner has rolled segments to work on, and ``compacted``
has ``delete.retention.ms=0``.

Load: a writer process (a Ray actor) sends, every 50 ms, an Arrow table of 1,000 rows of
100-byte values with ``send_batch``, about 20,000 records/s, to one of the two background
topics; the tables take their keys in turn from a fixed set of 100,000 (each key updated
every 5 s or so), so that a compacted log holds a few megabytes of newest values that
every cleaning pass must read and, where it shrinks, rewrite. Meanwhile the driver's probe
producer (``acks=1``, ``linger_ms=0``) has a 100-byte record for ``latency`` due every
10 ms, sends each when it is due (or, if the previous one is still waited for, as soon as that
one is acknowledged) and waits for its acknowledgement: the produce latency is the time from
when the record was due to the future's result, so a broker that stalls delays every record
due meanwhile, as it would an open-loop producer's.

Cases, alternated round by round after a warm-up round of each: ``compaction`` (the writer
on ``compacted``: the broker rolls, and compacts, its segments while the probe produces) and
``baseline`` (the writer on ``kept``: the same appends and rolls, no compaction). Figures:
each case's p50 and p99 produce latency over the probes of all its timed rounds, and
``produce_p99_compaction_ratio``, the compaction case's p99 over the baseline's (target:
at most 1.5, issue 23).

Checks, outside the timed regions: every probe was acknowledged; at the end ``compacted``
holds less than half the bytes of ``kept`` (its replica's size next to the bytes written), so
compaction did run during the compaction rounds.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray
from ray.cluster_utils import Cluster

from common import (
    RESULTS_DIR,
    alternate,
    binary_array,
    generate_values,
    machine_info,
    markdown_table,
    run_benchmark,
)

DEFAULT_JSON = RESULTS_DIR / "compaction.json"
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 200 * 1024 * 1024}
SEGMENT_BYTES = 1 << 20
KEYS = 100_000
ROWS = 1_000             # per writer table
WRITE_INTERVAL_S = 0.05  # between writer tables
PROBE_INTERVAL_S = 0.01  # between probe records
TARGET = 1.5             # maximum of produce_p99_compaction_ratio
BACKGROUND = {"compaction": "compacted", "baseline": "kept"}


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    rounds: int
    round_s: float


QUICK = Mode("quick", rounds=2, round_s=15)
FULL = Mode("full", rounds=3, round_s=40)


@ray.remote(num_cpus=0, max_restarts=0)
class Writer:
    """The background load: keyed Arrow tables at a steady pace, for a given time."""

    def __init__(self) -> None:
        import raylog
        from raylog import Producer

        raylog.init()
        values = binary_array(generate_values(ROWS, seed=3))
        self.tables = [pa.table({"key": pa.array([b"key-%06d" % (t * ROWS + i)
                                                  for i in range(ROWS)], pa.binary()),
                                 "value": values}) for t in range(KEYS // ROWS)]
        self.producer = Producer(acks=1)

    def write(self, topic: str, seconds: float) -> int:
        """Send a table every WRITE_INTERVAL_S for ``seconds``; the records sent."""
        sent, start = 0, time.monotonic()
        while time.monotonic() - start < seconds:
            table = self.tables[(sent // ROWS) % len(self.tables)]
            self.producer.send_batch(topic, table, partition=0)
            sent += ROWS
            time.sleep(WRITE_INTERVAL_S)
        self.producer.flush()
        return sent


def probe(producer: Any, seconds: float) -> list[float]:
    """A record due every PROBE_INTERVAL_S, each waited for; the latencies in ms, each from
    the time the record was due (a record due while an earlier one waited is sent late, and
    counts its wait: a stalled broker delays every record due meanwhile, not only one)."""
    value = b"x" * 100
    latencies = []
    start = time.perf_counter()
    for i in range(int(seconds / PROBE_INTERVAL_S)):
        due = start + i * PROBE_INTERVAL_S
        time.sleep(max(due - time.perf_counter(), 0))
        producer.send("latency", value, partition=0).result(60)
        latencies.append((time.perf_counter() - due) * 1000)
    return latencies


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started = time.perf_counter()
    load_at_start = os.getloadavg()
    from raylog.util.cluster_names import BROKER_RESOURCE, DATA_DIR_ENV

    cluster = Cluster(initialize_head=True, head_node_args={
        **NODE_ARGS, "include_dashboard": False, "env_vars": {DATA_DIR_ENV: str(root / "head")}})
    cluster.add_node(**NODE_ARGS, resources={BROKER_RESOURCE: 1},
                     env_vars={DATA_DIR_ENV: str(root / "broker")})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        import raylog
        from raylog import Admin, Producer

        raylog.init()
        admin = Admin()
        common = {"retention.ms": -1, "segment.bytes": SEGMENT_BYTES}
        admin.create_topic("latency", 1, 1, {"retention.ms": -1})
        admin.create_topic("compacted", 1, 1, {**common, "cleanup.policy": "compact",
                                               "delete.retention.ms": 0})
        admin.create_topic("kept", 1, 1, {**common, "cleanup.policy": "delete"})
        writer = Writer.remote()
        latencies: dict[str, list[float]] = {case: [] for case in BACKGROUND}
        written = {topic: 0 for topic in BACKGROUND.values()}
        with Producer(acks=1, linger_ms=0) as producer:
            producer.send("latency", b"warm", partition=0).result(60)

            def case(name: str) -> float:
                topic = BACKGROUND[name]
                load = writer.write.remote(topic, mode.round_s + 1)
                time.sleep(0.5)  # the writer is under way
                latencies[name].append(probe(producer, mode.round_s))
                written[topic] += ray.get(load, timeout=600)
                return mode.round_s

            alternate(mode.rounds, {name: lambda name=name: case(name) for name in BACKGROUND})
        sizes = {r["topic"]: r["size_bytes"] for topic in BACKGROUND.values()
                 for r in admin.describe_replicas(topic) if "size_bytes" in r}
        if sizes.get("compacted", 0) * 2 > sizes.get("kept", 0):
            raise RuntimeError(f"compaction did not keep up or did not run: {sizes}")
        ray.kill(writer, no_restart=True)
        admin.close()
    finally:
        ray.shutdown()
        cluster.shutdown()

    figures: dict[str, float] = {}
    probes = {}
    for name, rounds in latencies.items():
        timed = np.array([ms for r in rounds[1:] for ms in r])  # round 0: the warm-up
        probes[name] = len(timed)
        figures[f"{name}_p50_ms"] = float(np.percentile(timed, 50))
        figures[f"{name}_p99_ms"] = float(np.percentile(timed, 99))
    figures["produce_p99_compaction_ratio"] = \
        figures["compaction_p99_ms"] / figures["baseline_p99_ms"]
    ratio = figures["produce_p99_compaction_ratio"]
    return {
        **figures,
        "targets": {"produce_p99_compaction_ratio": {"target": TARGET, "value": ratio,
                                                     "met": ratio <= TARGET}},
        "mode": mode.name,
        "data": {"segment_bytes": SEGMENT_BYTES, "keys": KEYS, "rows_per_table": ROWS,
                 "write_interval_s": WRITE_INTERVAL_S, "probe_interval_s": PROBE_INTERVAL_S,
                 "round_s": mode.round_s, "rounds": mode.rounds, "probes": probes,
                 "records_written": written, "replica_bytes_at_end": sizes},
        "machine": {**machine_info(ray=ray.__version__),
                    "load_average_1m": {"start": load_at_start[0], "end": os.getloadavg()[0]}},
        "wall_seconds": time.perf_counter() - started,
    }


def headline(mode: Mode, result: dict[str, Any]) -> str:
    machine = result["machine"]
    return (f"compaction beside produce, {mode.name} mode: one broker, {mode.rounds} round(s) "
            f"of {mode.round_s:.0f} s per case, a writer of about "
            f"{ROWS / WRITE_INTERVAL_S:,.0f} keyed records/s, a probe every "
            f"{PROBE_INTERVAL_S * 1000:.0f} ms; {machine['cpu_count']} CPUs, Ray "
            f"{machine['ray']}, load {machine['load_average_1m']['start']:.1f} at start")


def table(result: dict[str, Any]) -> str:
    target = result["targets"]["produce_p99_compaction_ratio"]
    rows = [
        ("produce p50, writer on the compacted topic (ms)",
         f"{result['compaction_p50_ms']:.2f}", "-", "-"),
        ("produce p50, writer on the kept topic (ms)", f"{result['baseline_p50_ms']:.2f}",
         "-", "-"),
        ("produce p99, writer on the compacted topic (ms)",
         f"{result['compaction_p99_ms']:.2f}", "-", "-"),
        ("produce p99, writer on the kept topic (ms)", f"{result['baseline_p99_ms']:.2f}",
         "-", "-"),
        ("p99 with compaction / without", f"{result['produce_p99_compaction_ratio']:.2f}",
         f"<= {target['target']:g}", "met" if target["met"] else "NOT MET"),
    ]
    return markdown_table(["measurement", "value", "target", "met"], rows, "lrrl")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         "two rounds of 15 s per case (about two minutes)", (QUICK, FULL), run,
                         headline, table)


if __name__ == "__main__":
    sys.exit(main())
