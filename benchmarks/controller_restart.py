"""Controller restart: loading the metadata log with snapshots next to replaying all of it.

Run from the repository root, through the slot script (part (b) starts a Ray cluster)::

    PYTHONPATH=$PWD /work/wt/cluster-run .venv/bin/python benchmarks/controller_restart.py \\
        [--quick] [--json PATH]

``--quick`` takes about a minute and a half on this shared 2-core machine, the full run about three.
The script prints a Markdown table and writes JSON (default
``benchmarks/results/controller_restart.json``).

Data: a cluster's metadata log: its first event, 3 brokers registered and started, 10 topics
of 100 partitions each (replication factor 3), then 100,000 ISR changes (each shrinks or
grows one partition's ISR, the partitions in turn). The history is written twice, by the
same ``MetadataStore.commit`` calls, one event per commit as the controller makes them (the
fsyncs skipped while writing: setup, not timed): once with the default snapshot policy
(``SnapshotPolicy()``: a snapshot every 10,000 events or 16 MiB of log, the log kept back to
the previous snapshot), once with snapshots off (the log as raylog kept it before
snapshots: every event since the cluster was born). Both load to the same state (checked,
outside the timed regions; that load is also the warm-up).

(a) ``MetadataStore(directory).load()``: opening the store and rebuilding the state, as the
    controller's constructor does, seconds. As after a crash (``ray.kill`` is one): the
    clean-shutdown marker removed before each open, so the log's active segment is checked
    batch by batch. With and without snapshots, alternated, best of the rounds; the files
    are in the page cache; the benchmark's own history and state are frozen out of the
    garbage collector (``gc.freeze``) while it times. The 100,017 events put the newest
    snapshot 17 events before the end: a lucky restart. So the snapshot variant is measured
    again with the longest tail its policy allows (9,999 events after the snapshot: the
    worst restart).
(b) A real controller actor restart, on a one-node Ray cluster started by the script (no
    broker node): the 100,000-change log of one variant in the controller's data
    directory, the controller created and answering, then ``ray.kill(controller,
    no_restart=False)`` and the seconds until ``ready()`` answers from the new process. That
    includes Ray's restart of the process and raylog's imports, which snapshots do not
    change. The controller runs with snapshot taking off
    (``RAYLOG_METADATA_SNAPSHOT_AFTER_EVENTS`` and ``_BYTES`` huge), so that neither
    variant's files change but for the events its first start commits (the 3 brokers of the
    history are down: about a thousand ISR changes, replayed by both variants' restarts).
    Variants alternated, best of the rounds.

``restart_speedup`` (a) and ``actor_restart_speedup`` (b) are the seconds without snapshots
over the seconds with them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raylog.metadata import MetadataState, MetadataStore
from raylog.metadata import state as events
from raylog.metadata.snapshot import (
    AFTER_BYTES_ENV,
    AFTER_EVENTS_ENV,
    SnapshotPolicy,
    snapshot_positions,
)
from raylog.storage import files
from raylog.storage.log import CLEAN_SHUTDOWN_FILE

from common import (
    RESULTS_DIR,
    alternate,
    input_frozen,
    machine_info,
    markdown_table,
    result_document,
    run_benchmark,
)

DEFAULT_JSON = RESULTS_DIR / "controller_restart.json"
BROKERS = 3
TOPICS = 10
PARTITIONS = 100                  # per topic
HEADLINE_HISTORY = 100_000        # ISR changes of the figures the issue asks for
WITHOUT = SnapshotPolicy(after_events=1 << 62, after_bytes=1 << 62)  # snapshots off


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    rounds: int                   # timed rounds of (a), after a warm-up round
    actor_rounds: int             # timed rounds of (b)


QUICK = Mode("quick", rounds=1, actor_rounds=1)
FULL = Mode("full", rounds=3, actor_rounds=3)


def history(isr_changes: int) -> list[dict[str, Any]]:
    """The metadata log's events: the cluster, its brokers and topics, then the ISR changes."""
    out = [events.cluster_created("benchmark0000000")]
    out += [events.broker_registered(b) for b in range(BROKERS)]
    out += [events.broker_started(b, f"incarnation-{b}") for b in range(BROKERS)]
    for t in range(TOPICS):
        replicas = [[(p + i) % BROKERS for i in range(BROKERS)] for p in range(PARTITIONS)]
        out.append(events.topic_created(f"topic-{t}", f"id-{t}", replicas, {}))
    for i in range(isr_changes):
        t, p = divmod(i % (TOPICS * PARTITIONS), PARTITIONS)
        replicas = [(p + j) % BROKERS for j in range(BROKERS)]
        isr = replicas if (i // (TOPICS * PARTITIONS)) % 2 else replicas[:2]
        out.append(events.partition_changed(f"topic-{t}", p, leader=replicas[0],
                                            leader_epoch=0, isr=isr))
    return out


@contextlib.contextmanager
def no_fsync() -> Iterator[None]:
    """Writing the logs (setup, not timed) without an fsync per event: the files are the
    same, and the timed opens read them from the page cache either way."""
    real = files.fsync
    files.fsync = lambda fd: None
    try:
        yield
    finally:
        files.fsync = real


def write_log(directory: Path, history_events: list[dict[str, Any]],
              policy: SnapshotPolicy) -> dict[str, Any]:
    """Commit ``history_events`` to a new store at ``directory``, one event per commit as the
    controller does (one batch each); what it holds on disk."""
    store = MetadataStore(directory, policy)
    state = store.load()
    with no_fsync():
        for event in history_events:
            store.commit(state, [event])
    info = {"log_start_offset": store.log.log_start_offset,
            "log_bytes": store.log.size_bytes,
            "snapshots": snapshot_positions(directory),
            "snapshot_bytes": sum(p.stat().st_size for p in directory.glob("*.snapshot"))}
    store.close()
    return info


def restart(directory: Path) -> tuple[float, MetadataState]:
    """Open the store as after a crash and rebuild its state: (seconds, the state)."""
    (directory / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    started = time.perf_counter()
    store = MetadataStore(directory)
    state = store.load()
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed, state


def run_store(mode: Mode, root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Part (a): figures, and what the logs hold."""
    evs = history(HEADLINE_HISTORY)
    expected = MetadataState()
    for event in evs:
        expected.apply(event)
    dirs = {"snapshots": root / "snapshots", "full_replay": root / "full_replay"}
    sizes = {"events": len(evs),
             "snapshots": write_log(dirs["snapshots"], evs, SnapshotPolicy()),
             "full_replay": write_log(dirs["full_replay"], evs, WITHOUT)}
    for name, directory in dirs.items():  # the same state (and a warm-up of each)
        if restart(directory)[1].to_data() != expected.to_data():
            raise RuntimeError(f"{name} loaded another state than the history's")
    with input_frozen():  # the history and its state, kept for the checks, are not timed
        seconds = alternate(mode.rounds, {name: lambda d=d: restart(d)[0]
                                          for name, d in dirs.items()}, warm_up=False)
    figures = {"restart_snapshots_s": min(seconds["snapshots"]),
               "restart_full_replay_s": min(seconds["full_replay"])}
    figures["restart_speedup"] = figures["restart_full_replay_s"] / figures["restart_snapshots_s"]
    # The worst case: the longest tail the policy lets the log have after its newest snapshot.
    worst = root / "worst"
    shutil.copytree(dirs["snapshots"], worst)
    store = MetadataStore(worst)
    state = store.load()
    more = SnapshotPolicy().after_events - 1 - (state.applied - store.snapshot_position)
    with no_fsync():
        for event in history(HEADLINE_HISTORY + more)[len(evs):]:
            store.commit(state, [event])
    if store.snapshot_position != max(snapshot_positions(worst)) or store.snapshot_due():
        raise RuntimeError("the worst case took a snapshot")
    sizes["worst_tail_events"] = state.applied - store.snapshot_position
    store.close()
    restart(worst)
    with input_frozen():
        figures["restart_snapshots_worst_s"] = min(restart(worst)[0]
                                                   for _ in range(mode.rounds))
    sizes["seconds"] = seconds
    return figures, sizes


def run_actor(mode: Mode, root: Path) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Part (b): a real controller actor's restart, per variant of the 100,000-change log."""
    import ray

    from actors.launch import start_controller
    from raylog.util.cluster_names import CONTROLLER_NAME, NAMESPACE

    data_dir = root / "ray-data"
    metadata = data_dir / "__controller" / "metadata"
    logs = {"snapshots": root / "snapshots", "full_replay": root / "full_replay"}
    metadata.parent.mkdir(parents=True)
    os.environ["RAYLOG_DATA_DIR"] = str(data_dir)  # read by the controller's process
    # Nor does it take snapshots: each variant's log stays what it is (else its first round's
    # commits would give the full-replay variant a snapshot to load).
    os.environ[AFTER_EVENTS_ENV] = os.environ[AFTER_BYTES_ENV] = str(1 << 62)
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
             object_store_memory=100 << 20)

    def ready(handle: Any, old_pid: int | None, deadline_s: float = 300) -> int:
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                pid = ray.get(handle.ready.remote(), timeout=30)["pid"]
                if pid != old_pid:
                    return pid
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the controller did not come back")
            time.sleep(0.02)  # polling a restarting actor: its calls fail until it is up

    def step(name: str) -> float:
        shutil.move(logs[name], metadata)  # the variant's log, while no controller runs
        try:
            handle = start_controller()
            pid = ready(handle, None)
            started = time.perf_counter()
            ray.kill(handle, no_restart=False)
            ready(handle, pid)
            elapsed = time.perf_counter() - started
            ray.kill(handle, no_restart=True)
            while True:  # its name is free once it is gone
                try:
                    ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
                except ValueError:
                    break
                time.sleep(0.05)
        finally:
            shutil.move(metadata, logs[name])
        if snapshot_positions(logs["full_replay"]):
            raise RuntimeError("the controller took a snapshot of the full-replay variant")
        return elapsed

    try:
        seconds = alternate(mode.actor_rounds, {name: lambda n=name: step(n) for name in logs},
                            warm_up=False)
    finally:
        ray.shutdown()
    figures = {"actor_restart_snapshots_s": min(seconds["snapshots"]),
               "actor_restart_full_replay_s": min(seconds["full_replay"])}
    figures["actor_restart_speedup"] = (figures["actor_restart_full_replay_s"]
                                        / figures["actor_restart_snapshots_s"])
    return figures, seconds


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load_at_start = time.perf_counter(), os.getloadavg()
    import ray

    figures, sizes = run_store(mode, root)
    actor_figures, actor_seconds = run_actor(mode, root)
    return result_document(
        {**figures, **actor_figures}, {}, mode=mode.name,
        data={"description": f"{BROKERS} brokers, {TOPICS} topics of {PARTITIONS} partitions "
                             f"(replication factor {BROKERS}), then {HEADLINE_HISTORY:,} ISR "
                             f"changes",
              "logs": sizes},
        sections={"config": {"policy": dataclasses.asdict(SnapshotPolicy()),
                             "rounds": mode.rounds,
                             "actor_rounds": mode.actor_rounds},
                  "seconds": {"actor": actor_seconds}},
        machine=machine_info(ray=ray.__version__), started=started,
        load_at_start=load_at_start)


def headline(mode: Mode, result: dict[str, Any]) -> str:
    machine = result["machine"]
    return (f"controller restart, {mode.name} mode: {TOPICS * PARTITIONS} partitions, "
            f"{HEADLINE_HISTORY:,} ISR changes, {mode.rounds} round(s) of the store, "
            f"{mode.actor_rounds} of the actor; {machine['cpu_count']} CPUs, load "
            f"{machine['load_average_1m']['start']:.1f} at start")


def table(result: dict[str, Any]) -> str:
    logs = result["data"]["logs"]
    snap, full = logs["snapshots"], logs["full_replay"]
    rows = [
        ("open the store and rebuild the state (s)", f"{result['restart_snapshots_s']:.3f}",
         f"{result['restart_full_replay_s']:.2f}", f"{result['restart_speedup']:.0f}"),
        ("events replayed", f"{logs['events'] - max(snap['snapshots']):,}",
         f"{logs['events']:,}", "-"),
        (f"... with the longest tail the policy allows ({logs['worst_tail_events']:,} events "
         f"replayed) (s)", f"{result['restart_snapshots_worst_s']:.2f}",
         f"{result['restart_full_replay_s']:.2f}",
         f"{result['restart_full_replay_s'] / result['restart_snapshots_worst_s']:.1f}"),
        ("on disk (MB): log + snapshots",
         f"{snap['log_bytes'] / 1e6:.1f} + {snap['snapshot_bytes'] / 1e6:.2f}",
         f"{full['log_bytes'] / 1e6:.1f}", "-"),
        ("controller actor restart, kill to ready (s)",
         f"{result['actor_restart_snapshots_s']:.2f}",
         f"{result['actor_restart_full_replay_s']:.2f}",
         f"{result['actor_restart_speedup']:.1f}"),
    ]
    return markdown_table(["after 100,000 ISR changes", "with snapshots",
                           "without (full replay)", "without / with"], rows, "lrrr")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         "one timed round (about a minute and a half)", (QUICK, FULL), run,
                         headline, table)


if __name__ == "__main__":
    sys.exit(main())
