"""A deleted tiered topic's remote data (raylog/tiered/cleanup.py, and the sweep
actors/tiered.py's TieredHost runs where it leads the metadata topic): its folder and every
metadata key of its topic id go, retried while the store is down, finished by a new process
after a sweep cut short; a topic created again under its name, and any other, is untouched."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from actors.tiered import CLEANUP, TieredHost
from raylog.replica.partition import LeaderAndIsr, Partition
from raylog.storage.log import PartitionLog
from raylog.tiered.cleanup import find_deleted
from raylog.tiered.layout import METADATA_TOPIC, fence_record, folder_topic_id, topic_folder
from raylog.tiered.metadata import RemoteLogState
from raylog.tiered.reader import RemoteReader
from raylog.tiered.store import ObjectStore
from tests.tieredutil import upload_segments
from tests.unit.tiered.test_host_jobs import until
from tests.unit.tiered.test_uploader import filled_log

OLD, NEW, OTHER, GONE = (uuid.uuid4().hex for _ in range(4))


class MetadataTopic:
    """``__raylog_remote_log`` as stored records (key, value), applied to ``state``."""

    def __init__(self, state: RemoteLogState) -> None:
        self.state = state
        self.records: list[tuple[bytes, bytes | None]] = []

    def append(self, key: str, value: bytes | None) -> None:
        self.records.append((key.encode(), value))
        self.state.apply_value(key.encode(), value)

    def compacted(self) -> list[tuple[bytes, bytes | None]]:
        """Each key's latest record, tombstones dropped, in log order."""
        latest = {key: i for i, (key, _) in enumerate(self.records)}
        return [r for i, r in enumerate(self.records)
                if latest[r[0]] == i and r[1] is not None]


@pytest.fixture
def store(tmp_path) -> ObjectStore:
    return ObjectStore.from_uri(f"file://{tmp_path / 'store'}")


@pytest.fixture
def topic(store, tmp_path) -> MetadataTopic:
    """Topic "t" deleted (OLD) and created again (NEW), and topic "u" (OTHER), each with
    copied segments of two partitions and a fence."""
    topic = MetadataTopic(RemoteLogState())
    for name, topic_id in (("t", OLD), ("t", NEW), ("u", OTHER)):
        for partition in (0, 1):
            directory = tmp_path / f"log-{topic_id}-{partition}"
            filled_log(directory, batches=12).flush()
            fence = fence_record(name, topic_id, partition, 0, 7, 0)
            topic.append(fence.key(), fence.to_json())
            for record in upload_segments(directory, store, name, partition,
                                          topic_id=topic_id):
                topic.append(record.key(), record.to_json())
    return topic


def folders(store: ObjectStore) -> set[str]:
    return {f.rsplit("/", 1)[1] for f in store.list_folders(store.prefix)}


def metadata_leader(tmp_path) -> Partition:
    partition = Partition(METADATA_TOPIC, 0, PartitionLog(tmp_path / "meta"), 7)
    partition.apply(LeaderAndIsr(7, 1, 1, (7,), (7,)))
    return partition


def sweeping_host(store: ObjectStore, topic: MetadataTopic, live: set[str]) -> TieredHost:
    """A host leading the metadata topic, its store open, its state ``topic``'s, told by
    its controller that ``live`` are the topic ids (and the metadata topic exists)."""
    host = TieredHost(lambda: 7, lambda: None, lambda tp: None)
    host.state = topic.state
    host.store, host.reader = store, RemoteReader(store)
    host.store_info = {"uri": None, "settings": {}}
    host.loaded.set()
    host._tombstone = lambda key: topic.append(key, None)
    host._live_topic_ids = lambda: set(live)
    return host


def sweep(host: TieredHost, leader: Partition, done) -> None:
    async def run() -> None:
        while not done():  # the host's maintenance, once a round, the next sweep due
            host._not_before.pop(CLEANUP, None)
            host.upkeep("", leader)  # plans a sweep, or takes the last one's end (failed:
            # it backs off, and the next round plans one)
            await until(lambda: CLEANUP not in host._running or host._running[CLEANUP].done())

    try:
        asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        host.close()


def test_the_deleted_topics_folder_and_keys_go_and_its_namesake_stays(store, topic, tmp_path):
    before = {tid: topic.state.readable(tid, 1) for tid in (NEW, OTHER)}
    assert folders(store) == {f"t-{OLD}", f"t-{NEW}", f"u-{OTHER}"}
    keys = topic.state.topics()[OLD][1]
    assert sum("fence-" in k for k in keys) == 2 and len(keys) > 4
    host = sweeping_host(store, topic, {NEW, OTHER})
    sweep(host, metadata_leader(tmp_path), lambda: OLD not in topic.state.topics())
    assert folders(store) == {f"t-{NEW}", f"u-{OTHER}"}
    tombstoned = [k.decode() for k, v in topic.records if v is None]
    assert sorted(tombstoned) == sorted(keys)  # every key of the old id, fences too, once
    assert {tid: topic.state.readable(tid, 1) for tid in (NEW, OTHER)} == before
    assert topic.state.readable(OLD, 0) == []
    # The compacted topic replays to the same state: nothing of the old id.
    replayed = RemoteLogState()
    for key, value in topic.compacted():
        replayed.apply_value(key, value)
    assert replayed.topics() == topic.state.topics()
    assert OLD not in replayed.topics()


def test_a_store_that_is_down_is_retried_and_nothing_is_recorded_meanwhile(store, topic,
                                                                          tmp_path):
    delete_folder, failures = store.delete_folder, []

    def down_twice(path: str) -> None:
        if len(failures) < 2:
            failures.append(path)
            raise OSError("the store is down")
        delete_folder(path)

    store.delete_folder = down_twice
    host = sweeping_host(store, topic, {NEW, OTHER})
    leader = metadata_leader(tmp_path)
    records = len(topic.records)

    async def first_round() -> None:
        host.upkeep("", leader)
        await until(lambda: host._running[CLEANUP].done(), 10)
        host.upkeep("", leader)  # sees the failure: backs off

    asyncio.run(first_round())
    assert failures and len(topic.records) == records  # no tombstone before the folder went
    assert host._not_before[CLEANUP] > 0 and host._backoff[CLEANUP].attempts > 0
    sweep(host, leader, lambda: OLD not in topic.state.topics())
    assert len(failures) == 2 and folders(store) == {f"t-{NEW}", f"u-{OTHER}"}


def test_a_sweep_cut_short_is_finished_by_another_process(store, topic, tmp_path):
    keys = topic.state.topics()[OLD][1]
    first = sweeping_host(store, topic, {NEW, OTHER})
    written: list[str] = []

    def killed_after_three(key: str) -> None:
        if len(written) == 3:
            raise SystemExit("killed")  # the process dies: nothing more is written
        written.append(key)
        topic.append(key, None)

    first._tombstone = killed_after_three
    with pytest.raises(SystemExit):
        first._job_cleanup()
    first.close()
    assert f"t-{OLD}" not in folders(store) and len(written) == 3
    # A new process (the metadata topic's next leader) replays the topic and finishes.
    restarted = MetadataTopic(RemoteLogState())
    for key, value in topic.records:
        restarted.append(key.decode(), value)
    assert sorted(restarted.state.topics()[OLD][1]) == sorted(set(keys) - set(written))
    second = sweeping_host(store, restarted, {NEW, OTHER})
    sweep(second, metadata_leader(tmp_path), lambda: OLD not in restarted.state.topics())
    assert sorted(k.decode() for k, v in restarted.records if v is None) == sorted(keys)
    assert NEW in restarted.state.topics() and OTHER in restarted.state.topics()


def test_objects_left_without_records_are_found_from_the_store(store, topic):
    """A deposed leader put objects after its topic was deleted (and its records are
    gone): the folder names the topic id."""
    store.put(f"{topic_folder(store.prefix, 'gone-too', GONE)}/0/x/y", b"z")
    store.put(f"{store.prefix}/not-a-topic/a", b"b")  # something else sharing the prefix
    found = find_deleted(store, topic.state.topics(), lambda: {NEW, OTHER})
    assert [(d.topic_id, len(d.keys)) for d in found] == [
        *sorted([(OLD, len(topic.state.topics()[OLD][1])), (GONE, 0)])]
    assert folder_topic_id(f"{store.prefix}/not-a-topic") is None


def test_the_controller_is_asked_only_after_the_state_and_the_store_were_read(store, topic):
    """A topic created meanwhile (its folder appears while the controller is asked, after
    the listing) is not the controller's yet in the answer, and is not taken for deleted."""
    late = uuid.uuid4().hex

    def controller() -> set[str]:
        store.put(f"{topic_folder(store.prefix, 'late', late)}/0/x/y", b"z")
        return {NEW, OTHER}

    found = find_deleted(store, topic.state.topics(), controller)
    assert [d.topic_id for d in found] == [OLD]
    assert find_deleted(store, topic.state.topics(), lambda: None) == []  # cannot tell
