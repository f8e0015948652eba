"""Replication on a 3-broker cluster: failover without losing an acknowledged record.

Topics here have replication factor 3 and ``min.insync.replicas`` 2, and producers send with
``acks="all"`` throughout (tests/integration/workload.py) while brokers and the controller are
killed. The history checker must find nothing: no acknowledged record lost or duplicated, no
offset holding two values, no consumer going back, no producer's records out of order, no
future left unresolved; and once the cluster is whole again, every replica of a partition
holds the same records. The scenarios that take whole nodes away run on clusters of their own
(replication_scenario.py, test_replication_scenarios.py).
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import ray

from raylog import Admin, Consumer, Producer
from raylog.cli import main
from raylog.client.remote import ReplicaClient, resolve
from raylog.errors import BrokerStalledError, FencedEpochError, UnknownLeaderEpochError
from raylog.util.cluster_names import CONTROLLER_NAME, NAMESPACE
from tests.history import summary
from tests.integration.conftest import (
    leader_broker,
    replica_records,
    restart_controller,
    restarts,
    wait_for,
)
from tests.integration.workload import Workload

PARTITIONS = 3
REPLICATED = {"min.insync.replicas": 2}


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


def create_replicated(admin: Admin, topic: str, partitions: int = PARTITIONS,
                      **configs: object) -> dict:
    return admin.create_topic(topic, partitions=partitions, replication_factor=3,
                              configs={**REPLICATED, **configs})


def cli(*argv: str) -> str:
    """What ``raylog ARGV...`` prints (exit status 0)."""
    out = io.StringIO()
    assert main(list(argv), out=out) == 0, argv
    return out.getvalue()


def partition_states(admin: Admin, topic: str) -> list[dict]:
    return admin.describe_topic(topic)["partitions"]


def fully_in_sync(admin: Admin, topic: str) -> bool:
    """Every partition has a leader and all its replicas in the ISR."""
    return all(p["leader"] is not None and sorted(p["isr"]) == sorted(p["replicas"])
               for p in partition_states(admin, topic))


def assert_replicas_identical(admin: Admin, topic: str, partitions: int) -> None:
    """Once in sync and quiet, every replica of each partition holds the same records."""
    wait_for(lambda: fully_in_sync(admin, topic), timeout=90, what=f"{topic} fully in sync")

    def same() -> bool:
        for p in range(partitions):
            held = replica_records(admin, topic, p)
            first = next(iter(held.values()))
            if any(records != first for records in held.values()) or len(held) != 3:
                return False
        return True

    wait_for(same, timeout=60, what=f"the replicas of {topic} to hold the same records")


def kill_and_wait_for_failover(admin: Admin, topic: str, partition: int,
                               for_good: bool) -> None:
    """Kill the broker leading ``partition`` and wait until another one leads it."""
    before = partition_states(admin, topic)[partition]
    actor = leader_broker(admin, topic, partition)
    count = restarts(actor)
    ray.kill(actor, no_restart=for_good)

    def moved() -> bool:
        now = partition_states(admin, topic)[partition]
        return now["leader"] is not None and now["leader_epoch"] > before["leader_epoch"] \
            and now["leader"] != before["leader"]

    wait_for(moved, timeout=60, what=f"{topic}-{partition} to fail over")
    if not for_good:
        wait_for(lambda: restarts(actor) > count, timeout=60, what="the broker to restart")


@pytest.mark.cluster
def test_killing_the_leaders_of_every_partition_repeatedly_loses_no_acknowledged_record(
        ray_cluster, admin, topic_name):
    """(a) Each round kills, one after the other, the broker leading each partition (half the
    time for good: the controller creates it again); a new leader is elected from the ISR
    each time, the killed broker comes back as a follower, truncates what its leader lacks,
    catches up and rejoins the ISR."""
    create_replicated(admin, topic_name)
    nodes = [b["node_id"] for b in ray_cluster.brokers().values() if b["alive"]]
    with Workload(topic_name, PARTITIONS, reader_nodes=nodes) as load:
        kills = 0
        for _ in range(2):
            for partition in range(PARTITIONS):
                load.wait_acknowledged(200)
                kill_and_wait_for_failover(admin, topic_name, partition, kills % 2 == 1)
                kills += 1
                wait_for(lambda: fully_in_sync(admin, topic_name), timeout=90,
                         what="the killed broker back in every ISR")
        load.healthy()
    anomalies = load.finish()
    assert not anomalies, summary(anomalies)
    assert load.summary["acknowledged"] > 0
    # Consumers on the brokers' nodes read from followers too, checked with the rest.
    assert load.followers_read_from, load.summary
    assert_replicas_identical(admin, topic_name, PARTITIONS)
    epochs = [p["leader_epoch"] for p in partition_states(admin, topic_name)]
    assert all(e >= 2 for e in epochs), epochs  # every partition failed over at least twice


@pytest.mark.cluster
def test_controller_kills_while_brokers_die_lose_no_acknowledged_record(admin, topic_name):
    """(c) The controller and a leading broker are killed together, twice: the restarted
    controller replays its log, finds the brokers, sees the one that died and elects."""
    create_replicated(admin, topic_name)
    with Workload(topic_name, PARTITIONS) as load:
        for round_ in range(2):
            load.wait_acknowledged(200)
            partition = round_ % PARTITIONS
            before = partition_states(admin, topic_name)
            killed = before[partition]["leader"]
            ray.kill(leader_broker(admin, topic_name, partition), no_restart=False)
            restart_controller()
            wait_for(lambda: fully_in_sync(admin, topic_name), timeout=120,
                     what="every partition led and in sync after the controller restart")
            after = partition_states(admin, topic_name)
            for b, a in zip(before, after, strict=True):  # the broker's death was seen
                if b["leader"] == killed:
                    assert a["leader_epoch"] > b["leader_epoch"], (b, a)
        load.healthy()
    anomalies = load.finish()
    assert not anomalies, summary(anomalies)
    assert_replicas_identical(admin, topic_name, PARTITIONS)


def refusal(request) -> BaseException | None:
    """The error a broker answers ``request`` with; None while it refuses everything for a
    stall of its own (BrokerStalledError: a loaded machine can delay its event loop long
    enough), which says nothing about the request."""
    try:
        answer = resolve(request(), timeout=30)
    except BrokerStalledError:
        return None
    except Exception as e:  # the error is what the caller checks
        return e
    return AssertionError(f"accepted: {answer!r}")


@pytest.mark.cluster
def test_a_stale_or_missing_epoch_is_refused_by_every_request(admin, topic_name):
    create_replicated(admin, topic_name, partitions=1)
    with Producer(acks="all") as producer:
        producer.send(topic_name, b"one", partition=0).result(30)
    meta = admin._cluster.topic(topic_name, refresh=True).partitions[0]
    kill_and_wait_for_failover(admin, topic_name, 0, for_good=False)
    wait_for(lambda: fully_in_sync(admin, topic_name), timeout=90, what="back in sync")
    fresh = admin._cluster.topic(topic_name, refresh=True).partitions[0]
    # Every replica, at the old epoch, through the process serving it now: a replica the
    # killed broker's replica host served is served by a host its restart started.
    for broker, now in fresh.clients.items():
        stale = ReplicaClient(now.handle, topic_name, 0, meta.clients[broker].leader_epoch,
                              broker)
        assert stale.leader_epoch < fresh.leader_epoch
        for request in (lambda c: c.append(b"x", 1), lambda c: c.fetch(0, 1 << 20, 0, 1),
                        lambda c: c.list_offset("latest"),
                        lambda c: c.read_kafka_table(0, 1)):
            error = wait_for(lambda r=request, c=stale: refusal(lambda: r(c)), timeout=90,
                             what="an answer past the broker's own stalls")
            assert isinstance(error, (FencedEpochError, UnknownLeaderEpochError)), error
    handle = fresh.leader_client().handle
    for request in (lambda: handle.fetch.remote(topic_name, 0, None, 0, 1 << 20, 0, 1),
                    lambda: handle.produce.remote(topic_name, 0, None, b"x", 1),
                    lambda: handle.list_offset.remote(topic_name, 0, None, "latest"),
                    lambda: handle.read_kafka_table.remote(topic_name, 0, None, 0, 1)):
        error = wait_for(lambda r=request: refusal(r), timeout=90,
                         what="an answer past the broker's own stalls")
        assert isinstance(error, ValueError) and "must carry the leader epoch" in str(error), \
            error
    with Producer(acks="all") as producer:  # the client refreshes and goes on
        assert producer.send(topic_name, b"two", partition=0).result(30).offset == 1


@pytest.mark.cluster
def test_internal_topics_are_replicated(admin):
    with Consumer(group_id="replicated-offsets", enable_auto_commit=False) as consumer:
        consumer.committed([])  # makes sure __consumer_offsets exists
    described = admin.describe_topic("__consumer_offsets")
    assert described["replication_factor"] == 3
    assert described["configs"]["min_insync_replicas"] == 2
    assert all(len(set(p["replicas"])) == 3 for p in described["partitions"])


@pytest.mark.cluster
def test_preferred_leader_election_gives_leadership_back(admin, topic_name):
    create_replicated(admin, topic_name)
    preferred = [p["replicas"][0] for p in partition_states(admin, topic_name)]
    kill_and_wait_for_failover(admin, topic_name, 0, for_good=False)
    wait_for(lambda: fully_in_sync(admin, topic_name), timeout=90, what="back in sync")
    assert partition_states(admin, topic_name)[0]["leader"] != preferred[0]
    with Producer(acks="all") as producer:
        for i in range(50):
            producer.send(topic_name, b"v%d" % i, partition=0)
    # Placement balances leaders over every topic, so the killed broker may have led other
    # partitions of this topic too: all of those move back.
    away = [p["partition"] for p in partition_states(admin, topic_name)
            if p["leader"] != p["replicas"][0]]
    assert 0 in away
    assert cli("topics", "elect-leaders", topic_name) == \
        f"{topic_name}: preferred leader elected for partitions {','.join(map(str, away))}\n"
    wait_for(lambda: [p["leader"] for p in partition_states(admin, topic_name)] == preferred,
             what="every partition led by its preferred replica")
    assert admin.elect_leaders(topic_name) == {}
    with Producer(acks="all") as producer:
        assert producer.send(topic_name, b"after", partition=0).result(30).offset == 50


@pytest.mark.cluster
def test_a_reassignment_moves_replicas_while_producers_write(ray_cluster, admin, topic_name):
    """Partition 0 moves from three replicas to two others' order and one fewer broker:
    the new replica set copies the leader while producers keep writing, leadership moves to
    the new preferred replica, and the dropped replica's files go."""
    described = create_replicated(admin, topic_name, partitions=1,
                                  **{"min.insync.replicas": 1})
    replicas = described["partitions"][0]["replicas"]
    target = [replicas[2], replicas[1]]  # drop the leader, lead from the last
    with Workload(topic_name, 1, producers=2) as load:
        load.wait_acknowledged(300)
        moving = cli("topics", "reassign", topic_name, "--move",
                     f"0:{target[0]},{target[1]}")
        assert f"{topic_name}-0: moving to brokers {target[0]},{target[1]}" in moving
        wait_for(lambda: partition_states(admin, topic_name)[0]["replicas"] == target and
                 partition_states(admin, topic_name)[0]["target"] is None, timeout=90,
                 what="the reassignment to finish")
        load.wait_acknowledged(300)
        load.healthy(sends_after=200)
    anomalies = load.finish()
    assert not anomalies, summary(anomalies)
    state = partition_states(admin, topic_name)[0]
    assert state["leader"] in target and sorted(state["isr"]) == sorted(target)
    dropped = replicas[0]
    wait_for(lambda: all(r["broker_id"] != dropped for r in admin.describe_replicas(topic_name)),
             what="the dropped replica removed from its broker")
    directory = Path(ray_cluster.brokers()[dropped]["data_dir"]) / f"{topic_name}-0"
    wait_for(lambda: not directory.exists(), what="the dropped replica's files removed")
    held = wait_for(lambda: (h := replica_records(admin, topic_name, 0)) and
                    h[target[0]] == h[target[1]] and h, what="both new replicas identical")
    assert len(held[target[0]]) == load.summary["acknowledged"]


@pytest.mark.cluster
def test_a_consumer_on_a_follower_node_reads_from_its_follower(ray_cluster, admin, topic_name):
    """KIP-392: a consumer running on a node whose broker holds an in-sync follower fetches
    from that follower, up to its high watermark, and gets every record."""
    described = create_replicated(admin, topic_name, partitions=1)
    state = described["partitions"][0]
    follower = next(b for b in state["replicas"] if b != state["leader"])
    node = ray_cluster.brokers()[follower]["node_id"]
    with Producer(acks="all") as producer:
        for i in range(500):
            producer.send(topic_name, b"v%d" % i, partition=0)
    wait_for(lambda: fully_in_sync(admin, topic_name), what="in sync")

    @ray.remote(num_cpus=0)
    def read_on_this_node(topic: str, count: int) -> tuple[list[bytes], int | None]:
        import raylog

        cluster = raylog.init(start_local=False, create=False)
        with raylog.Consumer(cluster=cluster, auto_offset_reset="earliest") as consumer:
            consumer.assign([raylog.TopicPartition(topic, 0)])
            got: list = []
            deadline = time.monotonic() + 60
            while len(got) < count and time.monotonic() < deadline:
                got.extend(consumer.poll(timeout_ms=200))
            broker = consumer._reader(raylog.TopicPartition(topic, 0)).broker_id
        return [r.value for r in got], broker

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    values, broker = ray.get(read_on_this_node.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
        topic_name, 500), timeout=120)
    assert broker == follower
    assert values == [b"v%d" % i for i in range(500)]


@pytest.mark.cluster
def test_an_isr_change_the_controller_committed_but_never_answered_is_kept(
        ray_cluster, admin, topic_name):
    """Issue 22 item 2. The controller dies right after it committed an ISR expansion, before
    it answered (the fail point controller.isr_committed): the leader must keep the change
    pending, its high watermark waiting for the new member too, until the answer is known
    (it asks again). Then both old members die: the new one, in the durable ISR, is elected
    cleanly and must hold every acknowledged record."""
    state = admin.create_topic(topic_name, partitions=1, replication_factor=2,
                               configs={"min.insync.replicas": 2})["partitions"][0]
    leader, other = state["leader"], next(b for b in state["replicas"] if b != state["leader"])
    joining = next(b for b in ray_cluster.broker_ids if b not in state["replicas"])
    meta = admin._cluster.topic(topic_name, refresh=True).partitions[0]
    leader_actor, other_actor = meta.clients[leader].handle, meta.clients[other].handle
    # Nothing else in the cluster is changing its ISR: the fail point is this change's.
    wait_for(lambda: ray_cluster.raylog.controller.cluster_status()[
        "under_replicated_partitions"] == 0, timeout=120, what="every partition in sync")
    marker = ray_cluster.root / f"isr-committed-{topic_name}"
    controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    died = ray.get(controller.ready.remote(), timeout=60)["pid"]
    with Workload(topic_name, 1, producers=2) as load:
        load.wait_acknowledged(200)
        with ray_cluster.failpoints({"controller.isr_committed": f"exit-once:{marker}"}):
            admin.reassign_partitions(topic_name, {0: [*state["replicas"], joining]})
            wait_for(marker.exists, timeout=120,
                     what="the controller to die right after committing the expansion")
        # Until the restarted controller serves, the leader's view is watched: the change
        # it was never answered about must never be dropped.
        asked = controller.ready.remote()
        while True:
            view = ray.get(leader_actor.describe.remote(topic_name), timeout=60)[0]
            assert joining in {*view["isr"], *(view["pending_isr"] or ())}, view
            if ray.wait([asked], timeout=0.05)[0]:
                try:
                    if ray.get(asked)["pid"] != died:
                        break
                except ray.exceptions.RayActorError:  # asked before it was restarting
                    pass
                asked = controller.ready.remote()
        wait_for(lambda: joining in partition_states(admin, topic_name)[0]["isr"],
                 timeout=60, what="the expansion in the controller's ISR")
        wait_for(lambda: sorted(ray.get(leader_actor.describe.remote(topic_name))[0]["isr"])
                 == sorted([leader, other, joining]), timeout=60,
                 what="the leader's ISR to be the controller's")
        load.wait_acknowledged(200)
        ray.kill(leader_actor, no_restart=False)
        ray.kill(other_actor, no_restart=False)
        wait_for(lambda: partition_states(admin, topic_name)[0]["leader"] == joining,
                 timeout=120, what=f"broker {joining} elected")
        load.healthy()
    anomalies = load.finish()
    assert not anomalies, summary(anomalies)
    assert_replicas_identical(admin, topic_name, 1)
