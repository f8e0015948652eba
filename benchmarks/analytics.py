"""Scanning a topic for analytics: raylog's Ray Dataset and Spark readers against Parquet.

Run from the repository root::

    .venv/bin/python benchmarks/analytics.py [--quick] [--json PATH]

``--quick`` (2 million records) takes about three minutes on a 2-core machine, the full run
(10 million) about seven, most of it in raylog's Spark reads. The script prints a Markdown
table and writes JSON (default ``benchmarks/results/analytics.json``).

Setup: ``raylog.init(address="local", data_dir=<temporary directory>)`` starts an embedded
single-node Ray cluster whose node is a broker (Ray's default logical CPUs, one per core).
One topic with 6 partitions, replication factor 1 and ``retention.ms=-1`` is filled, before
any timing, with the 100-byte page views of ``common.py`` (no key, timestamps +1 ms per
record) by ``Producer.send_batch`` (default settings: LZ4). The same records, read back from
the topic as Arrow tables with the columns of Spark's Kafka source (key, value, topic,
partition, offset, timestamp, timestampType, headers), are written to Parquet in the same
temporary directory: one file per partition, snappy compression, row groups of at most
1,048,576 rows (pyarrow's default; about 100 MB of values, near Spark's 128 MB
``parquet.block.size``), pyarrow's other defaults. The files were just written and the log
was just filled, so both are read from the page cache: the figures measure decoding and
moving data, not the disk.

Measurements, all in one run, each over all the records: one warm-up, then the best and the
median of 3 timed repetitions (``time.perf_counter``). The warm-up is the check pass below,
which reads every record through the same readers (and starts Spark's Python workers). The
steps of a group (the two Dataset scans; the four Spark queries) take turns, one repetition
each per round, so each ratio compares figures taken under the same load (the machine is
shared).

Ray Datasets (before Spark starts, so Ray Data's read tasks have every CPU; raylog's replica
actors take ``num_cpus=0`` and decode on whatever cores are free):

dataset_scan     ``raylog.integrations.ray_data.read_topic(topic)`` (offset lookups, then
                 every block read by its partition's replica actor), iterated with
                 ``iter_batches(batch_format="pyarrow", batch_size=None)``, adding up rows
                 and ``value`` bytes; from the call to the last block.
parquet_dataset  ``ray.data.read_parquet(dir)``, iterated the same way. Both read every
                 column into Arrow blocks: no figure comes from metadata alone.

Spark, on one RayDP session from ``raylog.integrations.spark.session()`` (1 executor, 1 core, 1 GB):

connector_count  ``spark.read.format("raylog").option("subscribe", topic).load().count()``,
                 the Java connector; from the call to the count. It answers from the
                 partitions' offsets (the topic is not compacted, so offsets are dense).
parquet_spark    ``spark.read.parquet(dir).count()``. Spark answers this from the row
                 counts in the Parquet footers without reading a value: each answers a
                 count the cheapest way its format allows.
connector_sum    ``spark.read.format("raylog")...selectExpr("sum(length(value))")``: every
                 value crosses into the JVM (Arrow IPC from the brokers, ColumnarBatches).
parquet_spark_sum ``spark.read.parquet(dir).selectExpr("sum(length(value))")``: the value
                 column is decompressed and decoded.
arrow_count, arrow_sum  the same two queries over ``raylog.integrations.spark.read(spark, topic,
                 via="arrow")``, the fallback without the connector (Python workers hand
                 Arrow tables to Spark with ``mapInArrow``): what the connector replaced.

Checks, outside the timed regions, so a broken fast path cannot report a good figure: the
topic's offset ranges hold exactly the records sent; once per run each of the four readers
(both Datasets, both DataFrames) gives the same row count and the same sum of the values'
CRC32 (Spark's ``crc32``, zlib's in Python) as the generated records; every timed repetition
saw every record (and, where it reads values, 100 bytes each).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyspark
import ray
import raydp

import raylog
from raylog import Admin, Producer
from raylog.client.connection import RaylogCluster, reset_default
from raylog.integrations import ray_data
from raylog.integrations import spark as raylog_spark
from raylog.util.cluster_names import DATA_DIR_ENV

from common import (
    DATA_DESCRIPTION,
    FIRST_TIMESTAMP_MS,
    RECORD_BYTES,
    RESULTS_DIR,
    Timing,
    alternate,
    binary_array,
    binary_values,
    digest,
    generate_values,
    input_frozen,
    machine_info,
    markdown_table,
    rate_figures,
    result_document,
    run_benchmark,
    target_cells,
    timed,
)

DEFAULT_JSON = RESULTS_DIR / "analytics.json"
TOPIC = "pageviews"
PARTITIONS = 6
REPLICATION_FACTOR = 1
TOPIC_CONFIGS = {"retention.ms": -1}
FILL_CHUNK_RECORDS = 1_000_000     # rows per send_batch while filling the topic
PARQUET_COMPRESSION = "snappy"
PARQUET_ROW_GROUP_ROWS = 1_048_576
SPARK_SESSION = {"executors": 1, "cores": 1, "memory": "1GB"}
SPARK_CONFIGS = {"spark.ui.showConsoleProgress": "false"}
SUM_LENGTH = "sum(length(value))"

TARGETS = {  # figure -> minimum (issue 13: count at least 1.5x Parquet, sum at least 1.0x)
    "dataset_scan_ratio_vs_parquet": 1.0,
    "connector_count_vs_parquet": 1.5,
    "connector_sum_vs_parquet": 1.0,
}
RATIOS = {  # ratio figure -> (raylog rate, Parquet rate)
    "dataset_scan_ratio_vs_parquet": ("dataset_scan_records_per_s",
                                      "parquet_dataset_records_per_s"),
    "connector_count_vs_parquet": ("connector_count_records_per_s",
                                   "parquet_spark_records_per_s"),
    "connector_sum_vs_parquet": ("connector_sum_records_per_s",
                                 "parquet_spark_sum_records_per_s"),
    "arrow_count_vs_parquet": ("arrow_count_records_per_s", "parquet_spark_records_per_s"),
    "arrow_sum_vs_parquet": ("arrow_sum_records_per_s", "parquet_spark_sum_records_per_s"),
}
CHECKS = [
    "the topic's offset ranges hold exactly the records sent",
    "read_topic, read_parquet, format(\"raylog\"), raylog.integrations.spark.read(via=\"arrow\") "
    "and spark.read.parquet each give the "
    "generated records' count and sum of CRC32 of the values",
    "each timed repetition: every record, and 100 value bytes each where the values are read",
]


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    records: int      # in the topic, and in the Parquet files
    repetitions: int  # timed, after one warm-up


QUICK = Mode("quick", records=2_000_000, repetitions=3)
FULL = Mode("full", records=10_000_000, repetitions=3)


# -- data ------------------------------------------------------------------------------------

def fill_topic(cluster: RaylogCluster, rows: np.ndarray) -> None:
    """The topic, created and holding ``rows`` as values, +1 ms timestamps, no key."""
    Admin(cluster=cluster).create_topic(TOPIC, PARTITIONS, REPLICATION_FACTOR,
                                        dict(TOPIC_CONFIGS))
    with Producer(cluster=cluster) as producer:
        for start in range(0, len(rows), FILL_CHUNK_RECORDS):
            chunk = rows[start:start + FILL_CHUNK_RECORDS]
            stamps = np.arange(FIRST_TIMESTAMP_MS + start,
                               FIRST_TIMESTAMP_MS + start + len(chunk), dtype=np.int64)
            producer.send_batch(TOPIC, pa.table({"value": binary_array(chunk),
                                                 "timestamp": stamps})).result()
        producer.flush()
    ranges = ray_data.offset_ranges(TOPIC, cluster=cluster)
    if (held := sum(last - first for first, last in ranges.values())) != len(rows):
        raise RuntimeError(f"{TOPIC}: sent {len(rows):,} records, its offsets hold {held:,}")


def write_parquet(cluster: RaylogCluster, directory: Path) -> dict[str, Any]:
    """The topic's records, as read_topic gives them, in one Parquet file per partition."""
    directory.mkdir()
    writers: dict[int, pq.ParquetWriter] = {}
    try:
        for block in ray_data.read_topic(TOPIC, cluster=cluster).iter_batches(
                batch_format="pyarrow", batch_size=None):
            if not block.num_rows:
                continue
            partition = block.column("partition")[0].as_py()
            if partition not in writers:
                writers[partition] = pq.ParquetWriter(
                    directory / f"part-{partition:05d}.parquet", block.schema,
                    compression=PARQUET_COMPRESSION)
            writers[partition].write_table(block, row_group_size=PARQUET_ROW_GROUP_ROWS)
    finally:
        for writer in writers.values():
            writer.close()
    files = sorted(directory.glob("*.parquet"))
    return {
        "files": len(files),
        "bytes": sum(f.stat().st_size for f in files),
        "row_groups": sum(pq.ParquetFile(f).metadata.num_row_groups for f in files),
        "compression": PARQUET_COMPRESSION,
        "row_group_rows_max": PARQUET_ROW_GROUP_ROWS,
        "schema": str(pq.read_schema(files[0])).splitlines(),
    }


# -- the timed regions -----------------------------------------------------------------------

def scan_dataset(dataset: ray.data.Dataset) -> tuple[int, int]:
    """(rows, value bytes) over every block, as Arrow."""
    rows = value_bytes = 0
    for block in dataset.iter_batches(batch_format="pyarrow", batch_size=None):
        rows += block.num_rows
        value_bytes += pc.sum(pc.binary_length(block.column("value"))).as_py() or 0
    return rows, value_bytes


def sum_lengths(frame: Any) -> int:
    return frame.selectExpr(SUM_LENGTH).first()[0]


# -- checks ----------------------------------------------------------------------------------

def dataset_digest(dataset: ray.data.Dataset) -> tuple[int, int]:
    return digest((value for block in dataset.iter_batches(batch_format="pyarrow", batch_size=None)
                   for value in binary_values(block["value"])), zlib.crc32)


def frame_digest(frame: Any) -> tuple[int, int]:
    row = frame.selectExpr("count(*)", "sum(crc32(value))").first()
    return row[0], row[1] or 0


class Steps:
    """The timed steps over one topic and its Parquet copy. Each step returns the seconds
    of its timed region and checks its outcome outside it."""

    def __init__(self, mode: Mode, cluster: RaylogCluster, parquet: Path) -> None:
        self.mode, self.cluster, self.parquet = mode, cluster, str(parquet)
        self.spark: Any = None

    def _check(self, name: str, rows: int, value_bytes: int | None) -> None:
        expected = self.mode.records
        if rows != expected or value_bytes not in (None, expected * RECORD_BYTES):
            raise RuntimeError(f"{name}: {rows:,} rows of {value_bytes} value bytes, "
                               f"{expected:,} records of {RECORD_BYTES} bytes expected")

    def _scan(self, name: str, make: Callable[[], ray.data.Dataset]) -> float:
        seconds, (rows, value_bytes) = timed(lambda: scan_dataset(make()))
        self._check(name, rows, value_bytes)
        return seconds

    def dataset_scan(self) -> float:
        return self._scan("read_topic", lambda: ray_data.read_topic(TOPIC,
                                                                       cluster=self.cluster))

    def parquet_dataset(self) -> float:
        return self._scan("read_parquet", lambda: ray.data.read_parquet(self.parquet))

    def connector(self) -> Any:
        return self.spark.read.format("raylog").option("subscribe", TOPIC).load()

    def arrow(self) -> Any:
        return raylog_spark.read(self.spark, TOPIC, cluster=self.cluster, via="arrow")

    def _count(self, name: str, make: Callable[[], Any]) -> float:
        seconds, rows = timed(lambda: make().count())
        self._check(f"{name} count", rows, None)
        return seconds

    def _sum(self, name: str, make: Callable[[], Any]) -> float:
        seconds, total = timed(lambda: sum_lengths(make()))
        self._check(f"{name} {SUM_LENGTH}", self.mode.records, total)
        return seconds

    def connector_count(self) -> float:
        return self._count('format("raylog")', self.connector)

    def parquet_spark(self) -> float:
        return self._count("spark.read.parquet", lambda: self.spark.read.parquet(self.parquet))

    def connector_sum(self) -> float:
        return self._sum('format("raylog")', self.connector)

    def parquet_spark_sum(self) -> float:
        return self._sum("spark.read.parquet", lambda: self.spark.read.parquet(self.parquet))

    def arrow_count(self) -> float:
        return self._count('raylog.integrations.spark.read(via="arrow")', self.arrow)

    def arrow_sum(self) -> float:
        return self._sum('raylog.integrations.spark.read(via="arrow")', self.arrow)

    def check_datasets(self, expected: tuple[int, int]) -> None:
        for name, dataset in [
                ("read_topic", ray_data.read_topic(TOPIC, cluster=self.cluster)),
                ("read_parquet", ray.data.read_parquet(self.parquet))]:
            if (found := dataset_digest(dataset)) != expected:
                raise RuntimeError(f"{name}: (count, CRC32 sum) {found}, generated {expected}")

    def check_frames(self, expected: tuple[int, int]) -> None:
        for name, frame in [
                ('format("raylog")', self.connector()),
                ('raylog.integrations.spark.read(via="arrow")', self.arrow()),
                ("spark.read.parquet", self.spark.read.parquet(self.parquet))]:
            if (found := frame_digest(frame)) != expected:
                raise RuntimeError(f"{name}: (count, CRC32 sum) {found}, generated {expected}")


# -- the run ---------------------------------------------------------------------------------

def quiet_ray_data() -> None:
    """No per-dataset progress lines: they would bury the table."""
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)


def measure_all(mode: Mode, cluster: RaylogCluster, parquet: Path, expected: tuple[int, int],
                phase: Phases) -> tuple[dict[str, Timing], dict[str, Any]]:
    """The Timings by step name, and facts about the Spark session."""
    steps = Steps(mode, cluster, parquet)
    # Each check reads everything through the same path as the steps: it is their warm-up.
    with phase("check_datasets"):
        steps.check_datasets(expected)
    with phase("datasets"):
        seconds = alternate(mode.repetitions, {"dataset_scan": steps.dataset_scan,
                                               "parquet_dataset": steps.parquet_dataset},
                            warm_up=False)
    try:
        with phase("spark_start"):
            steps.spark = raylog_spark.session("raylog-bench-analytics", **SPARK_SESSION,
                                               configs=SPARK_CONFIGS)
        steps.spark.sparkContext.setLogLevel("ERROR")
        with phase("check_frames"):
            steps.check_frames(expected)
        with phase("spark"):
            seconds |= alternate(mode.repetitions, {
                "connector_count": steps.connector_count, "parquet_spark": steps.parquet_spark,
                "connector_sum": steps.connector_sum,
                "parquet_spark_sum": steps.parquet_spark_sum,
                "arrow_count": steps.arrow_count, "arrow_sum": steps.arrow_sum},
                warm_up=False)
        spark = {"session_start_seconds": phase.seconds["spark_start"],
                 "spark": steps.spark.version,
                 "java": steps.spark.sparkContext._jvm.System.getProperty("java.version")}
    finally:
        with phase("spark_stop"):
            raylog_spark.stop()
    return {name: Timing(mode.records, s) for name, s in seconds.items()}, spark


def figures(timings: dict[str, Timing]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, timing in timings.items():
        out |= rate_figures(f"{name}_records_per_s", timing)
    for ratio, (ours, parquet) in RATIOS.items():
        out[ratio] = out[ours] / out[parquet]
        out[f"{ratio}_median"] = out[f"{ours}_median"] / out[f"{parquet}_median"]
    return out


class Phases:
    """Seconds of each phase of the run, for the JSON: where a slow run's time went."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = time.perf_counter() - start


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load_at_start = time.perf_counter(), os.getloadavg()
    phase = Phases()
    with phase("generate"):
        rows = generate_values(mode.records)
        expected = digest((memoryview(rows.reshape(-1))[i:i + RECORD_BYTES]
                           for i in range(0, rows.size, RECORD_BYTES)), zlib.crc32)
    try:
        with phase("ray_init"):
            cluster = raylog.init(address="local", data_dir=root / "log")
        quiet_ray_data()
        resources = ray.cluster_resources()
        with phase("fill_topic"):
            fill_topic(cluster, rows)
        del rows  # the topic has them now
        with phase("write_parquet"):
            parquet = write_parquet(cluster, root / "parquet")
        with input_frozen():
            timings, spark = measure_all(mode, cluster, root / "parquet", expected, phase)
    finally:
        with phase("ray_shutdown"):
            ray.shutdown()
        reset_default()
        os.environ.pop(DATA_DIR_ENV, None)
    return result_document(
        figures(timings), TARGETS, mode=mode.name, started=started,
        load_at_start=load_at_start,
        machine=machine_info(ray=ray.__version__, raydp=raydp.__version__,
                             pyspark=pyspark.__version__, java=spark["java"]),
        data={
            "description": DATA_DESCRIPTION,
            "record_bytes": RECORD_BYTES,
            "records": mode.records,
            "checksum": {"count": expected[0], "crc32_sum": expected[1]},
            "parquet": parquet,
        },
        sections={
            "config": {
                "cluster": 'raylog.init(address="local"): one node, embedded',
                "ray_resources": {k: v for k, v in resources.items() if k in ("CPU", "GPU")},
                "partitions": PARTITIONS,
                "replication_factor": REPLICATION_FACTOR,
                "topic_configs": TOPIC_CONFIGS,
                "producer": "defaults (LZ4), send_batch of "
                            f"{FILL_CHUNK_RECORDS:,} rows at a time",
                "read_topic_block_records_max": ray_data.DEFAULT_BLOCK_RECORDS,
                "dataset_iteration": 'iter_batches(batch_format="pyarrow", batch_size=None)',
                "datasets_measured_before_spark_started": True,
                "spark_session": {**SPARK_SESSION, "configs": SPARK_CONFIGS, **spark},
                "spark_count_on_parquet": "answered from footer row counts, no value read",
                "temp_dir": str(root),
                "repetitions": mode.repetitions,
                "warmups": 1,
                "warm_up": "the check pass: every record read through the same readers",
            },
            "seconds": {name: timing.seconds for name, timing in timings.items()},
            "phase_seconds": phase.seconds,
            "checks_passed": CHECKS,  # a failed check ends the run with an error instead
        })


ROWS = [  # (figure, label, ratio figure)
    ("dataset_scan_records_per_s", "raylog read_topic, Ray Dataset scan",
     "dataset_scan_ratio_vs_parquet"),
    ("parquet_dataset_records_per_s", "Parquet read_parquet, Ray Dataset scan", None),
    ("connector_count_records_per_s", 'format("raylog") count()',
     "connector_count_vs_parquet"),
    ("parquet_spark_records_per_s", "spark.read.parquet count() (footers only)", None),
    ("connector_sum_records_per_s", f'format("raylog") {SUM_LENGTH}',
     "connector_sum_vs_parquet"),
    ("parquet_spark_sum_records_per_s", f"spark.read.parquet {SUM_LENGTH}", None),
    ("arrow_count_records_per_s", 'raylog.integrations.spark.read(via="arrow") count()',
     "arrow_count_vs_parquet"),
    ("arrow_sum_records_per_s", f'raylog.integrations.spark.read(via="arrow") {SUM_LENGTH}',
     "arrow_sum_vs_parquet"),
]


def table(result: dict[str, Any]) -> str:
    targets, rows = result["targets"], []
    for name, label, ratio in ROWS:
        cells = [label, f"{result[name] / 1e6:,.2f}", f"{result[f'{name}_median'] / 1e6:,.2f}",
                 "-", "-"]
        if ratio is not None:
            target, met = target_cells(ratio, targets)
            cells[-2] = f"{result[ratio]:.2f} ({target}: {met})"
            cells[-1] = f"{result[f'{ratio}_median']:.2f}"
        rows.append(cells)
    return markdown_table(["measurement (M records/s)", "best", "median",
                           "raylog/Parquet, best", "median"], rows, align="lrrlr")


def headline(mode: Mode, result: dict[str, Any]) -> str:
    parquet = result["data"]["parquet"]
    return (f"analytics scan benchmark, {mode.name} mode: {mode.records:,} records of "
            f"{RECORD_BYTES} bytes; {PARTITIONS} partitions vs {parquet['files']} Parquet "
            f"files ({parquet['compression']}, {parquet['row_groups']} row groups, "
            f"{parquet['bytes'] / 1e6:,.0f} MB); {result['machine']['cpu_count']} CPUs, Ray "
            f"{ray.__version__}, RayDP {result['machine']['raydp']}")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         f"{QUICK.records:,} records instead of {FULL.records:,}",
                         (QUICK, FULL), run, headline, table)


if __name__ == "__main__":
    sys.exit(main())
