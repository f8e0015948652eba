"""Failover of a broker that leads many partitions: the code before a change and after it.

Run from the repository root, through the slot script (part (b) starts Ray clusters)::

    PYTHONPATH=$PWD /work/wt/cluster-run .venv/bin/python benchmarks/failover.py \\
        [--quick] [--json PATH] [--before REV]

Both variants are measured in one run, alternated: **after** is the working tree, **before**
the code at ``--before`` (default ``merge-preview``: what elections were before they committed
their changes in one; pass the commit to compare with), taken with ``git archive`` into the
scratch directory. Each variant's steps run in a Python process of their own whose
``PYTHONPATH`` is the variant's tree (its Ray workers inherit it); this script and
``common.py`` come from the working tree. The script prints a Markdown table and writes JSON
(default ``benchmarks/results/failover.json``).

(a) **The controller's step**, without Ray: ``BrokerManager.broker_down`` over a
    ``MetadataAccess`` on a ``MetadataStore`` in a scratch directory on this machine's disk
    (real fsyncs), broker 1 leading 500 partitions (replication factor 3, in sync) that the
    step moves to broker 2; the brokers told are fakes that take what they are told at once.
    Seconds of the step, best of the rounds (a new store each round).
(b) **A real failover**: a Ray cluster of a head node (the controller) and two broker nodes
    (one process each), a topic of 1,000 partitions with replication factor 2 (each broker
    leads 500); the broker actor of the broker leading partition 0 killed (``ray.kill``, Ray
    restarts it, as a crashed process), then the seconds until the controller's description
    of the topic shows another leader for every partition it led (polled every 50 ms). Its
    leaderships are given back (a preferred-leader election, once it is in sync again)
    between rounds. Clusters in the order before, after, after, before, ...; best and median
    of the failovers. On this shared machine the seconds are mostly Ray noticing the death
    and the machine's load (other clusters): read them with the load average in the JSON.

``step_speedup`` and ``failover_speedup`` are the seconds before over the seconds after.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
DEFAULT_JSON = HERE.parent / "results" / "failover.json"


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    step_rounds: int      # part (a): steps per variant, each in a process of its own
    clusters: int         # part (b): clusters per variant, alternated
    failover_rounds: int  # part (b): failovers in each cluster
    partitions_led: int = 500


QUICK = Mode("quick", step_rounds=3, clusters=1, failover_rounds=2)
FULL = Mode("full", step_rounds=7, clusters=2, failover_rounds=3)


# -- the steps, run in a variant's own process ---------------------------------------------------

class LiveWatch:
    """A broker's watch that says it is alive."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id, self.alive = broker_id, True


class TakingChannel:
    """A broker's sender that takes every word at once."""

    def tell(self, partitions=(), full: bool = False) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        future.set_result(True)
        return future


def controller_step(root: Path, led: int) -> float:
    """Part (a): seconds of ``broker_down`` for a broker leading ``led`` partitions."""
    from actors.broker_manager import BrokerManager
    from raylog.metadata import state as events
    from raylog.metadata.access import MetadataAccess
    from raylog.metadata.settings import ReplicationSettings
    from raylog.metadata.store import MetadataStore

    directory = Path(tempfile.mkdtemp(prefix="meta-", dir=root))
    store = MetadataStore(directory)
    try:
        access = MetadataAccess(store)
        access.commit(events.cluster_created("c"))
        for broker in (1, 2, 3):
            access.commit(events.broker_registered(broker))
        access.commit(events.topic_created("t", "id", [[1, 2, 3]] * led, {}))
        manager = BrokerManager(access, ReplicationSettings())
        for broker in (2, 3):
            manager.watches[broker] = LiveWatch(broker)
            manager.channels[broker] = TakingChannel()
        started = time.perf_counter()
        asyncio.run(manager.broker_down(1))
        elapsed = time.perf_counter() - started
        if {p.leader for _, p in access.partitions()} != {2}:
            raise RuntimeError("the step did not move every leadership")
        return elapsed
    finally:
        store.close()
        shutil.rmtree(directory)


def real_failovers(root: Path, rounds: int, led: int) -> list[float]:
    """Part (b): seconds of each of ``rounds`` failovers of a broker leading ``led``."""
    import ray
    from ray.cluster_utils import Cluster

    import raylog
    from raylog import Admin
    from raylog.client.connection import reset_default
    from raylog.metadata.hosts import PROCESSES_ENV
    from raylog.util.cluster_names import BROKER_RESOURCE, DATA_DIR_ENV, NAMESPACE

    node_args = {"num_cpus": 1, "object_store_memory": 200 << 20}
    cluster = Cluster(initialize_head=True, head_node_args={
        **node_args, "include_dashboard": False,
        "env_vars": {DATA_DIR_ENV: str(root / "head")}})
    try:
        for i in range(2):
            cluster.add_node(**node_args, resources={BROKER_RESOURCE: 1},
                             env_vars={DATA_DIR_ENV: str(root / f"broker-{i}"),
                                       PROCESSES_ENV: "1"})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        connection = raylog.init()
        admin = Admin()
        admin.create_topic("failover", partitions=2 * led, replication_factor=2)
        seconds = []
        for _ in range(rounds):
            leaders = until(lambda: preferred(admin), 300, "every preferred leader")
            victim = leaders[0]
            moving = [i for i, b in enumerate(leaders) if b == victim]
            node = next(b["node_id"] for b in connection.controller.cluster_status()["brokers"]
                        if b["broker_id"] == victim)
            actor = ray.get_actor(f"broker:{node}", namespace=NAMESPACE)
            started = time.perf_counter()
            ray.kill(actor, no_restart=False)
            until(lambda v=victim, m=moving: all(leaders_of(admin)[i] not in (v, None)
                                                  for i in m),
                  300, "the leaderships to move", interval=0.05)
            seconds.append(time.perf_counter() - started)
            if len(moving) != led:
                raise RuntimeError(f"broker {victim} led {len(moving)} partitions, not {led}")
        return seconds
    finally:
        reset_default()
        ray.shutdown()
        cluster.shutdown()


def leaders_of(admin: Any) -> list[int | None]:
    return [p["leader"] for p in admin.describe_topic("failover")["partitions"]]


def preferred(admin: Any) -> list[int] | None:
    """The leaders once each partition is led by its first replica, with both in sync."""
    description = admin.describe_topic("failover")["partitions"]
    if all(p["leader"] == p["replicas"][0] and len(p["isr"]) == 2 for p in description):
        return [p["leader"] for p in description]
    if all(len(p["isr"]) == 2 for p in description):
        admin.elect_leaders("failover")
    return None


def until(condition: Any, timeout_s: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = condition()
        except Exception:  # the cluster settles: a call may fail meanwhile
            found = None
        if found:
            return found
        time.sleep(interval)  # a benchmark polling the cluster's state, not a test
    raise TimeoutError(f"no {what} within {timeout_s} s")


def variant_main(argv: list[str]) -> int:
    """``--variant PART ROOT ROUNDS LED``: run one part here and print its seconds as JSON."""
    part, root, rounds, led = argv[0], Path(argv[1]), int(argv[2]), int(argv[3])
    if part == "step":
        seconds = [controller_step(root, led) for _ in range(rounds)]
    else:
        seconds = real_failovers(root, rounds, led)
    print(json.dumps(seconds))
    return 0


# -- the comparison ----------------------------------------------------------------------------

def in_variant(tree: Path, part: str, root: Path, rounds: int, led: int) -> list[float]:
    scratch = Path(tempfile.mkdtemp(prefix=f"{part}-", dir=root))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, str(HERE), "--variant", part, str(scratch),
                           str(rounds), str(led)], env=env, cwd=tree, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode:
        raise RuntimeError(f"the {part} run in {tree} failed:\n{done.stderr[-4000:]}")
    shutil.rmtree(scratch, ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(mode: Mode, root: Path, before: str) -> dict[str, Any]:
    from common import machine_info, source_tree

    started, load_at_start = time.perf_counter(), os.getloadavg()[0]
    trees = {"before": source_tree(before, root), "after": HERE.parents[1]}
    steps: dict[str, list[float]] = {name: [] for name in trees}
    failovers: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(mode.step_rounds):  # part (a): a process per variant and round, in turn
        for name, tree in trees.items():
            steps[name] += in_variant(tree, "step", root, 1, mode.partitions_led)
    # Part (b): a cluster per variant and round, before, after, after, before, ...: a drift
    # of the machine's load over the run weighs on both alike.
    order = list(trees)
    for _ in range(mode.clusters):
        for name in order:
            failovers[name] += in_variant(trees[name], "cluster", root, mode.failover_rounds,
                                          mode.partitions_led)
        order.reverse()
    figures = {f"step_{name}_s": min(seconds) for name, seconds in steps.items()}
    figures["step_speedup"] = figures["step_before_s"] / figures["step_after_s"]
    for name, seconds in failovers.items():
        figures[f"failover_{name}_s"] = min(seconds)
        figures[f"failover_{name}_median_s"] = statistics.median(seconds)
    figures["failover_speedup"] = figures["failover_before_s"] / figures["failover_after_s"]
    return {**figures, "mode": mode.name, "before": before,
            "partitions_led": mode.partitions_led,
            "seconds": {"step": steps, "failover": failovers},
            "machine": machine_info(load_average_1m={"start": load_at_start,
                                                     "end": os.getloadavg()[0]}),
            "wall_seconds": time.perf_counter() - started}


def table(result: dict[str, Any]) -> str:
    from common import markdown_table

    rows = [[what, f"{result[f'{key}_before_s']:.3f}", f"{result[f'{key}_after_s']:.3f}",
             f"{result[f'{key}_speedup']:.2f}"]
            for what, key in (("controller step, broker_down (s, best)", "step"),
                              ("real failover, kill to every leader moved (s, best)",
                               "failover"))]
    rows.append(["real failover (s, median)", f"{result['failover_before_median_s']:.3f}",
                 f"{result['failover_after_median_s']:.3f}", "-"])
    return markdown_table(["", "before", "after", "before / after"], rows, "lrrr")


def headline(mode: Mode, result: dict[str, Any]) -> str:
    return (f"failover of a broker leading {result['partitions_led']} partitions ({mode.name}), "
            f"before ({result['before']}) and after: the controller's step "
            f"{result['step_speedup']:.1f}x faster")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--variant"]:
        return variant_main(argv[1:])
    from common import run_benchmark

    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         "3 steps and 2 failovers per variant (about six minutes)",
                         (QUICK, FULL), run, headline, table, compare=True)


if __name__ == "__main__":
    sys.exit(main())
