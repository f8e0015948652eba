"""The controller's drains (actors/drains.py) over a MetadataAccess in memory, without Ray:
leaderships moved and told, ISRs left, refusals before any change, a draining broker kept
from leading and from rejoining ISRs, stops and restarts through the Ray seam."""

from __future__ import annotations

import asyncio

import pytest

from actors import drains as drains_module
from actors.drains import Drains, MemoryValue
from actors.partition_moves import PartitionMoves
from actors.topic_manager import TopicManager
from raylog.errors import (
    DrainTimeoutError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidReplicationFactorError,
    LastInSyncReplicaError,
    OfflinePartitionsError,
    UnknownBrokerError,
)
from raylog.metadata import state as events
from raylog.metadata.limits import PartitionLimits
from raylog.metadata.settings import ReplicationSettings
from tests.unit.actors.test_controller_parts import cluster, told


async def nothing() -> None:
    return None


def setup(replicas=((1, 2, 3), (2, 3, 1), (3, 1, 2))):
    access, manager, channels = cluster(replicas=replicas)
    return access, manager, channels, Drains(access, manager, nothing)


def leaders(access) -> list:
    return [p.leader for _, p in access.partitions()]


def isrs(access) -> list:
    return [p.isr for _, p in access.partitions()]


def test_a_drain_moves_leaderships_then_leaves_the_isrs_and_tells_the_replicas():
    access, manager, channels, drains = setup()
    answer = asyncio.run(drains.drain_broker(1))
    assert leaders(access) == [2, 2, 3]
    assert isrs(access) == [[2, 3], [2, 3], [3, 2]]
    assert answer == {"broker": 1, "moved": ["t-0"], "left_isr": ["t-0", "t-1", "t-2"],
                      "still_leading": [], "last_in_sync": []}
    assert told(channels)[1] >= {("t", 0)}  # the old leader learns it follows
    assert manager.draining == {1}


def test_a_draining_broker_neither_leads_nor_rejoins_an_isr():
    access, manager, _, drains = setup()
    asyncio.run(drains.drain_broker(1))
    moves = PartitionMoves(access, manager, ReplicationSettings(), nothing, lambda t: {})
    # its preferred leaderships are not given back while it drains
    assert asyncio.run(moves.elect_leaders()) == {}
    # a leader asking to add it back is refused
    p = access.state.topic("t").partitions[0]
    answer = asyncio.run(moves.alter_partition("t", 0, p.leader, p.leader_epoch,
                                               p.partition_epoch, [2, 3, 1], {1: 0}))
    assert isinstance(answer["error"], InvalidArgumentError)
    assert p.isr == [2, 3]
    # another broker going down hands its leaderships to the live ones only
    asyncio.run(manager.broker_down(2))
    assert leaders(access) == [3, 3, 3]
    # resumed, it may lead again
    asyncio.run(drains.resume_broker(1))
    assert manager.draining == set()


def test_draining_a_partitions_last_in_sync_replica_is_refused_unless_forced():
    access, manager, _, drains = setup(replicas=((1, 2, 3), (2, 3, 1)))
    p0 = access.state.topic("t").partitions[0]
    access.commit(events.partition_changed("t", 0, leader=1, leader_epoch=p0.leader_epoch, isr=[1]))
    before = [(p.leader, list(p.isr)) for _, p in access.partitions()]
    with pytest.raises(LastInSyncReplicaError, match=r"t-0"):
        asyncio.run(drains.drain_broker(1))
    assert [(p.leader, list(p.isr)) for _, p in access.partitions()] == before
    assert manager.draining == set()
    answer = asyncio.run(drains.drain_broker(1, force=True))
    assert answer["still_leading"] == ["t-0"] and answer["last_in_sync"] == ["t-0"]
    assert leaders(access) == [1, 2]


def test_unknown_brokers_are_named():
    *_, drains = setup()
    with pytest.raises(UnknownBrokerError, match=r"unknown broker 9 "):
        asyncio.run(drains.drain_broker(9))
    with pytest.raises(UnknownBrokerError, match=r"unknown broker 9 "):
        asyncio.run(drains.resume_broker(9))
    with pytest.raises(UnknownBrokerError, match=r"unknown brokers 7, 9 "):
        asyncio.run(drains.roll_plan([1, 9, 7]))


def test_a_drain_whose_leaders_are_not_taken_in_time_is_undone(monkeypatch):
    access, manager, channels, drains = setup()

    def never(partitions=(), full=False):
        return asyncio.get_running_loop().create_future()  # never taken

    monkeypatch.setattr(channels[2], "tell", never)
    with pytest.raises(DrainTimeoutError, match=r"broker 1 is not drained"):
        asyncio.run(drains.drain_broker(1, timeout_s=0.05))
    assert manager.draining == set()
    assert isrs(access)[0] == [1, 2, 3]  # it did not leave the ISRs


def test_a_roll_plan_refuses_offline_partitions():
    access, manager, _, drains = setup()
    manager.watches[1].alive = False
    asyncio.run(manager.broker_down(1))
    access.commit(events.partition_changed("t", 1, leader=None, leader_epoch=9, isr=[2]))
    with pytest.raises(OfflinePartitionsError, match=r"t-1"):
        asyncio.run(drains.roll_plan(None))
    assert asyncio.run(drains.sync_state())["not_in_sync"] == ["t-0", "t-1", "t-2"]


def test_stop_and_restart_need_a_drained_running_broker_and_go_through_ray(monkeypatch):
    _, manager, _, drains = setup()
    killed = []
    monkeypatch.setattr(drains_module.ray, "kill",
                        lambda handle, no_restart: killed.append((handle, no_restart)))
    with pytest.raises(IllegalStateError, match=r"broker 1 is not drained"):
        asyncio.run(drains.stop_broker(1))
    asyncio.run(drains.drain_broker(1))
    watch = manager.watches[1]
    assert asyncio.run(drains.stop_broker(1)) == {"broker": 1, "node_id": "node-1"}
    assert killed == [(watch.handle, True)]
    # its node is not asked to serve a broker again, until resumed
    assert not manager.registry.to_ask("node-1")
    asyncio.run(drains.resume_broker(1))
    assert manager.registry.to_ask("node-1")


def test_a_restart_waits_until_the_new_process_is_registered(monkeypatch):
    access, manager, _, drains = setup()
    asyncio.run(drains.drain_broker(1))
    watch = manager.watches[1]

    def kill(handle, no_restart):
        assert no_restart is False
        watch.incarnation = "new"  # Ray restarted it; the controller records it a bit later

        async def registered():
            await asyncio.sleep(0.2)
            access.commit(events.broker_started(1, "new"))
        asyncio.get_running_loop().create_task(registered())

    monkeypatch.setattr(drains_module.ray, "kill", kill)
    assert asyncio.run(drains.restart_broker(1, timeout_s=30)) == {"broker": 1,
                                                                   "incarnation": "new"}


def test_a_gone_brokers_replicas_are_not_rebuilt_on_a_draining_broker():
    """A replica rebuilt on a broker being drained would never join the ISR: the gone
    broker's replica goes to a broker that serves, or nowhere."""
    access, manager, _ = cluster(brokers=(1, 2, 3, 4, 5), replicas=((1, 2, 3),))
    drains = Drains(access, manager, nothing)
    asyncio.run(drains.drain_broker(4, force=True))
    manager.watches[3].alive = False
    manager.down_since[3] = 0.0
    moves = PartitionMoves(access, manager, ReplicationSettings(replace_broker_after_s=1),
                           nothing, lambda t: {}, clock=lambda: 100.0)
    asyncio.run(moves.replace_gone_brokers())
    assert access.state.topic("t").partitions[0].target == [1, 2, 5]


def test_a_broker_whose_ray_node_drains_is_drained_and_stopped_once(monkeypatch):
    """Ray marks node-1 draining (``ray start --block`` on SIGTERM, ``ray drain-node``):
    the controller's next look drains its broker, forced, and stops it; later looks leave
    it alone."""
    access, manager, _ = cluster(replicas=((1, 2, 3), (2, 3, 1), (3, 1, 2)))
    # t-2's only in-sync replica is broker 1: forced, it stays its leader until it stops
    access.commit(events.partition_changed("t", 2, leader=1, leader_epoch=9, isr=[1]))
    draining: dict[str, int] = {}
    looks = []

    def draining_nodes():
        looks.append(1)
        return dict(draining)

    drains = Drains(access, manager, nothing, draining_nodes)
    killed = []
    monkeypatch.setattr(drains_module.ray, "kill",
                        lambda handle, no_restart: killed.append((handle, no_restart)))
    watch = manager.watches[1]

    async def scenario():
        await drains.follow_node_drains()  # no node drains: nothing happens
        assert manager.draining == set() and not drains.node_drained
        draining["node-1"] = 0
        await drains.follow_node_drains()
        await asyncio.gather(*drains.node_drained.values())
        await drains.follow_node_drains()  # handled: not again
        assert list(drains.node_drained) == [(1, "node-1")]

    asyncio.run(scenario())
    assert len(looks) == 3
    assert manager.draining == {1}
    assert leaders(access) == [2, 2, 1]
    assert isrs(access)[:2] == [[2, 3], [2, 3]]
    assert killed == [(watch.handle, True)]
    assert drains.stopped == {1: "node-1"}


def test_new_topics_and_partitions_are_not_placed_on_a_draining_broker(monkeypatch):
    access, manager, _, drains = setup()
    monkeypatch.setattr(manager, "node_memory", lambda: {1: None, 2: None, 3: None})
    topics = TopicManager(access, manager, PartitionLimits(), nothing, lambda names: None)
    asyncio.run(drains.drain_broker(1))
    asyncio.run(topics.create_topic("new", 4, 2))
    assert {b for p in access.state.topic("new").partitions for b in p.replicas} == {2, 3}
    asyncio.run(topics.add_partitions("new", 6))
    assert all(1 not in p.replicas for p in access.state.topic("new").partitions)
    with pytest.raises(InvalidReplicationFactorError,
                       match=r"live brokers \(2\), not counting brokers being drained"):
        asyncio.run(topics.create_topic("wide", 1, 3))
    asyncio.run(drains.resume_broker(1))
    asyncio.run(topics.create_topic("wide", 1, 3))


def test_a_new_controller_restores_the_drains_of_brokers_that_did_not_restart(monkeypatch):
    """Drains outlive the controller (kept in Ray's GCS): a stopped broker's node is not
    asked to serve it again, a drained broker does not lead, until resumed; a broker whose
    process restarted since is no longer drained."""
    monkeypatch.setattr(drains_module.ray, "kill", lambda handle, no_restart: None)
    access, manager, _ = cluster(brokers=(1, 2, 3, 4), replicas=((1, 2, 3, 4), (4, 3, 2, 1)))
    for broker in (1, 2, 3, 4):
        access.commit(events.broker_started(broker, "i"))
    record = MemoryValue()
    drains = Drains(access, manager, nothing, record=record)
    asyncio.run(drains.drain_broker(1))
    asyncio.run(drains.stop_broker(1))
    asyncio.run(drains.drain_broker(2))
    asyncio.run(drains.drain_broker(3))
    access.commit(events.broker_started(3, "restarted"))  # 3 came back as a new process

    _, new_manager, _ = cluster(replicas=())
    new_manager.access = access
    restored = Drains(access, new_manager, nothing, record=record)
    asyncio.run(restored.restore())
    assert new_manager.draining == {1, 2}
    assert restored.stopped == {1: "node-1"}
    assert not new_manager.registry.to_ask("node-1")
    asyncio.run(restored.resume_broker(1))
    assert new_manager.registry.to_ask("node-1")
    # and the resume is recorded too
    again = Drains(access, new_manager, nothing, record=record)
    new_manager.draining = set()
    asyncio.run(again.restore())
    assert new_manager.draining == {2} and again.stopped == {}


def test_a_drain_goes_on_when_its_record_cannot_be_written():
    class Unreachable(MemoryValue):
        def put(self, value: bytes) -> None:
            raise ConnectionError("GCS unreachable")

    access, manager, _ = cluster(replicas=((1, 2, 3),))
    drains = Drains(access, manager, nothing, record=Unreachable())
    assert asyncio.run(drains.drain_broker(1))["moved"] == ["t-0"]
    assert manager.draining == {1}
