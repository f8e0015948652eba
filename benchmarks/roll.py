"""A rolling restart under acks=all load: failed sends, and produce latency during the roll
against before it.

Run from the repository root, through the slot script (it starts a Ray cluster)::

    PYTHONPATH=$PWD /work/wt/cluster-run .venv/bin/python benchmarks/roll.py [--quick] [--json PATH]

A Ray cluster of a head node (the controller) and three broker nodes (one process each,
1 CPU, 200 MB of object store), a topic of ``partitions`` partitions at replication
factor 3 with ``min.insync.replicas=2``. Two producer threads (``acks="all"``,
``linger_ms=1``) each send ``sends_per_s`` keyed 100-byte records per second, paced, for
``before_s`` seconds, then during a full roll (``Admin.roll()``: each broker in turn
drained, restarted, waited for until every partition is in sync, preferred leaders back),
then ``after_s`` seconds more. Every send's latency is the time from ``send`` to its
future resolving; a send belongs to the phase it was made in.

- ``roll_failed_sends``: sends whose future failed, over the whole run (target 0).
- ``roll_p99_ratio``: the p99 produce latency of the sends made during the roll over that
  of the sends made before it (target at most 10).
- ``roll_lost`` / ``roll_duplicated``: acknowledged values missing from the topic, and
  values found more than once, read back from the start at the end (both must be 0).
- ``roll_seconds``: how long the roll took.

The machine is shared: the p99s are read with the load average in the JSON.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from common import machine_info, markdown_table, run_benchmark

HERE = Path(__file__).resolve()
DEFAULT_JSON = HERE.parent / "results" / "roll.json"
TOPIC = "roll"
BROKERS = 3
TARGET_P99_RATIO = 10.0


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    partitions: int
    sends_per_s: int  # per producer
    before_s: float
    after_s: float
    producers: int = 2


QUICK = Mode("quick", partitions=3, sends_per_s=100, before_s=10, after_s=5)
FULL = Mode("full", partitions=6, sends_per_s=200, before_s=30, after_s=10)


@dataclasses.dataclass
class Send:
    value: bytes
    phase: str
    sent_at: float
    resolved_at: float | None = None
    error: BaseException | None = None


class Load:
    """Producer threads sending paced, unique values, each send timed; ``phase`` names
    the phase new sends belong to."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.phase = "before"
        self.sends: list[Send] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, args=(i,), daemon=True)
                         for i in range(mode.producers)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _produce(self, i: int) -> None:
        from raylog import Producer

        pause = 10 / self.mode.sends_per_s  # ten sends, then a pause: paced
        padding = b"x" * 80
        with Producer(acks="all", linger_ms=1, delivery_timeout_ms=120_000) as producer:
            index = 0
            while not self._stop.is_set():
                value = b"p%d-%08d-" % (i, index) + padding
                send = Send(value, self.phase, time.monotonic())
                future = producer.send(TOPIC, value, key=b"k%d" % (index % 64))
                future.add_done_callback(lambda f, s=send: self._resolved(s, f))
                with self._lock:
                    self.sends.append(send)
                index += 1
                if index % 10 == 0:
                    time.sleep(pause)
            producer.flush()

    @staticmethod
    def _resolved(send: Send, future: Any) -> None:
        send.resolved_at = time.monotonic()
        send.error = future.exception(0)


def p99_ms(sends: list[Send]) -> float:
    latencies = [s.resolved_at - s.sent_at for s in sends
                 if s.resolved_at is not None and s.error is None]
    return float(np.percentile(latencies, 99) * 1000) if latencies else float("nan")


def run(mode: Mode, root: Path) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    import raylog
    from raylog import Admin, Consumer, TopicPartition
    from raylog.client.connection import reset_default
    from raylog.metadata.hosts import PROCESSES_ENV
    from raylog.util.cluster_names import BROKER_RESOURCE, DATA_DIR_ENV

    started, load_at_start = time.perf_counter(), os.getloadavg()[0]
    node_args = {"num_cpus": 1, "object_store_memory": 200 << 20}
    cluster = Cluster(initialize_head=True, head_node_args={
        **node_args, "include_dashboard": False,
        "env_vars": {DATA_DIR_ENV: str(root / "head")}})
    try:
        for i in range(BROKERS):
            cluster.add_node(**node_args, resources={BROKER_RESOURCE: 1},
                             env_vars={DATA_DIR_ENV: str(root / f"broker-{i}"),
                                       PROCESSES_ENV: "1"})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        raylog.init()
        admin = Admin()
        admin.create_topic(TOPIC, mode.partitions, 3, {"min.insync.replicas": "2"})
        admin.wait_in_sync(300)
        load = Load(mode)
        load.start()
        time.sleep(mode.before_s)  # the baseline phase lasts this long
        load.phase = "roll"
        roll_started = time.perf_counter()
        steps: list[tuple[str, int, float]] = []
        rolled = admin.roll(on_step=lambda step, broker: steps.append(
            (step, broker, time.perf_counter() - roll_started)))
        roll_seconds = time.perf_counter() - roll_started
        load.phase = "after"
        time.sleep(mode.after_s)
        load.stop()
        sends = list(load.sends)
        unresolved = sum(s.resolved_at is None for s in sends)
        acked = {s.value for s in sends if s.resolved_at is not None and s.error is None}
        tps = [TopicPartition(TOPIC, p) for p in range(mode.partitions)]
        with Consumer(auto_offset_reset="earliest") as consumer:
            consumer.assign(tps)
            ends = consumer.end_offsets(tps)
            found: Counter = Counter()
            deadline = time.monotonic() + 300
            while any(consumer.position(tp) < ends[tp] for tp in tps):
                if time.monotonic() > deadline:
                    raise TimeoutError("could not read the topic back within 300 s")
                found.update(r.value for r in consumer.poll(timeout_ms=500))
    finally:
        reset_default()
        ray.shutdown()
        cluster.shutdown()
    by_phase = {phase: [s for s in sends if s.phase == phase]
                for phase in ("before", "roll", "after")}
    figures = {
        "roll_failed_sends": sum(s.error is not None for s in sends) + unresolved,
        "roll_p99_ratio": p99_ms(by_phase["roll"]) / p99_ms(by_phase["before"]),
        "roll_lost": len(acked - found.keys()),
        "roll_duplicated": sum(1 for count in found.values() if count > 1),
        "roll_seconds": roll_seconds,
        "produce_p99_before_ms": p99_ms(by_phase["before"]),
        "produce_p99_roll_ms": p99_ms(by_phase["roll"]),
        "produce_p99_after_ms": p99_ms(by_phase["after"]),
    }
    targets = {
        "roll_failed_sends": {"target": "= 0", "value": figures["roll_failed_sends"],
                              "met": figures["roll_failed_sends"] == 0},
        "roll_p99_ratio": {"target": f"<= {TARGET_P99_RATIO:g}",
                           "value": figures["roll_p99_ratio"],
                           "met": figures["roll_p99_ratio"] <= TARGET_P99_RATIO},
        "roll_lost": {"target": "= 0", "value": figures["roll_lost"],
                      "met": figures["roll_lost"] == 0},
        "roll_duplicated": {"target": "= 0", "value": figures["roll_duplicated"],
                            "met": figures["roll_duplicated"] == 0},
    }
    return {
        **figures, "targets": targets, "mode": mode.name,
        "config": {**dataclasses.asdict(mode), "brokers": BROKERS, "replication_factor": 3,
                   "min_insync_replicas": 2, "acks": "all"},
        "sends": {phase: len(s) for phase, s in by_phase.items()},
        "unresolved_sends": unresolved, "rolled": rolled,
        "steps": [{"step": s, "broker": b, "at_s": round(t, 2)} for s, b, t in steps],
        "machine": machine_info(load_average_1m={"start": load_at_start,
                                                 "end": os.getloadavg()[0]}),
        "wall_seconds": time.perf_counter() - started,
    }


def table(result: dict[str, Any]) -> str:
    targets = result["targets"]
    rows = [[name, f"{result[name]:.2f}" if isinstance(result[name], float)
             else str(result[name]), targets[name]["target"] if name in targets else "-",
             ("met" if targets[name]["met"] else "NOT MET") if name in targets else "-"]
            for name in ("roll_failed_sends", "roll_p99_ratio", "roll_lost", "roll_duplicated",
                         "produce_p99_before_ms", "produce_p99_roll_ms",
                         "produce_p99_after_ms", "roll_seconds")]
    return markdown_table(["figure", "value", "target", "met"], rows, "lrrl")


def headline(mode: Mode, result: dict[str, Any]) -> str:
    sends = result["sends"]
    return (f"roll ({mode.name}): {BROKERS} brokers, {mode.partitions} partitions at rf 3, "
            f"{mode.producers} acks=all producers at {mode.sends_per_s} sends/s each; "
            f"{sends['before']} sends before, {sends['roll']} during the "
            f"{result['roll_seconds']:.1f} s roll, {sends['after']} after")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON, "a shorter baseline, 3 partitions, "
                         "100 sends/s per producer", (QUICK, FULL), run, headline, table)


if __name__ == "__main__":
    sys.exit(main())
