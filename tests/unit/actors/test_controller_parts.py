"""The controller's parts over a MetadataAccess in memory, without Ray: the metadata they
read and commit to (raylog/metadata/access.py), the one routine that elects, commits and
pushes (BrokerManager.elect), the moves built on it (actors/partition_moves.py), and the
controller's API declared with ``served_by``.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import pathlib
import shutil
from typing import Any

import pytest

from actors.broker_manager import BrokerManager
from actors.java_api import JavaApi
from actors.partition_moves import PartitionMoves
from actors.topic_manager import TopicManager
from raylog.client.connection import METADATA_MAX_AGE_S
from raylog.errors import InvalidArgumentError, UnknownTopicError
from raylog.metadata import election
from raylog.metadata import state as events
from raylog.metadata.access import EventLog, MemoryLog, MetadataAccess
from raylog.metadata.settings import ReplicationSettings
from raylog.metadata.store import MetadataStore
from raylog.storage import files
from raylog.util.typecheck import served_by


class FakeWatch:
    def __init__(self, broker_id: int) -> None:
        self.broker_id, self.alive, self.handle, self.incarnation = broker_id, True, object(), "i"
        self.node_id = f"node-{broker_id}"


class FakeChannel:
    """A broker's sender that records what it is told, and says it was taken."""

    def __init__(self) -> None:
        self.told: list[tuple[set, bool]] = []
        self.stopped: list[tuple[tuple, bool]] = []

    def _taken(self) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        future.set_result(True)
        return future

    def tell(self, partitions=(), full: bool = False) -> asyncio.Future:
        self.told.append((set(partitions), full))
        return self._taken()

    def stop_replicas(self, replicas, delete: bool, version: int) -> asyncio.Future:
        self.stopped.append((tuple(replicas), delete))
        return self._taken()


def cluster(brokers=(1, 2, 3), replicas=((1, 2, 3), (2, 3, 1)), log: EventLog | None = None
            ) -> tuple[MetadataAccess, BrokerManager, dict[int, FakeChannel]]:
    """Topic ``t`` with a partition per ``replicas`` (all in sync, the first leading) over
    live ``brokers``, each with a recording channel; the metadata in ``log`` (default: in
    memory)."""
    access = MetadataAccess(MemoryLog() if log is None else log)
    access.commit(events.cluster_created("c"))
    for broker in brokers:
        access.commit(events.broker_registered(broker))
    access.commit(events.topic_created("t", "id", [list(r) for r in replicas], {}))
    manager = BrokerManager(access, ReplicationSettings())
    channels = {}
    for broker in brokers:
        manager.watches[broker] = FakeWatch(broker)
        channels[broker] = manager.channels[broker] = FakeChannel()
    return access, manager, channels


def told(channels: dict[int, FakeChannel]) -> dict[int, set]:
    return {b: set().union(*(tps for tps, _ in c.told)) for b, c in channels.items() if c.told}


def test_metadata_access_replays_what_it_committed():
    access, _, _ = cluster()
    again = MetadataAccess(access.log)
    assert again.state.topic("t").partitions == access.state.topic("t").partitions
    assert again.state.applied == access.state.applied
    assert again.user_topics() == {"t": 2}
    assert [p.partition for _, p in again.replicas_on(1)] == [0, 1]


def test_a_broker_down_moves_its_leaderships_commits_and_tells_the_live_replicas():
    async def scenario() -> None:
        access, manager, channels = cluster()
        manager.watches[1].alive = False
        before = len(access.log.events)
        await manager.broker_down(1)
        p0, p1 = access.state.topic("t").partitions
        assert (p0.leader, p0.isr) == (2, [2, 3])  # moved off broker 1
        assert p1.leader == 2 and 1 not in p1.isr
        assert len(access.log.events) == before + 2  # one event per change, persisted
        assert MetadataAccess(access.log).state.topic("t").partitions == [p0, p1]
        assert told(channels) == {2: {("t", 0), ("t", 1)}, 3: {("t", 0), ("t", 1)}}
        assert 1 in manager.down_since

    asyncio.run(scenario())


class CountingLog(MemoryLog):
    def __init__(self) -> None:
        super().__init__()
        self.commits = 0

    def commit(self, state, events) -> None:
        self.commits += 1
        super().commit(state, events)


def test_the_changes_of_one_election_are_one_commit():
    async def scenario() -> None:
        access, manager, _ = cluster(replicas=[(1, 2, 3)] * 40, log=CountingLog())
        commits, before = access.log.commits, len(access.log.events)
        manager.watches[1].alive = False
        await manager.broker_down(1)
        assert access.log.commits == commits + 1
        assert len(access.log.events) == before + 40
        assert {p.leader for _, p in access.partitions()} == {2}

    asyncio.run(scenario())


def test_a_refused_decision_commits_the_changes_decided_before_it():
    async def scenario() -> None:
        access, manager, channels = cluster()

        def second_refused(topic, p, live):
            if p.partition == 1:
                raise UnknownTopicError("gone")
            return election.Change(p.leader, p.leader_epoch, [p.leader])

        with pytest.raises(UnknownTopicError):
            await manager.elect(access.partitions, second_refused)
        assert [p.isr for _, p in access.partitions()] == [[1], [2, 3, 1]]
        assert MetadataAccess(access.log).state.topic("t").partitions[0].isr == [1]
        assert told(channels) == {}

    asyncio.run(scenario())


LEADS = [(1, 2, 3)] * 200  # broker 1 leads 200 partitions


def log_fsyncs(monkeypatch) -> list[str]:
    synced: list[str] = []
    real = files.fsync

    def recording(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(".log"):
            synced.append(path)
        real(fd)

    monkeypatch.setattr(files, "fsync", recording)
    return synced


def test_a_broker_down_syncs_the_metadata_log_once_for_all_it_led(tmp_path, monkeypatch):
    store = MetadataStore(tmp_path / "meta")
    try:
        access, manager, _ = cluster(replicas=LEADS, log=store)
        manager.watches[1].alive = False
        synced = log_fsyncs(monkeypatch)
        asyncio.run(manager.broker_down(1))
        assert len(synced) == 1
        assert {p.leader for _, p in access.partitions()} == {2}
    finally:
        store.close()


def test_a_failover_torn_by_a_crash_comes_back_whole_or_not_at_all(tmp_path):
    """The metadata log's recovery cuts a torn batch whole: cut anywhere in the write of a
    failover's changes, the log reopens with all of them or none."""
    store = MetadataStore(tmp_path / "meta")
    try:
        _, manager, _ = cluster(replicas=LEADS, log=store)
        manager.watches[1].alive = False
        segment = store.log.active_segment.path
        before = segment.stat().st_size
        asyncio.run(manager.broker_down(1))
        after = segment.stat().st_size
        shutil.copytree(tmp_path / "meta", tmp_path / "crash")  # open: a crash image
    finally:
        store.close()
    seen = []
    for cut in range(before, after, max((after - before) // 10, 1)):
        copy = tmp_path / f"cut-{cut}"
        shutil.copytree(tmp_path / "crash", copy)
        os.truncate(copy / segment.name, cut)
        reopened = MetadataStore(copy)
        try:
            seen.append({p.leader for p in reopened.load().topic("t").partitions})
        finally:
            reopened.close()
    assert len(seen) >= 10 and all(leaders == {1} for leaders in seen)
    os.truncate(tmp_path / "crash" / segment.name, after)
    reopened = MetadataStore(tmp_path / "crash")
    try:
        assert {p.leader for p in reopened.load().topic("t").partitions} == {2}
    finally:
        reopened.close()


def test_elect_pushes_nothing_when_a_decision_is_refused():
    async def scenario() -> None:
        access, manager, channels = cluster()

        def refuse(topic, p, live):
            raise UnknownTopicError("gone")

        with pytest.raises(UnknownTopicError):
            await manager.elect(access.partitions, refuse)
        assert told(channels) == {}
        assert not manager.access.lock.locked()

    asyncio.run(scenario())


def test_elect_skips_and_excludes_the_brokers_it_is_told_to():
    async def scenario() -> None:
        access, manager, channels = cluster()
        seen = []

        def decide(topic, p, live):
            seen.append(set(live))
            return election.Change(p.leader, p.leader_epoch, [p.leader])  # shrink the ISR

        changed, pushed = await manager.elect(access.partitions, decide, without=3, skip=2)
        assert seen == [{1, 2}, {1, 2}]
        assert [p.isr for _, p in changed] == [[1], [2]]
        assert await pushed == [True, True]
        assert told(channels) == {1: {("t", 0), ("t", 1)}, 3: {("t", 0), ("t", 1)}}

    asyncio.run(scenario())


def test_a_reassignment_is_taken_to_its_end_step_by_step():
    async def scenario() -> None:
        access, manager, channels = cluster(brokers=(1, 2, 3, 4), replicas=((1, 2),))

        async def started() -> None:
            pass

        moves = PartitionMoves(access, manager, ReplicationSettings(), started,
                               lambda topic: {"name": topic.name})
        assert await moves.reassign_partitions("t", {0: [3, 4]}) == {"name": "t"}
        p = access.state.topic("t").partitions[0]
        assert p.replicas == [1, 2, 3, 4] and p.target == [3, 4]  # copying first
        access.commit(events.partition_changed("t", 0, leader=1, leader_epoch=p.leader_epoch,
                                               isr=[1, 2, 3, 4], replicas=p.replicas))
        await moves.move_reassigned()  # in sync: leadership moves to a target
        await moves.move_reassigned()  # then the old replicas go, and the move is done
        p = access.state.topic("t").partitions[0]
        assert (p.replicas, p.leader, p.target) == ([3, 4], 3, None)
        assert channels[1].stopped == [((("t", 0),), True)]
        assert channels[2].stopped == [((("t", 0),), True)]
        access.commit(events.configs_altered("t", {"min_insync_replicas": 2}))
        with pytest.raises(InvalidArgumentError, match=r"min\.insync\.replicas=2"):
            await moves.reassign_partitions("t", {0: [4]})

    asyncio.run(scenario())


def test_the_java_connector_is_told_the_clients_metadata_age_compaction_and_tiering():
    async def scenario() -> None:
        access, manager, _ = cluster()
        access.commit(events.topic_created("kept", "id2", [[1, 2]],
                                           {"cleanup_policy": "compact"}))
        access.commit(events.topic_created("cold", "id3", [[1, 2]],
                                           {"remote_storage_enable": True}))

        async def started() -> None:
            pass

        topics = TopicManager(access, manager, None, started, lambda names: None)
        answer = json.loads(await JavaApi(topics, manager).java_metadata(
            json.dumps(["t", "kept", "cold", "nope"])))
        assert answer["t"]["max_age_ms"] == answer["kept"]["max_age_ms"] == \
            METADATA_MAX_AGE_S * 1000
        assert (answer["t"]["compacted"], answer["kept"]["compacted"]) == (False, True)
        # only a tiered topic has a cold part for the connector to plan (TieredSplit.java)
        assert (answer["t"]["tiered"], answer["cold"]["tiered"]) == (False, True)
        assert answer["t"]["brokers"]["2"]["actor"].endswith("node-2")
        assert answer["nope"]["error"]["type"] == "UnknownTopicError"

    asyncio.run(scenario())


class Part:
    async def serve(self, name: str, count: int = 1) -> dict[str, Any]:
        """Serve ``count`` of ``name``."""
        return {"name": name, "count": count}


class Api:
    serve = served_by("part", Part.serve)

    def __init__(self) -> None:
        self.part = Part()


def test_served_by_checks_the_parts_annotations_and_calls_it():
    assert asyncio.run(Api().serve("x", count=2)) == {"name": "x", "count": 2}
    assert Api.serve.__doc__ == "Serve ``count`` of ``name``."
    with pytest.raises(InvalidArgumentError, match="count must be int"):
        asyncio.run(Api().serve("x", "2"))
    with pytest.raises(InvalidArgumentError):
        asyncio.run(Api().serve())


@pytest.mark.parametrize("part", ["broker_manager", "topic_manager", "partition_moves",
                                  "groups", "java_api"])
def test_no_part_imports_the_controller_that_owns_it(part):
    source = pathlib.Path(__file__).parents[3] / "actors" / f"{part}.py"
    tree = ast.parse(source.read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    assert "actors.controller" not in imported
