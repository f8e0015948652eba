"""The marker writer over fake partition leaders (no Ray): every partition gets its marker
through leader changes and timeouts, each once it is taken, then the transaction completes;
a newer coordinator or a deleted topic end the work as they should."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

from raylog.errors import (
    ConcurrentTransactionsError,
    InternalError,
    LeaderNotAvailableError,
    NotLeaderError,
    ProducerFencedError,
    RequestTimeoutError,
    TransactionCoordinatorFencedError,
    UnknownTopicError,
)
from raylog.transactions.markers import MarkerWriter
from raylog.transactions.state import MarkerWork, TransactionState
from raylog.types import TopicPartition
from tests.unit.transactions.test_coordinator import FakeLog, coordinator, run

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
FAST = (0.001, 0.01)


def work(*partitions: TopicPartition, commit: bool = True, tid: str = "t") -> MarkerWork:
    return MarkerWork(tid, 100, 0, commit, tuple(partitions), 7)


class Leaders:
    """Every partition's leader: fails a partition's first tries with the errors queued for
    it, then takes the marker (and keeps every one it took)."""

    def __init__(self) -> None:
        self.failures: dict[TopicPartition, list[BaseException]] = collections.defaultdict(list)
        self.tries: collections.Counter = collections.Counter()
        self.taken: list[tuple[TopicPartition, MarkerWork]] = []

    async def __call__(self, tp: TopicPartition, work: MarkerWork) -> None:
        await asyncio.sleep(0)
        self.tries[tp] += 1
        if self.failures[tp]:
            raise self.failures[tp].pop(0)
        self.taken.append((tp, work))


class Done:
    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls: list[MarkerWork] = []

    async def __call__(self, work: MarkerWork) -> Any:
        self.calls.append(work)
        if self.failures:
            raise self.failures.pop(0)


async def finished(writer: MarkerWriter, item: MarkerWork) -> None:
    await asyncio.wait_for(writer.submit(item), 5)


def test_every_partition_gets_its_marker_through_leader_changes_then_it_completes():
    leaders, done = Leaders(), Done()
    leaders.failures[A1] = [NotLeaderError("moved"), LeaderNotAvailableError("electing"),
                            RequestTimeoutError("paused broker")]
    item = work(A0, A1, B0)

    async def scenario() -> None:
        writer = MarkerWriter(leaders, done, backoff_s=FAST)
        await finished(writer, item)
        assert writer.idle() and writer.written == 3 and writer.completed == 1

    run(scenario())
    assert sorted(tp for tp, _ in leaders.taken) == [A0, A1, B0]  # each taken once
    assert leaders.tries == {A0: 1, A1: 4, B0: 1}  # only the failing one was tried again
    assert done.calls == [item]  # completed once, after every marker


def test_completion_waits_for_the_last_marker():
    leaders, done = Leaders(), Done()
    leaders.failures[B0] = [NotLeaderError("moved")] * 5

    async def scenario() -> None:
        writer = MarkerWriter(leaders, done, backoff_s=(0.02, 0.02))
        task = writer.submit(work(A0, B0))
        while leaders.tries[B0] < 3:
            await asyncio.sleep(0.005)
        assert done.calls == []  # A0 has its marker, B0 not yet: not complete
        await asyncio.wait_for(task, 5)

    run(scenario())
    assert len(done.calls) == 1


def test_unexpected_refusals_are_retried_too_the_outcome_is_decided():
    leaders, done = Leaders(), Done()
    leaders.failures[A0] = [InternalError("a bug somewhere"), InternalError("again")]

    async def scenario() -> None:
        await finished(MarkerWriter(leaders, done, backoff_s=FAST), work(A0))

    run(scenario())
    assert leaders.tries[A0] == 3 and len(done.calls) == 1


def test_the_same_work_submitted_while_it_runs_is_not_started_twice():
    leaders, done = Leaders(), Done()
    leaders.failures[A0] = [NotLeaderError("moved")] * 3

    async def scenario() -> None:
        writer = MarkerWriter(leaders, done, backoff_s=FAST)
        first = writer.submit(work(A0, B0))
        assert writer.submit(work(A0, B0)) is first
        await asyncio.wait_for(first, 5)
        await finished(writer, work(A0, B0))  # once ended, it may run again (a retry)

    run(scenario())
    assert len(done.calls) == 2 and leaders.tries[B0] == 2


def test_completion_is_retried_while_retriable_and_given_up_when_the_state_moved_on():
    leaders = Leaders()
    done = Done(ConcurrentTransactionsError("busy"), RequestTimeoutError("slow"))

    async def scenario() -> None:
        writer = MarkerWriter(leaders, done, backoff_s=FAST)
        await finished(writer, work(A0))
        assert writer.completed == 1
        gone = Done(TransactionCoordinatorFencedError("replaced"))
        other = MarkerWriter(leaders, gone, backoff_s=FAST)
        await finished(other, work(A0))
        assert other.completed == 0 and len(gone.calls) == 1  # not tried forever

    run(scenario())
    assert len(done.calls) == 3


def test_a_newer_coordinator_at_a_partition_ends_the_work_without_completing_it():
    leaders, done = Leaders(), Done()
    leaders.failures[A1] = [TransactionCoordinatorFencedError("epoch 9 > 7")]
    leaders.failures[B0] = [NotLeaderError("moved")] * 1000  # would go on: cancelled

    async def scenario() -> None:
        writer = MarkerWriter(leaders, done, backoff_s=FAST)
        await finished(writer, work(A0, A1, B0))
        assert writer.idle()
        assert writer.submit(work(A0, A1, B0)) is None  # handed over again: not taken

    run(scenario())
    assert done.calls == []


@pytest.mark.parametrize("error", [UnknownTopicError("unknown topic 'b'"),
                                   ProducerFencedError("epoch 3 > 0 at b-0")],
                         ids=["deleted topic", "newer producer epoch"])
def test_a_partition_past_the_transaction_counts_as_marked(error):
    leaders, done = Leaders(), Done()
    leaders.failures[B0] = [error]

    async def scenario() -> None:
        await finished(MarkerWriter(leaders, done, backoff_s=FAST), work(A0, B0))

    run(scenario())
    assert [tp for tp, _ in leaders.taken] == [A0] and len(done.calls) == 1
    assert leaders.tries[B0] == 1


def test_close_stops_the_work_in_progress():
    leaders, done = Leaders(), Done()
    leaders.failures[A0] = [NotLeaderError("moved")] * 10_000

    async def scenario() -> None:
        writer = MarkerWriter(leaders, done, backoff_s=FAST)
        task = writer.submit(work(A0))
        while leaders.tries[A0] < 2:  # being retried (run's deadline bounds the wait)
            await asyncio.sleep(0.005)
        writer.close()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert writer.idle()

    run(scenario())
    assert done.calls == []


def test_with_the_coordinator_a_commit_completes_once_its_markers_are_written():
    """The real coordinator's end hands the work over; the writer completes it."""
    leaders = Leaders()
    leaders.failures[A1] = [NotLeaderError("moved")]

    async def scenario() -> None:
        c = coordinator(FakeLog(), epoch=7)
        pid, epoch = await c.init_producer_id("t", 60_000)
        await c.add_partitions("t", pid, epoch, [A0, A1])
        item = await c.end_transaction("t", pid, epoch, True)
        assert c.transactions["t"].state is TransactionState.PREPARE_COMMIT
        await finished(MarkerWriter(leaders, c.markers_done, backoff_s=FAST), item)
        assert c.transactions["t"].state is TransactionState.COMPLETE_COMMIT

    run(scenario())
    assert sorted(tp for tp, _ in leaders.taken) == [A0, A1]
    assert all(w.commit and w.coordinator_epoch == 7 for _, w in leaders.taken)
