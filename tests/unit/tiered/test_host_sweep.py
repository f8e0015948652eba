"""The sweep as a tiered leader's job (actors/tiered.py's TieredHost): in the new leader's
preparation, then again every interval on the one-at-a-time job queue; a store that fails
the sweep delays only the sweep (no Ray)."""

from __future__ import annotations

import asyncio
import time

from actors import tiered as tiered_actor
from actors.tiered import TieredHost
from raylog.tiered.layout import DELETE_FINISHED, DELETE_STARTED, SEGMENT, RemoteSegment
from raylog.tiered.reader import RemoteReader
from raylog.tiered.store import ObjectStore
from raylog.tiered.sweep import SweepSettings, list_upload_folders
from raylog.tiered.uploader import closed_segments
from tests.unit.tiered.test_host_jobs import TP, leader, until  # noqa: F401 (a fixture)
from tests.unit.tiered.test_uploader import REF, Recorder


def host_over(store: ObjectStore, partition, interval_s: float) -> tuple[TieredHost, Recorder]:
    """A host with its store open, its metadata loaded (a Recorder) and the sweep every
    ``interval_s``; each job's end plans the next, as the broker's host does."""
    host = TieredHost(lambda: 7, lambda: None, lambda tp: (REF.topic_id, partition),
                      SweepSettings(interval_s))
    recorder = Recorder(store)
    recorder.state = host.state
    host._write = recorder.write
    host.catch_ups = 0

    def catch_up() -> None:
        host.catch_ups += 1

    host._catch_up = catch_up
    host.store, host.reader = store, RemoteReader(store)
    host.store_info = {"uri": None, "settings": {}}
    host.loaded.set()
    return host, recorder


def deleted_attempt_with_late_objects(store: ObjectStore, recorder: Recorder, segment_id: str
                                      ) -> RemoteSegment:
    """An older leader's attempt its successor deleted (DELETE_FINISHED), then one object
    the older leader put into its folder after all."""
    attempt = RemoteSegment(topic=REF.topic, topic_id=REF.topic_id, partition=REF.partition,
                            segment_id=segment_id, base_offset=0, end_offset=9,
                            max_timestamp=0, size_bytes=1, leader_epoch=1, broker_id=3)
    for state in (attempt.state, DELETE_STARTED, DELETE_FINISHED):
        recorder.write(attempt.with_state(state, 0))
    store.put(f"{attempt.folder(store.prefix)}/{SEGMENT}", b"late")
    return attempt


def folder_ids(store: ObjectStore) -> set[str]:
    return {f.segment_id for f in list_upload_folders(store, REF)}


def test_a_new_leader_sweeps_in_its_preparation_then_every_interval(tmp_path, leader):  # noqa: F811
    store = ObjectStore.from_uri(f"file://{tmp_path / 'store'}")
    host, recorder = host_over(store, leader, 3600.0)
    deleted_attempt_with_late_objects(store, recorder, "before")
    assert folder_ids(store) == {"before"}

    async def run() -> None:
        host.upkeep(REF.topic_id, leader)  # the preparation, then every copy
        await until(lambda: len(host.state.readable(REF.topic_id, REF.partition))
                    == len(closed_segments(leader.log))
                    and (TP not in host._running or host._running[TP].done()))
        assert "before" not in folder_ids(store)  # swept by the preparation
        deleted_attempt_with_late_objects(store, recorder, "after")
        host.upkeep(REF.topic_id, leader)  # a sweep wrongly planned here would run now
        await until(lambda: TP not in host._running or host._running[TP].done())
        assert "after" in folder_ids(store)  # not due for an hour
        host._sweep_due[TP] = 0.0  # the interval passed
        host.upkeep(REF.topic_id, leader)
        await until(lambda: "after" not in folder_ids(store))

    try:
        asyncio.run(run())
    finally:
        host.close()
    readable = host.state.readable(REF.topic_id, REF.partition)
    assert folder_ids(store) == {s.segment_id for s in readable}  # none of them touched
    assert host.catch_ups == 2  # the preparation's, the periodic sweep's own


def test_a_store_failing_the_sweep_delays_only_the_sweep(tmp_path, leader,  # noqa: F811
                                                         monkeypatch):
    store = ObjectStore.from_uri(f"file://{tmp_path / 'store'}")
    host, recorder = host_over(store, leader, 3600.0)
    deleted_attempt_with_late_objects(store, recorder, "late")
    listings = []

    def unreachable(store, ref):
        listings.append(ref)
        raise OSError("the store is down")

    monkeypatch.setattr(tiered_actor, "list_upload_folders", unreachable)

    async def run() -> None:
        host.upkeep(REF.topic_id, leader)
        await until(lambda: len(host.state.readable(REF.topic_id, REF.partition))
                    == len(closed_segments(leader.log))
                    and (TP not in host._running or host._running[TP].done()))

    try:
        asyncio.run(run())
        # the preparation went through
        assert host._ready_epoch[TP] == (REF.topic_id, leader.leader_epoch)
        assert listings  # the sweep was tried, in the preparation and after its backoff
        assert TP not in host._not_before  # no job of the partition failed
        assert host._sweep_backoff[TP].attempts >= 1  # the sweep's own backoff
        assert time.monotonic() < host._sweep_due[TP] < time.monotonic() + 60  # soon again
        monkeypatch.setattr(tiered_actor, "list_upload_folders", list_upload_folders)
        host._sweep_due[TP] = 0.0  # its backoff ended

        async def again() -> None:
            host.upkeep(REF.topic_id, leader)
            await until(lambda: "late" not in folder_ids(store))

        asyncio.run(again())
    finally:
        host.close()
    assert "late" not in folder_ids(store)
