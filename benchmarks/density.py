"""Partition density: what one partition replica costs a broker, next to a bare Ray actor.

Run from the repository root::

    .venv/bin/python benchmarks/density.py [--quick] [--json PATH]

``--quick`` takes about two minutes on this shared 2-core machine, the full run about four.
The script prints a Markdown table and writes JSON (default ``benchmarks/results/density.json``).

Setup: a ``ray.cluster_utils.Cluster`` on this machine, a head (the controller's, not a broker)
and 3 broker nodes, each with its own ``RAYLOG_DATA_DIR`` in a scratch directory. A broker is
one Ray actor per broker node that hosts every replica of its broker (actors/broker.py), as a
Kafka broker's process does. The bare actor is a class with one method that returns its
process id, placed with ``num_cpus=0`` and ``NodeAffinitySchedulingStrategy``: what any Ray
actor costs.

Measurements, all in one run:

memory      The broker process holding one partition's leader replica, after that replica
            served 20 appends of 100 records, fetches and an Arrow read (so whatever it
            imports lazily is loaded), and a bare actor on the same node: resident set
            (``replica_rss_mb``, ``bare_actor_rss_mb``) and unique set, the memory that goes
            away with the process (``replica_uss_mb``, ``bare_actor_uss_mb``), with psutil.
            Then the same broker's unique set again once it also holds the replicas of a
            ``N``-partition topic: ``per_partition_kb`` is what each more partition adds.
create      ``create_64_s``: ``Admin.create_topic`` of 64 partitions (replication factor 1),
            from the call until it returns (every replica opened by its broker and serving).
            ``bare_64_s``: starting 64 bare actors placed on the same nodes and waiting until
            every one has answered. Alternated, best of the rounds, each round with a new
            topic and new actors.
idle        ``idle_cpu_percent``: CPU seconds (user + system) of the three broker processes,
            which hold the 64 partitions of the last created topic (and the others), over the
            window, as a percentage of one core; nothing produces or consumes meanwhile.
            ``bare_idle_cpu_percent``: the 64 bare actors of the last round in the same
            window: what 64 processes cost idle, had each partition its own actor.
per GiB     ``partitions_per_gib``: 1 GiB over ``per_partition_kb``: how many partitions one
            GiB of a broker's memory holds beyond the broker process itself (a replica's log
            data lives in the page cache, which the kernel gives back under pressure).

Targets (the issue's): replica RSS at most 1.25x a bare actor's; creating the 64-partition
topic at most 1.5x starting the 64 bare actors; 64 idle replicas under 2% of a core.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from common import RESULTS_DIR, alternate, machine_info, markdown_table, run_benchmark

DEFAULT_JSON = RESULTS_DIR / "density.json"
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 100 * 1024 * 1024}
BROKERS = 3
PARTITIONS = 64
TARGETS = {"rss_ratio": 1.25, "create_ratio": 1.5, "idle_cpu_percent": 2.0}  # maxima


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    rounds: int          # create/bare rounds, alternated
    idle_window_s: float
    dense: int           # partitions of the topic that measures the cost of one more


QUICK = Mode("quick", rounds=1, idle_window_s=30, dense=300)
FULL = Mode("full", rounds=3, idle_window_s=30, dense=1500)


@ray.remote(num_cpus=0)
class Bare:
    """Any Ray actor: what a replica is measured against."""

    def pid(self) -> int:
        return os.getpid()


def pid_of(handle: ray.actor.ActorHandle) -> int:
    return ray.get(handle.__ray_call__.remote(lambda _self: os.getpid()), timeout=60)


def memory_mb(pid: int) -> tuple[float, float]:
    info = psutil.Process(pid).memory_full_info()
    return info.rss / 2**20, info.uss / 2**20


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def broker_handles(admin: Any) -> dict[int, ray.actor.ActorHandle]:
    """Broker id -> its broker actor, from the metadata of any topic placed on all."""
    meta = admin._cluster.topic("one", refresh=True)
    return {b: c.handle for p in meta.partitions for b, c in p.clients.items()}


def node_of_broker(admin: Any) -> dict[int, str]:
    return {b["broker_id"]: b["node_id"] for b in admin.cluster_status()["brokers"]
            if b["alive"]}


def start_bare(nodes: list[str]) -> tuple[float, list[ray.actor.ActorHandle]]:
    """Seconds to start one bare actor on each of ``nodes`` and hear from every one; the
    actors."""
    start = time.perf_counter()
    actors = [Bare.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False))
              .remote() for n in nodes]
    ray.get([a.pid.remote() for a in actors], timeout=600)
    return time.perf_counter() - start, actors


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started = time.perf_counter()
    load_at_start = os.getloadavg()
    from raylog.util.cluster_names import BROKER_RESOURCE, DATA_DIR_ENV

    cluster = Cluster(initialize_head=True, head_node_args={
        **NODE_ARGS, "include_dashboard": False, "env_vars": {DATA_DIR_ENV: str(root / "head")}})
    for i in range(BROKERS):
        cluster.add_node(**NODE_ARGS, resources={BROKER_RESOURCE: 1},
                         env_vars={DATA_DIR_ENV: str(root / f"broker-{i}")})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        import raylog
        from raylog import Admin, Consumer, Producer, TopicPartition

        raylog.init()
        admin = Admin()
        brokers = node_of_broker(admin)

        # -- memory: the broker holding one replica that has worked, a bare actor beside it
        admin.create_topic("one", partitions=BROKERS)  # a replica on every broker
        with Producer(acks="all", linger_ms=0) as producer:
            for i in range(20):
                for j in range(100):
                    producer.send("one", b"v%d" % j, key=b"k%d" % i, partition=0)
                producer.flush()
        with Consumer(auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("one", 0)])
            got: list = []
            deadline = time.monotonic() + 60
            while len(got) < 2000 and time.monotonic() < deadline:
                got.extend(consumer.poll(timeout_ms=200))
        leader = admin._cluster.topic("one", refresh=True).partitions[0].leader_client()
        ray.get(leader.read_kafka_table(0, 2000), timeout=60)  # the Arrow path
        handles = broker_handles(admin)
        broker = handles[leader.broker_id]
        bare = Bare.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            brokers[leader.broker_id], soft=False)).remote()
        ray.get(bare.pid.remote())
        broker_pid = pid_of(broker)
        replica_rss, replica_uss = memory_mb(broker_pid)
        bare_rss, bare_uss = memory_mb(ray.get(bare.pid.remote()))
        ray.kill(bare)

        # -- what one more partition costs: a dense topic, the broker's unique memory again
        admin.create_topic("dense", partitions=mode.dense * BROKERS,
                           configs={"retention.ms": -1})
        _, dense_uss = memory_mb(broker_pid)
        per_partition_kb = max(dense_uss - replica_uss, 0) * 1024 / mode.dense
        admin.delete_topic("dense")

        # -- creating 64 partitions vs starting 64 bare actors on the same nodes, alternated
        state: dict[str, Any] = {"round": 0, "bares": [], "placement": None}

        def create() -> float:
            state["round"] += 1
            name = f"dense-{state['round']}"
            start = time.perf_counter()
            admin.create_topic(name, partitions=PARTITIONS, configs={"retention.ms": -1})
            seconds = time.perf_counter() - start
            state["placement"] = [brokers[p["leader"]] for p in
                                  admin.describe_topic(name)["partitions"]]
            state["topic"] = name
            return seconds

        def start_bares() -> float:
            for actor in state["bares"]:
                ray.kill(actor)
            seconds, state["bares"] = start_bare(state["placement"])
            return seconds

        seconds = alternate(mode.rounds, {"create": create, "bare": start_bares},
                            warm_up=False)

        # -- 64 idle replicas in their brokers, and the 64 bare actors beside them
        broker_pids = [pid_of(h) for h in handles.values()]
        bare_pids = ray.get([a.pid.remote() for a in state["bares"]], timeout=120)
        time.sleep(2)  # the creation's own work (fsyncs, first maintenance round) settles
        before, bare_before = cpu_seconds(broker_pids), cpu_seconds(bare_pids)
        time.sleep(mode.idle_window_s)  # the measurement window: nothing else happens
        idle = 100 * (cpu_seconds(broker_pids) - before) / mode.idle_window_s
        bare_idle = 100 * (cpu_seconds(bare_pids) - bare_before) / mode.idle_window_s
        hosted = sum(len(ray.get(h.describe.remote(), timeout=60)) for h in handles.values())
    finally:
        from raylog.client.connection import reset_default

        reset_default()
        ray.shutdown()
        cluster.shutdown()

    figures = {
        "replica_rss_mb": replica_rss, "bare_actor_rss_mb": bare_rss,
        "replica_uss_mb": replica_uss, "bare_actor_uss_mb": bare_uss,
        "rss_ratio": replica_rss / bare_rss,
        "per_partition_kb": per_partition_kb,
        "create_64_s": min(seconds["create"]), "bare_64_s": min(seconds["bare"]),
        "create_ratio": min(seconds["create"]) / min(seconds["bare"]),
        "idle_cpu_percent": idle, "bare_idle_cpu_percent": bare_idle,
        "partitions_per_gib": 1024 * 1024 / max(per_partition_kb, 1e-9),
    }
    targets = {name: {"target": limit, "value": figures[name], "met": figures[name] <= limit,
                      "at_most": True} for name, limit in TARGETS.items()}
    return {
        **figures,
        "targets": targets,
        "mode": mode.name,
        "config": {"brokers": BROKERS, "partitions": PARTITIONS, "rounds": mode.rounds,
                   "idle_window_s": mode.idle_window_s, "dense_per_broker": mode.dense,
                   "replicas_hosted_during_idle_window": hosted},
        "seconds": {"create_64": seconds["create"], "bare_64": seconds["bare"]},
        "machine": {**machine_info(ray=ray.__version__),
                    "load_average_1m": {"start": load_at_start[0], "end": os.getloadavg()[0]}},
        "wall_seconds": time.perf_counter() - started,
    }


def headline(mode: Mode, result: dict[str, Any]) -> str:
    machine = result["machine"]
    return (f"partition density, {mode.name} mode: {BROKERS} brokers, a {PARTITIONS}-partition "
            f"topic, {mode.rounds} round(s), {mode.idle_window_s:.0f} s idle window, "
            f"{mode.dense} partitions per broker for the marginal cost; "
            f"{machine['cpu_count']} CPUs, Ray {machine['ray']}, load "
            f"{machine['load_average_1m']['start']:.1f} at start")


def table(result: dict[str, Any]) -> str:
    targets = result["targets"]

    def met(name: str) -> tuple[str, str]:
        if name not in targets:
            return "-", "-"
        return f"<= {targets[name]['target']:g}", "met" if targets[name]["met"] else "NOT MET"

    rows = [
        ("broker with one replica, resident memory (MB)", f"{result['replica_rss_mb']:.0f}",
         "-", "-"),
        ("bare actor resident memory (MB)", f"{result['bare_actor_rss_mb']:.0f}", "-", "-"),
        ("replica / bare actor, resident", f"{result['rss_ratio']:.2f}", *met("rss_ratio")),
        ("broker with one replica, unique memory (MB)", f"{result['replica_uss_mb']:.0f}",
         "-", "-"),
        ("bare actor unique memory (MB)", f"{result['bare_actor_uss_mb']:.0f}", "-", "-"),
        ("each more partition (KB)", f"{result['per_partition_kb']:.0f}", "-", "-"),
        ("create a 64-partition topic (s)", f"{result['create_64_s']:.2f}", "-", "-"),
        ("start 64 bare actors, same nodes (s)", f"{result['bare_64_s']:.1f}", "-", "-"),
        ("create / bare start", f"{result['create_ratio']:.3f}", *met("create_ratio")),
        ("64 idle replicas (3 broker processes), % of one core",
         f"{result['idle_cpu_percent']:.2f}", *met("idle_cpu_percent")),
        ("64 idle bare actors, % of one core", f"{result['bare_idle_cpu_percent']:.2f}", "-",
         "-"),
        ("partitions per GiB of broker memory", f"{result['partitions_per_gib']:.0f}", "-",
         "-"),
    ]
    return markdown_table(["measurement", "value", "target", "met"], rows, "lrrl")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         "one create/start round (about two minutes)", (QUICK, FULL), run,
                         headline, table)


if __name__ == "__main__":
    sys.exit(main())
