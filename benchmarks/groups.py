"""Consumer groups: how fast a dead member's partitions move on, and what three members
consume together against one consumer alone.

Run from the repository root::

    .venv/bin/python benchmarks/groups.py [--quick] [--json PATH]

``--quick`` takes one to two minutes on this shared 2-core machine (much of it starting
actors and waiting for groups to settle), the full run two to three. The script
prints a Markdown table and writes JSON (default ``benchmarks/results/groups.json``).

Setup: ``raylog.init(address="local", data_dir=<temporary directory>)`` starts an embedded
single-node Ray cluster whose node is a broker (Ray's default logical CPUs, one per core; the
controller, the replicas and the member actors here all take ``num_cpus=0``, so none waits
for a CPU slot). Topics have 6 partitions, replication factor 1 and ``retention.ms=-1``.
Every group member is a Ray actor of its own (a worker process) that builds its
``Consumer(group_id=...)`` inside the actor and ``subscribe``\\s; all consumer settings not
named here are the defaults, in particular ``heartbeat_interval_ms=250`` and
``session_timeout_ms=10000`` (the session timeout plays no part: the controller watches
member actors and removes a dead one's members at once), and the ``cooperative_sticky``
assignor. Time is ``time.time()`` on every side: all processes are on this machine.

Measurements, all in one run:

consume   A topic pre-filled with the 100-byte page views of ``common.py`` (``send_batch``
          with a partition column, so the partitions are even). Members join with
          ``auto_offset_reset="latest"`` and no auto-commit, so they take their partitions
          without reading; once the group is stable each timed repetition tells every member
          at once to ``seek_to_beginning`` and poll (``max_poll_records=500``, the default)
          until it has every record of its partitions, adding up ``len(record.value)``.
          Figure: records over the seconds from the driver's call until the last member's
          last record.
          ``group``: three members in one group (2 partitions each); ``single``: one member
          alone in another group (all 6), the same actor class, so both pay the same remote
          call and process boundary. One warm-up round, then the best and the median of the
          timed rounds; single and group alternate so each pair runs under the same load (the
          machine is shared). Per repetition the JSON has each member's own rate and CPU
          seconds, the machine's busy cores (``/proc/stat``) and the cores used by each kind
          of process (members, replicas, controller, Ray, driver, and "other": processes that
          are not this benchmark's, from ``/proc/<pid>/stat``); from those, the CPU cost per
          record and the group-vs-single ratio an idle machine of this size would allow.
rebalance A topic with a producer thread in the driver sending 10 records to every partition
          each 50 ms (1,200 records/s). Three members poll in a loop in a thread inside their
          actor (``poll(timeout_ms=100)``, auto-commit every 1,000 ms), writing the offset
          ranges they got to a file before their next poll. Once the group is stable (2
          partitions each) and every member got records of each of its partitions in the last
          300 ms, the driver notes t0 and ``ray.kill``\\s the oldest member. Sample: the latest,
          over the partitions it owned, of the first time a survivor received a record of that
          partition, minus t0. A fresh member then joins the same group and the next trial
          starts. Also recorded, to show where the time goes: when the coordinator listed
          the dead member gone (the driver polls ``list_groups``), when each moved partition
          showed up in a survivor's assignment, how long each survivor's poll thread ran and
          how long it was runnable but waited for a CPU (``/proc/self/task/<id>/schedstat``),
          and the cores used by each kind of process, from the kill until all had moved.

Checks, outside the timed regions: every consume repetition of every member returned, per
partition it owned, exactly the partition's records (count from offset 0 to the end offset,
positions at the end offsets, 100 value bytes each), and the members' partitions were
disjoint and covered the topic: exactly once. After the rebalance trials the producer stops,
the survivors drain the topic, and the members' files (the killed members' too) cover every
offset of every partition at least once; the coordinator's ownership history never shows a
partition with two owners.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import statistics
import sys
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import ray

import raylog
from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.client import ConsumerConfig
from raylog.client.connection import RaylogCluster, reset_default
from raylog.util.cluster_names import DATA_DIR_ENV

from common import (
    RECORD_BYTES,
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
    split_values,
    target_cells,
)

DEFAULT_JSON = RESULTS_DIR / "groups.json"
PARTITIONS = 6
MEMBERS = 3
REPLICATION_FACTOR = 1
TOPIC_CONFIGS = {"retention.ms": -1}
MAX_POLL_RECORDS = 500  # Kafka's default: records die young, so the GC has nothing to scan
# Throughput members: take partitions without reading (latest), read only when told.
CONSUME_SETTINGS = {"auto_offset_reset": "latest", "enable_auto_commit": False,
                    "max_poll_records": MAX_POLL_RECORDS}
# Rebalance members: a service's settings; earliest so a partition never committed is
# still read from the start (at least once).
POLL_SETTINGS = {"auto_offset_reset": "earliest", "auto_commit_interval_ms": 1000}
POLL_TIMEOUT_MS = 100
# The rebalance producer: a burst of PRODUCE_BURST records per partition every
# PRODUCE_INTERVAL_S (1,200 records/s). Bursts make batches of 10 records: one record per
# partition every 5 ms made 1,200 one-record appends/s, which cost the driver and the
# replicas about 1.5 of the 2 cores and starved the members being measured.
PRODUCE_INTERVAL_S = 0.05
PRODUCE_BURST = 10
STEADY_RECENT_S = 0.3        # steady: every member got records of each partition this recently
STALL_TIMEOUT_MS = 30_000    # a consume poll that returns nothing this long fails the run
WAIT_TIMEOUT_S = 60          # for a group to settle, partitions to move, the topic to drain
STATUS_INTERVAL_S = 0.05     # how often the driver asks the survivors during a rebalance
PARTITION = attrgetter("partition")
T = TypeVar("T")

TARGETS = {"group_vs_single_ratio": 2.0}  # minimums, for this (2-core) machine
REBALANCE_TARGET_MS = 1_000               # a maximum: the median must stay under it
CHECKS = [
    "each consume repetition: every member got exactly the records of its partitions (count "
    "per partition = end offset, positions at the end offsets, 100 value bytes each) and the "
    "members' partitions were disjoint and covered all 6",
    "rebalance: every offset of every partition, up to the end offsets after the producer "
    "stopped, is in some member's file (the killed members' included): at least once",
    "rebalance: the coordinator's ownership history never shows a partition with two owners",
]


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    consume_records: int       # in the pre-filled topic
    consume_repetitions: int   # timed rounds of single and group, after one warm-up round
    rebalance_trials: int


QUICK = Mode("quick", consume_records=2_000_000, consume_repetitions=3, rebalance_trials=5)
FULL = Mode("full", consume_records=6_000_000, consume_repetitions=3, rebalance_trials=15)


# -- the members (Ray actors) ----------------------------------------------------------------

def offset_runs(offsets: list[int]) -> list[tuple[int, int]]:
    """(first, last) of each run of consecutive offsets."""
    runs: list[tuple[int, int]] = []
    for _, run in itertools.groupby(enumerate(offsets), lambda pair: pair[1] - pair[0]):
        pairs = list(run)
        runs.append((pairs[0][1], pairs[-1][1]))
    return runs


@ray.remote(num_cpus=0, max_restarts=0)
class ConsumingMember:
    """A group member that reads only when told: joins at construction, then ``consume``
    reads its partitions from the beginning to given end offsets. Calls run one at a time."""

    def __init__(self, group_id: str, topic: str) -> None:
        raylog.init()
        self.topic = topic
        self.consumer = Consumer(group_id=group_id, **CONSUME_SETTINGS)
        self.consumer.subscribe([topic])

    def assignment(self) -> list[int]:
        """Poll briefly (that applies assignment changes) and return the partitions owned."""
        if records := self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS):
            raise RuntimeError(f"{len(records)} records before consume(): someone produced")
        return sorted(tp.partition for tp in self.consumer.assignment())

    def consume(self, ends: dict[int, int]) -> dict[str, Any]:
        """Read every owned partition from its beginning to ``ends``; what was read, and when."""
        started, cpu_started = time.time(), time.process_time()
        consumer = self.consumer
        consumer.seek_to_beginning()
        owned = sorted(tp.partition for tp in consumer.assignment())
        expected = sum(ends[p] for p in owned)
        seen = value_bytes = 0
        counts: Counter[int] = Counter()
        while seen < expected:
            records = consumer.poll(timeout_ms=STALL_TIMEOUT_MS)
            if not records:
                raise RuntimeError(f"no record for {STALL_TIMEOUT_MS} ms after {seen:,} of "
                                   f"{expected:,}")
            for record in records:
                value_bytes += len(record.value)
            counts.update(map(PARTITION, records))
            seen += len(records)
        finished = time.time()
        return {"partitions": owned, "started": started, "finished": finished,
                "records": seen, "value_bytes": value_bytes, "counts": dict(counts),
                "cpu_seconds": time.process_time() - cpu_started,
                "positions": {p: consumer.position(TopicPartition(self.topic, p))
                              for p in owned}}

    def close(self) -> None:
        self.consumer.close()


@ray.remote(num_cpus=0, max_restarts=0)
class PollingMember:
    """A group member that polls in a thread from construction on, as a service would.

    Each poll's records go, as (partition, first, last) offset runs, to a file at ``log_path``
    (flushed before the next poll, whose auto-commit may cover them), so a killed member's
    work can still be checked. The thread also keeps when each partition was received and
    when it joined the assignment. The actor's methods only read that, under a lock.
    """

    def __init__(self, group_id: str, topic: str, log_path: str) -> None:
        raylog.init()
        self.consumer = Consumer(group_id=group_id, **POLL_SETTINGS)
        self.consumer.subscribe([topic])
        self.log = open(log_path, "a")  # noqa: SIM115 - closed by stop(), or by dying
        self.lock = threading.Lock()
        self.received: list[tuple[float, int]] = []  # (time, partition), once per poll
        self.gained: list[tuple[float, int]] = []    # (time, partition) assignment grew
        self.last_seen: dict[int, float] = {}
        self.positions: dict[int, int] = {}          # partition -> last offset received + 1
        self.owned: list[int] = []
        self.error: str | None = None
        self.poll_thread_id: int | None = None  # the kernel's id, for its scheduler stats
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._poll_forever, daemon=True)
        self.thread.start()

    def _poll_forever(self) -> None:
        self.poll_thread_id = threading.get_native_id()
        try:
            while not self.stopping.is_set():
                self._poll_once()
        except Exception:  # reported by status() and stop(); the driver fails the run
            self.error = traceback.format_exc()

    def _poll_once(self) -> None:
        records = self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
        now = time.time()
        owned = sorted(tp.partition for tp in self.consumer.assignment())
        lines, received, positions = [], [], {}
        for partition, run in itertools.groupby(records, PARTITION):
            offsets = [record.offset for record in run]
            lines += [f"{now:.6f} {partition} {a} {b}\n" for a, b in offset_runs(offsets)]
            received.append((now, partition))
            positions[partition] = offsets[-1] + 1
        if lines:
            self.log.writelines(lines)
            self.log.flush()
        with self.lock:
            self.gained += [(now, p) for p in sorted(set(owned) - set(self.owned))]
            self.owned = owned
            self.received += received
            self.positions = {p: self.positions.get(p, -1) for p in owned} | positions
            for _, partition in received:
                self.last_seen[partition] = now

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {"owned": list(self.owned), "last_seen": dict(self.last_seen),
                    "positions": dict(self.positions), "error": self.error,
                    "sched": self._sched()}

    def firsts_since(self, since: float) -> dict[str, Any]:
        """Per partition, the first receipt and the first gain at or after ``since``."""
        with self.lock:
            return {"received": _firsts(self.received, since),
                    "gained": _firsts(self.gained, since), "error": self.error,
                    "sched": self._sched()}

    def _sched(self) -> tuple[float, int, int] | None:
        """(time, ns on a CPU, ns runnable but waiting for one) of the poll thread so far,
        from ``/proc/self/task/<id>/schedstat``; None where the kernel has no such file."""
        try:
            with open(f"/proc/self/task/{self.poll_thread_id}/schedstat") as f:
                running, waiting = (int(v) for v in f.read().split()[:2])
        except (OSError, ValueError):
            return None
        return time.time(), running, waiting

    def stop(self) -> str | None:
        """Stop polling, leave the group (committing) and close the file; the thread's error."""
        self.stopping.set()
        self.thread.join(timeout=STALL_TIMEOUT_MS / 1000)
        self.consumer.close()
        self.log.close()
        return self.error


def _firsts(events: list[tuple[float, int]], since: float) -> dict[int, float]:
    """Per partition, the earliest time at or after ``since`` (events are in time order)."""
    firsts: dict[int, float] = {}
    for at, partition in reversed(events):
        if at < since:
            break
        firsts[partition] = at
    return firsts


# -- helpers on the driver -------------------------------------------------------------------

def wait_until(condition: Callable[[], T | None], what: str, timeout: float = WAIT_TIMEOUT_S,
               interval: float = 0.05) -> T:
    """Call ``condition`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


class CpuMeter:
    """CPU used from construction until :meth:`read`: the machine's busy cores
    (``/proc/stat``) and the cores used by each kind of process (``/proc/<pid>/stat``).

    A process is this benchmark's when it is the driver or descends from it (the embedded
    cluster's GCS, raylet and workers all do); anything else on this shared machine counts
    as "other". Processes that exit in between are missed; new ones count from their start.
    """

    KINDS = {"ray::ConsumingMember": "members", "ray::PollingMember": "members",
             "ray::BrokerActor": "brokers", "ray::ControllerActor": "controller"}

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._machine = self._machine_ticks()
        self._processes = self._process_ticks()

    @staticmethod
    def _machine_ticks() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait

    @staticmethod
    def _process_ticks() -> dict[int, tuple[int, int, str]]:
        """pid -> (parent pid, user + system ticks, name)."""
        out = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except (OSError, IndexError):
                continue  # exited meanwhile
            name = argv[0].decode(errors="replace").split(".")[0] if argv[0].startswith(
                b"ray::") else os.path.basename(argv[0].decode(errors="replace"))
            out[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]), name)
        return out

    def _kind(self, pid: int, processes: dict[int, tuple[int, int, str]]) -> str:
        name = processes[pid][2]
        ancestor = pid
        while ancestor in processes and ancestor != os.getpid():
            ancestor = processes[ancestor][0]
        if ancestor != os.getpid():
            return "other"
        return "driver" if pid == os.getpid() else self.KINDS.get(name, "ray system")

    def read(self) -> dict[str, Any]:
        """``machine_busy_cores`` and ``cores_by_process`` (members, replicas, controller,
        driver, ray system, other) since construction."""
        seconds = time.monotonic() - self._started
        machine, processes = self._machine_ticks(), self._process_ticks()
        busy = None
        if self._machine is not None and machine is not None and machine[0] > self._machine[0]:
            total, idle = machine[0] - self._machine[0], machine[1] - self._machine[1]
            busy = (1 - idle / total) * (os.cpu_count() or 1)
        cores: Counter[str] = Counter()
        tick = os.sysconf("SC_CLK_TCK")
        for pid, (_, ticks, _) in processes.items():
            used = ticks - self._processes.get(pid, (0, 0, ""))[1]
            if used > 0:
                cores[self._kind(pid, processes)] += used / tick / seconds
        return {"machine_busy_cores": busy, "cores_by_process": dict(cores.most_common())}


def create_topic(cluster: RaylogCluster, name: str) -> list[TopicPartition]:
    Admin(cluster=cluster).create_topic(name, PARTITIONS, REPLICATION_FACTOR,
                                        dict(TOPIC_CONFIGS))
    return [TopicPartition(name, p) for p in range(PARTITIONS)]


def end_offsets(cluster: RaylogCluster, partitions: list[TopicPartition]) -> dict[int, int]:
    with Consumer(cluster=cluster) as probe:
        probe.assign(partitions)
        return {tp.partition: end for tp, end in probe.end_offsets(partitions).items()}


def group_state(cluster: RaylogCluster, group_id: str) -> str:
    return Admin(cluster=cluster).describe_group(group_id)["state"]


# -- consume throughput ----------------------------------------------------------------------

@dataclasses.dataclass
class ConsumeRun:
    started: float                 # the driver's time.time() when it called the members
    seconds: float
    members: list[dict[str, Any]]  # what each member's consume() returned
    cpu: dict[str, Any]            # CpuMeter.read() over the run

    def report(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            **self.cpu,
            "members": [{
                "partitions": m["partitions"], "records": m["records"],
                "seconds": m["finished"] - m["started"],
                "records_per_s": m["records"] / (m["finished"] - m["started"]),
                "start_delay_s": m["started"] - self.started,
                "cpu_seconds": m["cpu_seconds"],
                "cpu_cores": m["cpu_seconds"] / (m["finished"] - m["started"]),
            } for m in self.members],
        }


class ConsumeGroups:
    """A pre-filled topic, a group of three members and (with ``single``) a group of one,
    each settled. Without ``single`` no idle member heartbeats beside what is measured."""

    def __init__(self, cluster: RaylogCluster, rows: np.ndarray, *, single: bool = True) -> None:
        self.cluster = cluster
        self.partitions = create_topic(cluster, "consume")
        table = pa.table({"value": binary_array(rows),
                          "partition": np.arange(len(rows)) % PARTITIONS})
        with Producer(cluster=cluster) as producer:
            producer.send_batch("consume", table).result()
            producer.flush()
        self.ends = end_offsets(cluster, self.partitions)
        if sum(self.ends.values()) != len(rows):
            raise RuntimeError(f"pre-filled {len(rows):,} records, the topic holds {self.ends}")
        self.group = [ConsumingMember.remote("consume-group", "consume") for _ in range(MEMBERS)]
        self.single = [ConsumingMember.remote("consume-single", "consume")] if single else []
        self._settle(self.group, "consume-group")
        if single:
            self._settle(self.single, "consume-single")

    def _settle(self, members: list[Any], group_id: str) -> None:
        share = PARTITIONS // len(members)

        def settled() -> bool:
            owned = ray.get([m.assignment.remote() for m in members])
            return all(len(o) == share for o in owned) and \
                group_state(self.cluster, group_id) == "stable"

        wait_until(settled, f"{group_id}: {share} partitions per member")

    def run(self, members: list[Any]) -> ConsumeRun:
        meter, started = CpuMeter(), time.time()
        results = ray.get([m.consume.remote(self.ends) for m in members])
        seconds = max(r["finished"] for r in results) - started
        self._check(results)
        return ConsumeRun(started, seconds, results, meter.read())

    def _check(self, results: list[dict[str, Any]]) -> None:
        owned = sorted(p for r in results for p in r["partitions"])
        if owned != list(range(PARTITIONS)):
            raise RuntimeError(f"members owned {owned}, not each partition once")
        for r in results:
            wanted = {p: self.ends[p] for p in r["partitions"]}
            if r["counts"] != wanted or r["positions"] != wanted or \
                    r["value_bytes"] != r["records"] * RECORD_BYTES:
                raise RuntimeError(
                    f"member of partitions {r['partitions']}: counts {r['counts']}, positions "
                    f"{r['positions']}, {r['value_bytes']:,} value bytes; the ends are {wanted}")

    def close(self) -> None:
        """Leave the groups and end the member actors."""
        members = self.group + self.single
        # After a failed run a member may be dead already: that error is the one to report.
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get([m.close.remote() for m in members], timeout=WAIT_TIMEOUT_S)
        for member in members:
            ray.kill(member, no_restart=True)


def measure_consume(mode: Mode, cluster: RaylogCluster) -> dict[str, Any]:
    groups = ConsumeGroups(cluster, generate_values(mode.consume_records))
    try:
        runs: dict[str, list[ConsumeRun]] = {"single": [], "group": []}
        for i in range(mode.consume_repetitions + 1):
            for name, members in (("single", groups.single), ("group", groups.group)):
                run = groups.run(members)
                if i:  # round 0 is the warm-up
                    runs[name].append(run)
    finally:
        groups.close()
    return {"records": mode.consume_records, "runs": runs}


# -- rebalance -------------------------------------------------------------------------------

class BackgroundProducer:
    """Sends ``PRODUCE_BURST`` records to every partition each ``PRODUCE_INTERVAL_S``, from
    a thread."""

    def __init__(self, cluster: RaylogCluster, topic: str) -> None:
        self.topic = topic
        self.values = split_values(generate_values(10_000).tobytes())
        self.producer = Producer(cluster=cluster)
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-producer")
        self._thread.start()

    def _run(self) -> None:
        send, values, due = self.producer.send, self.values, time.monotonic()
        try:
            while not self._stop.is_set():
                for partition in range(PARTITIONS):
                    for _ in range(PRODUCE_BURST):
                        send(self.topic, values[self.sent % len(values)], partition=partition)
                        self.sent += 1
                due += PRODUCE_INTERVAL_S
                self._stop.wait(max(0.0, due - time.monotonic()))
        except Exception as e:  # re-raised by stop()
            self.error = e

    def stop(self) -> None:
        """Stop sending and flush what was sent. Idempotent; raises the thread's error."""
        self._stop.set()
        self._thread.join()
        self.producer.close()
        if self.error is not None:
            raise RuntimeError("the background producer failed") from self.error


@dataclasses.dataclass
class Trial:
    moved: list[int]
    received_ms: dict[int, float]  # per moved partition: first survivor receipt after t0
    gained_ms: dict[int, float]    # per moved partition: in a survivor's assignment after t0
    removed_ms: float | None       # the coordinator listed one member fewer (seen by polling)
    scheduling: list[dict[str, float] | None]  # each survivor's poll thread, kill to moved
    cpu: dict[str, Any]            # CpuMeter.read() from the kill until all had moved
    setup_s: float                 # starting the fresh member until the group was steady

    @property
    def rebalance_ms(self) -> float:
        return max(self.received_ms.values())


def _scheduling(start: tuple[float, int, int] | None, end: tuple[float, int, int] | None
                ) -> dict[str, float] | None:
    """What a poll thread did between two ``PollingMember._sched`` samples, in ms."""
    if start is None or end is None:
        return None
    return {"window_ms": (end[0] - start[0]) * 1000, "on_cpu_ms": (end[1] - start[1]) / 1e6,
            "waiting_for_cpu_ms": (end[2] - start[2]) / 1e6}


class Rebalancing:
    """The rebalance trials: a topic with a producer, a group of polling members."""

    GROUP = "rebalance"

    def __init__(self, cluster: RaylogCluster, log_dir: Path) -> None:
        self.cluster = cluster
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.partitions = create_topic(cluster, self.GROUP)
        self.members: deque[Any] = deque()
        self.started = 0
        self.producer = BackgroundProducer(cluster, self.GROUP)

    def add_member(self) -> None:
        path = self.log_dir / f"member-{self.started}.log"
        self.started += 1
        self.members.append(PollingMember.remote(self.GROUP, self.GROUP, str(path)))

    def ask(self, method: str, *args: Any) -> list[dict[str, Any]]:
        """Call ``method`` on every member; fail if a member's poll thread failed."""
        answers = ray.get([getattr(m, method).remote(*args) for m in self.members])
        if errors := [a["error"] for a in answers if a["error"]]:
            raise RuntimeError(f"a member's poll thread failed:\n{errors[0]}")
        return answers

    def steady(self) -> dict[Any, dict[str, Any]] | None:
        """Each member's status, once the group is stable and records flow to all."""
        statuses = self.ask("status")
        now = time.time()
        owned = sorted(p for s in statuses for p in s["owned"])
        flowing = all(now - s["last_seen"].get(p, 0) <= STEADY_RECENT_S
                      for s in statuses for p in s["owned"])
        if owned != list(range(PARTITIONS)) or not flowing or \
                any(len(s["owned"]) != PARTITIONS // MEMBERS for s in statuses) or \
                group_state(self.cluster, self.GROUP) != "stable":
            return None
        return dict(zip(self.members, statuses, strict=True))

    def trial(self) -> Trial:
        started = time.monotonic()
        while len(self.members) < MEMBERS:
            self.add_member()
        before = wait_until(self.steady, "a stable group with records flowing to all")
        setup_s = time.monotonic() - started
        victim = self.members.popleft()
        moved = before[victim]["owned"]
        meter = CpuMeter()
        t0 = time.time()
        ray.kill(victim, no_restart=True)

        removed: list[float] = []

        def all_moved() -> list[dict[str, Any]] | None:
            if not removed and self.group_members() < MEMBERS:
                removed.append((time.time() - t0) * 1000)
            firsts = self.ask("firsts_since", t0)
            received = {p for f in firsts for p in f["received"]}
            return firsts if set(moved) <= received else None

        firsts = wait_until(all_moved, f"partitions {moved} to be consumed by a survivor",
                            interval=STATUS_INTERVAL_S)
        received, gained = {}, {}
        for f in firsts:
            for p in moved:
                for kind, out in (("received", received), ("gained", gained)):
                    if p in f[kind]:
                        out[p] = min(out.get(p, float("inf")), (f[kind][p] - t0) * 1000)
        cpu = meter.read()
        scheduling = [_scheduling(before[m]["sched"], f["sched"])
                      for m, f in zip(self.members, firsts, strict=True)]
        return Trial(moved, received, gained, removed[0] if removed else None, scheduling,
                     cpu, setup_s)

    def group_members(self) -> int:
        groups = Admin(cluster=self.cluster).list_groups()
        return next(g["members"] for g in groups if g["group_id"] == self.GROUP)

    def finish(self) -> dict[str, Any]:
        """Stop producing, let the survivors drain, stop them; check what everyone read."""
        self.producer.stop()
        ends = end_offsets(self.cluster, self.partitions)

        def drained() -> bool:
            positions = {}
            for s in self.ask("status"):
                positions |= {p: s["positions"].get(p) for p in s["owned"]}
            return positions == ends

        wait_until(drained, "the survivors to read up to the end offsets")
        errors = ray.get([m.stop.remote() for m in self.members])
        if any(errors):
            raise RuntimeError(f"a member's poll thread failed:\n{next(filter(None, errors))}")
        return {"end_offsets": ends, "sent": self.producer.sent, **self._check(ends)}

    def _check(self, ends: dict[int, int]) -> dict[str, Any]:
        if sum(ends.values()) != self.producer.sent:
            raise RuntimeError(f"sent {self.producer.sent:,} records, the topic holds {ends}")
        reads = {p: np.zeros(end, np.int32) for p, end in ends.items()}
        for path in sorted(self.log_dir.glob("member-*.log")):
            # A member killed while writing may leave a torn last line: it never polled
            # again, so nothing in it was committed, and survivors read those records.
            for line in path.read_text().split("\n")[:-1]:
                _, partition, first, last = line.split()
                p, first, last = int(partition), int(first), int(last)
                if not 0 <= first <= last < ends[p]:
                    raise RuntimeError(f"{path.name}: partition {p} offsets {first}..{last} "
                                       f"outside 0..{ends[p] - 1}")
                reads[p][first:last + 1] += 1
        missing = {p: int((r == 0).sum()) for p, r in reads.items() if (r == 0).any()}
        if missing:
            raise RuntimeError(f"records never consumed, per partition: {missing}")
        history = self.cluster.controller.group_history(self.GROUP)
        for generation, owners in history:
            counts = Counter(tuple(tp) for tps in owners.values() for tp in tps)
            if doubled := [tp for tp, n in counts.items() if n > 1]:
                raise RuntimeError(f"generation {generation}: {doubled} owned twice: {owners}")
        return {"records_read_more_than_once": int(sum((r - 1).sum() for r in reads.values())),
                "ownership_generations_checked": len(history)}


def measure_rebalance(mode: Mode, cluster: RaylogCluster, log_dir: Path) -> dict[str, Any]:
    rebalancing = Rebalancing(cluster, log_dir)
    try:
        trials = [rebalancing.trial() for _ in range(mode.rebalance_trials)]
        checked = rebalancing.finish()
    except BaseException:
        with contextlib.suppress(RuntimeError):  # the error being raised matters more
            rebalancing.producer.stop()
        raise
    return {"trials": trials, "checked": checked, "members_started": rebalancing.started}


# -- the run ---------------------------------------------------------------------------------

def median_of(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def cpu_section(consume: dict[str, Any]) -> dict[str, Any]:
    """Where the CPU went in the timed consume runs (medians over repetitions), and the
    group-vs-single ratio that CPU cost per record allows on an idle machine of this size."""
    cores, records = os.cpu_count() or 1, consume["records"]
    out: dict[str, Any] = {"cores": cores}
    for name, runs in consume["runs"].items():
        reports = [run.report() for run in runs]
        kinds = sorted({k for r in reports for k in r["cores_by_process"]})
        out[name] = {
            "machine_busy_cores_median": median_of([r["machine_busy_cores"] for r in reports]),
            "cores_by_process_median": {
                k: statistics.median(r["cores_by_process"].get(k, 0.0) for r in reports)
                for k in kinds},
            "member_records_per_s_median": [
                statistics.median(r["members"][i]["records_per_s"] for r in reports)
                for i in range(len(reports[0]["members"]))],
            # CPU per record: of the member processes (their own process_time), and of all
            # this benchmark's processes (members, replicas, controller, Ray, driver).
            "member_cpu_us_per_record_median": statistics.median(
                sum(m["cpu_seconds"] for m in r["members"]) / records * 1e6 for r in reports),
            "benchmark_cpu_us_per_record_median": statistics.median(
                sum(v for k, v in r["cores_by_process"].items() if k != "other")
                * r["seconds"] / records * 1e6 for r in reports),
        }
    group, single = out["group"], out["single"]
    # One consumer is one process whose poll loop runs on one core at a time; a group is
    # bounded by every core of the machine at the group runs' cost per record.
    single_ceiling = min(1e6 / single["member_cpu_us_per_record_median"],
                         cores * 1e6 / single["benchmark_cpu_us_per_record_median"])
    group_ceiling = cores * 1e6 / group["benchmark_cpu_us_per_record_median"]
    out["idle_machine_estimate"] = {
        "single_records_per_s": single_ceiling, "group_records_per_s": group_ceiling,
        "group_vs_single_ratio": group_ceiling / single_ceiling}
    note = [f"This machine has {cores} cores, shared by the members, the {PARTITIONS} "
            "broker actors, the controller, Ray's own processes, the driver and whatever "
            "else runs on it. Cores used, median over the timed runs:"]
    for name in ("group", "single"):
        by = out[name]["cores_by_process_median"]
        note.append(f"{name} runs: machine {_cores(out[name]['machine_busy_cores_median'])} "
                    "busy (" + ", ".join(f"{k} {v:.2f}" for k, v in by.items()) + ").")
    other = {name: out[name]["cores_by_process_median"].get("other", 0.0)
             for name in ("group", "single")}
    if max(other.values()) >= 0.1 * cores:
        note.append(f"Processes outside this benchmark took {other['group']:.2f} cores during "
                    f"the group runs and {other['single']:.2f} during the single runs: the "
                    "figures are below what an idle machine gives.")
    if abs(other["group"] - other["single"]) >= 0.2:
        lighter = "group" if other["group"] < other["single"] else "single"
        note.append(f"The {lighter} runs had the lighter outside load, which tilts the "
                    f"measured ratio {'up' if lighter == 'group' else 'down'}.")
    target, ceiling = TARGETS["group_vs_single_ratio"], group_ceiling / single_ceiling
    note.append(
        f"CPU per record: {single['member_cpu_us_per_record_median']:.2f} us in the single "
        f"consumer's process, {group['benchmark_cpu_us_per_record_median']:.2f} us over all "
        f"this benchmark's processes in the group runs. So on an idle {cores}-core machine "
        f"one consumer (one core) would reach at most about {single_ceiling / 1e6:.2f} M "
        f"records/s and the group (all {cores} cores) about {group_ceiling / 1e6:.2f} M: a "
        f"ratio of at most about {ceiling:.1f}.")
    if ceiling < target:
        needed = target * single_ceiling * group["benchmark_cpu_us_per_record_median"] / 1e6
        note.append(f"The {target:g}x target is bounded by this machine's {cores} cores, "
                    f"not by the group protocol: at that cost it needs about {needed:.1f}.")
    out["note"] = " ".join(note)
    return out


def _cores(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"


def figures_of(consume: dict[str, Any], trials: list[Trial]) -> dict[str, Any]:
    records = consume["records"]
    single = Timing(records, [run.seconds for run in consume["runs"]["single"]])
    group = Timing(records, [run.seconds for run in consume["runs"]["group"]])
    samples = [trial.rebalance_ms for trial in trials]
    figures: dict[str, Any] = {
        "rebalance_ms": statistics.median(samples),
        "rebalance_ms_min": min(samples),
        "rebalance_ms_max": max(samples),
        "rebalance_ms_samples": samples,
        **rate_figures("group_consume_records_per_s", group),
        **rate_figures("single_consume_records_per_s", single),
    }
    figures["group_vs_single_ratio"] = (figures["group_consume_records_per_s"]
                                        / figures["single_consume_records_per_s"])
    figures["group_vs_single_ratio_median"] = (figures["group_consume_records_per_s_median"]
                                               / figures["single_consume_records_per_s_median"])
    return figures


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load_at_start = time.perf_counter(), os.getloadavg()
    phases: dict[str, float] = {}  # seconds of each part of the run, setup and checks included

    def phase(name: str, since: float) -> float:
        phases[name] = time.perf_counter() - since
        return time.perf_counter()

    try:
        cluster = raylog.init(address="local", data_dir=root / "data")
        logical_cpus = ray.cluster_resources().get("CPU")
        mark = phase("start_ray_and_controller", started)
        consume = measure_consume(mode, cluster)
        mark = phase("consume", mark)
        rebalance = measure_rebalance(mode, cluster, root / "member-logs")
        phase("rebalance", mark)
    finally:
        ray.shutdown()
        reset_default()
        os.environ.pop(DATA_DIR_ENV, None)
    trials = rebalance["trials"]
    figures = figures_of(consume, trials)
    document = result_document(
        figures, TARGETS, mode=mode.name, started=started, load_at_start=load_at_start,
        machine=machine_info(ray=ray.__version__, ray_logical_cpus=logical_cpus),
        data={
            "description": describe_data("timestamps the producer's clock at send"),
            "record_bytes": RECORD_BYTES,
            "consume_records": consume["records"],
            "rebalance_records": rebalance["checked"]["sent"],
        },
        sections={
            "config": {
                "cluster": 'raylog.init(address="local"): one node, embedded, Ray default '
                           "logical CPUs; every actor here takes num_cpus=0",
                "partitions": PARTITIONS,
                "replication_factor": REPLICATION_FACTOR,
                "topic_configs": TOPIC_CONFIGS,
                "members": MEMBERS,
                "member_actor": "one Ray actor (worker process) per member, num_cpus=0, "
                                "max_restarts=0; the consumer is built inside it",
                "consume_consumer": dataclasses.asdict(
                    ConsumerConfig(group_id="consume-group", **CONSUME_SETTINGS)),
                "rebalance_consumer": dataclasses.asdict(
                    ConsumerConfig(group_id=Rebalancing.GROUP, **POLL_SETTINGS)),
                "rebalance_poll_timeout_ms": POLL_TIMEOUT_MS,
                "rebalance_produce": f"{PRODUCE_BURST} records per partition every "
                                     f"{PRODUCE_INTERVAL_S * 1000:g} ms "
                                     f"({PARTITIONS * PRODUCE_BURST / PRODUCE_INTERVAL_S:,.0f}"
                                     " records/s), default producer settings, from a driver "
                                     "thread",
                "rebalance_steady_recent_s": STEADY_RECENT_S,
                "rebalance_trials": mode.rebalance_trials,
                "rebalance_victim": "the oldest member; a fresh member then joins the same "
                                    "group",
                "consume_repetitions": mode.consume_repetitions,
                "warmups": 1,
                "temp_dir": str(root),
            },
            "rebalance": {
                "trials": [{"moved": t.moved, "rebalance_ms": t.rebalance_ms,
                            "received_ms": t.received_ms, "gained_ms": t.gained_ms,
                            "removed_ms": t.removed_ms,
                            "survivor_poll_threads": t.scheduling, **t.cpu,
                            "setup_s": t.setup_s}
                           for t in trials],
                "machine_busy_cores_median": median_of(
                    [t.cpu["machine_busy_cores"] for t in trials]),
                "other_processes_cores_median": statistics.median(
                    t.cpu["cores_by_process"].get("other", 0.0) for t in trials),
                "survivor_poll_thread_waiting_share_median": median_of([
                    s["waiting_for_cpu_ms"] / s["window_ms"]
                    for t in trials for s in t.scheduling if s]),
                "removed_ms_median": median_of([t.removed_ms for t in trials]),
                "gained_ms_median": statistics.median(
                    max(t.gained_ms.values()) for t in trials if t.gained_ms),
                "members_started": rebalance["members_started"],
                **rebalance["checked"],
            },
            "consume": {name: [run.report() for run in runs]
                        for name, runs in consume["runs"].items()},
            "cpu": cpu_section(consume),
            "checks_passed": CHECKS,  # a failed check ends the run with an error instead
            "phase_seconds": phases,
        })
    rebalance_target = {"target": REBALANCE_TARGET_MS, "value": figures["rebalance_ms"],
                        "met": figures["rebalance_ms"] < REBALANCE_TARGET_MS,
                        "kind": "maximum: the median must be below it"}
    document["targets"] = {"rebalance_ms": rebalance_target, **document["targets"]}
    return document


def table(result: dict[str, Any]) -> str:
    targets = result["targets"]
    rebalance = targets["rebalance_ms"]
    rows = [
        ["rebalance after a member dies (ms)", f"{result['rebalance_ms_min']:,.0f}",
         f"{result['rebalance_ms']:,.0f}",
         f"< {rebalance['target']:,}", "met" if rebalance["met"] else "NOT MET"],
    ]
    for name, label in (("group_consume_records_per_s", f"group of {MEMBERS} consume"),
                        ("single_consume_records_per_s", "one consumer consume")):
        rows.append([f"{label} (M records/s)", f"{result[name] / 1e6:,.2f}",
                     f"{result[f'{name}_median'] / 1e6:,.2f}", *target_cells(name, targets)])
    rows.append(["group / single", f"{result['group_vs_single_ratio']:.2f}",
                 f"{result['group_vs_single_ratio_median']:.2f}",
                 *target_cells("group_vs_single_ratio", targets)])
    return markdown_table(["measurement", "best", "median", "target", "met"], rows,
                          align="lrrrl")


def headline(mode: Mode, result: dict[str, Any]) -> str:
    return (f"consumer groups benchmark, {mode.name} mode: "
            f"{result['data']['consume_records']:,} records of {RECORD_BYTES} bytes to "
            f"consume; {len(result['rebalance']['trials'])} rebalance trials; {PARTITIONS} "
            f"partitions, {MEMBERS} members; {result['cpu']['cores']} CPUs, "
            f"Ray {ray.__version__}")


def notes(result: dict[str, Any]) -> str:
    cpu, rebalance = result["cpu"], result["rebalance"]
    samples = ", ".join(f"{ms:,.0f}" for ms in result["rebalance_ms_samples"])
    lines = [f"rebalance samples (ms): {samples}. Medians: the coordinator dropped the dead "
             f"member after {_ms(rebalance['removed_ms_median'])} ms (seen by the driver "
             f"polling), its partitions were in a survivor's assignment after "
             f"{_ms(rebalance['gained_ms_median'])} ms"]
    if (share := rebalance["survivor_poll_thread_waiting_share_median"]) is not None:
        lines.append(
            f"survivors' poll threads were runnable but waiting for a CPU {share:.0%} of the "
            "time from just before the kill until the trial ended (median; schedstat); "
            f"the machine was {_cores(rebalance['machine_busy_cores_median'])} cores busy, "
            f"{rebalance['other_processes_cores_median']:.2f} of them processes outside "
            "this benchmark")
    lines.append("members' own rates (M records/s, median): group "
                 + ", ".join(f"{r / 1e6:.2f}"
                             for r in cpu["group"]["member_records_per_s_median"])
                 + f"; single {cpu['single']['member_records_per_s_median'][0] / 1e6:.2f}")
    lines.append(f"\n{cpu['note']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         f"{QUICK.consume_records:,} records and {QUICK.rebalance_trials} "
                         f"rebalance trials instead of {FULL.consume_records:,} and "
                         f"{FULL.rebalance_trials}", (QUICK, FULL), run, headline, table, notes)


if __name__ == "__main__":
    sys.exit(main())
