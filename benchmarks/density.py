"""Partition density: what one partition replica costs a broker, next to a bare Ray actor.

Run from the repository root::

    .venv/bin/python benchmarks/density.py [--quick] [--json PATH]

``--quick`` takes about two minutes on this shared 2-core machine, the full run about four.
The script prints a Markdown table and writes JSON (default ``benchmarks/results/density.json``).

Setup: a ``ray.cluster_utils.Cluster`` on this machine, a head (the controller's, not a broker)
and 3 broker nodes, each with its own ``RAYLOG_DATA_DIR`` in a scratch directory. Every
replica actor and every bare actor takes ``num_cpus=0`` and is pinned to its node
(``NodeAffinitySchedulingStrategy``), as the controller pins replicas. The bare actor is a
class with one method that returns its process id: what any Ray actor costs.

Measurements, all in one run:

memory      One partition's leader replica after it has served 20 appends of 100 records,
            fetches and an Arrow read (so whatever it imports lazily is loaded), and a bare
            actor on the same node: resident set (``replica_rss_mb``, ``bare_actor_rss_mb``)
            and unique set, the memory that goes away with the process
            (``replica_uss_mb``, ``bare_actor_uss_mb``), with psutil from /proc. The RSS
            counts the shared libraries each process maps (Ray's core worker, Arrow), which
            several processes share; the USS is what each more replica adds.
create      ``create_64_s``: ``Admin.create_topic`` of 64 partitions, from the call until it
            returns (every replica actor started, its log opened, ready). ``bare_64_s``:
            starting 64 bare actors placed on the same nodes as those 64 replicas and
            waiting until every one has answered. Alternated, best of the rounds, each round
            with a new topic and new actors (the old ones removed first).
idle        ``idle_cpu_percent``: the CPU seconds (user + system, /proc/<pid>/stat) that the
            64 replicas of the last created topic use together over the window, as a
            percentage of one core; nothing produces or consumes meanwhile.
            ``bare_idle_cpu_percent``: the same for the last round's 64 bare actors, in the
            same window: what Ray's own worker threads cost.
per GiB     ``partitions_per_gib``: 1 GiB over the replica's unique memory: how many more
            partitions one GiB of a broker's memory holds (the shared libraries are counted
            once per node, not per replica; a replica's log data lives in the page cache,
            which the kernel gives back under pressure).

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

from common import RESULTS_DIR, machine_info, markdown_table, run_benchmark

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


QUICK = Mode("quick", rounds=1, idle_window_s=30)
FULL = Mode("full", rounds=3, idle_window_s=30)


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


def replica_handles(admin: Any, topic: str) -> list[ray.actor.ActorHandle]:
    meta = admin._cluster.topic(topic, refresh=True)
    return [p.leader_client().handle for p in meta.partitions]


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
    from raylog.cluster_names import BROKER_RESOURCE, DATA_DIR_ENV

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

        # -- memory: one replica that has worked, and a bare actor on its node
        admin.create_topic("one", partitions=1)
        with Producer(acks="all", linger_ms=0) as producer:
            for i in range(20):
                for j in range(100):
                    producer.send("one", b"v%d" % j, key=b"k%d" % i)
                producer.flush()
        with Consumer(auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("one", 0)])
            got: list = []
            deadline = time.monotonic() + 60
            while len(got) < 2000 and time.monotonic() < deadline:
                got.extend(consumer.poll(timeout_ms=200))
        replica = replica_handles(admin, "one")[0]
        ray.get(replica.read_kafka_table.remote(0, 2000), timeout=60)  # the Arrow path
        leader = admin.describe_topics(["one"])[0]["partitions"][0]["leader"]
        bare = Bare.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            brokers[leader], soft=False)).remote()
        ray.get(bare.pid.remote())
        replica_rss, replica_uss = memory_mb(pid_of(replica))
        bare_rss, bare_uss = memory_mb(ray.get(bare.pid.remote()))
        ray.kill(bare)

        # -- creating 64 partitions vs starting 64 bare actors on the same nodes
        create_s, bare_s = [], []
        topic, bares = None, []
        for r in range(mode.rounds):
            if topic is not None:
                admin.delete_topic(topic)
            for actor in bares:
                ray.kill(actor)
            topic = f"dense-{r}"
            start = time.perf_counter()
            admin.create_topic(topic, partitions=PARTITIONS, configs={"retention.ms": -1})
            create_s.append(time.perf_counter() - start)
            placement = [brokers[p["leader"]]
                         for p in admin.describe_topics([topic])[0]["partitions"]]
            seconds, bares = start_bare(placement)
            bare_s.append(seconds)

        # -- 64 idle replicas, and the 64 bare actors of the last round beside them
        pids = [pid_of(h) for h in replica_handles(admin, topic)]
        bare_pids = ray.get([a.pid.remote() for a in bares], timeout=120)
        before, bare_before = cpu_seconds(pids), cpu_seconds(bare_pids)
        time.sleep(mode.idle_window_s)  # the measurement window: nothing else happens
        idle = 100 * (cpu_seconds(pids) - before) / mode.idle_window_s
        bare_idle = 100 * (cpu_seconds(bare_pids) - bare_before) / mode.idle_window_s
    finally:
        from raylog.client.connection import reset_default

        reset_default()
        ray.shutdown()
        cluster.shutdown()

    figures = {
        "replica_rss_mb": replica_rss, "bare_actor_rss_mb": bare_rss,
        "replica_uss_mb": replica_uss, "bare_actor_uss_mb": bare_uss,
        "rss_ratio": replica_rss / bare_rss,
        "create_64_s": min(create_s), "bare_64_s": min(bare_s),
        "create_ratio": min(create_s) / min(bare_s),
        "idle_cpu_percent": idle, "bare_idle_cpu_percent": bare_idle,
        "partitions_per_gib": 1024 / replica_uss,
    }
    targets = {name: {"target": limit, "value": figures[name], "met": figures[name] <= limit,
                      "at_most": True} for name, limit in TARGETS.items()}
    return {
        **figures,
        "targets": targets,
        "mode": mode.name,
        "config": {"brokers": BROKERS, "partitions": PARTITIONS, "rounds": mode.rounds,
                   "idle_window_s": mode.idle_window_s},
        "seconds": {"create_64": create_s, "bare_64": bare_s},
        "machine": {**machine_info(ray=ray.__version__),
                    "load_average_1m": {"start": load_at_start[0], "end": os.getloadavg()[0]}},
        "wall_seconds": time.perf_counter() - started,
    }


def headline(mode: Mode, result: dict[str, Any]) -> str:
    machine = result["machine"]
    return (f"partition density, {mode.name} mode: {BROKERS} brokers, a {PARTITIONS}-partition "
            f"topic, {mode.rounds} round(s), {mode.idle_window_s:.0f} s idle window; "
            f"{machine['cpu_count']} CPUs, Ray {machine['ray']}, load "
            f"{machine['load_average_1m']['start']:.1f} at start")


def table(result: dict[str, Any]) -> str:
    targets = result["targets"]

    def met(name: str) -> tuple[str, str]:
        if name not in targets:
            return "-", "-"
        return f"<= {targets[name]['target']:g}", "met" if targets[name]["met"] else "NOT MET"

    rows = [
        ("replica resident memory (MB)", f"{result['replica_rss_mb']:.0f}", "-", "-"),
        ("bare actor resident memory (MB)", f"{result['bare_actor_rss_mb']:.0f}", "-", "-"),
        ("replica / bare actor, resident", f"{result['rss_ratio']:.2f}", *met("rss_ratio")),
        ("replica unique memory (MB)", f"{result['replica_uss_mb']:.0f}", "-", "-"),
        ("bare actor unique memory (MB)", f"{result['bare_actor_uss_mb']:.0f}", "-", "-"),
        ("create a 64-partition topic (s)", f"{result['create_64_s']:.1f}", "-", "-"),
        ("start 64 bare actors, same nodes (s)", f"{result['bare_64_s']:.1f}", "-", "-"),
        ("create / bare start", f"{result['create_ratio']:.2f}", *met("create_ratio")),
        ("64 idle replicas, % of one core", f"{result['idle_cpu_percent']:.2f}",
         *met("idle_cpu_percent")),
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
