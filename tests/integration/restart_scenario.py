"""Whole-cluster, broker and embedded restarts, each in a process of its own.

Run for tests/integration/test_restarts.py by scenarios.py as ``python -m
tests.integration.restart_scenario SCENARIO ROOT``: a scenario starts its own Ray clusters (a
process joins one Ray cluster at a time, and the test session may have joined one), checks,
prints what it checked and exits 0, or raises. ``ROOT`` holds the data directories, and is
the HOME of the embedded scenario so that its default locations (``~/.raylog``) are the
test's own.

Starting a cluster of nodes costs some 15 s on a busy machine: ``head-first`` starts again
the cluster that ``whole-cluster`` left stopped on ``ROOT`` (run it there after
``whole-cluster``), and the checks that need a live cluster whose data came back from its
disks run on the restarted cluster of a restart scenario instead of on one of their own (a
broker node replaced, on the whole cluster started again; a copied disk and a foreign
directory refused, on the cluster whose head came back first).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

import raylog
from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.client.connection import reset_default
from raylog.metadata.identity import BrokerIdentity, read_identity, write_identity
from raylog.records import BatchBuilder
from raylog.util.cluster_names import BROKER_RESOURCE, DATA_DIR_ENV
from tests.integration.conftest import wait_for as suite_wait_for

NODE_ARGS = {"num_cpus": 1, "object_store_memory": 150 * 1024 * 1024}
GROUP = "restart-group"
STOPPED = "stopped.json"  # whole-cluster's snapshot and status of the cluster it left stopped
PRODUCER_ID = 4242  # a producer whose retry after the restart must be recognised


def wait_for(condition, timeout: float = 60.0, what: str = "condition") -> Any:
    """The suite's wait_for, with this module's longer default (clusters start here)."""
    return suite_wait_for(condition, timeout=timeout, interval=0.2, what=what)


class Nodes:
    """A cluster_utils cluster: a head (the controller's) and broker nodes whose data
    directories the caller names, started in the order given. ``env`` is in the environment
    of every node (and so of every actor), ``head_env`` in the head's only, ``broker_env``
    in the named broker nodes' only (also when they are added back)."""

    def __init__(self, root: Path, broker_dirs: list[str],
                 head_env: dict[str, str] | None = None,
                 env: dict[str, str] | None = None,
                 broker_env: dict[str, dict[str, str]] | None = None) -> None:
        self.root = root
        self.env = dict(env or {})
        self.broker_env = dict(broker_env or {})
        self.cluster = Cluster(initialize_head=True, head_node_args={
            **NODE_ARGS, "include_dashboard": False,
            "env_vars": {DATA_DIR_ENV: str(root / "head"), **self.env, **(head_env or {})}})
        self.brokers = {}  # data directory name -> node
        for name in broker_dirs:
            self.add_broker(name)
        if broker_dirs:
            self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, log_to_driver=False)
        self.raylog = raylog.init()

    def add_broker(self, name: str):
        node = self.cluster.add_node(**NODE_ARGS, resources={BROKER_RESOURCE: 1},
                                     env_vars={DATA_DIR_ENV: str(self.root / name), **self.env,
                                               **self.broker_env.get(name, {})})
        self.brokers[name] = node
        return node

    def remove_broker(self, name: str) -> None:
        """Take the broker node away, as a machine that died (its raylet and actors go)."""
        self.cluster.remove_node(self.brokers.pop(name), allow_graceful=False)

    def dir_of(self, broker_id: int) -> str:
        """The name of the data directory that holds ``broker_id``."""
        return next(name for name in self.brokers
                    if read_identity(self.root / name).broker_id == broker_id)

    def stop(self) -> None:
        reset_default()
        ray.shutdown()
        if ray.is_initialized():  # a thread's Ray call connected it again meanwhile (Ray's
            ray.shutdown()        # auto-connect): the cluster would refuse to remove its head
        self.cluster.shutdown()


def fill(admin: Admin) -> dict[str, Any]:
    """Topics, configs, records, a group's offsets and an idempotent batch: what must come
    back."""
    admin.create_topic("orders", partitions=3, configs={"segment.bytes": 64 << 10})
    admin.create_topic("profiles", partitions=2, configs={"cleanup.policy": "compact"})
    with Producer(acks="all", linger_ms=2) as producer:
        for i in range(600):
            producer.send("orders", b"order-%d" % i, key=b"k%d" % (i % 11),
                          headers=[("n", b"%d" % i)])
        for i in range(40):
            producer.send("profiles", b"profile-%d" % i, key=b"user-%d" % (i % 9))
    with Consumer(group_id=GROUP, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        consumer.subscribe(["orders"])
        seen: list = []
        wait_for(lambda: seen.extend(consumer.poll(timeout_ms=200)) or len(seen) >= 200,
                 what="the group to read 200 records")
        consumer.commit()
    builder = BatchBuilder()
    builder.append(int(time.time() * 1000), b"idem", b"exactly-once")
    builder.set_producer(PRODUCER_ID, 0, 0)
    batch = builder.build()
    first = append_raw(admin, batch)
    return {"batch": batch, "first_answer": first}


def append_raw(admin: Admin, batch: bytes) -> tuple[int, int]:
    """Append as the producer's sender would, to the leader of orders-0: (base, last)."""
    meta = admin._cluster.topic("orders", refresh=True).partitions[0]
    info = ray.get(meta.leader_client().append(batch, "all"), timeout=60)
    return info.base_offset, info.last_offset


def snapshot(admin: Admin) -> dict[str, Any]:
    """Everything that must survive, in comparable form."""
    topics = {}
    for t in admin.describe_topics():
        if t["name"].startswith("__"):
            continue
        topics[t["name"]] = {"configs": t["configs"], "topic_id": t["topic_id"],
                             "replicas": [p["replicas"] for p in t["partitions"]]}
    records = {}
    with Consumer(auto_offset_reset="earliest", max_poll_records=100_000) as consumer:
        partitions = [TopicPartition(name, p) for name, t in topics.items()
                      for p in range(len(t["replicas"]))]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        got: list = []

        def caught_up() -> bool:
            got.extend(consumer.poll(timeout_ms=200))
            return all(consumer.position(tp) >= ends[tp] for tp in partitions)

        wait_for(caught_up, what="every record")
        for r in got:
            records.setdefault(f"{r.topic}-{r.partition}", []).append(
                [r.offset, r.key.decode() if r.key else None, r.value.decode(),
                 [[k, v.decode()] for k, v in r.headers or []]])
    group = admin.describe_group(GROUP)["offsets"]
    return {"topics": topics, "records": records, "group": group}


def identities(root: Path, names: list[str]) -> dict[str, list]:
    return {name: list(vars(read_identity(root / name)).values()) for name in names}


def keep_going(admin: Admin) -> None:
    """Producing and consuming work after the restart."""
    with Producer(acks="all") as producer:
        meta = producer.send("orders", b"after-restart", partition=1).result(60)
    with Consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("orders", 1)])
        consumer.seek(TopicPartition("orders", 1), meta.offset)
        got = wait_for(lambda: consumer.poll(timeout_ms=500), what="the new record")
        assert got[0].value == b"after-restart", got


def whole_cluster(root: Path) -> dict[str, Any]:
    names = ["b0", "b1", "b2"]
    nodes = Nodes(root, names)
    try:
        admin = Admin()
        filled = fill(admin)
        before = snapshot(admin)
        ids_before = identities(root, names)
        cluster_id = nodes.raylog.controller.cluster_status()["cluster_id"]
    finally:
        nodes.stop()
    shuffled = names[:]
    while shuffled == names:
        random.shuffle(shuffled)
    nodes = Nodes(root, shuffled)  # new Ray node IDs, nodes in another order
    try:
        admin = Admin()
        status = nodes.raylog.controller.cluster_status()
        assert status["cluster_id"] == cluster_id, status
        assert sorted(b["broker_id"] for b in status["brokers"] if b["alive"]) == [0, 1, 2]
        after = wait_for(lambda: snapshot(admin), what="a snapshot after the restart")
        assert after == before, "state differs after the restart"
        assert identities(root, names) == ids_before
        assert append_raw(admin, filled["batch"]) == filled["first_answer"], \
            "a producer's retry was not recognised after the restart"
        keep_going(admin)
        replaced = replace_broker_node(nodes, admin, "b1")
        stopped = {"snapshot": snapshot(admin),
                   "status": nodes.raylog.controller.cluster_status()}
    finally:
        nodes.stop()
    (root / STOPPED).write_text(json.dumps(stopped))
    return {"order": shuffled, "records": sum(len(r) for r in before["records"].values()),
            "group_offsets": before["group"], "replaced": replaced}


def head_first(root: Path) -> dict[str, Any]:
    """The head of the cluster whole-cluster left stopped on ``root`` comes back alone: its
    controller replays the metadata log from the head's directory and knows every broker,
    offline; then the broker nodes join, one by one."""
    names = ["b0", "b1", "b2"]
    stopped = json.loads((root / STOPPED).read_text())
    before, first = stopped["snapshot"], stopped["status"]
    nodes = Nodes(root, [])
    try:
        admin = Admin()
        status = nodes.raylog.controller.cluster_status()
        assert status["cluster_id"] == first["cluster_id"]
        assert status["controller_dir"] == first["controller_dir"]
        assert [(b["broker_id"], b["alive"], len(b["replicas"])) for b in status["brokers"]] \
            == [(b["broker_id"], False, len(b["replicas"])) for b in first["brokers"]]
        assert {t["name"] for t in admin.describe_topics()} >= set(before["topics"])
        for name in reversed(names):
            nodes.add_broker(name)
        wait_for(lambda: all(b["alive"] for b in admin.cluster_status()["brokers"]),
                 timeout=90, what="every broker back")
        after = wait_for(lambda: snapshot(admin), timeout=90, what="every record again")
        # as whole-cluster wrote it down
        assert json.loads(json.dumps(after)) == before, \
            "state differs after the head came back first"
        keep_going(admin)
        refused = refuse_copy_and_foreign(nodes, admin, "b0")
    finally:
        nodes.stop()
    return {"brokers": [b["broker_id"] for b in first["brokers"]], "refused": refused}


def refuse_copy_and_foreign(nodes: Nodes, admin: Admin, live: str) -> dict[str, str]:
    """A node presenting a copy of the live broker ``live``'s disk, and one presenting
    another cluster's directory: both refused with the reason, neither mixed in, nothing
    changed. The reasons by kind."""
    root = nodes.root
    before = snapshot(admin)
    brokers = sorted((b["broker_id"], b["alive"]) for b in admin.cluster_status()["brokers"])
    assert all(alive for _, alive in brokers), brokers
    shutil.copytree(root / live, root / "copy", ignore=shutil.ignore_patterns(".lock"))
    (root / "foreign").mkdir()
    write_identity(root / "foreign", BrokerIdentity(0, "0123456789abcdef"))
    copy, foreign = nodes.add_broker("copy"), nodes.add_broker("foreign")

    def both_refused() -> dict[str, str]:
        status = admin.cluster_status()
        reasons = {r["node_id"]: r["reason"] for r in status["refused"]}
        return reasons if {copy.node_id, foreign.node_id} <= set(reasons) else {}

    reasons = wait_for(both_refused, timeout=90, what="both nodes to be refused")
    assert "already serves" in reasons[copy.node_id], reasons
    assert "not of this cluster" in reasons[foreign.node_id], reasons
    status = admin.cluster_status()
    assert sorted((b["broker_id"], b["alive"]) for b in status["brokers"]) == brokers
    assert {b["node_id"] for b in status["brokers"]}.isdisjoint(
        {copy.node_id, foreign.node_id})
    assert read_identity(root / "foreign") == BrokerIdentity(0, "0123456789abcdef")
    assert snapshot(admin) == before
    keep_going(admin)
    return {"copy": reasons[copy.node_id], "foreign": reasons[foreign.node_id]}


def replace_broker_node(nodes: Nodes, admin: Admin, name: str) -> dict[str, Any]:
    """The node of the broker whose data directory is ``name`` replaced by a new node (a new
    Ray node ID) with the old disk: it serves that broker again, nothing changed."""
    before = snapshot(admin)
    old = nodes.brokers[name]
    broker = read_identity(nodes.root / name).broker_id
    nodes.cluster.remove_node(old)
    new = nodes.add_broker(name)
    assert new.node_id != old.node_id

    def served_again() -> bool:
        status = nodes.raylog.controller.cluster_status()
        info = {b["broker_id"]: b for b in status["brokers"]}[broker]
        return info["alive"] and info["node_id"] == new.node_id

    wait_for(served_again, timeout=90, what=f"broker {broker} to be served by the new node")
    after = wait_for(lambda: snapshot(admin), timeout=90, what="every record again")
    assert after == before, "state differs after the broker's node was replaced"
    keep_going(admin)
    return {"broker": broker, "old_node": old.node_id[:12], "new_node": new.node_id[:12]}


def embedded(root: Path) -> dict[str, Any]:
    """Twice an embedded one-node cluster with the default locations (HOME is ``root``)."""
    raylog.init(address="local")
    try:
        admin = Admin()
        fill(admin)
        before = snapshot(admin)
        first = admin.cluster_status()
    finally:
        reset_default()
        ray.shutdown()
    raylog.init(address="local")
    try:
        admin = Admin()
        again = admin.cluster_status()
        assert again["cluster_id"] == first["cluster_id"]
        assert [b["data_dir"] for b in again["brokers"]] == \
            [b["data_dir"] for b in first["brokers"]]
        assert wait_for(lambda: snapshot(admin), what="the records") == before
        keep_going(admin)
    finally:
        reset_default()
        ray.shutdown()
    return {"data_dir": first["brokers"][0]["data_dir"],
            "controller_dir": first["controller_dir"]}


SCENARIOS = {"whole-cluster": whole_cluster, "head-first": head_first, "embedded": embedded}

if __name__ == "__main__":
    scenario, root = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(SCENARIOS[scenario](root)))
