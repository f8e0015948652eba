"""A client's two ways to a host, side by side: Ray (actor calls, the consumer's Ray stream)
and the host's data socket (``produce_socket`` and ``fetch_socket`` False, and True; docs/
architecture.md, "The data socket").

On one embedded node (the suite's broker layout) with a 6-partition topic, alternated way by
way in each round, so both see the same load:

- end to end, send to receipt, through the suite's probe (a consumer in its own process, one
  per way) at 10,000 records/s with ``linger_ms`` 0 and 5 and at 500/s with 0: p50, p99,
  p99.9;
- ``send_batch`` of a table of 100-byte values, uncompressed and with LZ4: records/s.

An empty Ray actor call's p50 is measured beside them (the suite's ``vs_actor_call_p50``
compares the linger-0 e2e p50 at 10,000/s with it). Run:
``PYTHONPATH=$PWD .venv/bin/python benchmarks/produce_paths.py [--quick] [--json PATH]``.
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
from produce_consume import Topic, produce_table
from suite_raylog import LatencyProbe, actor_call_latencies, measure_latency

from raylog import Producer

from common import (
    RESULTS_DIR,
    binary_array,
    embedded_cluster,
    generate_values,
    machine_info,
    markdown_table,
    run_benchmark,
    timed,
)

WAYS = {"ray": False, "socket": True}
CELLS = ((10_000, 0), (500, 0), (10_000, 5))  # records/s, linger_ms


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    rounds: int
    seconds: float  # per latency cell
    rows: int       # per send_batch table


QUICK = Mode("quick", 2, 3.0, 1_000_000)
FULL = Mode("full", 4, 6.0, 2_000_000)


def latency_cells(probes: dict[str, Any], topic: str, way: str, seconds: float
                  ) -> list[dict[str, Any]]:
    out = []
    for rate, linger in CELLS:
        ms = measure_latency(probes[way], topic, rate, seconds,
                             {"linger_ms": linger, "produce_socket": WAYS[way]})
        out.append({"way": way, "rate": rate, "linger_ms": linger,
                    **{f"p{name}_ms": float(np.percentile(ms, q))
                       for name, q in (("50", 50), ("99", 99), ("999", 99.9))}})
    return out


def send_batch_rates(raw: Topic, lz4: Topic, way: str, table: pa.Table) -> dict[str, Any]:
    out: dict[str, Any] = {"way": way}
    with Producer(compression_type="none", produce_socket=WAYS[way]) as plain, \
            Producer(produce_socket=WAYS[way]) as compressed:
        for producer, topic, name in ((plain, raw, "none"), (compressed, lz4, "lz4")):
            produce_table(producer, topic.name, table.slice(0, 10_000))  # connected first
            seconds, _ = timed(lambda p=producer, t=topic: produce_table(p, t.name, table))
            out[f"{name}_records_per_s"] = len(table) / seconds
    return out


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load = time.perf_counter(), os.getloadavg()
    table = pa.table({"value": binary_array(generate_values(mode.rows))})
    latency, throughput = [], []
    with embedded_cluster(root) as cluster:
        latency_topic, raw, lz4 = (Topic(cluster, name) for name in ("latency", "raw", "lz4"))
        probes = {way: LatencyProbe.remote("latency", len(latency_topic.partitions),
                                           fetch_socket=on) for way, on in WAYS.items()}
        for way, probe in probes.items():  # warm-up (the sockets connect)
            measure_latency(probe, "latency", 10_000, 1.0,
                            {"linger_ms": 0, "produce_socket": WAYS[way]})
        for _ in range(mode.rounds):
            for way in WAYS:
                latency.extend(latency_cells(probes, "latency", way, mode.seconds))
                throughput.append(send_batch_rates(raw, lz4, way, table))
                print(f"{way}: {latency[-3:]} {throughput[-1]}", file=sys.stderr)
        call_p50 = float(np.percentile(actor_call_latencies(1000), 50))
    return {"latency": latency, "send_batch": throughput, "actor_call_p50_ms": call_p50,
            "mode": mode.name, "rounds": mode.rounds, "rows": mode.rows,
            "machine": machine_info(load_average_1m={"start": load[0],
                                                     "end": os.getloadavg()[0]}),
            "wall_seconds": time.perf_counter() - started}


def headline(mode: Mode, result: dict[str, Any]) -> str:
    load = result["machine"]["load_average_1m"]
    return (f"A client's way to a host, {mode.name} mode ({result['rounds']} rounds "
            f"alternated): Ray against the data socket; an empty call's p50 "
            f"{result['actor_call_p50_ms']:.2f} ms; load {load['start']:.1f} at start, "
            f"{load['end']:.1f} at the end")


def _spread(values: list[float], fmt: str) -> str:
    return f"{format(min(values), fmt)}-{format(max(values), fmt)}" if len(values) > 1 \
        else format(values[0], fmt)


def table(result: dict[str, Any]) -> str:
    rows = []
    for rate, linger in CELLS:
        for way in WAYS:
            cells = [r for r in result["latency"] if (r["way"], r["rate"], r["linger_ms"])
                     == (way, rate, linger)]
            rows.append([f"{rate:,}/s, linger {linger}", way,
                         *(_spread([c[k] for c in cells], ".2f")
                           for k in ("p50_ms", "p99_ms", "p999_ms"))])
    for way in WAYS:
        runs = [r for r in result["send_batch"] if r["way"] == way]
        rows.append([f"send_batch, {result['rows']:,} rows", way,
                     "none " + _spread([r["none_records_per_s"] / 1e6 for r in runs], ".2f")
                     + " M/s", "LZ4 " + _spread([r["lz4_records_per_s"] / 1e6 for r in runs],
                                                ".2f") + " M/s", ""])
    return markdown_table(["workload", "way", "p50 ms (or rate)", "p99 ms (or rate)",
                           "p99.9 ms"], rows, "llrrr")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, RESULTS_DIR / "produce_paths.json",
                         "two rounds, 3 s a cell, 1 M-row tables (full: four, 6 s, 2 M)",
                         (QUICK, FULL), run, headline, table)


if __name__ == "__main__":
    sys.exit(main())
