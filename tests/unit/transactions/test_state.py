"""The transaction state machine: every legal step, and illegal ones refused unchanged."""

from __future__ import annotations

import dataclasses

import pytest

from raylog.errors import InvalidTxnStateError
from raylog.records.header import MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH
from raylog.transactions.state import (
    PERSISTED,
    TRANSITIONS,
    JointCommit,
    Member,
    MemberStatus,
    TransactionMetadata,
    TransactionState,
    epoch_exhausted,
)
from raylog.types import TopicPartition

S = TransactionState
A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


def initialised(epoch: int = 0) -> TransactionMetadata:
    return dataclasses.replace(TransactionMetadata.new("t", 7, 1000, 10).bump_epoch(1000, 10),
                               producer_epoch=epoch)


def in_state(state: TransactionState) -> TransactionMetadata:
    m = initialised(3)
    steps = {
        S.EMPTY: lambda: m,
        S.ONGOING: lambda: m.add([A0], [], 20),
        S.PREPARE_COMMIT: lambda: m.add([A0], [], 20).prepare_end(True, 30),
        S.PREPARE_ABORT: lambda: m.add([A0], [], 20).prepare_end(False, 30),
        S.COMPLETE_COMMIT: lambda: m.add([A0], [], 20).prepare_end(True, 30).complete(40),
        S.COMPLETE_ABORT: lambda: m.add([A0], [], 20).prepare_end(False, 30).complete(40),
        S.PREPARE_EPOCH_FENCE: lambda: m.add([A0], [], 20).fence(30),
        S.DEAD: lambda: m.dead(30),
    }
    return steps[state]()


def test_the_table_is_kafkas():
    assert TRANSITIONS[S.ONGOING] == {S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT,
                                      S.PREPARE_EPOCH_FENCE}
    assert TRANSITIONS[S.PREPARE_COMMIT] == {S.COMPLETE_COMMIT}
    assert TRANSITIONS[S.PREPARE_EPOCH_FENCE] == {S.PREPARE_ABORT}
    assert TRANSITIONS[S.DEAD] == set()
    assert set(S) - {S.PREPARE_EPOCH_FENCE, S.DEAD} == PERSISTED


def test_a_transaction_from_init_to_commit():
    m = TransactionMetadata.new("t", 7, 1000, 10)
    assert (m.producer_epoch, m.state) == (NO_PRODUCER_EPOCH, S.EMPTY)
    m = m.bump_epoch(2000, 11)
    assert (m.producer_epoch, m.timeout_ms, m.start_ms) == (0, 2000, -1)
    m = m.add([A0], [], 20)
    assert (m.state, m.partitions, m.start_ms) == (S.ONGOING, {A0}, 20)
    m = m.add([A1], ["g"], 25)  # more partitions: the start stays
    assert (m.partitions, m.groups, m.start_ms, m.update_ms) == ({A0, A1}, {"g"}, 20, 25)
    m = m.prepare_end(True, 30)
    assert m.state is S.PREPARE_COMMIT and m.partitions == {A0, A1}
    work = m.marker_work(coordinator_epoch=4)
    assert (work.producer_id, work.producer_epoch, work.commit, work.partitions,
            work.coordinator_epoch) == (7, 0, True, (A0, A1), 4)
    m = m.complete(40)
    assert (m.state, m.partitions, m.groups, m.start_ms) == (S.COMPLETE_COMMIT, set(), set(), 20)
    m = m.add([A1], [], 50)  # the next transaction begins
    assert (m.state, m.partitions, m.start_ms, m.producer_epoch) == (S.ONGOING, {A1}, 50, 0)


def test_a_fence_bumps_the_epoch_and_leads_to_an_abort_only():
    m = in_state(S.ONGOING)
    fenced = m.fence(30)
    assert (fenced.state, fenced.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 4)
    with pytest.raises(InvalidTxnStateError, match="PREPARE_EPOCH_FENCE to PREPARE_COMMIT"):
        fenced.prepare_end(True, 31)
    aborted = fenced.prepare_end(False, 31)
    assert (aborted.state, aborted.producer_epoch, aborted.partitions) == (
        S.PREPARE_ABORT, 4, {A0})
    assert aborted.complete(40).state is S.COMPLETE_ABORT


@pytest.mark.parametrize("state", list(S))
def test_every_illegal_step_is_refused_and_changes_nothing(state):
    m = in_state(state)
    before = dataclasses.asdict(m)
    steps = {
        S.EMPTY: lambda: m.bump_epoch(1000, 99),
        S.ONGOING: lambda: m.add([A1], [], 99),
        S.PREPARE_COMMIT: lambda: m.prepare_end(True, 99),
        S.PREPARE_ABORT: lambda: m.prepare_end(False, 99),
        S.COMPLETE_COMMIT: lambda: m.complete(99),
        S.COMPLETE_ABORT: lambda: m.complete(99),
        S.PREPARE_EPOCH_FENCE: lambda: m.fence(99),
        S.DEAD: lambda: m.dead(99),
    }
    for target, step in steps.items():
        if target in TRANSITIONS[state] or (
                target in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and state.preparing):
            step()  # legal: returns a new metadata
            continue
        with pytest.raises(InvalidTxnStateError, match=r"'t'"):
            step()
    assert dataclasses.asdict(m) == before


def test_markers_only_once_the_end_is_decided():
    with pytest.raises(InvalidTxnStateError, match="ONGOING: no markers"):
        in_state(S.ONGOING).marker_work(0)


def test_epochs_run_out_one_before_the_last():
    assert not epoch_exhausted(MAX_PRODUCER_EPOCH - 2)
    assert epoch_exhausted(MAX_PRODUCER_EPOCH - 1)
    m = initialised(MAX_PRODUCER_EPOCH - 2).bump_epoch(1000, 20)
    assert m.producer_epoch == MAX_PRODUCER_EPOCH - 1 and m.epoch_exhausted
    with pytest.raises(InvalidTxnStateError, match="last epoch"):
        m.bump_epoch(1000, 30)
    # The coordinator can still fence a producer at the last epoch a producer gets ...
    fenced = m.add([A0], [], 30).fence(40)
    assert fenced.producer_epoch == MAX_PRODUCER_EPOCH
    # ... and the next init takes a new producer id.
    done = fenced.prepare_end(False, 41).complete(42)
    rotated = done.rotate(8, 1000, 50)
    assert (rotated.producer_id, rotated.producer_epoch, rotated.state) == (8, 0, S.EMPTY)
    with pytest.raises(InvalidTxnStateError, match="must differ"):
        done.rotate(7, 1000, 50)


def test_an_epoch_at_the_maximum_is_not_bumped():
    m = dataclasses.replace(in_state(S.ONGOING), producer_epoch=MAX_PRODUCER_EPOCH)
    with pytest.raises(InvalidTxnStateError, match="cannot be bumped"):
        m.fence(50)


def test_describe_shows_the_age_of_an_open_transaction():
    d = in_state(S.ONGOING).describe(now_ms=520)
    assert d["state"] == "ONGOING" and d["age_ms"] == 500 and d["partitions"] == ["a:0"]
    assert in_state(S.COMPLETE_COMMIT).describe(520)["age_ms"] is None


@pytest.mark.parametrize("state, status", [
    (S.ONGOING, MemberStatus.PREPARE), (S.PREPARE_COMMIT, MemberStatus.MARKERS),
    (S.COMPLETE_COMMIT, MemberStatus.DONE),
])
def test_a_joint_commit_member_goes_prepare_markers_done(state, status):
    m = in_state(state)
    decision = JointCommit("w", (Member("t", 7, 3),), 10)
    assert decision.status(decision.members[0], m) is status
    assert decision.statuses({"t": m}) == {status}
    # Another producer or epoch of the id is not the member's transaction.
    other = JointCommit("w", (Member("t", 7, 2),), 10)
    assert other.status(other.members[0], m) is MemberStatus.LOST


@pytest.mark.parametrize("state", [S.EMPTY, S.PREPARE_ABORT, S.COMPLETE_ABORT,
                                   S.PREPARE_EPOCH_FENCE])
def test_a_joint_commit_member_aborted_or_gone_is_lost(state):
    decision = JointCommit("w", (Member("t", 7, 3), Member("u", 8, 0)), 10)
    m = in_state(state)
    if state is S.PREPARE_EPOCH_FENCE:
        m = dataclasses.replace(m, producer_epoch=3)
    assert decision.status(decision.members[0], m) is MemberStatus.LOST
    assert decision.statuses({"t": in_state(S.ONGOING)}) == {MemberStatus.PREPARE,
                                                             MemberStatus.LOST}
