"""Replication: what acks=all over three replicas costs, how fast a leader is replaced, and
reading from a follower against reading from the leader.

Run from the repository root::

    .venv/bin/python benchmarks/replication.py [--quick] [--json PATH]

``--quick`` takes about three minutes on this shared 2-core machine, the full run about six.
The script prints a Markdown table and writes JSON (default
``benchmarks/results/replication.json``).

Setup: a ``ray.cluster_utils.Cluster`` on this machine, a head (the controller's) and 3 broker
nodes, each with its own data directory in a scratch directory; the 100-byte JSON page views
of ``common.py``, keyless, generated before any timing. Every topic has 3 partitions and
``retention.ms=-1``.

Measurements, all in one run:

produce     ``rf1_acks1_records_per_s``: one ``Producer(acks=1)`` (otherwise the defaults),
            ``send`` for every record of the input then ``flush()``, to a topic with
            replication factor 1; ``rf3_acksall_records_per_s``: the same with
            ``acks="all"`` to a topic with replication factor 3 and ``min.insync.replicas=2``
            (each batch answered once its three replicas have it: the ISR);
            ``rf3_acksall_fsync_records_per_s``: the same again to a topic that also has
            ``flush.messages=1`` (each batch answered once its three replicas have it on
            disk: every replica fsyncs each append before its log end counts; what the
            default's page cache costs to give up). They alternate, after a warm-up round
            each; best of the rounds. The same with ``send_batch`` of one Arrow table
            (``*_arrow_records_per_s``, without the fsync topic), which moves the load from
            the producer's Python to the brokers.
failover    ``failover_ms``: median over the kills of the time from killing the broker that
            leads a replication-factor-3 partition (``ray.kill``; Ray restarts it) to the
            first ``acks="all"`` write acknowledged by the new leader. A producer (metadata
            already cached, ``retry_backoff_ms=20``) sends one record right after the kill
            and waits for its future: it fails on the dead broker, refreshes its metadata
            and retries on the new leader. Between kills the cluster gets back fully in sync.
fetch       ``leader_fetch_records_per_s`` and ``follower_fetch_records_per_s``: a consumer
            running in a Ray task on the node of the partition leader's broker reads a
            preloaded replication-factor-3 single-partition topic from there (the leader),
            and one on the node of a follower's broker reads it from that follower (KIP-392,
            the consumer's default), from the start to the end, adding up ``len(value)``;
            alternated, best of the rounds. The task checks which replica it read from.

Checks, outside the timed regions: after the produce rounds each topic holds exactly the
records sent (its end offsets), every fetch read 100 bytes per record, each consumer read from
the replica it was meant to, and each failover's write was answered by another broker.

Targets (the issue's): replication factor 3 with acks=all at least 50% of replication factor
1 with acks=1 (Kafka's own published figures show 51%); failover under 2,000 ms; follower
fetch at least 90% of leader fetch.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from common import (
    RESULTS_DIR,
    alternate,
    generate_values,
    machine_info,
    markdown_table,
    run_benchmark,
    split_values,
)

DEFAULT_JSON = RESULTS_DIR / "replication.json"
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 300 * 1024 * 1024}
BROKERS = 3
PARTITIONS = 3
TARGETS = {"rf3_over_rf1": 0.5, "follower_over_leader": 0.9}  # minima
FAILOVER_TARGET_MS = 2000.0  # maximum


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    records: int       # per produce repetition
    rounds: int
    kills: int
    fetch_records: int


QUICK = Mode("quick", records=200_000, rounds=2, kills=5, fetch_records=300_000)
FULL = Mode("full", records=500_000, rounds=3, kills=9, fetch_records=1_000_000)


def in_sync(admin: Any, topic: str) -> bool:
    return all(p["leader"] is not None and sorted(p["isr"]) == sorted(p["replicas"])
               for p in admin.describe_topic(topic)["partitions"])


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def produce(values: list[bytes], topic: str, acks: int | str) -> float:
    from raylog import Producer

    with Producer(acks=acks) as producer:
        start = time.perf_counter()
        for value in values:
            producer.send(topic, value)
        producer.flush()
        return time.perf_counter() - start


def produce_table(table: pa.Table, topic: str, acks: int | str) -> float:
    from raylog import Producer

    with Producer(acks=acks) as producer:
        start = time.perf_counter()
        producer.send_batch(topic, table).result(600)
        producer.flush()
        return time.perf_counter() - start


@ray.remote(num_cpus=0)
def read_here(topic: str, count: int) -> tuple[float, int, int]:
    """On this node: (seconds to read ``count`` records of ``topic``-0 from the start, the
    bytes of their values, the broker read from)."""
    import raylog

    cluster = raylog.init(start_local=False, create=False)
    tp = raylog.TopicPartition(topic, 0)
    with raylog.Consumer(cluster=cluster, auto_offset_reset="earliest",
                         max_poll_records=50_000) as consumer:
        consumer.assign([tp])
        broker = consumer._reader(tp).broker_id
        seen = size = 0
        start = time.perf_counter()
        while seen < count:
            records = consumer.poll(timeout_ms=1000)
            seen += len(records)
            size += sum(len(r.value) for r in records)
        return time.perf_counter() - start, size, broker


def end_offsets(topics: list[str]) -> dict[str, int]:
    """Records in each topic: the sum of its partitions' end offsets."""
    from raylog import Consumer, TopicPartition

    with Consumer() as consumer:
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        ends = consumer.end_offsets(tps)
    return {t: sum(v for tp, v in ends.items() if tp.topic == t) for t in topics}


def failover_once(admin: Any, topic: str) -> float:
    """Kill the leader of ``topic``-0, then ms until an acks=all write is acknowledged."""
    from raylog import Producer

    with Producer(acks="all", retry_backoff_ms=20, linger_ms=0) as producer:
        producer.send(topic, b"warm", partition=0).result(60)  # metadata cached, connected
        meta = admin._cluster.topic(topic, refresh=True).partitions[0]
        leader = meta.leader_client()
        ray.kill(leader.handle, no_restart=False)
        start = time.perf_counter()
        producer.send(topic, b"after-kill", partition=0).result(60)
        elapsed = (time.perf_counter() - start) * 1000
    now = admin.describe_topic(topic)["partitions"][0]
    assert now["leader"] != leader.broker_id, "the old leader answered"
    wait_until(lambda: in_sync(admin, topic), 120, "the killed broker back in sync")
    return elapsed


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started = time.perf_counter()
    load_at_start = os.getloadavg()
    from raylog.util.cluster_names import BROKER_RESOURCE, DATA_DIR_ENV

    values = split_values(generate_values(mode.records).tobytes())
    table = pa.table({"value": pa.array(values, pa.binary())})
    cluster = Cluster(initialize_head=True, head_node_args={
        **NODE_ARGS, "include_dashboard": False, "env_vars": {DATA_DIR_ENV: str(root / "head")}})
    for i in range(BROKERS):
        cluster.add_node(**NODE_ARGS, resources={BROKER_RESOURCE: 1},
                         env_vars={DATA_DIR_ENV: str(root / f"broker-{i}")})
    cluster.wait_for_nodes()
    try:
        import raylog
        from raylog import Admin, Producer

        raylog.init(address=cluster.address)  # as a raylog user's driver connects
        admin = Admin()
        keep = {"retention.ms": -1}
        admin.create_topic("rf1", PARTITIONS, 1, keep)
        admin.create_topic("rf3", PARTITIONS, 3, {**keep, "min.insync.replicas": 2})
        admin.create_topic("rf3fsync", PARTITIONS, 3,
                           {**keep, "min.insync.replicas": 2, "flush.messages": 1})
        for topic in ("rf3", "rf3fsync"):
            wait_until(lambda t=topic: in_sync(admin, t), 60, f"{topic} in sync")

        # -- produce: rf1/acks=1 against rf3/acks=all (and with every append fsynced), per
        # record and as an Arrow table
        seconds = alternate(mode.rounds, {
            "rf1": lambda: produce(values, "rf1", 1),
            "rf3": lambda: produce(values, "rf3", "all"),
            "rf3_fsync": lambda: produce(values, "rf3fsync", "all"),
            "rf1_arrow": lambda: produce_table(table, "rf1", 1),
            "rf3_arrow": lambda: produce_table(table, "rf3", "all"),
        })
        for topic in ("rf3", "rf3fsync"):
            wait_until(lambda t=topic: in_sync(admin, t), 60, f"{topic} in sync after producing")
        ends = end_offsets(["rf1", "rf3", "rf3fsync"])
        sent = mode.records * (mode.rounds + 1)  # warm-up and rounds, per path
        assert ends == {"rf1": 2 * sent, "rf3": 2 * sent, "rf3fsync": sent}, (ends, sent)

        # -- failover
        admin.create_topic("failover", 1, 3, {**keep, "min.insync.replicas": 2})
        wait_until(lambda: in_sync(admin, "failover"), 60, "failover in sync")
        failovers = [failover_once(admin, "failover") for _ in range(mode.kills)]

        # -- reading from the leader and from a follower, each on its broker's own node
        admin.create_topic("reads", 1, 3, keep)
        with Producer(acks="all") as producer:
            producer.send_batch("reads", pa.table({"value": pa.array(
                (values * (mode.fetch_records // len(values) + 1))[:mode.fetch_records],
                pa.binary())}), partition=0).result(600)
        wait_until(lambda: in_sync(admin, "reads"), 60, "reads in sync")
        state = admin.describe_topic("reads")["partitions"][0]
        nodes = {b["broker_id"]: b["node_id"] for b in admin.cluster_status()["brokers"]}
        follower = next(b for b in state["replicas"] if b != state["leader"])
        read_from: dict[str, int] = {}

        def reader(name: str, broker: int):
            def step() -> float:
                elapsed, size, used = ray.get(read_here.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[broker],
                                                                       soft=False)).remote(
                    "reads", mode.fetch_records), timeout=600)
                assert size == 100 * mode.fetch_records, size
                read_from[name] = used
                return elapsed
            return step

        fetch_seconds = alternate(mode.rounds, {"leader": reader("leader", state["leader"]),
                                                "follower": reader("follower", follower)})
        assert read_from == {"leader": state["leader"], "follower": follower}, read_from
    finally:
        from raylog.client.connection import reset_default

        reset_default()
        ray.shutdown()
        cluster.shutdown()

    n, f = mode.records, mode.fetch_records
    figures = {
        "rf1_acks1_records_per_s": n / min(seconds["rf1"]),
        "rf3_acksall_records_per_s": n / min(seconds["rf3"]),
        "rf3_acksall_fsync_records_per_s": n / min(seconds["rf3_fsync"]),
        "rf1_acks1_arrow_records_per_s": n / min(seconds["rf1_arrow"]),
        "rf3_acksall_arrow_records_per_s": n / min(seconds["rf3_arrow"]),
        "failover_ms": statistics.median(failovers),
        "leader_fetch_records_per_s": f / min(fetch_seconds["leader"]),
        "follower_fetch_records_per_s": f / min(fetch_seconds["follower"]),
    }
    figures["rf3_over_rf1"] = figures["rf3_acksall_records_per_s"] / \
        figures["rf1_acks1_records_per_s"]
    figures["rf3_fsync_over_rf3"] = figures["rf3_acksall_fsync_records_per_s"] / \
        figures["rf3_acksall_records_per_s"]
    figures["rf3_over_rf1_arrow"] = figures["rf3_acksall_arrow_records_per_s"] / \
        figures["rf1_acks1_arrow_records_per_s"]
    figures["follower_over_leader"] = figures["follower_fetch_records_per_s"] / \
        figures["leader_fetch_records_per_s"]
    targets = {name: {"target": limit, "value": figures[name], "met": figures[name] >= limit,
                      "at_most": False} for name, limit in TARGETS.items()}
    targets["failover_ms"] = {"target": FAILOVER_TARGET_MS, "value": figures["failover_ms"],
                              "met": figures["failover_ms"] < FAILOVER_TARGET_MS,
                              "at_most": True}
    return {
        **figures,
        "targets": targets,
        "mode": mode.name,
        "config": {"brokers": BROKERS, "partitions": PARTITIONS, "records": n,
                   "rounds": mode.rounds, "kills": mode.kills, "fetch_records": f,
                   "records_in_topics": ends},
        "seconds": {**seconds, "fetch": fetch_seconds},
        "failovers_ms": failovers,
        "machine": {**machine_info(ray=ray.__version__),
                    "load_average_1m": {"start": load_at_start[0], "end": os.getloadavg()[0]}},
        "wall_seconds": time.perf_counter() - started,
    }


def headline(mode: Mode, result: dict[str, Any]) -> str:
    machine = result["machine"]
    return (f"replication, {mode.name} mode: {BROKERS} brokers, {mode.records:,} records of "
            f"100 bytes per produce round, {mode.rounds} rounds, {mode.kills} leader kills; "
            f"{machine['cpu_count']} CPUs, Ray {machine['ray']}, load "
            f"{machine['load_average_1m']['start']:.1f} at start")


def table(result: dict[str, Any]) -> str:
    t = result["targets"]

    def met(name: str, op: str) -> tuple[str, str]:
        return f"{op} {t[name]['target']:g}", "met" if t[name]["met"] else "NOT MET"

    rate = "{:,.0f}".format
    rows = [
        ("produce rf=1 acks=1 (records/s)", rate(result["rf1_acks1_records_per_s"]), "-", "-"),
        ("produce rf=3 acks=all (records/s)", rate(result["rf3_acksall_records_per_s"]), "-",
         "-"),
        ("rf=3 acks=all / rf=1 acks=1", f"{result['rf3_over_rf1']:.2f}",
         *met("rf3_over_rf1", ">=")),
        ("produce rf=3 acks=all, flush.messages=1 (records/s)",
         rate(result["rf3_acksall_fsync_records_per_s"]), "-", "-"),
        ("rf=3 acks=all flush.messages=1 / rf=3 acks=all", f"{result['rf3_fsync_over_rf3']:.2f}",
         "-", "-"),
        ("send_batch rf=1 acks=1 (records/s)", rate(result["rf1_acks1_arrow_records_per_s"]),
         "-", "-"),
        ("send_batch rf=3 acks=all (records/s)",
         rate(result["rf3_acksall_arrow_records_per_s"]), "-", "-"),
        ("send_batch rf=3 acks=all / rf=1 acks=1", f"{result['rf3_over_rf1_arrow']:.2f}", "-",
         "-"),
        ("failover: leader killed to acked write (ms, median)", f"{result['failover_ms']:.0f}",
         *met("failover_ms", "<")),
        ("fetch from the leader (records/s)", rate(result["leader_fetch_records_per_s"]), "-",
         "-"),
        ("fetch from a follower (records/s)", rate(result["follower_fetch_records_per_s"]), "-",
         "-"),
        ("follower / leader fetch", f"{result['follower_over_leader']:.2f}",
         *met("follower_over_leader", ">=")),
    ]
    return markdown_table(["measurement", "value", "target", "met"], rows, "lrrl")


def notes(result: dict[str, Any]) -> str:
    kills = ", ".join(f"{ms:.0f}" for ms in result["failovers_ms"])
    return f"failover of each kill (ms): {kills}"


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         "fewer records, rounds and kills (about three minutes)", (QUICK, FULL),
                         run, headline, table, notes)


if __name__ == "__main__":
    sys.exit(main())
