"""A broker node serving its replicas from several processes (actors/replica_hosts.py).

The test cluster's first broker node runs two replica-host processes
(``RAYLOG_BROKER_PROCESSES=2``, tests/integration/conftest.py): the broker actor and one
replica host. Its replicas are spread over both, clients call the host serving each
directly, a host killed under acks=all load costs no acknowledged record (its replicas come
back on the restarted process and rejoin their ISRs), a replica whose directory another
process of the broker still holds opens once it is free, and a topic with
``raylog.replica.dedicated=true`` gets an actor per replica on its broker's node.
"""

from __future__ import annotations

import os

import pytest
import ray

from raylog import Admin, Producer
from raylog.errors import InvalidConfigError
from raylog.metadata.identity import DirectoryLock
from raylog.util.cluster_names import NAMESPACE, broker_actor_name
from tests.history import summary
from tests.integration.conftest import consume_all, wait_for
from tests.integration.test_replication import (
    assert_replicas_identical,
    create_replicated,
    fully_in_sync,
    partition_states,
)
from tests.integration.workload import Workload

PARTITIONS = 8  # on the two-process broker, beyond what evens out its processes' loads


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


def two_process_broker(ray_cluster) -> tuple[int, str]:
    """(broker id, node id) of the broker whose node runs two replica-host processes."""
    node = ray_cluster.processes_node

    def live() -> list[int]:  # an earlier test may have killed it: it comes back
        return [b for b, info in ray_cluster.brokers().items()
                if info["node_id"] == node and info["alive"]]

    return wait_for(live, timeout=120, what=f"a live broker on node {node}")[0], node


def hosts_of(ray_cluster, topic: str, broker: int) -> dict[int, object]:
    """Partition -> the host actor the metadata names for ``broker``'s replica (only those
    its broker actor does not serve itself)."""
    raw = ray_cluster.raylog.controller.metadata([topic])[topic]
    return {p["partition"]: p["hosts"][broker] for p in raw["partitions"]
            if broker in p.get("hosts", {})}


def to_spread(ray_cluster, admin: Admin, broker: int, partitions: int,
              replication_factor: int) -> int:
    """Partitions a new topic needs for both of ``broker``'s processes to take ``partitions``
    or so between them: each new replica goes to the less loaded process (a leader weighs
    two, a follower one: raylog/metadata/hosts.py), so first as many as the loads the earlier
    tests left differ by, with margin for the replicas placed on other brokers."""
    names = admin.list_topics(include_internal=True)
    load = [0, 0]  # the broker actor's own process, its replica host
    for topic in ray_cluster.raylog.controller.metadata(names).values():
        for p in topic["partitions"]:
            if broker in p["replicas"]:
                load[broker in p.get("hosts", {})] += 2 if p["leader"] == broker else 1
    brokers = len(ray_cluster.brokers())
    return partitions + -(-abs(load[0] - load[1]) * brokers // replication_factor)


def pid_of(handle) -> int:
    return ray._private.state.actors(handle._actor_id.hex())["Pid"]


@pytest.mark.cluster
def test_a_brokers_partitions_spread_over_its_two_processes_and_are_served(
        ray_cluster, admin, topic_name):
    broker, node = two_process_broker(ray_cluster)
    partitions = to_spread(ray_cluster, admin, broker, PARTITIONS, 3)
    create_replicated(admin, topic_name, partitions=partitions)
    # Spread by load: some on the broker's own process, some on its replica host (how many
    # each depends on what the broker held before, from earlier tests).
    wait_for(lambda: 0 < len(hosts_of(ray_cluster, topic_name, broker)) < partitions,
             timeout=60, what="partitions on both processes")
    hosts = hosts_of(ray_cluster, topic_name, broker)
    broker_actor = ray.get_actor(broker_actor_name(node), namespace=NAMESPACE)
    broker_pid = ray.get(broker_actor.identify.remote(), timeout=30)["pid"]
    assert {pid_of(h) for h in hosts.values()} - {broker_pid}, "the host is another process"
    # Every replica is held, on whichever process serves it.
    held = [r for r in admin.describe_replicas(topic_name) if r["broker_id"] == broker]
    assert sorted(r["partition"] for r in held) == list(range(partitions))
    with Producer(acks="all", cluster=ray_cluster.raylog) as producer:
        futures = [producer.send(topic_name, f"v{i}".encode(), partition=i % partitions)
                   for i in range(400)]
        assert all(f.result(60).offset >= 0 for f in futures)
    # Clients call the process serving each replica of the broker (the leader's too).
    meta = ray_cluster.raylog.topic(topic_name, refresh=True)
    for p in range(partitions):
        client = meta.partitions[p].clients[broker]
        assert client.handle._actor_id == hosts.get(p, broker_actor)._actor_id, p
    records = consume_all(topic_name, partitions, 400)
    assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(400))
    assert_replicas_identical(admin, topic_name, partitions)


@pytest.mark.cluster
def test_a_killed_replica_host_loses_nothing_acknowledged_and_its_replicas_come_back(
        ray_cluster, admin, topic_name):
    broker, _ = two_process_broker(ray_cluster)
    create_replicated(admin, topic_name, partitions=PARTITIONS)
    wait_for(lambda: hosts_of(ray_cluster, topic_name, broker), timeout=60,
             what="a partition on the replica host")
    host = next(iter(hosts_of(ray_cluster, topic_name, broker).values()))
    on_host = sorted(hosts_of(ray_cluster, topic_name, broker))
    pid = pid_of(host)
    with Workload(topic_name, PARTITIONS) as load:
        load.wait_acknowledged(300)
        wait_for(lambda: fully_in_sync(admin, topic_name), timeout=90, what="the topic in sync")
        before = {p["partition"]: p for p in partition_states(admin, topic_name)}
        ray.kill(host, no_restart=False)  # a crash: Ray starts the process again
        failed_over: set[int] = set()

        def moved_on() -> bool:
            """Every replica of the dead host was failed over, seen now or since: out of its
            ISR and leading nothing, or (the restarted host may open it again within a second
            or two, between two looks) the leadership it held moved (the leader epoch grew),
            or as a follower it left the ISR and came back (the partition epoch grew by two)."""
            for p in partition_states(admin, topic_name):
                n, was = p["partition"], before[p["partition"]]
                if n not in on_host:
                    continue
                out = p["leader"] != broker and broker not in p["isr"]
                since = p["leader_epoch"] > was["leader_epoch"] if was["leader"] == broker \
                    else p["partition_epoch"] >= was["partition_epoch"] + 2
                if out or since:
                    failed_over.add(n)
            return failed_over >= set(on_host)

        wait_for(moved_on, timeout=60, what="the dead host's partitions failed over")
        load.wait_acknowledged(300)  # acknowledged while the host is down
        wait_for(lambda: fully_in_sync(admin, topic_name), timeout=120,
                 what="the restarted host's replicas back in every ISR")
        load.healthy()
        load.wait_acknowledged(200)
    anomalies = load.finish()
    assert not anomalies, summary(anomalies)
    assert pid_of(host) != pid, "Ray restarted the host process"
    assert_replicas_identical(admin, topic_name, PARTITIONS)


@pytest.mark.cluster
def test_a_replica_whose_directory_another_process_holds_serves_once_it_is_free(
        ray_cluster, admin, topic_name):
    """A restarted broker told a replica whose directory another process of its own still
    holds (a process of its earlier incarnation, still exiting; here this test's process,
    through the same lock, taken as the killed process let go) reports it failed at once,
    and its partition goes on without it; once the lock is free, the broker opens it (tried
    again with backoff: raylog/replica/lock_waits.py; no word of the controller comes to
    retry it, for the broker left its ISR when it restarted), and it catches up and rejoins
    its ISR at the broker's new broker epoch."""
    broker, node = two_process_broker(ray_cluster)
    partitions = to_spread(ray_cluster, admin, broker, 4, 3)
    create_replicated(admin, topic_name, partitions=partitions)
    wait_for(lambda: fully_in_sync(admin, topic_name), timeout=90, what="the topic in sync")
    # Its replicas in the broker actor's own process: their locks go with that process.
    own = sorted(set(range(partitions)) - set(hosts_of(ray_cluster, topic_name, broker)))
    assert own, "the broker actor serves some replicas itself"
    locks = [DirectoryLock(ray_cluster.data_dirs[node] / f"{topic_name}-{p}") for p in own]
    broker_actor = ray.get_actor(broker_actor_name(node), namespace=NAMESPACE)
    before = ray.get(broker_actor.identify.remote(), timeout=30)["incarnation"]
    with Producer(acks="all", cluster=ray_cluster.raylog) as producer:
        try:
            ray.kill(broker_actor, no_restart=False)  # Ray starts its process again
            wait_for(lambda: all(lock.held or lock.acquire() for lock in locks), timeout=30,
                     interval=0.01, what="the killed process's replica locks")

            def failed() -> dict:  # what the restarted broker reports failed, once back
                status = ray.get(broker_actor.watch.remote(None, 0), timeout=30)
                return status["failed"] if status["incarnation"] != before else {}

            wait_for(lambda: {(topic_name, p) for p in own} <= set(failed()), timeout=90,
                     what="the held replicas reported failed by the restarted broker")
            states = partition_states(admin, topic_name)
            assert all(broker not in states[p]["isr"] and states[p]["leader"] not in
                       (None, broker) for p in own)
            futures = [producer.send(topic_name, f"h{i}".encode(), partition=i % partitions)
                       for i in range(200)]
            assert all(f.result(60).offset >= 0 for f in futures)
            # The broker waited: nothing took the locks from this process.
            assert [lock.holder() for lock in locks] == [os.getpid()] * len(own)
        finally:
            for lock in locks:
                lock.release()
    wait_for(lambda: fully_in_sync(admin, topic_name), timeout=90,
             what="the broker's replicas in their ISRs once their directories are free")
    assert not set(failed()) & {(topic_name, p) for p in range(partitions)}
    held = [r for r in admin.describe_replicas(topic_name) if r["broker_id"] == broker]
    assert sorted(r["partition"] for r in held) == list(range(partitions))
    assert_replicas_identical(admin, topic_name, partitions)


@pytest.mark.cluster
def test_a_dedicated_topic_gets_an_actor_per_replica_on_its_brokers_node(
        ray_cluster, admin, topic_name):
    broker, node = two_process_broker(ray_cluster)
    create_replicated(admin, topic_name, partitions=2, **{"raylog.replica.dedicated": True})
    wait_for(lambda: len(hosts_of(ray_cluster, topic_name, broker)) == 2, timeout=60,
             what="a host per replica")
    for b in ray_cluster.broker_ids:  # on every broker, whatever its processes
        wait_for(lambda b=b: len(hosts_of(ray_cluster, topic_name, b)) == 2, timeout=60,
                 what=f"a host per replica on broker {b}")
    hosts = hosts_of(ray_cluster, topic_name, broker)
    assert len({h._actor_id for h in hosts.values()}) == 2
    for handle in hosts.values():
        record = ray._private.state.actors(handle._actor_id.hex())
        assert record["Address"]["NodeID"] == node
    with Producer(acks="all", cluster=ray_cluster.raylog) as producer:
        futures = [producer.send(topic_name, f"d{i}".encode(), partition=i % 2)
                   for i in range(100)]
        assert all(f.result(60).offset >= 0 for f in futures)
    assert len(consume_all(topic_name, 2, 100)) == 100
    assert_replicas_identical(admin, topic_name, 2)
    admin.delete_topic(topic_name)

    def hosts_gone() -> bool:
        return all(ray._private.state.actors(h._actor_id.hex())["State"] == "DEAD"
                   for h in hosts.values())

    wait_for(hosts_gone, timeout=60, what="the dedicated hosts stopped with their topic")


@pytest.mark.cluster
def test_the_dedicated_config_is_validated(admin, topic_name):
    with pytest.raises(InvalidConfigError, match="dedicated"):
        admin.create_topic(topic_name, configs={"raylog.replica.dedicated": "maybe"})
    assert topic_name not in admin.list_topics()


@pytest.mark.cluster
def test_produce_batches_passes_on_in_order_what_its_other_host_serves(ray_cluster, admin,
                                                                       topic_name):
    """The broker actor's produce_batches (the Kafka listener's merged appends): batches for
    replicas its replica host serves are passed on, each answered with its own offsets, in
    order with the ones it appends itself."""
    from tests.integration.test_kafka_merged_appends import batch

    broker, node = two_process_broker(ray_cluster)
    partitions = to_spread(ray_cluster, admin, broker, 24, 1)
    admin.create_topic(topic_name, partitions=partitions, replication_factor=1)
    meta = ray_cluster.raylog.topic(topic_name, refresh=True)
    mine = {p: meta.partitions[p].leader_client().leader_epoch for p in range(partitions)
            if meta.partitions[p].leader_client().broker_id == broker}
    elsewhere = wait_for(lambda: set(hosts_of(ray_cluster, topic_name, broker)) or None,
                         timeout=60, what="partitions on the replica host")
    assert elsewhere and set(mine) - elsewhere, "both of the broker's processes serve some"
    items = [(topic_name, p, epoch, batch(b"%d-%d" % (p, i)))
             for i in range(2) for p, epoch in sorted(mine.items())]
    broker_actor = ray.get_actor(broker_actor_name(node), namespace=NAMESPACE)
    answers = ray.get(broker_actor.produce_batches.remote(items, 1, 30_000), timeout=60)
    assert [a.base_offset for a in answers] == [0] * len(mine) + [1] * len(mine)
    read = consume_all(topic_name, partitions, 2 * len(mine))
    assert sorted((r.partition, r.offset, r.value) for r in read) == \
        sorted((p, i, b"%d-%d" % (p, i)) for i in range(2) for p in mine)
