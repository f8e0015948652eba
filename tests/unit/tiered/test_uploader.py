"""The leader's copy rules on a real log and a file:// store: in order, no gap, no
duplicate, manifest last; a failed copy is an orphan; retention remote and local."""

from __future__ import annotations

import itertools
import json

import pytest

from raylog.records import read_records
from raylog.replica.partition import Partition
from raylog.storage import PartitionLog
from raylog.storage.config import LogConfig
from raylog.tiered.layout import (
    COPY_FINISHED,
    COPY_STARTED,
    DELETE_FINISHED,
    DELETE_STARTED,
    MANIFEST,
    SEGMENT,
    RemoteSegment,
    digest,
)
from raylog.tiered.metadata import RemoteLogState
from raylog.tiered.store import ObjectStore
from raylog.tiered.uploader import (
    PartitionRef,
    Uploader,
    closed_segments,
    expired_remote,
    local_deletable_below,
    plan_copy,
)
from tests.unit.logutil import FakeClock, batch_of

REF = PartitionRef("t", "tid", 0)
TIERED = LogConfig(segment_bytes=1024, remote_storage_enable=True, retention_ms=None)


class Recorder:
    """The metadata topic and the store's puts, in the order they happened."""

    def __init__(self, store: ObjectStore) -> None:
        self.state = RemoteLogState()
        self.events: list[str] = []
        self.records: list[RemoteSegment] = []
        self.store = store
        put = store.put

        def recorded_put(path: str, data: bytes) -> None:
            self.events.append(path.rsplit("/", 1)[1])
            put(path, data)

        store.put = recorded_put

    def write(self, record: RemoteSegment) -> bool:
        self.events.append(record.state)
        self.records.append(record)
        return self.state.apply(record)


@pytest.fixture
def store(tmp_path) -> ObjectStore:
    return ObjectStore.from_uri(f"file://{tmp_path / 'store'}")


def filled_log(directory, batches: int = 30, config: LogConfig = TIERED,
               clock: FakeClock | None = None) -> PartitionLog:
    log = PartitionLog(directory, config, clock=clock or FakeClock(1000))
    for i in range(batches):
        log.append(batch_of([b"v%03d" % i + b"x" * 100] * 2, ts=1000 + i), leader_epoch=1)
    log.update_high_watermark(log.log_end_offset)
    return log


def copy_all(log: PartitionLog, recorder: Recorder, uploader: Uploader,
             epochs=((1, 0),)) -> int:
    copies = 0
    while (plan := plan_copy(recorder.state, REF, closed_segments(log), log.high_watermark,
                             log.log_start_offset, 1, 7, epochs)) is not None:
        uploader.copy(plan)
        copies += 1
    return copies


def test_closed_segments_are_copied_in_order_with_no_gap_manifest_last(tmp_path, store):
    log = filled_log(tmp_path / "log")
    recorder = Recorder(store)
    uploader = Uploader(store, recorder.write, FakeClock(5))
    assert copy_all(log, recorder, uploader) == len(log.segments) - 1
    readable = recorder.state.readable("tid", 0)
    assert [s.base_offset for s in readable] == [s.base_offset for s in log.segments[:-1]]
    assert all(a.end_offset + 1 == b.base_offset for a, b in itertools.pairwise(readable))
    assert readable[-1].end_offset + 1 == log.active_segment.base_offset
    # Each copy: recorded started, its objects, the manifest, recorded finished.
    first = recorder.events[:recorder.events.index(COPY_FINISHED) + 1]
    assert first[0] == COPY_STARTED and first[-2:] == [MANIFEST, COPY_FINISHED]
    assert SEGMENT in first
    segment = readable[0]
    data = store.get(f"{segment.folder(store.prefix)}/{SEGMENT}")
    assert digest(data) == segment.files[SEGMENT].sha256
    assert data == log.segments[0].read_all()
    manifest = store.get(f"{segment.folder(store.prefix)}/{MANIFEST}")
    assert RemoteSegment.from_json(manifest) == segment
    assert segment.leader_epochs == {1: 0}
    assert copy_all(log, recorder, uploader) == 0  # nothing twice


def test_only_segments_wholly_below_the_high_watermark_are_copied(tmp_path, store):
    log = filled_log(tmp_path / "log")
    log.update_high_watermark(log.segments[0].next_offset - 1)
    recorder = Recorder(store)
    assert copy_all(log, recorder, Uploader(store, recorder.write)) == 0
    log.update_high_watermark(log.segments[0].next_offset)
    assert copy_all(log, recorder, Uploader(store, recorder.write)) == 1


def test_a_new_leader_whose_segments_begin_lower_copies_from_the_next_offset(tmp_path, store):
    """The old leader copied its first segment; the new one rolled elsewhere (larger
    segments): its copy starts at the batch after the old copy's end, not at its segment's
    base, so the remote log has neither gap nor overlap."""
    old = filled_log(tmp_path / "old")
    recorder = Recorder(store)
    uploader = Uploader(store, recorder.write)
    uploader.copy(plan_copy(recorder.state, REF, closed_segments(old), old.high_watermark, 0,
                            1, 7, [(1, 0)]))
    end = recorder.state.end_offset("tid", 0)
    new = filled_log(tmp_path / "new", config=TIERED.replace(segment_bytes=4096))
    assert new.segments[0].base_offset == 0 < end < new.segments[0].next_offset - 1
    plan = plan_copy(recorder.state, REF, closed_segments(new), new.high_watermark, 0, 2, 8,
                     [(1, 0)])
    assert plan.from_offset == end + 1
    uploader.copy(plan)
    readable = recorder.state.readable("tid", 0)
    assert [(s.base_offset, s.leader_epoch) for s in readable] == [(0, 1), (end + 1, 2)]
    copied = store.get(f"{readable[1].folder(store.prefix)}/{SEGMENT}")
    assert read_records(copied)[0].offset == end + 1


def test_a_copy_the_store_failed_is_an_orphan_that_a_later_leader_deletes(tmp_path, store):
    log = filled_log(tmp_path / "log")
    recorder = Recorder(store)
    put = store.put
    calls = []

    def failing_put(path: str, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 3:
            raise OSError("store went away")
        put(path, data)

    store.put = failing_put
    plan = plan_copy(recorder.state, REF, closed_segments(log), log.high_watermark, 0, 1, 7,
                     [(1, 0)])
    with pytest.raises(OSError):
        Uploader(store, recorder.write).copy(plan)
    assert recorder.state.readable("tid", 0) == []
    orphans = recorder.state.orphans("tid", 0, 2)
    assert [o.state for o in orphans] == [COPY_STARTED]
    folder = orphans[0].folder(store.prefix)
    assert store.list_folders(folder.rsplit("/", 1)[0]) == [folder]
    store.put = put
    Uploader(store, recorder.write).delete(orphans[0], 2)
    assert recorder.events[-2:] == [DELETE_STARTED, DELETE_FINISHED]
    assert store.list_folders(folder.rsplit("/", 1)[0]) == []
    assert recorder.state.orphans("tid", 0, 2) == []
    # The next copy starts where the remote log ends: at the beginning still.
    plan = plan_copy(recorder.state, REF, closed_segments(log), log.high_watermark, 0, 2, 7,
                     [(1, 0)])
    assert plan.from_offset == 0


def test_a_deposed_leaders_copy_deleted_by_its_successor_leaves_no_objects(tmp_path, store):
    """The new leader deletes the old one's copy in flight (an orphan of an older epoch)
    while the old one still puts objects: the old one's COPY_FINISHED is ignored, and it
    deletes what it put after the deletion, which no record names any more."""
    log = filled_log(tmp_path / "log")
    recorder = Recorder(store)
    put = store.put
    successor = Uploader(store, recorder.write)

    def put_then_deposed(path: str, data: bytes) -> None:
        put(path, data)
        if path.endswith(SEGMENT):
            for orphan in recorder.state.orphans("tid", 0, 2):
                successor.delete(orphan, 2)

    store.put = put_then_deposed
    plan = plan_copy(recorder.state, REF, closed_segments(log), log.high_watermark, 0, 1, 7,
                     [(1, 0)])
    assert Uploader(store, recorder.write).copy(plan) is None
    assert recorder.events[-1] == COPY_FINISHED  # written, and ignored
    assert recorder.state.readable("tid", 0) == []
    assert recorder.state.orphans("tid", 0, 2) == []
    folder = recorder.records[0].folder(store.prefix)
    assert store.list_folders(folder.rsplit("/", 1)[0]) == []


def test_whole_log_retention_takes_the_oldest_remote_segments(tmp_path, store):
    log = filled_log(tmp_path / "log")
    recorder = Recorder(store)
    copy_all(log, recorder, Uploader(store, recorder.write))
    readable = recorder.state.readable("tid", 0)
    newest = readable[1].max_timestamp
    by_time = expired_remote(readable, TIERED.replace(retention_ms=10), newest + 10, 0)
    assert by_time == readable[:1]
    total = sum(s.size_bytes for s in readable)
    without_first = total - readable[0].size_bytes
    by_size = expired_remote(readable, TIERED.replace(retention_bytes=without_first), 0, 0)
    assert by_size == readable[:1]
    bound = TIERED.replace(retention_bytes=without_first + 1)
    assert expired_remote(readable, bound, 0, 0) == []
    # The local records not copied yet count toward the whole log's size.
    assert expired_remote(readable, bound, 0, 1) == readable[:1]


def test_a_tiered_log_deletes_locally_only_what_is_copied_by_local_retention(tmp_path, store):
    clock = FakeClock(1000)
    config = TIERED.replace(retention_ms=1_000_000, local_retention_ms=100)
    log = filled_log(tmp_path / "log", config=config, clock=clock)
    partition = Partition("t", 0, log, 7, clock=clock)
    clock.advance(10_000)
    segments = len(log.segments)
    assert partition.enforce_retention(None) == 0  # nothing copied: nothing goes
    recorder = Recorder(store)
    uploader = Uploader(store, recorder.write)
    plan = plan_copy(recorder.state, REF, closed_segments(log), log.high_watermark, 0, 1, 7,
                     [(1, 0)])
    uploader.copy(plan)
    assert partition.enforce_retention(local_deletable_below(recorder.state, REF)) == 1
    assert len(log.segments) == segments - 1
    assert log.log_start_offset == recorder.state.end_offset("tid", 0) + 1


def test_the_record_lists_every_object_with_its_checksum(tmp_path, store):
    log = filled_log(tmp_path / "log")
    recorder = Recorder(store)
    copy_all(log, recorder, Uploader(store, recorder.write))
    segment = recorder.state.readable("tid", 0)[0]
    for name, expected in segment.files.items():
        body = store.get(f"{segment.folder(store.prefix)}/{name}")
        assert (len(body), digest(body)) == (expected.size, expected.sha256), name
    assert json.loads(store.get(f"{segment.folder(store.prefix)}/{MANIFEST}"))["state"] == \
        COPY_FINISHED
