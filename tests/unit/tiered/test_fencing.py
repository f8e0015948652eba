"""Fencing deposed leaders' copies (layout.fence_record, RemoteLogState): a new leader's
fence comes before it reads the metadata, so a deposed leader's late COPY_FINISHED neither
makes readable a copy its successor is deleting as an orphan, nor, as the latest record of
its key once ``__raylog_remote_log`` is compacted, brings back a deleted copy (no Ray)."""

from __future__ import annotations

import pytest

from actors.tiered import TieredHost
from raylog.tiered.layout import (
    COPY_FINISHED,
    COPY_STARTED,
    DELETE_FINISHED,
    DELETE_STARTED,
    RemoteSegment,
    fence_record,
)
from raylog.tiered.metadata import RemoteLogState
from raylog.tiered.reader import RemoteReader
from raylog.tiered.store import ObjectStore
from raylog.tiered.uploader import Uploader, closed_segments, plan_copy
from tests.unit.tiered.test_metadata import attempt, ids
from tests.unit.tiered.test_uploader import REF, Recorder, filled_log


def replay(records: list[RemoteSegment]) -> RemoteLogState:
    state = RemoteLogState()
    state.apply_all(records)
    return state


def compacted(records: list[RemoteSegment]) -> list[RemoteSegment]:
    """What compaction keeps of the metadata topic: each key's latest record, in log order."""
    latest = {r.key(): i for i, r in enumerate(records)}
    return [r for i, r in enumerate(records) if latest[r.key()] == i]


def fence(epoch: int) -> RemoteSegment:
    return fence_record("t", "id", 0, epoch, 1, 0)


def test_a_copy_finished_after_a_newer_leaders_fence_finishes_nothing():
    state = RemoteLogState()
    before = attempt("before", 0, 99, epoch=1)
    late = attempt("late", 100, 199, epoch=1)
    state.apply_all([before, late, before.with_state(COPY_FINISHED, 1), fence(2)])
    assert ids(state.readable("id", 0)) == ["before"]  # finished before the fence: kept
    assert not state.apply(late.with_state(COPY_FINISHED, 2))
    assert ids(state.readable("id", 0)) == ["before"]
    assert ids(state.orphans("id", 0, 3)) == ["late"]  # still an older leader's copy
    # The new leader's own copies finish; a stale, older fence changes nothing.
    own = attempt("own", 100, 199, epoch=2)
    state.apply_all([own, fence(1), own.with_state(COPY_FINISHED, 3)])
    assert ids(state.readable("id", 0)) == ["before", "own"]
    assert state.fence_epoch("id", 0) == 2
    # A reader of before fences takes a fence for a deleted attempt: the same format.
    written = fence(2)
    assert written.state == DELETE_FINISHED
    assert RemoteSegment.from_json(written.to_json()) == written


def test_a_late_copy_finished_kept_by_compaction_brings_nothing_back():
    """The deposed leader's COPY_FINISHED lands after its successor deleted the attempt, so
    it is the latest record of its key; the successor's copy of the same offsets is then
    deleted by retention. Compaction keeps the late record: replayed, it must not make the
    attempt (its objects gone) readable, nor leave objects no record names."""
    old = attempt("old", 0, 99, epoch=1)
    new = attempt("new", 0, 99, epoch=2)
    records = [old, fence(2), old.with_state(DELETE_STARTED, 2),
               old.with_state(DELETE_FINISHED, 3), new, new.with_state(COPY_FINISHED, 4),
               old.with_state(COPY_FINISHED, 5),  # late
               new.with_state(DELETE_STARTED, 6), new.with_state(DELETE_FINISHED, 7),
               fence(3)]
    kept = compacted(records)
    assert [r.segment_id for r in kept] == \
        [records[1].segment_id, "old", "new", records[-1].segment_id]
    for state in (replay(records), replay(kept)):
        assert state.readable("id", 0) == []
        assert state.log_start("id", 0) is None
    # Compacted, the late record is all that is left of its attempt: an orphan to delete
    # again (deleting a folder that is gone is nothing), never a readable segment.
    assert ids(replay(kept).orphans("id", 0, 3)) == ["old"]


@pytest.mark.parametrize("late_at", range(2, 9))
def test_compaction_replays_to_the_same_readable_segments(late_at):
    """Wherever the deposed leader's COPY_FINISHED lands, every prefix of the topic and its
    compaction replay to the same readable segments."""
    old, new = attempt("old", 0, 99, epoch=1), attempt("new", 0, 49, epoch=2)
    nxt = attempt("next", 100, 149, epoch=2)
    records = [old, fence(2), old.with_state(DELETE_STARTED, 2),
               old.with_state(DELETE_FINISHED, 3), new, new.with_state(COPY_FINISHED, 4),
               nxt, nxt.with_state(COPY_FINISHED, 5)]
    records.insert(late_at, old.with_state(COPY_FINISHED, 9))
    for end in range(1, len(records) + 1):
        assert ids(replay(compacted(records[:end])).readable("id", 0)) == \
            ids(replay(records[:end]).readable("id", 0)), end
    assert ids(replay(records).readable("id", 0)) == ["new", "next"]


@pytest.fixture
def successor(tmp_path):
    """A deposed leader's copy (epoch 1) made whole in the store, its COPY_FINISHED held
    (in flight to the metadata topic), and the successor's TieredHost (epoch 2) over the
    same metadata."""
    store = ObjectStore.from_uri(f"file://{tmp_path / 'store'}")
    log = filled_log(tmp_path / "log")
    host = TieredHost(lambda: 8, lambda: None, lambda tp: None)
    recorder = Recorder(store)
    recorder.state = host.state
    held: list[RemoteSegment] = []

    def deposed_write(record: RemoteSegment) -> bool:
        if record.state == COPY_FINISHED:
            held.append(record)
            return True
        return recorder.write(record)

    plan = plan_copy(host.state, REF, closed_segments(log), log.high_watermark, 0, 1, 7,
                     [(1, 0)])
    Uploader(store, deposed_write).copy(plan)
    host.store, host.reader = store, RemoteReader(store)
    host._write = recorder.write
    host._catch_up = lambda: None  # the recorder's state is the metadata topic, applied
    yield host, recorder, held[0], log
    host.close()
    log.close()


def test_a_copy_finished_between_the_successors_read_and_its_delete_is_refused(successor):
    """The race of docs/tiered.md: the new leader reads the state (the deposed leader's
    copy is unfinished: an orphan), then the deposed leader's COPY_FINISHED lands, then the
    new leader deletes the orphan. Unfenced, the copy is readable in between (a replica may
    delete its local copy of those offsets) and deleted after: a gap."""
    host, recorder, late, log = successor
    landed: list[tuple[bool, list]] = []

    def write(record: RemoteSegment) -> bool:
        if record.state == DELETE_STARTED and record.segment_id == late.segment_id:
            landed.append((recorder.write(late), host.state.readable(REF.topic_id, 0)))
        return recorder.write(record)

    host._write = write
    host._job_prepare(("t", 0), REF, 2)
    assert landed == [(False, [])]
    assert [r.state for r in recorder.records[:2]] == [COPY_STARTED, DELETE_FINISHED]
    assert recorder.records[1].is_fence and recorder.records[1].leader_epoch == 2
    assert host.state.state_of(late) == DELETE_FINISHED
    assert host.store.list_folders(late.folder(host.store.prefix).rsplit("/", 1)[0]) == []
    # The successor copies those offsets itself, from where the remote log ends: none.
    plan = plan_copy(host.state, REF, closed_segments(log), log.high_watermark, 0, 2, 8,
                     [(1, 0), (2, 30)])
    assert plan is not None and plan.from_offset == 0


def test_a_copy_finished_before_the_successors_fence_stays_readable(successor):
    host, recorder, late, _ = successor
    assert recorder.write(late)  # landed before the new leader's fence
    host._job_prepare(("t", 0), REF, 2)
    assert ids(host.state.readable(REF.topic_id, 0)) == [late.segment_id]
    assert host.state.orphans(REF.topic_id, 0, 3) == []
    assert [r.state for r in recorder.records] == [COPY_STARTED, COPY_FINISHED, DELETE_FINISHED]


def test_a_fence_written_again_keeps_its_first_place_through_compaction():
    """A new leader whose preparation failed after its fence (and its orphans' deletion)
    writes its fence again: the first fence must stay where it was, or a late COPY_FINISHED
    between the two would lose the fence before it once compaction kept only the second."""
    old = attempt("old", 0, 99, epoch=1)
    first, again = fence(2), fence(2)
    assert first.key() != again.key()
    records = [old, first, old.with_state(DELETE_STARTED, 2),
               old.with_state(DELETE_FINISHED, 3), old.with_state(COPY_FINISHED, 4), again]
    kept = compacted(records)
    assert kept == [first, old.with_state(COPY_FINISHED, 4), again]
    assert replay(kept).readable("id", 0) == []
