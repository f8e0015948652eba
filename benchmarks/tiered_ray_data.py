"""Ray Data's cold reads, A/B: ``read_topic`` over the remote segments of a tiered topic
against a Ray task per remote segment piece that asks the controller for the store.

Run from the repository root (through the machine's cluster slot script on a shared one)::

    .venv/bin/python benchmarks/tiered_ray_data.py [--records N] [--rounds R]

Setup as benchmarks/tiered.py's (its ``fill`` and ``upload``): one embedded node, a topic of
6 partitions and 1 MiB segments filled with 100-byte page views, the closed segments holding
the first 90% of each partition's records uploaded to a ``file://`` store (the cluster's:
``RAYLOG_REMOTE_STORAGE_URI``), the planners given the views of those uploads. Each step
reads only the cold part (from the log start to each partition's local log start), iterated
as Arrow, and is checked to see every cold record:

read_topic   ``raylog.integrations.ray_data.read_topic`` as this tree has it.
tasks        one Ray task (0.25 CPU, spread over the nodes) per cold piece, which asks the
             controller for the store once per worker process and decodes the piece with
             ``raylog.tiered.cold_read.segment_table``: the other way of keeping credentials
             out of task arguments, as a reference.

The steps alternate, one of each per round after a warm-up round (``--back-to-back``: all
rounds of one step, then of the next: Ray's idle workers then stay for the tasks). Printed
per step: the wall seconds and the cold records per second of each round, and the CPU seconds the
cluster's processes (the raylet and every process under it, sampled: workers started and
ended by a step count) and the driver spent, with the load average before and
after.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import ray
from analytics import quiet_ray_data, scan_dataset
from tiered import PARTITIONS, STORE_URI_ENV, TOPIC, fill, upload

import raylog
from raylog.client.connection import reset_default
from raylog.integrations import ray_data
from raylog.integrations.ray_data import cold as ray_data_cold
from raylog.tiered.cold_plan import TieredView
from raylog.tiered.cold_read import segment_table
from raylog.tiered.layout import RemoteSegment
from raylog.tiered.store import ObjectStore, cached_store
from raylog.types import TopicPartition
from raylog.util.cluster_names import CONTROLLER_NAME, DATA_DIR_ENV, NAMESPACE

from common import generate_values

_STORE: dict[str, ObjectStore] = {}


@ray.remote(num_cpus=0.25)
def _read_piece(segment_json: bytes, start: int, end: int) -> pa.Table:
    # The store, asked of the controller once per worker process (a script's globals
    # travel with its remote function: the cache is a dict of this module, per worker).
    if "store" not in _STORE:
        controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        found = ray.get(controller.remote_storage.remote())
        _STORE["store"] = cached_store(found["uri"], found["settings"])
    return segment_table(_STORE["store"], RemoteSegment.from_json(segment_json), start, end)


def tasks_dataset(cluster: Any, ends: dict[TopicPartition, int]) -> ray.data.Dataset:
    ranges = ray_data.offset_ranges(TOPIC, end=ends, cluster=cluster)
    views = ray_data_cold.tiered_views(cluster, sorted(ranges), False)
    plan = ray_data_cold.plan_read(ranges, views, ray_data.DEFAULT_BLOCK_RECORDS)
    assert not plan.hot, plan.hot
    return ray.data.from_arrow_refs([
        _read_piece.options(scheduling_strategy="SPREAD").remote(
            piece.segment.to_json(), piece.start, piece.end) for _, piece in plan.cold])


class ClusterCpu:
    """CPU seconds of this node's raylet, every process under it and this driver, sampled
    every SAMPLE_S on a thread: a worker that ends keeps the CPU time last read from it (the
    raylet does not collect its children's times), so at most SAMPLE_S of each is missed."""

    SAMPLE_S = 0.1

    def __init__(self) -> None:
        self._raylet = psutil.Process(
            ray._private.worker._global_node.all_processes["raylet"][0].process.pid)
        self._seen: dict[tuple[int, float], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for process in [self._raylet, *self._raylet.children(recursive=True)]:
            try:
                with process.oneshot():
                    t = process.cpu_times()
                    key = (process.pid, process.create_time())
            except psutil.Error:
                continue
            with self._lock:
                self._seen[key] = t.user + t.system

    def _run(self) -> None:
        while not self._stop.wait(self.SAMPLE_S):
            self._sample()

    def total_s(self) -> float:
        self._sample()
        own = resource.getrusage(resource.RUSAGE_SELF)
        with self._lock:
            return sum(self._seen.values()) + own.ru_utime + own.ru_stime

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--back-to-back", action="store_true",
                        help="every round of one step, then every round of the next")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="raylog-cold-ab-"))
    store_dir = root / "store"
    store_dir.mkdir()
    store_uri = f"file://{store_dir}"
    os.environ[STORE_URI_ENV] = store_uri
    try:
        cluster = raylog.init(address="local", data_dir=root / "log")
        quiet_ray_data()
        fill(cluster, TOPIC, generate_values(args.records), {})
        views, _ = upload(cluster, store_uri)
        ray_data_cold.tiered_views = lambda c, tps, *_: {
            tp: TieredView.from_answer(views[tp]) if tp in views else None for tp in tps}
        ends = {tp: v["local_log_start"] for tp, v in views.items()}
        cold = sum(v["local_log_start"] - v["log_start"] for v in views.values())
        steps = {
            "read_topic": lambda: ray_data.read_topic(TOPIC, end_offset=ends, cluster=cluster),
            "tasks": lambda: tasks_dataset(cluster, ends),
        }
        print(f"{cold:,} cold records in {sum(len(v['remote']) for v in views.values())} "
              f"pieces, {PARTITIONS} partitions; load {os.getloadavg()}", flush=True)
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in steps}
        cpu_meter = ClusterCpu()
        order = [(r, name) for r in range(args.rounds + 1) for name in steps]
        if args.back_to_back:
            order = [(r, name) for name in steps for r in range(args.rounds + 1)]
        for round_, name in order:
            cpu, started = cpu_meter.total_s(), time.perf_counter()
            rows, _ = scan_dataset(steps[name]())
            wall, cpu = time.perf_counter() - started, cpu_meter.total_s() - cpu
            if rows != cold:
                raise RuntimeError(f"{name}: {rows:,} rows, want {cold:,}")
            print(f"round {round_} {name:10s} {wall:6.2f} s {cold / wall:12,.0f} rec/s "
                  f"cpu {cpu:6.2f} s  load {os.getloadavg()[0]:.1f}", flush=True)
            if round_:
                figures[name].append((wall, cpu))
        for name, runs in figures.items():
            walls = sorted(w for w, _ in runs)
            cpus = sorted(c for _, c in runs)
            print(f"{name:10s} best {cold / walls[0]:12,.0f} rec/s, median "
                  f"{cold / walls[len(walls) // 2]:12,.0f} rec/s; cpu median "
                  f"{cpus[len(cpus) // 2]:.2f} s per read")
        print(f"load at end {os.getloadavg()}")
        cpu_meter.stop()
    finally:
        ray.shutdown()
        reset_default()
        os.environ.pop(DATA_DIR_ENV, None)
        os.environ.pop(STORE_URI_ENV, None)
        import shutil
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
