"""Operations without downtime on the session's 3-broker cluster (docs/operations.md): a
drain, a full rolling restart, a node stopped with ``raylog cluster stop-node`` and a
``ray start --block`` node stopped by SIGTERM (Ray drains the node; the controller drains
its broker) under acks=all load, checked by the history workload (nothing lost, nothing
duplicated, every future resolved, and not one failed send), and the refusals before
anything changes.

Small workloads (two producers, 100 sends/s each): what is checked is that not one send
fails and the history holds, not throughput. The tests run in file order; each leaves
every broker up, in sync and leading its preferred partitions.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from raylog import Admin
from raylog.cli import main
from raylog.errors import (
    LastInSyncReplicaError,
    OfflinePartitionsError,
    UnknownBrokerError,
)
from raylog.util.cluster_names import BROKER_RESOURCE, NAMESPACE, broker_actor_name
from tests.history import summary
from tests.integration.conftest import (
    NODE_ARGS,
    broker_node_env,
    restart_controller,
    restarts,
    wait_for,
)
from tests.integration.workload import Workload

PARTITIONS = 3
SENDS_PER_SECOND = 100
SYNC_S = 180  # every partition in sync again (a restarted broker catching up)


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    """An Admin of a session cluster holding only this module's topics: the topics earlier
    modules left (many of one replica) would make every drain refused as their last in-sync
    replica, which is right for them but not what these tests are about."""
    admin = Admin(cluster=ray_cluster.raylog)
    for name in admin.list_topics():
        admin.delete_topic(name)
    wait_for(lambda: not admin.list_topics(), timeout=120, what="earlier modules' topics gone")
    wait_for(lambda: ray_cluster.raylog.controller.cluster_status()[
        "under_replicated_partitions"] == 0, timeout=SYNC_S, what="every partition in sync")
    return admin


def load(topic: str) -> Workload:
    """Two acks=all producers and a consumer, every send of which must succeed."""
    return Workload(topic, PARTITIONS, producers=2, sends_per_second=SENDS_PER_SECOND)


def cli(*argv: str) -> tuple[int, str]:
    """``raylog ARGV`` in this process (connected to the session's cluster): (status, stdout)."""
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def leaders(admin: Admin, topic: str) -> list[int | None]:
    return [p["leader"] for p in admin.describe_topic(topic)["partitions"]]


def check(workload: Workload) -> None:
    anomalies = workload.finish()
    assert anomalies == [], summary(anomalies)
    assert workload.summary["failed"] == 0, workload.summary
    assert workload.summary["acknowledged"] == workload.summary["sends"], workload.summary


def test_bad_input_is_refused_before_anything_changes(ray_cluster, admin, topic_name,
                                                       capsys):
    brokers = ray_cluster.broker_ids
    with pytest.raises(UnknownBrokerError, match=r"unknown broker 99 "):
        admin.drain_broker(99)
    with pytest.raises(UnknownBrokerError, match=r"unknown brokers 77, 99 "):
        admin.roll([brokers[0], 99, 77])
    assert cli("cluster", "drain", "99") == (1, "")
    assert "raylog: error: unknown broker 99 " in capsys.readouterr().err
    # a partition whose only replica is on a broker: draining it would leave it offline
    admin.create_topic(topic_name, partitions=1, replication_factor=1)
    alone = leaders(admin, topic_name)[0]
    with pytest.raises(LastInSyncReplicaError, match=rf"broker {alone} .*{topic_name}-0"):
        admin.drain_broker(alone)
    assert admin.wait_in_sync(SYNC_S) is None  # nothing was drained
    # forced and stopped, the partition is offline: a roll refuses to begin
    assert admin.drain_broker(alone, force=True)["still_leading"] == [f"{topic_name}-0"]
    admin.stop_broker(alone)
    wait_for(lambda: alone not in ray_cluster.broker_ids, timeout=60, what="broker stopped")
    try:
        with pytest.raises(OfflinePartitionsError, match=rf"{topic_name}-0"):
            admin.roll()
    finally:
        admin.resume_broker(alone)
        wait_for(lambda: alone in ray_cluster.broker_ids, timeout=120, what="broker back")
        admin.delete_topic(topic_name)
        admin.wait_in_sync(SYNC_S)
        admin.elect_leaders()


def test_a_drained_and_stopped_broker_costs_producers_no_failed_send(ray_cluster, admin,
                                                                     topic):
    admin.wait_in_sync(SYNC_S)
    with load(topic) as workload:
        workload.healthy(sends_after=0)  # every send from the start must succeed
        workload.wait_acknowledged(200)
        victim = leaders(admin, topic)[0]
        drained = admin.drain_broker(victim)
        assert f"{topic}-0" in drained["moved"] and not drained["still_leading"]
        described = admin.describe_topic(topic)["partitions"]
        assert all(p["leader"] != victim and victim not in p["isr"] for p in described)
        assert ray_cluster.brokers()[victim]["draining"]
        # the command line's drain: already drained, it moves nothing more, and stops it
        code, out = cli("cluster", "drain", str(victim), "--json")
        assert code == 0 and json.loads(out)["moved"] == []
        wait_for(lambda: victim not in ray_cluster.broker_ids, timeout=60,
                 what="the drained broker stopped")
        workload.wait_acknowledged(200)  # writes go on without it
        assert cli("cluster", "resume", str(victim))[0] == 0
        admin.wait_in_sync(SYNC_S)
        admin.elect_leaders([topic])
        assert leaders(admin, topic)[0] == victim
        workload.wait_acknowledged(200)
        check(workload)


def test_a_full_roll_under_acks_all_load_fails_no_send(ray_cluster, admin, topic):
    admin.wait_in_sync(SYNC_S)
    brokers = ray_cluster.brokers()
    actors = {b: ray.get_actor(broker_actor_name(info["node_id"]), namespace=NAMESPACE)
              for b, info in brokers.items() if info["alive"]}
    before = {b: restarts(a) for b, a in actors.items()}
    preferred = [p["replicas"][0] for p in admin.describe_topic(topic)["partitions"]]
    steps: list[tuple[str, int]] = []
    with load(topic) as workload:
        workload.healthy(sends_after=0)
        workload.wait_acknowledged(200)
        done = admin.roll(on_step=lambda step, broker: steps.append((step, broker)))
        workload.wait_acknowledged(200)
        check(workload)
    assert done == sorted(actors)
    # one broker at a time, each step in order
    assert steps == [(s, b) for b in done for s in ("wait", "drain", "restart", "catch up",
                                                    "leaders")]
    assert all(restarts(a) == before[b] + 1 for b, a in actors.items())
    assert leaders(admin, topic) == preferred


def test_a_drain_outlives_a_controller_restart(ray_cluster, admin, topic):
    """Drains are kept in Ray's GCS: a new controller neither gives a drained broker its
    leaderships back nor starts a stopped one again."""
    admin.wait_in_sync(SYNC_S)
    drained, stopped = leaders(admin, topic)[:2]
    assert drained != stopped
    admin.drain_broker(drained)
    admin.stop_brokers([stopped])
    wait_for(lambda: stopped not in ray_cluster.broker_ids, timeout=60, what="broker stopped")
    try:
        restart_controller()
        brokers = ray_cluster.brokers()
        assert brokers[drained]["draining"] and brokers[drained]["alive"]
        assert brokers[stopped]["draining"] and not brokers[stopped]["alive"]
        admin.elect_leaders([topic])
        assert {drained, stopped}.isdisjoint(leaders(admin, topic))
        assert stopped not in ray_cluster.broker_ids  # its node was not asked again
    finally:
        admin.resume_broker(drained)
        admin.resume_broker(stopped)
        wait_for(lambda: stopped in ray_cluster.broker_ids, timeout=120, what="broker back")
        admin.wait_in_sync(SYNC_S)
        admin.elect_leaders()


def a_leaders_node(ray_cluster, admin: Admin, topic: str):
    """(a broker leading a partition of ``topic``, its ray.cluster_utils node), of a node
    serving its replicas from its broker process alone (the session's other tests count on
    the node with two processes)."""
    admin.elect_leaders([topic])
    nodes = {n.node_id: n for n in ray_cluster.cluster.worker_nodes
             if n.node_id != ray_cluster.processes_node}
    brokers = ray_cluster.brokers()
    broker = next(b for b in leaders(admin, topic) if brokers[b]["node_id"] in nodes)
    return broker, nodes[brokers[broker]["node_id"]]


def served_on_a_new_node(ray_cluster, broker: int, old_nodes: set[str]) -> bool:
    info = ray_cluster.brokers()[broker]
    return info["alive"] and info["node_id"] not in old_nodes


def bring_back(ray_cluster, admin: Admin, broker: int, data_dir: Path) -> None:
    """A new session node presenting ``data_dir``: ``broker`` is served again, every
    partition in sync, the preferred leaders lead."""
    old = {b["node_id"] for b in ray_cluster.brokers().values()}
    node = ray_cluster.cluster.add_node(**NODE_ARGS, resources={BROKER_RESOURCE: 1},
                                        env_vars=broker_node_env(ray_cluster.root, data_dir))
    ray_cluster.data_dirs[node.node_id] = data_dir
    wait_for(lambda: served_on_a_new_node(ray_cluster, broker, old), timeout=120,
             what=f"broker {broker} served by a new node")
    admin.wait_in_sync(SYNC_S)
    admin.elect_leaders()


def test_stop_node_drains_its_brokers_before_ray_takes_the_node(ray_cluster, admin, topic):
    """``raylog cluster stop-node`` drains and stops the node's broker; then the node is
    taken down as ``ray stop`` does it (SIGTERM to its raylet first)."""
    admin.wait_in_sync(SYNC_S)
    victim, node = a_leaders_node(ray_cluster, admin, topic)
    with load(topic) as workload:
        workload.healthy(sends_after=0)
        workload.wait_acknowledged(200)
        code, out = cli("cluster", "stop-node", "--node", node.node_id[:12])
        assert code == 0 and f"broker {victim} drained" in out, out
        assert victim not in leaders(admin, topic)
        wait_for(lambda: victim not in ray_cluster.broker_ids, timeout=60,
                 what="the node's broker stopped")
        assert ray_cluster.brokers()[victim]["draining"]
        data_dir = ray_cluster.data_dirs.pop(node.node_id)
        ray_cluster.cluster.remove_node(node, allow_graceful=True)
        workload.wait_acknowledged(200)  # writes go on without it
        bring_back(ray_cluster, admin, victim, data_dir)
        workload.wait_acknowledged(200)
        check(workload)


def start_ray_node(ray_cluster, data_dir: Path, log: Path) -> subprocess.Popen:
    """``ray start --block`` joining the session's cluster as a broker node presenting
    ``data_dir`` (a node as Kubernetes or systemd runs one: SIGTERM stops it)."""
    env = {**os.environ, **broker_node_env(ray_cluster.root, data_dir)}
    ray_script = os.path.join(os.path.dirname(sys.executable), "ray")
    with log.open("w") as out:
        return subprocess.Popen(
            [ray_script, "start", "--block", "--address", ray_cluster.cluster.address,
             "--num-cpus", str(NODE_ARGS["num_cpus"]),
             "--object-store-memory", str(NODE_ARGS["object_store_memory"]),
             "--resources", json.dumps({BROKER_RESOURCE: 1}), "--disable-usage-stats"],
            env=env, stdout=out, stderr=subprocess.STDOUT)


def test_sigterm_of_a_broker_node_drains_its_broker_first(ray_cluster, admin, topic,
                                                           tmp_path):
    """A broker node run by ``ray start --block``, stopped by SIGTERM: Ray marks the node
    draining (for RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S), the controller sees it, drains the
    broker and stops it; the node then ends. Not one send fails."""
    admin.wait_in_sync(SYNC_S)
    victim, node = a_leaders_node(ray_cluster, admin, topic)
    # move the victim's disk to a node of its own, run by `ray start --block`
    old = {b["node_id"] for b in ray_cluster.brokers().values()}
    admin.stop_brokers([victim])
    wait_for(lambda: victim not in ray_cluster.broker_ids, timeout=60, what="broker stopped")
    data_dir = ray_cluster.data_dirs.pop(node.node_id)
    ray_cluster.cluster.remove_node(node, allow_graceful=True)
    process = start_ray_node(ray_cluster, data_dir, tmp_path / "ray-start.log")
    try:
        wait_for(lambda: served_on_a_new_node(ray_cluster, victim, old), timeout=180,
                 what=f"broker {victim} served by the `ray start` node")
        admin.wait_in_sync(SYNC_S)
        admin.elect_leaders([topic])
        assert victim in leaders(admin, topic)
        with load(topic) as workload:
            workload.healthy(sends_after=0)
            workload.wait_acknowledged(200)
            process.send_signal(signal.SIGTERM)
            wait_for(lambda: process.poll() is not None, timeout=120,
                     what="the `ray start` node to stop")
            info = ray_cluster.brokers()[victim]
            # drained (only a drain sets this; a broker that just died is not), then gone
            assert info["draining"] and not info["alive"], info
            assert victim not in leaders(admin, topic)
            workload.wait_acknowledged(200)
            bring_back(ray_cluster, admin, victim, data_dir)
            workload.wait_acknowledged(200)
            check(workload)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    assert "received SIGTERM. Draining" in (tmp_path / "ray-start.log").read_text()
