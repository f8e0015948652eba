"""Joint commits: several transactional ids' transactions committed all or none by one
decision record, over a fake __transaction_state and an injected clock (the helpers of
test_coordinator.py): refusals that change nothing, the decision as the commit point across
a crash, members held against timeouts and aborts, a write in doubt, and compaction."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raylog.errors import (
    ConcurrentTransactionsError,
    InvalidArgumentError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
    RequestTimeoutError,
)
from raylog.transactions.coordinator import TransactionCoordinator
from raylog.transactions.log import (
    Record,
    decision_key,
    encode_decision,
    load,
    partition_for,
)
from raylog.transactions.state import JointCommit, Member, TransactionState
from raylog.types import TopicPartition
from tests.unit.transactions.test_coordinator import Clock, FakeLog, coordinator, run

S = TransactionState
TIMEOUT = 60_000
IDS = ("w-0", "w-1", "w-2")
DECISION_KEY = decision_key("w")


def begun(c: TransactionCoordinator, ids: tuple[str, ...] = IDS) -> list[Member]:
    """Each id initialised, with a transaction ongoing over a partition of its own."""
    members = []
    for i, tid in enumerate(ids):
        pid = run(c.init_producer_id(tid, TIMEOUT))
        run(c.add_partitions(tid, *pid, [TopicPartition("out", i)]))
        members.append(Member(tid, *pid))
    return members


def decisions_in(log: FakeLog) -> list[str]:
    return ["tombstone" if value is None else "decision"
            for _, (key, value) in log.written if key == DECISION_KEY]


class CrashAfterDecision(FakeLog):
    """__transaction_state whose writes all fail once a decision is written: the
    coordinator's host died between the commit point and everything after it."""

    async def __call__(self, partition: int, record: Record) -> None:
        await super().__call__(partition, record)
        if record[0] == DECISION_KEY and record[1] is not None:
            self.fail = RequestTimeoutError("the controller died")


def replayed(log: FakeLog, clock: Clock, epoch: int = 2) -> TransactionCoordinator:
    loaded = load([r for _, r in log.written])
    return coordinator(log, clock, epoch=epoch, transactions=loaded.transactions,
                       decisions=loaded.decisions)


def complete(c: TransactionCoordinator, works: list[Any]) -> None:
    for work in works:
        run(c.markers_done(work))


def test_a_joint_commit_writes_one_decision_then_commits_every_member():
    log = FakeLog()
    c = coordinator(log)
    members = begun(c)
    before = len(log.written)
    works = run(c.commit_jointly("w", members))
    # The decision is the first record written, in the write id's partition; then each
    # member's PREPARE_COMMIT.
    first, *rest = log.written[before:]
    assert first == (partition_for("w"), first[1]) and first[1][0] == DECISION_KEY
    assert [log.states(tid)[-1] for tid in IDS] == ["PREPARE_COMMIT"] * 3 and len(rest) == 3
    assert sorted((w.transactional_id, w.commit) for w in works) == [(t, True) for t in IDS]
    assert c.describe("w-1")["joint_commit"] == "w"
    complete(c, works)
    assert run(c.finish_decisions()) == []
    assert decisions_in(log) == ["decision", "tombstone"]
    assert c.held == {} and c.decisions == {}
    assert {tid: m.state for tid, m in log.replay().items()} == {
        tid: S.COMPLETE_COMMIT for tid in IDS}
    # A retry once done is answered as committed, without a write.
    before = len(log.written)
    assert run(c.commit_jointly("w", members)) == [] and len(log.written) == before


def fence(c: TransactionCoordinator, member: Member) -> None:
    """A new incarnation of the member's id: its transaction is fenced and aborting."""
    with pytest.raises(ConcurrentTransactionsError):
        run(c.init_producer_id(member.transactional_id, TIMEOUT))


@pytest.mark.parametrize("spoil, error", [
    (lambda c, m: fence(c, m), ProducerFencedError),
    (lambda c, m: None, ProducerFencedError),  # the stale epoch is given below
    (lambda c, m: None, InvalidProducerIdMappingError),
    (lambda c, m: complete(c, [run(c.end_transaction(*m, commit=False))]), InvalidTxnStateError),
], ids=["fenced-and-aborting", "stale-epoch", "other-producer", "not-ongoing"])
def test_one_member_that_cannot_commit_refuses_the_whole_and_nothing_changes(spoil, error):
    log = FakeLog()
    c = coordinator(log)
    members = begun(c)
    spoil(c, members[1])
    if error is ProducerFencedError and c.transactions["w-1"].state is S.ONGOING:
        members[1] = members[1]._replace(producer_epoch=members[1].producer_epoch + 1)
    elif error is InvalidProducerIdMappingError:
        members[1] = members[1]._replace(producer_id=999)
    before, states = list(log.written), dict(c.transactions)
    with pytest.raises(error):
        run(c.commit_jointly("w", members))
    assert log.written == before and c.transactions == states
    assert c.held == {} and c.decisions == {} and c.in_doubt == {}
    for m in (members[0], members[2]):  # the others are still their producers' to end
        assert c.transactions[m.transactional_id].state is S.ONGOING
        assert run(c.end_transaction(*m, commit=False)).commit is False


@pytest.mark.parametrize("members, message", [
    ([], "at least one"),
    ([("a", 1, 0), ("a", 1, 0)], "twice"),
    ([("a", "1", 0)], "not a"),
    ([("", 1, 0)], "transactional_id"),
])
def test_bad_members_are_refused(members, message):
    log = FakeLog()
    c = coordinator(log)
    with pytest.raises(InvalidArgumentError, match=message):
        run(c.commit_jointly("w", members))
    with pytest.raises(InvalidArgumentError, match="write_id"):
        run(c.commit_jointly("", [("a", 1, 0)]))
    assert log.written == []


def test_a_crash_after_the_decision_commits_every_member_on_replay():
    log, clock = CrashAfterDecision(), Clock()
    c = coordinator(log, clock)
    members = begun(c)
    # The decision is durable: the call answers the commit, whatever failed after it.
    assert run(c.commit_jointly("w", members)) == []
    assert [log.states(tid)[-1] for tid in IDS] == ["ONGOING"] * 3
    # The host dies; its successor replays the log, past every member's timeout.
    log.fail = None
    clock.now += TIMEOUT + 1
    d = replayed(log, clock)
    assert set(d.held) == set(IDS)
    assert run(d.expire()) == []  # held: never aborted at the timeout
    works = run(d.finish_decisions())
    assert sorted(w.transactional_id for w in works) == list(IDS)
    assert all(w.commit and w.coordinator_epoch == 2 for w in works)
    complete(d, works)
    run(d.finish_decisions())
    assert {tid: m.state for tid, m in log.replay().items()} == {
        tid: S.COMPLETE_COMMIT for tid in IDS}
    assert decisions_in(log) == ["decision", "tombstone"] and d.held == {}


def test_a_crash_after_some_members_prepared_commits_the_rest_on_replay():
    log, clock = FakeLog(), Clock()
    c = coordinator(log, clock)
    members = begun(c)
    written = len(log.written)
    run(c.commit_jointly("w", members))
    # The log as it was when the host died after the decision and one PREPARE_COMMIT.
    log.written = log.written[:written + 2]
    d = replayed(log, clock)
    assert [d.transactions[t].state for t in IDS] == [S.PREPARE_COMMIT, S.ONGOING, S.ONGOING]
    assert [w.transactional_id for w in d.pending_markers()] == ["w-0"]
    works = run(d.finish_decisions())
    assert sorted(w.transactional_id for w in works) == list(IDS)


def test_decided_members_are_held_against_timeouts_aborts_and_new_producers():
    log, clock = CrashAfterDecision(), Clock()
    c = coordinator(log, clock)
    members = begun(c)
    run(c.commit_jointly("w", members))  # decided; every PREPARE_COMMIT failed
    log.fail = None
    clock.now += TIMEOUT + 1
    assert run(c.expire()) == []
    with pytest.raises(InvalidTxnStateError, match="its commit is decided"):
        run(c.abort("w-0"))
    for step in (c.init_producer_id("w-0", TIMEOUT), c.end_transaction(*members[0], False),
                 c.add_partitions(*members[0], [TopicPartition("x", 0)]),
                 c.commit_jointly("other", members[:1])):
        with pytest.raises(ConcurrentTransactionsError, match="joint commit 'w'"):
            run(step)
    assert [c.transactions[t].state for t in IDS] == [S.ONGOING] * 3
    # A retry of the same joint commit, or the coordinator's next round, goes on.
    works = run(c.commit_jointly("w", members))
    assert sorted(w.transactional_id for w in works) == list(IDS)
    complete(c, works)
    run(c.finish_decisions())
    assert c.held == {}
    # Free again: the next transaction of an id is its producer's.
    run(c.add_partitions(*members[0], [TopicPartition("x", 0)]))


def test_steps_wait_while_the_decision_is_being_written():
    log = FakeLog()
    c = coordinator(log)
    members = begun(c)

    async def scenario() -> None:
        log.gate = asyncio.Event()
        deciding = asyncio.create_task(c.commit_jointly("w", members))
        await asyncio.sleep(0)
        assert c.describe("w-0")["writing"] == "PREPARE_COMMIT"
        for step in (c.init_producer_id("w-0", TIMEOUT), c.abort("w-1"),
                     c.commit_jointly("w", members)):
            with pytest.raises(ConcurrentTransactionsError):
                await step
        c.clock.now += TIMEOUT + 1
        assert await c.expire() == []
        log.gate.set()
        assert len(await deciding) == 3

    run(scenario())


@pytest.mark.parametrize("landed", [False, True])
def test_a_decision_in_doubt_holds_its_members_until_retracted(landed):
    log, clock = FakeLog(), Clock()
    c = coordinator(log, clock)
    members = begun(c)

    async def write(partition: int, record: Record) -> None:
        if landed:  # the record reached the log; its answer did not
            log.written.append((partition, record))
        raise RequestTimeoutError("no answer")

    c._write = write
    with pytest.raises(RequestTimeoutError):
        run(c.commit_jointly("w", members))
    assert set(c.held) == set(IDS) and set(c.in_doubt) == {"w"}
    clock.now += TIMEOUT + 1
    assert run(c.expire()) == []  # in doubt: maybe decided
    with pytest.raises(ConcurrentTransactionsError):
        run(c.abort("w-0"))
    # A coordinator replaying the log now commits them iff the record landed.
    d = replayed(log, clock)
    assert set(d.decisions) == ({"w"} if landed else set())
    # This one retracts it: a tombstone after it, then the members are free (and, past
    # their timeout, aborted).
    c._write = log
    assert run(c.finish_decisions()) == []
    assert decisions_in(log) == (["decision"] if landed else []) + ["tombstone"]
    assert c.held == {} and c.in_doubt == {}
    assert sorted(w.transactional_id for w in run(c.expire())) == list(IDS)
    assert replayed(log, clock).decisions == {}


def test_a_retry_of_a_decision_in_doubt_decides_it():
    log = FakeLog()
    c = coordinator(log)
    members = begun(c)
    log.fail = RequestTimeoutError("no answer")
    with pytest.raises(RequestTimeoutError):
        run(c.commit_jointly("w", members))
    log.fail = None
    with pytest.raises(InvalidArgumentError, match="was asked for members"):
        run(c.commit_jointly("w", members[:2]))
    assert len(run(c.commit_jointly("w", members))) == 3
    assert c.in_doubt == {} and set(c.decisions) == {"w"}


def test_a_decision_landing_after_a_member_moved_on_commits_none():
    """A decision record that reached the log behind a coordinator that never knew of it
    (an append of a dead host landing late) after it aborted a member governs nothing."""
    log, clock = FakeLog(), Clock()
    c = coordinator(log, clock)
    members = begun(c)
    run(c.abort("w-0"))  # aborted at epoch + 1 by a coordinator not holding it
    log.written.append((partition_for("w"), encode_decision(JointCommit("w", tuple(members),
                                                                        clock.now))))
    d = replayed(log, clock)
    assert set(d.held) == set(IDS)
    with pytest.raises(InvalidTxnStateError, match="commits nothing"):
        run(d.commit_jointly("w", members))
    assert run(d.finish_decisions()) == []  # retracted: no member prepared to commit
    assert decisions_in(log) == ["decision", "tombstone"] and d.held == {}
    assert [d.transactions[t].state for t in IDS[1:]] == [S.ONGOING, S.ONGOING]
    clock.now += TIMEOUT + 1
    assert sorted(w.transactional_id for w in run(d.expire())) == list(IDS[1:])


def test_without_a_decision_members_abort_at_their_timeout():
    log, clock = FakeLog(), Clock()
    c = coordinator(log, clock)
    begun(c)
    clock.now += TIMEOUT + 1
    assert sorted(w.transactional_id for w in run(c.expire())) == list(IDS)
    assert all(not w.commit for w in c.pending_markers())


def compact(records: list[Record], drop_tombstones: bool) -> list[Record]:
    """The cleaner's rule: the last record of each key, in log order; tombstones too
    unless their delete retention passed."""
    last = {key: i for i, (key, _) in enumerate(records)}
    return [r for i, r in enumerate(records) if last[r[0]] == i
            and not (drop_tombstones and r[1] is None)]


@pytest.mark.parametrize("drop_tombstones", [False, True])
def test_compaction_never_loses_a_decision_before_every_member_committed(drop_tombstones):
    log, clock = FakeLog(), Clock()
    c = coordinator(log, clock)
    members = begun(c)
    works = run(c.commit_jointly("w", members))
    complete(c, works)
    run(c.finish_decisions())
    # Compacted after any record of the lifecycle (one partition's order is the log's
    # order; the fake log keeps them all in one list), the replay is the uncompacted one's:
    # the decision is there exactly while a member has not committed.
    records = [r for _, r in log.written]
    for end in range(len(records) + 1):
        prefix = records[:end]
        whole, compacted = load(prefix), load(compact(prefix, drop_tombstones))
        assert compacted == whole
        decided = any(k == DECISION_KEY and v is not None for k, v in prefix)
        committed = all(t in whole.transactions and
                        whole.transactions[t].state is S.COMPLETE_COMMIT for t in IDS)
        assert ("w" in compacted.decisions) == (decided and (DECISION_KEY, None) not in prefix)
        if decided and not committed:
            assert "w" in compacted.decisions
