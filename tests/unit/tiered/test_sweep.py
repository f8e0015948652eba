"""The leader's sweep of its partition's folder (raylog/tiered/sweep.py) on a file:// store:
folders of attempts the metadata recorded and does not keep go at once (a deposed leader's
late objects in a folder its successor deleted, a refused copy), folders no record names go
once older than the grace; readable segments and copies in progress stay (no Ray)."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidConfigError
from raylog.tiered.layout import (
    COPY_FINISHED,
    DELETE_FINISHED,
    SEGMENT,
    fence_record,
    partition_prefix,
    segment_folder,
)
from raylog.tiered.store import ObjectStore
from raylog.tiered.sweep import (
    Folder,
    SweepSettings,
    list_upload_folders,
    newest_object_ms,
    plan_sweep,
    sweep,
)
from raylog.tiered.uploader import Uploader, closed_segments, plan_copy
from tests.unit.tiered.test_uploader import REF, Recorder, filled_log

GRACE_MS = 1_200_000


@pytest.fixture
def store(tmp_path) -> ObjectStore:
    return ObjectStore.from_uri(f"file://{tmp_path / 'store'}")


def folder_names(store: ObjectStore) -> list[str]:
    return [f.path.rsplit("/", 1)[1] for f in list_upload_folders(store, REF)]


def name(segment) -> str:
    return f"{segment.base_offset:020d}-{segment.segment_id}"


def sweep_now(store: ObjectStore, recorder: Recorder, epoch: int,
              since_ms: int | None = None) -> list[str]:
    """A sweep by the leader at ``epoch``; ``since_ms`` defaults to long after every put."""
    folders = list_upload_folders(store, REF)
    newest = max((newest_object_ms(store, f) or 0 for f in folders), default=0)
    plan = plan_sweep(recorder.state, REF, epoch, folders)
    deleted = sweep(store, plan, newest + 10 * GRACE_MS if since_ms is None else since_ms,
                    GRACE_MS)
    return [path.rsplit("/", 1)[1] for path in deleted]


def test_a_deposed_leaders_late_objects_in_a_deleted_folder_are_swept(tmp_path, store):
    """Leader 1 is cut off mid-copy; leader 2 fences, deletes the orphan (DELETE_FINISHED)
    and copies on; leader 1 then puts one more object into the deleted folder and is killed.
    No record leads to that folder again but the sweep; readable segments stay."""
    log = filled_log(tmp_path / "log")
    recorder = Recorder(store)
    segments = closed_segments(log)
    killed = []

    def deposed_put(path: str, data: bytes) -> None:
        killed.append(path)
        raise OSError("leader 1 cut off")

    deposed = Uploader(store, recorder.write)
    store_put, store.put = store.put, deposed_put
    with pytest.raises(OSError):
        deposed.copy(plan_copy(recorder.state, REF, segments, log.high_watermark, 0, 1, 7,
                               [(1, 0)]))
    store.put = store_put
    orphan = recorder.state.in_flight(REF.topic_id, REF.partition)[0]

    successor = Uploader(store, recorder.write)
    successor.fence(REF, 2, 8)
    for segment in recorder.state.orphans(REF.topic_id, REF.partition, 3):
        successor.delete(segment, 2)
    assert recorder.state.attempt(REF.topic_id, REF.partition,
                                  orphan.segment_id).state == DELETE_FINISHED
    for _ in range(2):
        successor.copy(plan_copy(recorder.state, REF, segments, log.high_watermark, 0, 2, 8,
                                 [(1, 0), (2, 0)]))
    readable = recorder.state.readable(REF.topic_id, REF.partition)
    store.put(killed[0], b"late")  # leader 1's put lands after all, then it dies

    assert folder_names(store) == sorted([name(orphan)] + [name(s) for s in readable])
    assert sweep_now(store, recorder, 2) == [name(orphan)]
    assert folder_names(store) == sorted(name(s) for s in readable)
    for segment in readable:  # untouched, whole
        assert store.size(f"{segment.folder(store.prefix)}/{SEGMENT}") == \
            segment.files[SEGMENT].size
    assert sweep_now(store, recorder, 2) == []


def test_readable_segments_and_the_leaders_copy_in_progress_stay_however_old(tmp_path, store):
    log = filled_log(tmp_path / "log")
    recorder = Recorder(store)
    segments = closed_segments(log)
    uploader = Uploader(store, recorder.write)
    uploader.copy(plan_copy(recorder.state, REF, segments, log.high_watermark, 0, 2, 7,
                            [(2, 0)]))
    readable = recorder.state.readable(REF.topic_id, REF.partition)
    held = []  # the next copy's COPY_FINISHED not written yet: in progress
    Uploader(store, lambda r: held.append(r) or True if r.state == COPY_FINISHED
             else recorder.write(r)).copy(plan_copy(recorder.state, REF, segments,
                                                    log.high_watermark, 0, 2, 7, [(2, 0)]))
    in_progress = recorder.state.in_flight(REF.topic_id, REF.partition)
    assert len(readable) == 1 and len(in_progress) == 1
    before = folder_names(store)
    assert len(before) == 2
    assert sweep_now(store, recorder, 2) == []  # long after every put
    assert folder_names(store) == before
    # A leader of a later epoch finds the same copy left by an older leader: it goes.
    assert sweep_now(store, recorder, 3) == [name(in_progress[0])]
    assert folder_names(store) == [name(readable[0])]


def test_a_copy_refused_by_a_newer_fence_is_swept(tmp_path, store):
    log = filled_log(tmp_path / "log")
    recorder = Recorder(store)
    held = []
    Uploader(store, lambda r: held.append(r) or True if r.state == COPY_FINISHED
             else recorder.write(r)).copy(plan_copy(recorder.state, REF, closed_segments(log),
                                                    log.high_watermark, 0, 1, 7, [(1, 0)]))
    recorder.write(fence_record(REF.topic, REF.topic_id, REF.partition, 2, 8, 0))
    assert not recorder.write(held[0])  # refused
    assert sweep_now(store, recorder, 2) == [name(held[0])]
    assert folder_names(store) == []


def test_a_folder_no_record_names_is_kept_while_young_and_swept_once_old(store):
    recorder = Recorder(store)
    path = segment_folder(store.prefix, REF.topic, REF.topic_id, REF.partition, 0, "nobody")
    store.put(f"{path}/{SEGMENT}", b"x")
    store.put(f"{partition_prefix(store.prefix, REF.topic, REF.topic_id, REF.partition)}"
              "/not-an-upload/x", b"x")  # not an upload folder's name: never touched
    (found,) = list_upload_folders(store, REF)
    put_ms = newest_object_ms(store, found)
    assert put_ms is not None
    assert sweep_now(store, recorder, 1, since_ms=put_ms + GRACE_MS) == []
    assert folder_names(store) == [f"{0:020d}-nobody"]
    assert sweep_now(store, recorder, 1, since_ms=put_ms + GRACE_MS + 1) == \
        [f"{0:020d}-nobody"]
    assert folder_names(store) == []
    assert store.size(f"{partition_prefix(store.prefix, REF.topic, REF.topic_id, 0)}"
                      "/not-an-upload/x") == 1


def test_a_folder_without_a_time_is_aged_by_its_newest_object(store):
    """S3 lists folders (common prefixes) without a time: the folder's objects tell."""
    path = segment_folder(store.prefix, REF.topic, REF.topic_id, REF.partition, 0, "s3")
    store.put(f"{path}/{SEGMENT}", b"x")
    objects = store.filesystem.get_file_info(f"{path}/{SEGMENT}")
    assert newest_object_ms(store, Folder(path, "s3", None)) == objects.mtime_ns // 1_000_000
    assert newest_object_ms(store, Folder(f"{path}-gone", "s3", None)) is None


def test_a_deposed_leader_sweeps_nothing(store):
    recorder = Recorder(store)
    path = segment_folder(store.prefix, REF.topic, REF.topic_id, REF.partition, 0, "newer")
    store.put(f"{path}/{SEGMENT}", b"x")
    recorder.write(fence_record(REF.topic, REF.topic_id, REF.partition, 3, 9, 0))
    assert sweep_now(store, recorder, 2) == []
    assert folder_names(store) == [f"{0:020d}-newer"]


def test_an_empty_partition_folder_sweeps_nothing(store):
    assert list_upload_folders(store, REF) == []
    assert sweep_now(store, Recorder(store), 1) == []


def test_settings_from_the_environment():
    assert SweepSettings.from_environ({}) == SweepSettings(600.0, None)
    assert SweepSettings.from_environ({}).grace == 1200.0
    lowered = SweepSettings.from_environ({"RAYLOG_TIERED_SWEEP_S": "2"})
    assert (lowered.interval_s, lowered.grace) == (2.0, 4.0)
    assert SweepSettings.from_environ({"RAYLOG_TIERED_SWEEP_S": "2",
                                       "RAYLOG_TIERED_SWEEP_GRACE_S": "30"}).grace == 30.0
    with pytest.raises(InvalidConfigError, match="RAYLOG_TIERED_SWEEP_S"):
        SweepSettings.from_environ({"RAYLOG_TIERED_SWEEP_S": "often"})
    with pytest.raises(InvalidConfigError):
        SweepSettings.from_environ({"RAYLOG_TIERED_SWEEP_GRACE_S": "0"})
