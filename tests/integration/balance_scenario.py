"""A broker node added to a cluster of three, and the balance plan executed while producers
write, on a cluster of its own (docs/balancing.md).

Run by tests/integration/test_balance.py as ``python -m tests.integration.balance_scenario
node-added ROOT`` (a process joins one Ray cluster at a time): it starts its cluster
(restart_scenario.Nodes), checks, prints what it checked as JSON and exits 0, or raises.

``node-added``: a topic of 4 partitions, 3 replicas each, filled with ``PREFILL`` bytes a
partition, on 3 brokers: the plan is empty. A fourth broker node joins; ``raylog cluster
balance --dry-run`` shows a plan that moves replicas to it, and executing it while two
producers write (acks=all) loses nothing, duplicates nothing, fails no send, and leaves 3
replicas and 1 preferred leader on each broker. The new replicas copied within the topic's
``replication.throttled.rate``: the move took at least half the time the prefilled bytes
need at that rate (a loose bound: the machine is shared).
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from raylog import Admin, Producer
from raylog.cli import main
from tests.history import summary
from tests.integration.restart_scenario import Nodes, wait_for
from tests.integration.workload import Workload

TOPIC = "orders"
PARTITIONS = 4
RATE = 100_000              # replication.throttled.rate of the topic, bytes a second
PREFILL = 250 * 1000        # bytes of values in each partition before the node joins
VALUE_BYTES = 1000


def cli(*argv: str) -> tuple[int, str]:
    """(exit status, what ``raylog ARGV...`` prints); it joins this process's cluster."""
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def in_sync(admin: Admin) -> bool:
    return all(p["leader"] is not None and sorted(p["isr"]) == sorted(p["replicas"])
               for p in admin.describe_topic(TOPIC)["partitions"])


def loads(admin: Admin) -> dict[int, tuple[int, int]]:
    """Live broker -> (replicas of the topic, partitions it leads)."""
    status = admin.cluster_status()
    return {b["broker_id"]: (sum(t == TOPIC for t, _ in b["replicas"]),
                             sum(t == TOPIC for t, _ in b["leaders"]))
            for b in status["brokers"] if b["alive"]}


def node_added(root: Path) -> dict[str, Any]:
    nodes = Nodes(root, ["b0", "b1", "b2"])
    try:
        admin = Admin()
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, configs={
            "min.insync.replicas": 2, "replication.throttled.rate": RATE})
        wait_for(lambda: in_sync(admin), what="in sync")
        with Producer(acks="all", linger_ms=5) as producer:
            for _ in range(PREFILL // VALUE_BYTES):
                for p in range(PARTITIONS):
                    producer.send(TOPIC, os.urandom(VALUE_BYTES), partition=p)
        code, shown = cli("cluster", "balance", "--dry-run")
        assert code == 0 and "balanced: nothing to move" in shown, shown

        nodes.add_broker("b3")
        wait_for(lambda: len(loads(admin)) == 4, timeout=90, what="the fourth broker")
        code, _ = cli("cluster", "balance", "--remove", "9", "7")
        assert code == 1  # unknown brokers: named on stderr, nothing planned

        with Workload(TOPIC, PARTITIONS, producers=2, sends_per_second=100) as load:
            load.wait_acknowledged(100)
            load.healthy(sends_after=20)  # every send from now on must succeed
            code, shown = cli("cluster", "balance", "--dry-run", "--json")
            assert code == 0, shown
            plan = json.loads(shown)
            copied = [m for m in plan["moves"] if not m["leader_only"]]
            assert copied and all(len(m["added"]) == 1 for m in copied), plan
            seen: list[dict] = []
            started = time.monotonic()
            admin.execute_balance(plan, timeout_s=300, poll_s=0.5, progress=seen.append)
            took_s = time.monotonic() - started
            load.wait_acknowledged(100)
        anomalies = load.finish()
        assert not anomalies, summary(anomalies)
        assert load.summary["failed"] == 0, load.summary

        after = loads(admin)
        assert sorted(after.values()) == [(3, 1)] * 4, after
        assert all(p["target"] is None for p in admin.describe_topic(TOPIC)["partitions"])
        code, shown = cli("cluster", "balance", "--json")
        assert code == 0 and json.loads(shown)["moves"] == [], shown
        # At least the prefilled bytes went through the throttle.
        throttled = PREFILL * len(copied)
        assert took_s >= throttled / RATE * 0.5, (took_s, throttled)
        copying = [s for s in seen if s["moving"]]
        assert copying and any(m["bytes_copied"] for s in copying for m in s["moving"])
        return {**load.summary, "moves": len(plan["moves"]), "copied_moves": len(copied),
                "plan_bytes": plan["bytes"], "took_s": round(took_s, 1),
                "throttled_bytes": throttled, "rate": RATE,
                "bytes_per_s": round(plan["bytes"] / took_s), "loads": after}
    except BaseException:
        traceback.print_exc()  # before stopping the nodes, which may fail in turn
        raise
    finally:
        nodes.stop()


SCENARIOS = {"node-added": node_added}

if __name__ == "__main__":
    scenario, root = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(SCENARIOS[scenario](root)))
