"""A tiered leader's jobs in one process (actors/tiered.py's TieredHost): when one ends, the
next is planned at once, not at the host's next maintenance round."""

from __future__ import annotations

import asyncio

import pytest

from actors.tiered import TieredHost
from raylog.replica.partition import LeaderAndIsr, Partition
from raylog.tiered.layout import FENCE_PREFIX
from raylog.tiered.reader import RemoteReader
from raylog.tiered.store import ObjectStore
from raylog.tiered.uploader import closed_segments
from tests.unit.tiered.test_uploader import REF, Recorder, filled_log

TP = (REF.topic, REF.partition)


@pytest.fixture
def leader(tmp_path):
    """A leader of a log of many closed segments, none copied yet."""
    log = filled_log(tmp_path / "log")
    partition = Partition(REF.topic, REF.partition, log, 7)
    partition.apply(LeaderAndIsr(7, 1, 1, (7,), (7,)))
    return partition


def started_host(store: ObjectStore, job_done) -> tuple[TieredHost, Recorder]:
    """A host with its store open and its metadata loaded; records go to a Recorder."""
    host = TieredHost(lambda: 7, lambda: None, job_done)
    recorder = Recorder(store)
    recorder.state = host.state
    host._write = recorder.write  # the metadata topic, without a cluster
    host._catch_up = lambda: None  # nothing else writes the metadata here
    host.store, host.reader = store, RemoteReader(store)
    host.store_info = {"uri": None, "settings": {}}  # start() asks no controller
    host.loaded.set()
    return host, recorder


async def until(condition, timeout_s: float = 30.0) -> None:
    """Until ``condition()`` holds (checked between the loop's callbacks: a job's end is
    handled whole by then), or the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition() and loop.time() < deadline:
        await asyncio.sleep(0.01)


def test_a_backlog_of_closed_segments_is_copied_without_waiting_for_maintenance(tmp_path,
                                                                              leader):
    store = ObjectStore.from_uri(f"file://{tmp_path / 'store'}")
    ended: list[tuple[str, int]] = []

    def job_done(tp):
        ended.append(tp)
        return REF.topic_id, leader

    host, _ = started_host(store, job_done)
    backlog = closed_segments(leader.log)

    async def run() -> None:
        host.upkeep(REF.topic_id, leader)  # maintenance looks once
        await until(lambda: len(ended) == 1 + len(backlog))  # preparing, then each copy

    try:
        asyncio.run(run())
    finally:
        host.close()
    assert len(backlog) > 3
    readable = host.state.readable(REF.topic_id, REF.partition)
    assert [s.base_offset for s in readable] == [s.base_offset for s in backlog]
    assert ended == [TP] * (1 + len(backlog))  # the new leader's preparation, then each copy


def test_a_replica_the_host_no_longer_holds_gets_no_next_job(tmp_path, leader):
    store = ObjectStore.from_uri(f"file://{tmp_path / 'store'}")
    ended: list[tuple[str, int]] = []
    host, recorder = started_host(store, lambda tp: ended.append(tp))  # answers None

    async def run() -> None:
        host.upkeep(REF.topic_id, leader)
        await until(lambda: ended)  # the preparation's end, handled whole
        assert host._running[TP].done()  # the preparation's: nothing planned after it

    try:
        asyncio.run(run())
    finally:
        host.close()
    assert host._ready_epoch[TP] == (REF.topic_id, leader.leader_epoch)  # it ran ...
    # ... and nothing was copied after it (the preparation writes only its fence)
    assert [r.segment_id.startswith(FENCE_PREFIX) for r in recorder.records] == [True]


def test_a_topic_created_again_under_its_name_is_prepared_again(tmp_path, leader):
    """Same name, same leader epoch, another topic id: its leader fences and catches up
    before it copies, as any new leader (the deleted topic's preparation is not its)."""
    store = ObjectStore.from_uri(f"file://{tmp_path / 'store'}")
    ended: list[tuple[str, int]] = []
    host, recorder = started_host(store, lambda tp: ended.append(tp))
    again = "1" * 32

    async def run() -> None:
        host.upkeep(REF.topic_id, leader)
        await until(lambda: len(ended) == 1)
        host.upkeep(again, leader)  # the old one deleted, this one led at the same epoch
        await until(lambda: len(ended) == 2)

    try:
        asyncio.run(run())
    finally:
        host.close()
    fences = [r for r in recorder.records if r.segment_id.startswith(FENCE_PREFIX)]
    assert [(r.topic_id, r.leader_epoch) for r in fences] == [
        (REF.topic_id, leader.leader_epoch), (again, leader.leader_epoch)]
    assert host._ready_epoch[TP] == (again, leader.leader_epoch)
