"""The benchmark suite's report: figures and targets, ``results.json``, the Markdown table,
the plots, and the generated ``benchmarks/RESULTS.md`` and README section.

Plain Python without Ray (matplotlib is imported only to draw), so that tests can check the
table, the JSON and the percentile arithmetic on made-up results in milliseconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from common import MB, RECORD_BYTES, markdown_table, write_json

# figure -> (comparison, bound): "min" figures must reach the bound, "max" ones stay under it.
TARGETS: dict[str, tuple[str, float]] = {
    "produce_records_per_s": ("min", 1_000_000),
    "produce_vs_queue": ("min", 3.0),
    "produce_vs_redis": ("min", 3.0),
    "produce_arrow_records_per_s": ("min", 10_000_000),
    "rf3_over_rf1": ("min", 0.5),
    "e2e_p50_ms": ("max", 5.0),
    "e2e_p99_ms": ("max", 20.0),
    "consume_records_per_s": ("min", 2_000_000),
}
# The keys results.json always has (None where a peer could not run).
REQUIRED_KEYS = (
    "produce_records_per_s", "produce_arrow_records_per_s", "produce_rf3_acksall_records_per_s",
    "produce_rf3_acksall_fsync_records_per_s", "consume_records_per_s", "e2e_p50_ms",
    "e2e_p99_ms", "redis_produce_records_per_s", "redis_consume_records_per_s",
    "queue_produce_records_per_s", "queue_consume_records_per_s",
    "produce_arrow_uncompressed_records_per_s", "lz4_compress_records_per_s",
    "actor_call_p50_ms", "vs_lz4_limit", "vs_actor_call_p50",
)
# The single node's figures that results.json leads with (the 3 brokers' come from their matrix).
SINGLE_NODE_FIGURES = (
    "produce_records_per_s", "produce_arrow_records_per_s", "consume_records_per_s",
    "consume_group_records_per_s", "e2e_p50_ms", "e2e_p99_ms", "e2e_p999_ms",
    "e2e_default_p50_ms", "e2e_default_p99_ms", "e2e_default_p999_ms",
    "redis_produce_records_per_s", "redis_consume_records_per_s",
    "queue_produce_records_per_s", "queue_consume_records_per_s",
    "produce_arrow_uncompressed_records_per_s", "lz4_compress_records_per_s",
    "page_cache_write_records_per_s", "actor_call_p50_ms",
)
# ratio -> (raylog figure, peer figure)
RATIOS = {
    "produce_vs_queue": ("produce_records_per_s", "queue_produce_records_per_s"),
    "produce_vs_redis": ("produce_records_per_s", "redis_produce_records_per_s"),
    "consume_vs_queue": ("consume_records_per_s", "queue_consume_records_per_s"),
    "consume_vs_redis": ("consume_records_per_s", "redis_consume_records_per_s"),
}
# Kafka ratio -> (raylog figure, Kafka figure, "higher" or "lower" is better); figures in
# results.json beside the ratio, None where Kafka did not run.
KAFKA_RATIOS = {
    "vs_kafka_produce": ("produce_records_per_s", "kafka_produce_records_per_s", "higher"),
    "vs_kafka_consume": ("consume_records_per_s", "kafka_consume_records_per_s", "higher"),
    # confluent-kafka through raylog's Kafka listener / confluent-kafka to Kafka
    "vs_kafka_listener_produce": ("kafka_listener_produce_records_per_s",
                                  "kafka_produce_records_per_s", "higher"),
    "vs_kafka_listener_consume": ("kafka_listener_consume_records_per_s",
                                  "kafka_consume_records_per_s", "higher"),
    "vs_kafka_rf3_acksall": ("produce_rf3_acksall_records_per_s",
                             "kafka_rf3_acksall_records_per_s", "higher"),
    "vs_kafka_e2e_p99": ("e2e_default_p99_ms", "kafka_e2e_p99_ms", "lower"),
    "vs_kafka_e2e_p99_linger0": ("e2e_p99_ms", "kafka_e2e_linger0_p99_ms", "lower"),
    "vs_kafka_spark_count": ("spark_count_raylog_records_per_s",
                             "spark_count_kafka_records_per_s", "higher"),
    "vs_kafka_spark_sum": ("spark_sum_raylog_records_per_s", "spark_sum_kafka_records_per_s",
                           "higher"),
    "vs_kafka_ray_data_read": ("ray_data_raylog_records_per_s",
                               "ray_data_kafka_records_per_s", "higher"),
}
# issue 25's targets for them: ("min", x) at least x, ("max", x) at most x
KAFKA_TARGETS = {"vs_kafka_produce": ("min", 1.0), "vs_kafka_consume": ("min", 1.0),
                 "vs_kafka_rf3_acksall": ("min", 1.0), "vs_kafka_e2e_p99": ("max", 1.5),
                 "vs_kafka_spark_count": ("min", 3.0), "vs_kafka_spark_sum": ("min", 1.5),
                 "vs_kafka_ray_data_read": ("min", 2.0)}
# The machine's limits (issue 25): ratio -> (raylog figure, the limit's figure, better)
LIMIT_RATIOS = {
    "vs_lz4_limit": ("produce_arrow_records_per_s", "lz4_compress_records_per_s", "higher"),
    "vs_actor_call_p50": ("e2e_p50_ms", "actor_call_p50_ms", "lower"),
    # no target: what the kernel lets one core write into the page cache here
    "vs_page_cache_limit": ("produce_arrow_uncompressed_records_per_s",
                            "page_cache_write_records_per_s", "higher"),
}
LIMIT_TARGETS = {"produce_arrow_uncompressed_records_per_s": ("min", 10_000_000),
                 "vs_lz4_limit": ("min", 0.8), "vs_actor_call_p50": ("max", 3.0)}
PLOTS = ("throughput.png", "latency.png", "curve.png")
README_START = "<!-- benchmark suite: generated by benchmarks/suite.py --publish -->"
README_END = "<!-- end of the generated benchmark section -->"


# -- arithmetic ------------------------------------------------------------------------------

def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100): the smallest sample that at least
    ``q`` % of the samples are at or below. No interpolation: p99.9 of 1,000 samples is the
    largest, a latency that really happened."""
    if not samples:
        raise ValueError("no samples")
    if not 0 < q <= 100:
        raise ValueError(f"a percentile is in (0, 100], got {q}")
    ordered = sorted(samples)
    # Rounded first: 99.9 / 100 * 1000 is 999.0000000000001 in floating point, not 999.
    return ordered[max(math.ceil(round(q / 100 * len(ordered), 9)), 1) - 1]


def latency_summary(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50, p99, p99.9, the mean and the largest of latencies in milliseconds."""
    return {"p50_ms": percentile(samples_ms, 50), "p99_ms": percentile(samples_ms, 99),
            "p999_ms": percentile(samples_ms, 99.9), "mean_ms": sum(samples_ms) / len(samples_ms),
            "max_ms": max(samples_ms), "samples": len(samples_ms)}


def headline_figures(single: Mapping[str, Any], matrix: Mapping[str, Any]) -> dict[str, Any]:
    """The figures results.json leads with, from what the single node's and the 3 brokers'
    runs returned: SINGLE_NODE_FIGURES, the matrix's 100-byte, one-producer rf 1 and rf 3
    rates (rf 3 with flush.messages=1 too), and the ratios (None where a peer did not run)."""
    figures = {name: single[name] for name in SINGLE_NODE_FIGURES}
    figures["produce_mb_per_s"] = figures["produce_records_per_s"] * RECORD_BYTES / MB
    rf1, rf3 = matrix["rf1_acks1_records_per_s"], matrix["rf3_acksall_records_per_s"]
    figures["produce_rf3_acksall_records_per_s"] = rf3
    figures["produce_rf1_acks1_3brokers_records_per_s"] = rf1
    figures["rf3_over_rf1"] = rf3 / rf1
    fsync = figures["produce_rf3_acksall_fsync_records_per_s"] = \
        matrix["rf3_acksall_fsync_records_per_s"]
    figures["rf3_fsync_over_rf3"] = fsync / rf3
    add_ratios(figures)
    for name, (ours, limit, _) in LIMIT_RATIOS.items():
        figures[name] = ratio(figures[ours], figures[limit])
    figures.update(kafka_figures(single, matrix, figures))
    return figures


def kafka_figures(single: Mapping[str, Any], matrix: Mapping[str, Any],
                  figures: Mapping[str, Any]) -> dict[str, Any]:
    """KAFKA_RATIOS and the raw figures beside them (None where Kafka did not run)."""
    analytics = single.get("kafka_analytics") or {}
    # [linger.ms=0, the default linger]: the ratio's run is the default one, where both
    # keep up with the offered load (librdkafka at 0 sends a request per record)
    linger0, latency = single.get("kafka_latency") or ({}, {})
    out: dict[str, Any] = {
        "kafka_produce_records_per_s": single.get("kafka_produce_records_per_s"),
        "kafka_produce_records_per_cpu_s": single.get("kafka_produce_records_per_cpu_s"),
        "kafka_listener_produce_records_per_s":
            single.get("kafka_listener_produce_records_per_s"),
        "kafka_consume_records_per_s": single.get("kafka_consume_records_per_s"),
        "kafka_listener_consume_records_per_s":
            single.get("kafka_listener_consume_records_per_s"),
        "kafka_rf3_acksall_records_per_s": (matrix.get("kafka") or {}).get(
            "rf3_acksall_records_per_s"),
        "kafka_e2e_p50_ms": latency.get("p50_ms"), "kafka_e2e_p99_ms": latency.get("p99_ms"),
        "kafka_e2e_p999_ms": latency.get("p999_ms"),
        "kafka_e2e_linger0_p50_ms": linger0.get("p50_ms"),
        "kafka_e2e_linger0_p99_ms": linger0.get("p99_ms"),
        "kafka_e2e_linger0_p999_ms": linger0.get("p999_ms"),
        "analytics_records": analytics.get("records"),
    }
    for name in ("spark_count", "spark_sum", "ray_data"):
        for side in ("raylog", "kafka"):
            key = f"{name}_{side}_records_per_s"
            out[key] = analytics.get(key)
    for name, (ours, theirs, _) in KAFKA_RATIOS.items():
        out[name] = ratio(figures.get(ours, out.get(ours)), out.get(theirs))
    return out


def ratio(ours: float | None, theirs: float | None) -> float | None:
    return None if not ours or not theirs else ours / theirs


def add_ratios(figures: dict[str, Any]) -> None:
    """Fill in RATIOS (None where a peer has no figure)."""
    for name, (ours, theirs) in RATIOS.items():
        figures[name] = ratio(figures.get(ours), figures.get(theirs))


def targets_report(figures: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target with its figure and whether it is met (None: not measured)."""
    out = {}
    for name, (kind, bound) in {**TARGETS, **KAFKA_TARGETS, **LIMIT_TARGETS}.items():
        value = figures.get(name)
        met = None if value is None else (value >= bound if kind == "min" else
                                          value < bound if name in TARGETS else value <= bound)
        out[name] = {"target": bound, "kind": kind, "value": value, "met": met}
    return out


# -- the table -------------------------------------------------------------------------------

def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _mb(value: float | None, value_bytes: int) -> str:
    return "-" if value is None else f"{value * value_bytes / MB:,.1f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _target_cell(targets: Mapping[str, Mapping[str, Any]], name: str) -> str:
    entry = targets.get(name)
    if entry is None:
        return "-"
    op = ">=" if entry["kind"] == "min" else "<"
    bound = entry["target"]
    shown = f"{bound:,.0f}" if bound >= 100 else f"{bound:g}"
    state = {True: "met", False: "**missed**", None: "not measured"}[entry["met"]]
    return f"{op} {shown}: {state}"


def peers_table(results: Mapping[str, Any]) -> str:
    """raylog next to Redis Streams and ray.util.queue.Queue, and the ratios."""
    t = results["targets"]
    redis_note = "" if results["redis"].get("available") else " (missing: see below)"
    rows = [
        ["produce, 1 producer, 100 B", _rate(results["produce_records_per_s"]),
         _rate(results["redis_produce_records_per_s"]) + redis_note,
         _rate(results["queue_produce_records_per_s"]),
         _x(results["produce_vs_redis"]), _x(results["produce_vs_queue"]),
         "; ".join(c for c in (_target_cell(t, "produce_records_per_s"),
                               _target_cell(t, "produce_vs_redis"),
                               _target_cell(t, "produce_vs_queue")))],
        ["consume, 1 consumer, 100 B", _rate(results["consume_records_per_s"]),
         _rate(results["redis_consume_records_per_s"]) + redis_note,
         _rate(results["queue_consume_records_per_s"]),
         _x(results["consume_vs_redis"]), _x(results["consume_vs_queue"]),
         _target_cell(t, "consume_records_per_s")],
    ]
    return markdown_table(["records/s", "raylog", "Redis Streams", "Ray queue",
                           "raylog / Redis", "raylog / queue", "target"], rows, "lrrrrrl")


def kafka_table(results: Mapping[str, Any]) -> str:
    """raylog next to Apache Kafka: each workload's raylog figure, Kafka's, and the ratio;
    the listener's rows: confluent-kafka through raylog's Kafka listener against
    confluent-kafka to Kafka."""
    t = results["targets"]
    labels = {
        "vs_kafka_produce": "produce, 1 producer, 100 B, rf 1 (records/s)",
        "vs_kafka_consume": "consume, 1 consumer, 100 B (records/s)",
        "vs_kafka_listener_produce": "produce as above, confluent-kafka -> raylog's Kafka "
                                     "listener (records/s)",
        "vs_kafka_listener_consume": "consume as above, confluent-kafka <- raylog's Kafka "
                                     "listener (records/s)",
        "vs_kafka_rf3_acksall": "produce, rf 3, acks=all, 3 brokers (records/s)",
        "vs_kafka_e2e_p99": "end-to-end p99 at {rate} records/s, linger 5 ms (ms; lower is "
                            "better)",
        "vs_kafka_e2e_p99_linger0": "end-to-end p99 at {rate} records/s, linger 0 (ms; lower "
                                    "is better)",
        "vs_kafka_spark_count": "Spark `count()` (records/s)",
        "vs_kafka_spark_sum": "Spark `sum(length(value))` (records/s)",
        "vs_kafka_ray_data_read": "Ray Data read (records/s)",
    }
    rate = results.get("kafka", {}).get("latency_offered_records_per_s") or 10_000
    # rows after the named ratio's
    after = {
        "vs_kafka_produce": [["producer process: records per CPU-second",
                              _rate(results.get("single_node", {}).get(
                                  "produce_records_per_cpu_s")),
                              _rate(results.get("kafka_produce_records_per_cpu_s")), "-", "-"]],
        "vs_kafka_e2e_p99": [_percentiles_row(results, "linger 5 ms", "e2e_default",
                                              "kafka_e2e")],
        "vs_kafka_e2e_p99_linger0": [_percentiles_row(results, "linger 0", "e2e",
                                                      "kafka_e2e_linger0")],
    }
    rows = []
    for name, (ours, theirs, better) in KAFKA_RATIOS.items():
        show = _ms if better == "lower" else _rate
        rows.append([labels[name].format(rate=f"{rate:,}"), show(results.get(ours)),
                     show(results.get(theirs)), _x(results.get(name)),
                     _target_cell(t, name).replace("<", "<=")])
        rows.extend(after.get(name, []))
    return markdown_table(["workload", "raylog", "Kafka", "raylog / Kafka", "target"], rows,
                          "lrrrl")


def _percentiles_row(results: Mapping[str, Any], label: str, ours: str, theirs: str
                     ) -> list[str]:
    return [f"end-to-end p50 / p99.9, {label} (ms)",
            f"{_ms(results.get(ours + '_p50_ms'))} / {_ms(results.get(ours + '_p999_ms'))}",
            f"{_ms(results.get(theirs + '_p50_ms'))} / {_ms(results.get(theirs + '_p999_ms'))}",
            "-", "-"]


def limits_table(results: Mapping[str, Any]) -> str:
    """raylog's columnar produce and latency next to what the machine allows them: Arrow
    without compression, LZ4's own rate, an empty Ray actor call."""
    t = results["targets"]
    lz4_ours, lz4, _ = LIMIT_RATIOS["vs_lz4_limit"]
    p50_ours, call, _ = LIMIT_RATIOS["vs_actor_call_p50"]
    rows = [
        ["`send_batch` (Arrow), uncompressed, 100 B (records/s); limit: its batches' bytes "
         "written into a new file on one core (the page cache)",
         _rate(results.get("produce_arrow_uncompressed_records_per_s")),
         _rate(results.get("page_cache_write_records_per_s")),
         _x(results.get("vs_page_cache_limit")),
         _target_cell(t, "produce_arrow_uncompressed_records_per_s")],
        ["`send_batch` (Arrow), LZ4 (records/s); limit: `lz4` alone compressing its batches "
         "on one core", _rate(results.get(lz4_ours)), _rate(results.get(lz4)),
         _x(results.get("vs_lz4_limit")), _target_cell(t, "vs_lz4_limit")],
        ["end-to-end p50, linger 0 (ms); limit: an empty Ray actor call's round trip, p50",
         _ms(results.get(p50_ours)), _ms(results.get(call)),
         _x(results.get("vs_actor_call_p50")),
         _target_cell(t, "vs_actor_call_p50").replace("<", "<=")],
    ]
    return markdown_table(["measurement", "raylog", "the limit", "raylog / limit", "target"],
                          rows, "lrrrl")


def kafka_note(kafka: Mapping[str, Any]) -> str:
    if not kafka.get("available"):
        return f"Apache Kafka: **not measured**: {kafka.get('reason')}"
    return (f"Apache Kafka {kafka['version']} (Maven Central's `kafka_2.13`, "
            f"benchmarks/kafka/pom.xml): one node, and 3 nodes for rf 3, each a combined "
            f"broker+controller ({kafka['roles']}), {kafka['heap']}, {kafka['jvm']}, "
            f"{kafka['listeners']}, data in {kafka['log_dirs']}; {kafka['fsync']}; settings "
            f"changed from Kafka's defaults: only the internal topics' replication (on one "
            f"node; 3 replicas, min.isr 2 on 3 nodes) and the initial rebalance delay "
            f"({', '.join(f'`{k}={v}`' for k, v in kafka['overrides'].items())}). "
            f"{kafka['workload']}"
            + (f". raylog's Kafka listener: {kafka['raylog_listener']}"
               if kafka.get("raylog_listener") else ""))


def raylog_table(results: Mapping[str, Any]) -> str:
    """raylog's own figures: the single-node ones, then the replicated cluster's matrix."""
    t = results["targets"]
    single = results["single_node"]
    rows = [
        ["produce, `send`, 1 producer, 100 B, rf 1, acks=1 (one node)",
         _rate(results["produce_records_per_s"]), _mb(results["produce_records_per_s"], 100),
         _target_cell(t, "produce_records_per_s")],
        ["produce, `send_batch` (Arrow), 100 B, rf 1 (one node)",
         _rate(results["produce_arrow_records_per_s"]),
         _mb(results["produce_arrow_records_per_s"], 100),
         _target_cell(t, "produce_arrow_records_per_s")],
        ["consume, 1 consumer (one node)", _rate(results["consume_records_per_s"]),
         _mb(results["consume_records_per_s"], 100), _target_cell(t, "consume_records_per_s")],
        ["consume, a group of 3 (one node)", _rate(results["consume_group_records_per_s"]),
         _mb(results["consume_group_records_per_s"], 100), "-"],
        ["producer process: records per CPU-second (1 producer, 100 B)",
         _rate(single.get("produce_records_per_cpu_s")), "-", "-"],
    ]
    for cell in results["replicated"]["cells"]:
        rows.append([f"produce, `send`, {cell['producers']} producer"
                     f"{'s' if cell['producers'] > 1 else ''}, {cell['value_bytes']:,} B, "
                     f"rf {cell['replication_factor']}, acks={cell['acks']}"
                     f"{', flush.messages=1' if cell.get('flush_messages') == 1 else ''} "
                     f"(3 brokers)",
                     _rate(cell["records_per_s"]),
                     _mb(cell["records_per_s"], cell["value_bytes"]), "-"])
    rows.append(["rf 3 acks=all / rf 1 acks=1 (1 producer, 100 B, 3 brokers)",
                 _x(results["rf3_over_rf1"]), "-", _target_cell(t, "rf3_over_rf1")])
    rows.append(["rf 3 acks=all with flush.messages=1 / without (1 producer, 100 B, 3 brokers)",
                 _x(results["rf3_fsync_over_rf3"]), "-", "-"])
    return markdown_table(["measurement", "records/s", "MB/s of values", "target"], rows,
                          "lrrl")


def latency_table(results: Mapping[str, Any]) -> str:
    t = results["targets"]
    rows = []
    for run in results["latency"]["runs"]:
        first = run["linger_ms"] == 0
        rows.append([f"linger_ms={run['linger_ms']}", f"{run['offered_records_per_s']:,}",
                     _ms(run["p50_ms"]), _ms(run["p99_ms"]), _ms(run["p999_ms"]),
                     _ms(run["max_ms"]), f"{run['samples']:,}",
                     "; ".join((_target_cell(t, "e2e_p50_ms"), _target_cell(t, "e2e_p99_ms")))
                     if first else "-"])
    return markdown_table(["producer", "offered records/s", "p50 ms", "p99 ms", "p99.9 ms",
                           "max ms", "records", "target"], rows, "lrrrrrrl")


def curve_table(results: Mapping[str, Any]) -> str:
    curve = results["curve"]
    rows = [[f"{p['linger_ms']}", f"{p['batch_size']:,}", _rate(p["records_per_s"]),
             _ms(p["p50_ms"]), _ms(p["p99_ms"])] for p in curve["points"]]
    return markdown_table(["linger_ms", "batch_size (bytes)", "max records/s",
                           f"p50 ms at {curve['offered_records_per_s']:,}/s",
                           f"p99 ms at {curve['offered_records_per_s']:,}/s"], rows, "rrrrr")


def redis_note(redis: Mapping[str, Any]) -> str:
    if redis.get("available"):
        return (f"Redis: `{redis['command']}` (redis-server {redis['version']}, no RDB "
                f"snapshots, AOF with `appendfsync everysec`), client redis-py "
                f"{redis['client_version']}{' with hiredis' if redis.get('hiredis') else ''}; "
                f"{redis['workload']}")
    return f"Redis Streams: **not measured**: {redis.get('reason')}"


def results_markdown(results: Mapping[str, Any]) -> str:
    """The whole Markdown report of one run (what ``results.md`` holds)."""
    machine = results["machine"]
    load = machine["load_average_1m"]
    parts = [
        f"raylog benchmark suite, {results['mode']} mode, {results['finished_at']}: "
        f"{machine['cpu_count']} CPUs ({machine['cpu_model']}), Python {machine['python']}, "
        f"Ray {machine['ray']}, pyarrow {machine['pyarrow']}; load average (1 min) "
        f"{load['start']:.2f} at start, {load['end']:.2f} at the end; "
        f"{results['wall_seconds']:.0f} s.",
        "### raylog next to its peers (the same run, the same data)", peers_table(results),
        redis_note(results["redis"]) + ".",
        f"Ray queue: {results['queue']['workload']}.",
        "### raylog next to Apache Kafka (the same run, the same data)", kafka_table(results),
        kafka_note(results.get("kafka", {})) + ".",
        "### raylog's throughput", raylog_table(results),
        "### The machine's limits beside them (the same run)", limits_table(results),
        "### End-to-end latency (send call to the consumer's receipt)", latency_table(results),
        "### The latency/throughput curve", curve_table(results),
        "### How each figure was measured", "\n".join(f"- {line}"
                                                       for line in results["method"]),
    ]
    return "\n\n".join(parts) + "\n"


# -- files -----------------------------------------------------------------------------------

def write_results(out: Path, results: Mapping[str, Any]) -> list[Path]:
    """Write results.json, results.md and the plots into ``out``; the paths written."""
    write_json(out / "results.json", results)
    (out / "results.md").write_text(results_markdown(results))
    return [out / "results.json", out / "results.md", *draw_plots(out, results)]


def draw_plots(out: Path, results: Mapping[str, Any]) -> list[Path]:
    """throughput.png (raylog and its peers), latency.png (percentiles per producer
    setting), curve.png (max throughput and p99 as linger_ms and batch_size vary)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot as plt

    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (what, names) in zip(axes, (
            ("produce", ("produce_records_per_s", "redis_produce_records_per_s",
                         "queue_produce_records_per_s")),
            ("consume", ("consume_records_per_s", "redis_consume_records_per_s",
                         "queue_consume_records_per_s"))), strict=True):
        labels = ["raylog", "Redis Streams", "Ray queue"]
        values = [(results.get(n) or 0) / 1e6 for n in names]
        bars = ax.bar(labels, values, color=["#1f77b4", "#d62728", "#7f7f7f"])
        for bar, name in zip(bars, names, strict=True):
            shown = "missing" if results.get(name) is None else f"{results[name] / 1e6:.2f}"
            ax.annotate(shown, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom")
        ax.set_title(f"{what}, 100-byte values, one client")
        ax.set_ylabel("million records/s")
    fig.tight_layout()
    paths.append(_save(fig, out / "throughput.png", plt))

    fig, ax = plt.subplots(figsize=(6, 4))
    runs = results["latency"]["runs"]
    marks = ["p50_ms", "p99_ms", "p999_ms"]
    for i, run in enumerate(runs):
        ax.bar([j + i * 0.4 for j in range(3)], [run[m] for m in marks], width=0.4,
               label=f"linger_ms={run['linger_ms']}")
    ax.set_xticks([j + 0.2 for j in range(3)], ["p50", "p99", "p99.9"])
    ax.set_ylabel("ms, send() to the consumer's receipt")
    offered = runs[0]["offered_records_per_s"] if runs else 0
    ax.set_title(f"end-to-end latency at {offered:,} records/s offered")
    ax.legend()
    fig.tight_layout()
    paths.append(_save(fig, out / "latency.png", plt))

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    curve = results["curve"]
    for ax, (knob, fixed) in zip(axes, (("linger_ms", "batch_size"),
                                        ("batch_size", "linger_ms")), strict=True):
        default = curve["defaults"][fixed]
        points = sorted((p for p in curve["points"] if p[fixed] == default),
                        key=lambda p: p[knob])
        xs = [p[knob] for p in points]
        ax.plot(xs, [p["records_per_s"] / 1e6 for p in points], "o-", color="#1f77b4")
        ax.set_xlabel(f"{knob} ({fixed}={default:,})")
        ax.set_ylabel("max throughput, million records/s", color="#1f77b4")
        if knob == "batch_size":
            ax.set_xscale("log", base=2)
        twin = ax.twinx()
        twin.plot(xs, [p["p99_ms"] for p in points], "s--", color="#d62728")
        twin.set_ylabel(f"p99 ms at {curve['offered_records_per_s']:,} records/s",
                        color="#d62728")
    fig.suptitle("one producer, 100-byte values: throughput and p99 latency")
    fig.tight_layout()
    paths.append(_save(fig, out / "curve.png", plt))
    return paths


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def results_document(results: Mapping[str, Any], plots_dir: str, commands: Sequence[str],
                     others: Sequence[str]) -> str:
    """benchmarks/RESULTS.md: generated from one suite run (never edited by hand).
    ``plots_dir``: the plots' directory relative to the document; ``others``: Markdown
    sections for the other benchmark scripts."""
    lines = [
        "# Benchmark results",
        "",
        "Generated by `benchmarks/suite.py --publish` from one run; do not edit by hand "
        "(re-run to update). Reproduce with:",
        "",
        "```sh",
        *commands,
        "```",
        "",
        results_markdown(results).rstrip(),
        "",
        *(f"![{name}]({plots_dir}/{name})" for name in PLOTS),
        "",
        "Where the time goes, the profiles before and after, and what bounds each target "
        "missed: [`docs/performance.md`](../docs/performance.md).",
        "",
        "## The other benchmark scripts",
        "",
        *others,
    ]
    return "\n".join(lines).rstrip() + "\n"


def readme_section(results: Mapping[str, Any], plots_dir: str, commands: Sequence[str]) -> str:
    """The README's benchmark section between its markers: the machine, the latest tables,
    the plots, and how to reproduce them."""
    return "\n\n".join([
        README_START,
        results_markdown(results).split("\n\n### How each figure")[0].rstrip(),
        "\n".join(f"![{name}]({plots_dir}/{name})" for name in PLOTS),
        "Reproduce (a 3-broker `ray.cluster_utils.Cluster` and an embedded node, and Apache "
        "Kafka's one node and 3 nodes, are started and stopped by the suite; `make bench` "
        "installs `redis-server` when it can and fetches Kafka's jars with Maven):\n\n"
        "```sh\n" + "\n".join(commands) + "\n```",
        "How each figure is measured, and what bounds the targets missed: "
        "[`benchmarks/RESULTS.md`](benchmarks/RESULTS.md).",
        README_END,
    ])


def replace_section(text: str, section: str) -> str:
    """``text`` with the part between README_START and README_END (markers included)
    replaced by ``section``; ValueError if the markers are missing."""
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
    if not pattern.search(text):
        raise ValueError("the README has no generated benchmark section markers")
    return pattern.sub(lambda _: section, text, count=1)
