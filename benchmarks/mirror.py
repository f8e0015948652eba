"""Mirroring between two clusters: how fast ``raylog mirror`` copies, against one consumer
reading the same source, and what a kill leaves behind.

Run from the repository root::

    .venv/bin/python benchmarks/mirror.py [--quick] [--json PATH]

``--quick`` takes about three minutes on a 2-core machine, the full run six to eight. The
script prints a Markdown table and writes JSON (default ``benchmarks/results/mirror.json``).

Setup: two one-node raylog clusters on this machine, each in Ray processes of its own
(``raylog.mirror.local``: ``ray start --head`` with 1 CPU, 200 MB of object store, its own
token), the source served over Arrow Flight by ``raylog flight-serve`` on 127.0.0.1. This
process is a driver of the source. One topic, 6 partitions, ``retention.ms=-1``: the
100-byte page views of ``common.py``, each with an 8-byte key holding its index (so every
record can be told apart), partition = index % 6, produced with ``send_batch`` before any
timing.

Measurements, alternating per repetition (the machine is shared; a warm-up first):

consume   a new ``Consumer(auto_offset_reset="earliest")`` on the source assigned all 6
          partitions, polling until it has every record, adding up ``len(record.value)``:
          from ``assign`` to the last record (``consume_records_per_s``).
mirror    ``raylog mirror --once`` (a process joining the target) copying the topic into a
          remote topic of a new alias: ``mirror_records_per_s`` = records / the seconds it
          says it copied for (from its first partition copier's start, which reads where
          the target stands, to its last one's end, every batch acknowledged by the target
          with acks=all). Not counted, as the consumer's joining is not: starting Python and
          Ray and joining the target (the JSON has the process's seconds, and those of the
          same command run again with nothing left to copy, which must copy 0 records).

Exactly once after kills: while this process writes a second topic (2,000 keyed records
every 20 ms), ``raylog mirror`` (following) copies it into another alias and is killed
with SIGKILL 0.3 to 2 s after it starts copying, twice; then the writing stops and
``raylog mirror --once`` finishes. A process joining the target reads every record of the
remote topics and their keys are compared with what was produced, per partition:
``missing`` (produced, not on the target), ``duplicates`` (on the target more than once),
and whether the order is the same; the uninterrupted copy of the first topic is checked
the same way.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from common import (
    RESULTS_DIR,
    Timing,
    binary_array,
    describe_data,
    generate_values,
    machine_info,
    markdown_table,
    rate_figures,
    result_document,
    run_benchmark,
    timed,
)

DEFAULT_JSON = RESULTS_DIR / "mirror.json"
PARTITIONS = 6
TOPIC = "pageviews"
LIVE_TOPIC = "live"     # written while the mirror is killed
LIVE_CHUNK = 2_000      # records per send_batch ...
LIVE_EVERY_S = 0.02     # ... this often (at most 100,000 records/s)
TOKEN = "mirror-benchmark-token"
STALL_TIMEOUT_MS = 60_000
MIRROR_TIMEOUT_S = 900
TARGETS = {"mirror_over_consume": 0.5}  # minimums
ZERO = ("missing", "duplicates")        # must be 0


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    records: int
    repetitions: int  # timed, after one warm-up
    kills: int


QUICK = Mode("quick", records=1_000_000, repetitions=2, kills=2)
FULL = Mode("full", records=3_000_000, repetitions=3, kills=3)

# Run in a process joining the target: every key of a remote topic, per partition, in order.
DUMP_TARGET = """
import sys, numpy as np, raylog
from raylog import Consumer, TopicPartition
cluster = raylog.init(sys.argv[1], start_local=False, create=False)
topic, out = sys.argv[2], sys.argv[3]
tps = [TopicPartition(topic, p) for p in range(cluster.topic(topic).num_partitions)]
keys = {tp.partition: [] for tp in tps}
with Consumer(auto_offset_reset="earliest", max_poll_records=50_000) as consumer:
    consumer.assign(tps)
    ends = consumer.end_offsets(tps)
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        for r in consumer.poll(timeout_ms=1000):
            keys[r.partition].append(int.from_bytes(r.key, "big"))
np.savez(out, **{str(p): np.asarray(k, np.int64) for p, k in keys.items()})
"""


def keyed_table(start: int, records: int, values: np.ndarray) -> pa.Table:
    """Records ``start`` to ``start + records``: key = index (8 bytes, big-endian), value
    from ``values`` (rows of 100 bytes), partition = index % PARTITIONS."""
    index = np.arange(start, start + records, dtype=np.int64)
    keys = index.astype(">i8").view(np.uint8).reshape(records, 8)
    offsets = pa.py_buffer(np.arange(0, 8 * (records + 1), 8, dtype=np.int32))
    return pa.table({
        "key": pa.Array.from_buffers(pa.binary(), records, [None, offsets, pa.py_buffer(keys)]),
        "value": binary_array(np.ascontiguousarray(values[:records])),
        "partition": pa.array(index % PARTITIONS, pa.int32()),
    })


def produce(topic: str, records: int, values: np.ndarray) -> None:
    from raylog import Admin, Producer

    Admin().create_topic(topic, PARTITIONS, 1, {"retention.ms": -1})
    with Producer(acks="all") as producer:
        producer.send_batch(topic, keyed_table(0, records, values)).result(600)


class LiveProducer:
    """Writes keyed records to ``topic`` on a thread, ``chunk`` every ``every_s``, until
    stopped; ``produced`` says how many."""

    def __init__(self, topic: str, values: np.ndarray, chunk: int, every_s: float) -> None:
        from raylog import Admin

        Admin().create_topic(topic, PARTITIONS, 1, {"retention.ms": -1})
        self.topic, self.values, self.chunk, self.every_s = topic, values, chunk, every_s
        self.produced = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from raylog import Producer

        with Producer(acks="all") as producer:
            while not self._stop.wait(self.every_s):
                producer.send_batch(self.topic, keyed_table(self.produced, self.chunk,
                                                            self.values)).result(120)
                self.produced += self.chunk

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.produced


def expected_keys(records: int) -> dict[int, np.ndarray]:
    index = np.arange(records, dtype=np.int64)
    return {p: index[index % PARTITIONS == p] for p in range(PARTITIONS)}


def consume(records: int) -> float:
    from raylog import Consumer, TopicPartition

    with Consumer(auto_offset_reset="earliest") as consumer:
        def read() -> int:
            consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
            seen = size = 0
            while seen < records:
                batch = consumer.poll(timeout_ms=STALL_TIMEOUT_MS)
                if not batch:
                    raise RuntimeError(f"no record for {STALL_TIMEOUT_MS} ms after {seen:,}")
                for record in batch:
                    size += len(record.value)
                seen += len(batch)
            return size

        elapsed, size = timed(read)
    if size != 100 * records:
        raise RuntimeError(f"consumed {size:,} value bytes, expected {100 * records:,}")
    return elapsed


class Mirrors:
    """``raylog mirror`` processes from the source's endpoint into the target."""

    def __init__(self, target: Any, endpoint: Any, root: Path) -> None:
        from raylog.mirror.local import BIN

        self.target, self.endpoint, self.root = target, endpoint, root
        self.command = [str(BIN / "raylog"), "mirror", "--source", endpoint.location,
                        "--target", target.address, "--token-file", str(endpoint.token_file)]

    def start(self, alias: str, *extra: str) -> tuple[subprocess.Popen, Path]:
        topic = LIVE_TOPIC if alias == "k" else TOPIC
        log = self.root / f"mirror-{alias}-{time.monotonic_ns()}.log"
        with open(log, "w") as out:
            process = subprocess.Popen([*self.command, "--alias", alias, "--topics", topic,
                                        *extra],
                                       env=self.target.env(), stdout=out, stderr=out,
                                       start_new_session=True)
        return process, log

    def once(self, alias: str) -> tuple[float, int, float]:
        """A ``--once`` run: its seconds, and the records it copied in how many seconds of
        copying (what it says: from its first partition's start to its last one's end)."""
        started = time.perf_counter()
        process, log = self.start(alias, "--once")
        if process.wait(timeout=MIRROR_TIMEOUT_S) != 0:
            raise RuntimeError(f"raylog mirror failed: {log.read_text()[-2000:]}")
        elapsed = time.perf_counter() - started
        found = re.search(r"copied ([\d,]+) records from \S+ in ([\d.]+) s", log.read_text())
        if found is None:
            raise RuntimeError(f"raylog mirror said nothing of its copy: {log.read_text()}")
        return elapsed, int(found.group(1).replace(",", "")), float(found.group(2))

    def killed(self, alias: str, after_s: float) -> None:
        """Start a following mirror and kill it (SIGKILL) ``after_s`` after it started
        copying."""
        process, log = self.start(alias)
        deadline = time.monotonic() + 120
        while f"copying {LIVE_TOPIC} into" not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the mirror did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        time.sleep(after_s)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def target_keys(self, alias: str, topic: str) -> dict[int, np.ndarray]:
        out = self.root / f"keys-{alias}.npz"
        subprocess.run([sys.executable, "-c", DUMP_TARGET, self.target.address,
                        f"{alias}.{topic}", str(out)], env=self.target.env(), check=True,
                       timeout=600)
        with np.load(out) as found:
            return {int(p): found[p] for p in found.files}


def compare(expected: dict[int, np.ndarray], found: dict[int, np.ndarray]) -> dict[str, Any]:
    """Missing and duplicated keys, and whether each partition holds them in order."""
    missing = duplicates = 0
    in_order = True
    for p, keys in expected.items():
        got = found.get(p, np.empty(0, np.int64))
        duplicates += len(got) - len(np.unique(got))
        missing += len(np.setdiff1d(keys, got))
        in_order = in_order and np.array_equal(got, keys)
    return {"missing": int(missing), "duplicates": int(duplicates), "in_order": in_order}


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started = time.perf_counter()
    load_at_start = os.getloadavg()
    from raylog.mirror.local import FlightEndpoint, LocalCluster

    token = root / "token"
    token.write_text(TOKEN + "\n")
    source = LocalCluster(root / "source")
    # This process joins the source: Ray reads its token settings when it is imported.
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=source.token)
    import ray

    import raylog

    with source, LocalCluster(root / "target") as target, \
            FlightEndpoint(source, token, root / "flight.log") as endpoint:
        raylog.init(source.address, start_local=False, create=False)
        try:
            values = generate_values(mode.records)
            produce(TOPIC, mode.records, values)
            mirrors = Mirrors(target, endpoint, root)
            consume_s, copy_s, wall_s, again_s = [], [], [], []
            for rep in range(mode.repetitions + 1):  # repetition 0 is the warm-up
                consume_s.append(consume(mode.records))
                elapsed, copied, copying = mirrors.once(f"r{rep}")
                if copied != mode.records:
                    raise RuntimeError(f"the mirror copied {copied:,} of {mode.records:,}")
                copy_s.append(copying)
                wall_s.append(elapsed)
                elapsed, copied, _ = mirrors.once(f"r{rep}")  # nothing left: fixed costs
                if copied:
                    raise RuntimeError(f"a second run copied {copied:,} records again")
                again_s.append(elapsed)
                print(f"repetition {rep}: consume {consume_s[-1]:.2f} s, mirror copy "
                      f"{copy_s[-1]:.2f} s (process {wall_s[-1]:.1f} s, again with nothing "
                      f"to copy {again_s[-1]:.1f} s)", flush=True)
            # Kills while producers write: the mirror is always in the middle of something.
            live = LiveProducer(LIVE_TOPIC, values, LIVE_CHUNK, LIVE_EVERY_S)
            rng = random.Random(20261125)
            kill_after = [rng.uniform(0.3, 2.0) for _ in range(mode.kills)]
            for after in kill_after:
                mirrors.killed("k", after)
            produced = live.stop()
            _, finished_by_once, _ = mirrors.once("k")
            after_kills = compare(expected_keys(produced), mirrors.target_keys("k", LIVE_TOPIC))
            uninterrupted = compare(expected_keys(mode.records), mirrors.target_keys("r1", TOPIC))
        finally:
            from raylog.client.connection import reset_default

            reset_default()
            ray.shutdown()
            for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
                os.environ.pop(name, None)

    n = mode.records
    figures = {
        **rate_figures("mirror_records_per_s", Timing(n, copy_s[1:])),
        **rate_figures("consume_records_per_s", Timing(n, consume_s[1:])),
        "missing": after_kills["missing"],
        "duplicates": after_kills["duplicates"],
    }
    figures["mirror_over_consume"] = figures["mirror_records_per_s"] / \
        figures["consume_records_per_s"]
    document = result_document(
        figures, TARGETS, mode=mode.name,
        data={"description": describe_data("timestamps from the producer's clock") +
              "; key: the record's index, 8 bytes big-endian", "records": n,
              "partitions": PARTITIONS},
        sections={
            "config": {"repetitions": mode.repetitions, "kills": mode.kills,
                       "kill_after_s": kill_after, "cluster": "one head node per cluster, 1 "
                       "CPU, 200 MB object store", "mirror": "acks=all, 5 batches in flight "
                       "per partition, source read over Flight on 127.0.0.1"},
            "checks": {"after_kills": after_kills, "uninterrupted": uninterrupted,
                       "live_records_produced": produced,
                       "copied_by_the_run_after_the_kills": finished_by_once},
            "seconds": {"consume": consume_s, "mirror_copy": copy_s, "mirror_process": wall_s,
                        "mirror_process_nothing_to_copy": again_s}},
        machine=machine_info(ray=ray.__version__), started=started,
        load_at_start=load_at_start)
    document["targets"].update({name: {"target": 0, "value": figures[name],
                                       "met": figures[name] == 0, "at_most": True}
                                for name in ZERO})
    return document


def headline(mode: Mode, result: dict[str, Any]) -> str:
    machine = result["machine"]
    return (f"mirror, {mode.name} mode: {mode.records:,} records of 100 bytes in "
            f"{PARTITIONS} partitions, {mode.repetitions} repetitions, {mode.kills} kills; "
            f"{machine['cpu_count']} CPUs, Ray {machine['ray']}, load "
            f"{machine['load_average_1m']['start']:.1f} at start")


def table(result: dict[str, Any]) -> str:
    t = result["targets"]

    def met(name: str) -> tuple[str, str]:
        entry = t[name]
        op = "=" if entry.get("at_most") else ">="
        return f"{op} {entry['target']:g}", "met" if entry["met"] else "NOT MET"

    rate = "{:,.0f}".format
    checks = result["checks"]
    rows = [
        ("mirror (records/s)", rate(result["mirror_records_per_s"]), "-", "-"),
        ("one consumer of the source (records/s)", rate(result["consume_records_per_s"]),
         "-", "-"),
        ("mirror / consume", f"{result['mirror_over_consume']:.2f}",
         *met("mirror_over_consume")),
        ("missing after kills", str(result["missing"]), *met("missing")),
        ("duplicates after kills", str(result["duplicates"]), *met("duplicates")),
        ("order kept after kills", "yes" if checks["after_kills"]["in_order"] else "NO", "-",
         "-"),
        ("uninterrupted copy: missing, duplicates, order",
         f"{checks['uninterrupted']['missing']}, {checks['uninterrupted']['duplicates']}, "
         f"{'yes' if checks['uninterrupted']['in_order'] else 'NO'}", "-", "-"),
    ]
    return markdown_table(["measurement", "value", "target", "met"], rows, "lrrl")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         "fewer records and repetitions (about three minutes)", (QUICK, FULL),
                         run, headline, table)


if __name__ == "__main__":
    sys.exit(main())
