"""RemoteLogState: readable segments, fencing of deposed leaders, orphans, log start."""

from __future__ import annotations

import pytest

from raylog.tiered.layout import (
    COPY_FINISHED,
    DELETE_FINISHED,
    DELETE_STARTED,
    RemoteSegment,
)
from raylog.tiered.metadata import RemoteLogState


def attempt(segment_id: str, base: int, end: int, epoch: int = 0, size: int = 100
            ) -> RemoteSegment:
    return RemoteSegment(topic="t", topic_id="id", partition=0, segment_id=segment_id,
                         base_offset=base, end_offset=end, max_timestamp=end, size_bytes=size,
                         leader_epoch=epoch, broker_id=1)


def finished(state: RemoteLogState, segment_id: str, base: int, end: int, epoch: int = 0
             ) -> RemoteSegment:
    started = attempt(segment_id, base, end, epoch)
    state.apply(started)
    done = started.with_state(COPY_FINISHED, 1)
    state.apply(done)
    return done


def ids(segments: list[RemoteSegment]) -> list[str]:
    return [s.segment_id for s in segments]


def test_finished_copies_are_readable_in_offset_order_and_started_ones_are_not():
    state = RemoteLogState()
    finished(state, "b", 100, 199)
    finished(state, "a", 0, 99)
    state.apply(attempt("c", 200, 299))
    assert ids(state.readable("id", 0)) == ["a", "b"]
    assert (state.log_start("id", 0), state.end_offset("id", 0)) == (0, 199)
    assert state.size_bytes("id", 0) == 200
    assert ids(state.in_flight("id", 0)) == ["c"]
    assert state.segment_for("id", 0, 150).segment_id == "b"
    assert state.segment_for("id", 0, 250) is None
    assert state.readable("other", 0) == [] and state.log_start("id", 1) is None


def test_a_record_never_moves_an_attempt_back():
    state = RemoteLogState()
    done = finished(state, "a", 0, 99)
    state.apply(done.with_state(DELETE_STARTED, 2))
    assert not state.apply(done)  # a late copy of the finish
    assert state.readable("id", 0) == []


def test_an_older_leaders_unfinished_copy_is_an_orphan_of_a_newer_leader():
    state = RemoteLogState()
    finished(state, "a", 0, 99, epoch=1)
    state.apply(attempt("old", 100, 199, epoch=1))
    assert ids(state.orphans("id", 0, 1)) == []  # its own leader's copy in flight
    assert ids(state.orphans("id", 0, 2)) == ["old"]


@pytest.mark.parametrize("order", [["old", "new"], ["new", "old"]])
def test_of_overlapping_finished_copies_the_newer_epoch_wins_in_any_order(order):
    """A deposed leader (epoch 1) finishing a copy its successor (epoch 2) made too: the
    successor's is read and the other is an orphan, whichever finished first (a compacted
    metadata topic may replay them in either order)."""
    state = RemoteLogState()
    finished(state, "a", 0, 99, epoch=1)
    copies = {"old": attempt("old", 100, 199, epoch=1), "new": attempt("new", 100, 150, epoch=2)}
    for name in order:
        state.apply(copies[name])
        state.apply(copies[name].with_state(COPY_FINISHED, 1))
    assert ids(state.readable("id", 0)) == ["a", "new"]
    assert ids(state.orphans("id", 0, 2)) == ["old"]


def test_of_two_copies_of_one_epoch_the_first_to_finish_wins():
    state = RemoteLogState()
    first = attempt("first", 0, 99, epoch=1)
    second = attempt("second", 0, 120, epoch=1)
    state.apply(first)
    state.apply(second)
    state.apply(first.with_state(COPY_FINISHED, 1))
    state.apply(second.with_state(COPY_FINISHED, 2))
    assert ids(state.readable("id", 0)) == ["first"]
    assert ids(state.orphans("id", 0, 1)) == ["second"]


def test_deletions_move_the_log_start_and_unfinished_ones_are_orphans():
    state = RemoteLogState()
    a = finished(state, "a", 0, 99)
    finished(state, "b", 100, 199)
    state.apply(a.with_state(DELETE_STARTED, 5))
    assert state.log_start("id", 0) == 100
    assert ids(state.orphans("id", 0, 0)) == ["a"]
    state.apply(a.with_state(DELETE_FINISHED, 6))
    assert state.orphans("id", 0, 0) == []
    state.forget("id", 0)
    assert state.readable("id", 0) == []
