"""Replication scenarios that take whole broker nodes away, on a cluster of their own.

Run for tests/integration/test_replication_scenarios.py by scenarios.py as ``python -m
tests.integration.replication_scenario SCENARIO ROOT`` (a process joins one Ray cluster at a
time): a scenario starts its cluster (restart_scenario.Nodes), checks, prints what it checked
as JSON and exits 0, or raises.

``machines-gone`` runs three, one after the other, on one cluster (a cluster of nodes costs
some 15 s to start), each on a topic of its own and each leaving every node back and in sync:

- ``two-down``, on three broker nodes: two of three replicas go: acks=all writes are refused
  (nothing appended) and accepted again once one is back in sync;
- ``divergent``: a leader alone in its ISR writes records nobody copies, then dies; another
  replica is elected (uncleanly) and writes others at those offsets; when the old leader
  comes back it truncates exactly its divergent records (KIP-101) and copies the new ones;
- ``node-removed``, a fourth broker node added as the spare: a leading broker's machine dies
  while producers write with acks=all; its partitions fail over, and after
  ``RAYLOG_REPLACE_BROKER_AFTER_S`` its replicas (of every topic) are rebuilt on the spare
  broker; nothing acknowledged is lost. With three brokers before, no replica had a spare
  broker to move to: the first two saw no replacement.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.cli import main
from raylog.client.remote import resolve
from raylog.errors import NotEnoughReplicasError
from raylog.metadata.settings import REPLACE_AFTER_ENV, SESSION_TIMEOUT_ENV
from raylog.records import BatchBuilder
from tests.history import summary
from tests.integration.conftest import replica_records
from tests.integration.restart_scenario import Nodes, wait_for
from tests.integration.workload import Workload

TOPIC = "orders"
DIVERGING = "diverging"  # divergent's topic, on the cluster two-down left whole again
REBUILT = "rebuilt"  # node-removed's topic, on the cluster divergent left whole again
# The controller's settings on these clusters (in the head's environment). A broker machine
# taken away answers nothing, and Ray calls its node dead only after some 15 s of missed
# heartbeats: the controller fences it when its broker session runs out, 5 s here (Kafka's
# 9 s default allows for real networks; these nodes are processes of one machine, whose
# brokers answer every 1.25 s). Its replicas move to the spare broker 5 s after it went.
SESSION_MS = 5000
REPLACE_AFTER_S = 5
HEAD_ENV = {SESSION_TIMEOUT_ENV: str(SESSION_MS), REPLACE_AFTER_ENV: str(REPLACE_AFTER_S)}


def states(admin: Admin, topic: str = TOPIC) -> list[dict]:
    return admin.describe_topic(topic)["partitions"]


def settled(partition: dict) -> bool:
    """The partition (as described) has a leader and every replica in its ISR."""
    return partition["leader"] is not None and \
        sorted(partition["isr"]) == sorted(partition["replicas"])


def in_sync(admin: Admin, topic: str = TOPIC) -> bool:
    return all(settled(p) for p in states(admin, topic))


def replica_values(admin: Admin, partition: int = 0, topic: str = TOPIC) -> dict[int, list]:
    """Broker -> [(offset, value)] below each replica's own high watermark."""
    return replica_records(admin, topic, partition)


def cli(*argv: str) -> str:
    """What ``raylog ARGV...`` prints (it joins this process's cluster)."""
    out = io.StringIO()
    assert main(list(argv), out=out) == 0, argv
    return out.getvalue()


def machines_gone(root: Path) -> dict[str, Any]:
    """``two-down``, ``divergent``, then ``node-removed``, on one cluster; what each
    checked, by name."""
    nodes = Nodes(root, ["b0", "b1", "b2"], head_env=HEAD_ENV)
    try:
        admin = Admin()
        checked = {"two-down": two_down(nodes, admin)}
        wait_for(lambda: in_sync(admin), timeout=90, what="every replica back in sync")
        checked["divergent"] = divergent(nodes, admin)
        checked["node-removed"] = node_removed(nodes, admin)
        return checked
    finally:
        nodes.stop()


def node_removed(nodes: Nodes, admin: Admin) -> dict[str, Any]:
    """On a cluster of three broker nodes, all in sync: a fourth added (the spare), then a
    leading broker's node removed."""
    topic = REBUILT
    nodes.add_broker("b3")
    wait_for(lambda: sum(b["alive"] for b in admin.cluster_status()["brokers"]) == 4,
             what="the fourth broker")
    admin.create_topic(topic, partitions=3, replication_factor=3,
                       configs={"min.insync.replicas": 2})
    wait_for(lambda: in_sync(admin, topic), what="in sync")
    with Workload(topic, 3) as load:
        load.wait_acknowledged(300)
        gone = states(admin, topic)[0]["leader"]
        nodes.remove_broker(nodes.dir_of(gone))
        wait_for(lambda: all(p["leader"] not in (None, gone) for p in states(admin, topic)),
                 what="every partition led by a live broker")
        load.wait_acknowledged(300)
        # After RAYLOG_REPLACE_BROKER_AFTER_S its replicas move to the spare broker: those
        # of the earlier scenarios' topics too.
        wait_for(lambda: all(gone not in p["replicas"] and settled(p)
                             for t in admin.describe_topics() for p in t["partitions"]),
                 timeout=120, what="the gone broker's replicas rebuilt")
        load.healthy()
    anomalies = load.finish()
    assert not anomalies, summary(anomalies)
    for p in range(3):
        held = wait_for(lambda p=p: (h := replica_values(admin, p, topic)) and
                        len({json.dumps(v, default=repr) for v in h.values()}) == 1 and h,
                        what=f"{topic}-{p} identical on every replica")
        assert len(held) == 3 and gone not in held
    status = admin.cluster_status()
    assert status["under_replicated_partitions"] == 0 and status["offline_partitions"] == 0
    return {"gone": gone, **load.summary,
            "replicas": [p["replicas"] for p in states(admin, topic)]}


def two_down(nodes: Nodes, admin: Admin) -> dict[str, Any]:
    """On a cluster of three broker nodes, all in; all in again when it returns."""
    admin.create_topic(TOPIC, partitions=1, replication_factor=3,
                       configs={"min.insync.replicas": 2})
    wait_for(lambda: in_sync(admin), what="in sync")
    with Producer(acks="all") as producer:
        for i in range(100):
            producer.send(TOPIC, b"before-%d" % i)
    state = states(admin)[0]
    followers = [b for b in state["replicas"] if b != state["leader"]]
    names = [nodes.dir_of(b) for b in followers]
    for name in names:
        nodes.remove_broker(name)
    wait_for(lambda: states(admin)[0]["isr"] == [state["leader"]],
             what="the ISR down to the leader")
    # What an operator sees meanwhile: the partition under-replicated, two brokers down.
    described = cli("topics", "describe", TOPIC, "--under-replicated-partitions")
    status = cli("cluster", "status")
    # A raw acks=all append is refused, appending nothing; acks=1 still works.
    meta = admin._cluster.topic(TOPIC, refresh=True).partitions[0]
    builder = BatchBuilder()
    builder.append(0, None, b"refused")
    end_before = admin.describe_replicas(TOPIC)[0]["log_end_offset"]
    try:
        resolve(meta.leader_client().append(builder.build(), "all"), timeout=30)
        raise AssertionError("an acks=all append with one in-sync replica was accepted")
    except NotEnoughReplicasError as e:
        refused = str(e)
    assert admin.describe_replicas(TOPIC)[0]["log_end_offset"] == end_before
    with Producer(acks=1) as producer:
        assert producer.send(TOPIC, b"acks-1").result(30).offset == end_before
    # acks=all sends made now wait (retrying) until a follower is back in sync.
    waiting = Producer(acks="all", delivery_timeout_ms=120_000, linger_ms=0)
    futures = [waiting.send(TOPIC, b"during-%d" % i) for i in range(20)]

    def refused_a_few_times() -> bool:
        sender = waiting._senders.get((TOPIC, 0))  # made when its first batch is sealed
        return sender is not None and any(b.attempts >= 3 for b in
                                          [*sender.in_flight, *sender.queue])

    wait_for(refused_a_few_times, what="the waiting batches refused a few times")
    assert not any(f.done() for f in futures)
    assert admin.describe_replicas(TOPIC)[0]["log_end_offset"] == end_before + 1
    nodes.add_broker(names[0])  # one follower's machine back, with its disk
    wait_for(lambda: len(states(admin)[0]["isr"]) == 2, timeout=90,
             what="a follower back in the ISR")
    offsets = [f.result(60).offset for f in futures]
    waiting.close()
    assert offsets == list(range(end_before + 1, end_before + 21))
    with Consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        got: list = []
        wait_for(lambda: got.extend(consumer.poll(timeout_ms=200)) or len(got) >= 121,
                 what="every record")
    assert [r.value for r in got] == [b"before-%d" % i for i in range(100)] + \
        [b"acks-1"] + [b"during-%d" % i for i in range(20)]
    checked = {"refused": refused, "offsets": offsets, "described": described,
               "status": status, "after": cli("topics", "describe", TOPIC),
               "unavailable_after": cli("topics", "describe", "--unavailable-partitions")}
    nodes.add_broker(names[1])  # the other one back too: the cluster whole again
    return checked


def divergent(nodes: Nodes, admin: Admin) -> dict[str, Any]:
    """On a cluster of three broker nodes, all in, on a topic of its own."""
    topic = DIVERGING
    admin.create_topic(topic, partitions=1, replication_factor=3, configs={
        "min.insync.replicas": 1, "unclean.leader.election.enable": True})
    wait_for(lambda: in_sync(admin, topic), what="in sync")
    with Producer(acks="all") as producer:
        for i in range(100):
            producer.send(topic, b"shared-%d" % i)
    state = states(admin, topic)[0]
    old_leader = state["leader"]
    followers = [b for b in state["replicas"] if b != old_leader]
    follower_dirs = [nodes.dir_of(b) for b in followers]
    leader_dir = nodes.dir_of(old_leader)
    for name in follower_dirs:  # cut the followers off
        nodes.remove_broker(name)
    wait_for(lambda: states(admin, topic)[0]["isr"] == [old_leader], what="ISR = old leader")
    with Producer(acks=1) as producer:  # records only the old leader will ever have
        for i in range(50):
            producer.send(topic, b"diverged-%d" % i)
    nodes.remove_broker(leader_dir)
    wait_for(lambda: states(admin, topic)[0]["leader"] is None, what="no leader")
    for name in follower_dirs:
        nodes.add_broker(name)
    wait_for(lambda: states(admin, topic)[0]["leader"] in followers, timeout=90,
             what="an unclean election of a follower")
    new_leader = states(admin, topic)[0]["leader"]
    with Producer(acks="all") as producer:  # other records at the same offsets
        for i in range(30):
            producer.send(topic, b"new-%d" % i)
    nodes.add_broker(leader_dir)  # the old leader comes back with its divergent tail
    wait_for(lambda: in_sync(admin, topic), timeout=120, what="the old leader back in sync")
    expected = [b"shared-%d" % i for i in range(100)] + [b"new-%d" % i for i in range(30)]
    held = wait_for(lambda: (h := replica_values(admin, topic=topic)) and len(h) == 3 and
                    all(len(v) == 130 for v in h.values()) and h, timeout=60,
                    what="every replica at the same high watermark")
    for broker, records in held.items():
        assert [o for o, _ in records] == list(range(130)), broker
        assert [v for _, v in records] == expected, broker
    described = {r["broker_id"]: r for r in admin.describe_replicas(topic)}
    assert described[old_leader]["log_end_offset"] == 130
    # It cut exactly its own 50 records (offsets 100-149), nothing it shared.
    assert described[old_leader]["last_truncation"] == 100, described[old_leader]
    return {"old_leader": old_leader, "new_leader": new_leader,
            "epochs": described[old_leader]["leader_epochs"]}


SCENARIOS = {"machines-gone": machines_gone}

if __name__ == "__main__":
    scenario, root = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(SCENARIOS[scenario](root), default=repr))
