"""Tiered storage: cold data read straight from the object store against hot data and Parquet.

Run from the repository root::

    .venv/bin/python benchmarks/tiered.py [--quick] [--json PATH]

``--quick`` (2 million records) takes a few minutes on a 2-core machine, most of it starting
Spark; the full run 10 million. Prints a Markdown table and writes JSON (default
``benchmarks/results/tiered.json``).

Setup: ``raylog.init(address="local", data_dir=<temporary directory>)`` (one embedded node,
a broker), with ``RAYLOG_REMOTE_STORAGE_URI`` set to a ``file://`` directory in the same
temporary directory (the object store). A topic of 6 partitions, replication factor 1,
``retention.ms=-1`` and ``segment.bytes`` of SEGMENT_BYTES is filled with the 100-byte page
views of ``common.py`` by ``Producer.send_batch`` (LZ4).

Cold segments. The closed segments holding the first REMOTE_SHARE (90%) of each partition's
records are uploaded into the store in the layout of raylog/tiered/layout.py by
tests/tieredutil.py (with a leader's Uploader: segment, indexes, epochs, manifest last;
every object's sha256 in its record), and the planners are given
the views a broker's ``tiered_view`` would answer with the local log starting right after
them. (The brokers still hold those records: this measures the analytics path from the
store, the same code a tiered topic's reads run once the broker side uploads; the
figure printed as ``remote_share`` is the share of records read from the store.) The same
records are written as Parquet into the same store directory, one file per partition
(snappy, pyarrow's defaults), from read_topic's tables. Both come from the page cache:
the figures measure decoding and moving data, not the disk.

Measurements, each over all the records, alternating one repetition of each step per round
after one warm-up round (the checks below), best and median of REPETITIONS:

spark_cold_sum     ``raylog.integrations.spark.read(spark, topic)`` then
                   ``selectExpr("sum(length(value))")``: the connector's planner lays the
                   cold pieces over the ranges; each cold piece is read from the store by
                   the executor's node's cold-read gateway (actors/cold_reader.py,
                   called across languages: the segment fetched, its sha256 checked, its
                   batches handed to the JVM, decoded by BatchDecoder), the hot rest by the
                   brokers. The warm-up (the checks) starts the gateway.
parquet_spark_sum  ``spark.read.parquet(<store>/parquet).selectExpr("sum(length(value))")``.
dataset_cold_scan  ``read_topic(topic)`` (cold pieces as Ray tasks reading the store),
                   iterated as Arrow, adding up rows and value bytes.
parquet_dataset    ``ray.data.read_parquet(<store>/parquet)`` iterated the same way.
consume_cold, consume_hot  (a topic with ``remote.storage.enable`` whose brokers uploaded
                   and trimmed their local logs) a Consumer reading the same number of
                   records per partition from offset 0 (cold: fetched by the brokers from
                   the store) and from the local log start (hot).

Spark: one RayDP session (1 executor, 1 core, 1 GB) from ``raylog.integrations.spark.session()``.
Checks outside the timed regions: the topic holds the records sent; each reader gives the
generated records' count and CRC32 sum once; every timed repetition saw every record and
100 value bytes each.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyspark
import ray
import raydp
from analytics import dataset_digest, frame_digest, quiet_ray_data, scan_dataset, sum_lengths

import raylog
from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.client.connection import RaylogCluster, reset_default
from raylog.integrations import ray_data
from raylog.integrations import spark as raylog_spark
from raylog.integrations.ray_data import cold as ray_data_cold
from raylog.tiered.cold_plan import TieredView
from raylog.tiered.store import ObjectStore
from raylog.util.cluster_names import DATA_DIR_ENV

from common import (
    DATA_DESCRIPTION,
    FIRST_TIMESTAMP_MS,
    RECORD_BYTES,
    RESULTS_DIR,
    alternate,
    binary_array,
    digest,
    generate_values,
    input_frozen,
    machine_info,
    ratio_figures,
    ratio_table,
    result_document,
    run_benchmark,
    timed,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.tieredutil import fake_view, upload_segments  # from the repository root

DEFAULT_JSON = RESULTS_DIR / "tiered.json"
TOPIC = "pageviews-tiered"
CONSUME_TOPIC = "pageviews-consume"
PARTITIONS = 6
SEGMENT_BYTES = 1 << 20
REMOTE_SHARE = 0.9
FILL_CHUNK_RECORDS = 500_000
STORE_URI_ENV = "RAYLOG_REMOTE_STORAGE_URI"  # raylog/tiered/settings.py (broker side)
SPARK_SESSION = {"executors": 1, "cores": 1, "memory": "1GB"}
SPARK_CONFIGS = {"spark.ui.showConsoleProgress": "false"}
MAX_POLL_RECORDS = 5_000
CONSUME_TIMEOUT_S = 300  # for the brokers to upload and trim, and for a stalled consumer

TARGETS = {"spark_cold_vs_parquet": 1.0, "cold_vs_hot_consume": 0.5}
RATIOS = {
    "spark_cold_vs_parquet": ("spark_cold_sum_records_per_s",
                              "parquet_spark_sum_records_per_s"),
    "dataset_cold_vs_parquet": ("dataset_cold_scan_records_per_s",
                                "parquet_dataset_records_per_s"),
}
CONSUME_RATIOS = {"cold_vs_hot_consume": ("consume_cold_records_per_s",
                                          "consume_hot_records_per_s")}


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    records: int
    repetitions: int


QUICK = Mode("quick", records=2_000_000, repetitions=3)
FULL = Mode("full", records=10_000_000, repetitions=3)


def fill(cluster: RaylogCluster, topic: str, rows: np.ndarray,
         configs: dict[str, Any]) -> None:
    Admin(cluster=cluster).create_topic(topic, PARTITIONS, 1, {
        "retention.ms": -1, "segment.bytes": SEGMENT_BYTES, **configs})
    with Producer(cluster=cluster) as producer:
        for start in range(0, len(rows), FILL_CHUNK_RECORDS):
            chunk = rows[start:start + FILL_CHUNK_RECORDS]
            stamps = np.arange(FIRST_TIMESTAMP_MS + start,
                               FIRST_TIMESTAMP_MS + start + len(chunk), dtype=np.int64)
            producer.send_batch(topic, pa.table({"value": binary_array(chunk),
                                                 "timestamp": stamps})).result()
        producer.flush()
    held = sum(e - s for s, e in ray_data.offset_ranges(topic, cluster=cluster).values())
    if held != len(rows):
        raise RuntimeError(f"{topic}: sent {len(rows):,} records, its offsets hold {held:,}")


def upload(cluster: RaylogCluster, store_uri: str) -> tuple[dict[TopicPartition, dict], float]:
    """Each partition's closed segments below REMOTE_SHARE of its records, uploaded; the
    fake tiered views, and the share of the records they hold."""
    store = ObjectStore.from_uri(store_uri)
    admin = Admin(cluster=cluster)
    views, cold, total = {}, 0, 0
    for replica in admin.describe_replicas(TOPIC):
        p, hw = replica["partition"], replica["high_watermark"]
        segments = upload_segments(replica["directory"], store, TOPIC, p,
                                   below=int(hw * REMOTE_SHARE) + 1)
        view = fake_view(segments, replica["log_start_offset"], hw, store_uri)
        views[TopicPartition(TOPIC, p)] = view
        cold += view["local_log_start"] - view["log_start"]
        total += hw - view["log_start"]
    return views, cold / total


def write_parquet(cluster: RaylogCluster, directory: Path) -> int:
    """The topic's records as read_topic gives them, one Parquet file per partition."""
    import pyarrow.parquet as pq

    directory.mkdir()
    writers: dict[int, Any] = {}
    try:
        for block in ray_data.read_topic(TOPIC, cluster=cluster).iter_batches(
                batch_format="pyarrow", batch_size=None):
            if block.num_rows:
                p = block.column("partition")[0].as_py()
                if p not in writers:
                    writers[p] = pq.ParquetWriter(directory / f"part-{p:05d}.parquet",
                                                  block.schema, compression="snappy")
                writers[p].write_table(block)
    finally:
        for writer in writers.values():
            writer.close()
    return sum(f.stat().st_size for f in directory.glob("*.parquet"))


class Steps:
    def __init__(self, mode: Mode, cluster: RaylogCluster, parquet: Path) -> None:
        self.mode, self.cluster, self.parquet = mode, cluster, str(parquet)
        self.spark: Any = None

    def _check(self, name: str, rows: int, value_bytes: int) -> None:
        if rows != self.mode.records or value_bytes != rows * RECORD_BYTES:
            raise RuntimeError(f"{name}: {rows:,} rows of {value_bytes:,} value bytes")

    def cold_frame(self) -> Any:
        return raylog_spark.read(self.spark, TOPIC, cluster=self.cluster)

    def spark_cold_sum(self) -> float:
        seconds, total = timed(lambda: sum_lengths(self.cold_frame()))
        self._check("spark cold", self.mode.records, total)
        return seconds

    def parquet_spark_sum(self) -> float:
        seconds, total = timed(lambda: sum_lengths(self.spark.read.parquet(self.parquet)))
        self._check("spark parquet", self.mode.records, total)
        return seconds

    def dataset_cold_scan(self) -> float:
        seconds, (rows, value_bytes) = timed(
            lambda: scan_dataset(ray_data.read_topic(TOPIC, cluster=self.cluster)))
        self._check("read_topic cold", rows, value_bytes)
        return seconds

    def parquet_dataset(self) -> float:
        seconds, (rows, value_bytes) = timed(
            lambda: scan_dataset(ray.data.read_parquet(self.parquet)))
        self._check("read_parquet", rows, value_bytes)
        return seconds


def consume_span(cluster: RaylogCluster, starts: dict[TopicPartition, int], per: int) -> float:
    """Seconds for a new Consumer to read ``per`` records of each partition from ``starts``."""
    consumer = Consumer(cluster=cluster, max_poll_records=MAX_POLL_RECORDS)
    try:
        consumer.assign(list(starts))
        for tp, offset in starts.items():
            consumer.seek(tp, offset)
        want = per * len(starts)

        def read() -> int:
            seen = value_bytes = 0
            deadline = time.monotonic() + CONSUME_TIMEOUT_S
            while seen < want:
                records = consumer.poll(timeout_ms=1000)
                if not records and time.monotonic() > deadline:
                    raise RuntimeError(f"consumed {seen:,} of {want:,}, then nothing")
                seen += len(records)
                value_bytes += sum(len(r.value) for r in records)
            return value_bytes

        seconds, value_bytes = timed(read)
    finally:
        consumer.close()
    if value_bytes < want * RECORD_BYTES:
        raise RuntimeError(f"consumer read {value_bytes:,} value bytes, want {want:,} records")
    return seconds


def measure_consume(mode: Mode, cluster: RaylogCluster, rows: np.ndarray
                    ) -> tuple[dict[str, list[float]], int]:
    """cold_vs_hot_consume on a tiered topic the brokers uploaded."""
    fill(cluster, CONSUME_TOPIC, rows, {"remote.storage.enable": True,
                                        "local.retention.bytes": SEGMENT_BYTES})
    tps = [TopicPartition(CONSUME_TOPIC, p) for p in range(PARTITIONS)]
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    while True:  # until the brokers moved most of each partition to the store
        views = ray_data_cold.tiered_views(cluster, tps, True, 60)
        if all(v.local_log_start - v.log_start >= (v.high_watermark - v.log_start) / 2
               for v in views.values()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the brokers did not tier {CONSUME_TOPIC} in time: {views}")
        time.sleep(1)
    per = min(min(v.local_log_start - v.log_start, v.high_watermark - v.local_log_start)
              for v in views.values())
    cold = {tp: views[tp].log_start for tp in tps}
    hot = {tp: views[tp].local_log_start for tp in tps}
    steps = {"consume_cold": lambda: consume_span(cluster, cold, per),
             "consume_hot": lambda: consume_span(cluster, hot, per)}
    return alternate(mode.repetitions, steps), per * PARTITIONS


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load_at_start = time.perf_counter(), os.getloadavg()
    rows = generate_values(mode.records)
    expected = digest((memoryview(rows.reshape(-1))[i:i + RECORD_BYTES]
                       for i in range(0, rows.size, RECORD_BYTES)), zlib.crc32)
    store_dir = root / "store"
    store_dir.mkdir()
    store_uri = f"file://{store_dir}"
    os.environ[STORE_URI_ENV] = store_uri  # the cluster's store, the brokers' uploads go to
    spark_facts: dict[str, Any] = {}
    consume_note = "not reached"
    try:
        cluster = raylog.init(address="local", data_dir=root / "log")
        quiet_ray_data()
        fill(cluster, TOPIC, rows, {})
        views, remote_share = upload(cluster, store_uri)
        parquet_bytes = write_parquet(cluster, store_dir / "parquet")
        brokers_views = ray_data_cold.tiered_views
        ray_data_cold.tiered_views = lambda c, tps, *_: {  # the views of the uploads above
            tp: TieredView.from_answer(views[tp]) if tp in views else None for tp in tps}
        steps = Steps(mode, cluster, store_dir / "parquet")
        with input_frozen():
            for name, dataset in (("read_topic", ray_data.read_topic(TOPIC, cluster=cluster)),
                                  ("read_parquet", ray.data.read_parquet(steps.parquet))):
                if (found := dataset_digest(dataset)) != expected:
                    raise RuntimeError(f"{name}: (count, CRC32 sum) {found}, want {expected}")
            seconds = alternate(mode.repetitions, {"dataset_cold_scan": steps.dataset_cold_scan,
                                                   "parquet_dataset": steps.parquet_dataset},
                                warm_up=False)
            try:
                steps.spark = raylog_spark.session("raylog-bench-tiered", **SPARK_SESSION,
                                                   configs=SPARK_CONFIGS)
                steps.spark.sparkContext.setLogLevel("ERROR")
                for name, frame in (("spark cold", steps.cold_frame()),
                                    ("spark parquet", steps.spark.read.parquet(steps.parquet))):
                    if (found := frame_digest(frame)) != expected:
                        raise RuntimeError(f"{name}: (count, CRC32 sum) {found}")
                seconds |= alternate(mode.repetitions, {
                    "spark_cold_sum": steps.spark_cold_sum,
                    "parquet_spark_sum": steps.parquet_spark_sum}, warm_up=False)
                spark_facts = {"spark": steps.spark.version}
            finally:
                raylog_spark.stop()
            ray_data_cold.tiered_views = brokers_views  # the consumed topic is the brokers'
            try:
                consumed = measure_consume(mode, cluster, rows)
                consume_note = "measured"
            except RuntimeError as e:  # the brokers did not tier in time: say so, keep the rest
                consumed, consume_note = None, f"failed: {e}"
    finally:
        ray.shutdown()
        reset_default()
        os.environ.pop(DATA_DIR_ENV, None)
        os.environ.pop(STORE_URI_ENV, None)
    figures = ratio_figures(seconds, mode.records, RATIOS)
    targets = {"spark_cold_vs_parquet": TARGETS["spark_cold_vs_parquet"]}
    if consumed is not None:
        figures |= ratio_figures(consumed[0], consumed[1], CONSUME_RATIOS)
        targets = dict(TARGETS)
        seconds |= consumed[0]
    return result_document(
        figures, targets, mode=mode.name, started=started, load_at_start=load_at_start,
        machine=machine_info(ray=ray.__version__, raydp=raydp.__version__,
                             pyspark=pyspark.__version__),
        data={"description": DATA_DESCRIPTION, "record_bytes": RECORD_BYTES,
              "records": mode.records, "remote_share": remote_share,
              "parquet_bytes": parquet_bytes,
              "checksum": {"count": expected[0], "crc32_sum": expected[1]}},
        sections={
            "config": {"partitions": PARTITIONS, "segment_bytes": SEGMENT_BYTES,
                       "store": "file:// in the run's temporary directory",
                       "cold_segments": "uploaded by tests/tieredutil.py, views faked",
                       "spark_session": {**SPARK_SESSION, **spark_facts},
                       "repetitions": mode.repetitions,
                       "consume": consume_note},
            "seconds": seconds,
        })


def table(result: dict[str, Any]) -> str:
    steps = ["spark_cold_sum", "parquet_spark_sum", "dataset_cold_scan", "parquet_dataset"]
    ratios = list(RATIOS)
    if "cold_vs_hot_consume" in result:
        steps += ["consume_cold", "consume_hot"]
        ratios += list(CONSUME_RATIOS)
    return ratio_table(result, steps, ratios)


def headline(mode: Mode, result: dict[str, Any]) -> str:
    return (f"tiered storage benchmark, {mode.name} mode: {mode.records:,} records of "
            f"{RECORD_BYTES} bytes, {PARTITIONS} partitions, "
            f"{result['data']['remote_share']:.0%} of them read from the store; "
            f"consume: {result['config']['consume']}")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         f"{QUICK.records:,} records instead of {FULL.records:,}",
                         (QUICK, FULL), run, headline, table)


if __name__ == "__main__":
    sys.exit(main())
