"""The transaction coordinator's operations over a fake __transaction_state, with an
injected clock: Kafka's semantics, and every refusal."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Coroutine
from typing import Any

import pytest

from raylog.errors import (
    ConcurrentTransactionsError,
    InvalidArgumentError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    RequestTimeoutError,
    TransactionalIdNotFoundError,
    TransactionCoordinatorFencedError,
)
from raylog.groups.coordinator import GroupCoordinator
from raylog.records.header import MAX_PRODUCER_EPOCH
from raylog.transactions.coordinator import ProducerIdAndEpoch, TransactionCoordinator
from raylog.transactions.log import Record, decode, load, partition_for
from raylog.transactions.state import TransactionMetadata, TransactionState
from raylog.types import TopicPartition

S = TransactionState
A0, B1 = TopicPartition("a", 0), TopicPartition("b", 1)
TIMEOUT = 60_000


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 10))


class FakeLog:
    """__transaction_state: keeps what is written; ``fail`` makes writes raise, ``gate``
    holds them until set."""

    def __init__(self) -> None:
        self.written: list[tuple[int, Record]] = []
        self.fail: BaseException | None = None
        self.gate: asyncio.Event | None = None

    async def __call__(self, partition: int, record: Record) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.written.append((partition, record))

    def states(self, tid: str = "t") -> list[str]:
        return [decode(*r).state.name if r[1] is not None else "tombstone"
                for _, r in self.written if r[0] == f'["txn", "{tid}"]'.encode()]

    def replay(self) -> dict[str, TransactionMetadata]:
        return load([r for _, r in self.written]).transactions


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def coordinator(log: FakeLog | None = None, clock: Clock | None = None, epoch: int = 1,
                **kwargs: Any) -> TransactionCoordinator:
    ids = itertools.count(100)
    return TransactionCoordinator(log or FakeLog(), coordinator_epoch=epoch,
                                  clock=clock or Clock(), new_producer_id=lambda: next(ids),
                                  **kwargs)


def test_init_gives_a_new_id_its_producer_at_epoch_0_written_first():
    log = FakeLog()
    c = coordinator(log)
    assert run(c.init_producer_id("t", TIMEOUT)) == ProducerIdAndEpoch(100, 0)
    [(partition, _)] = log.written
    assert partition == partition_for("t") and log.states() == ["EMPTY"]
    assert c.transactions["t"].state is S.EMPTY


def test_a_second_init_bumps_the_epoch_and_fences_the_first_producer():
    c = coordinator()
    first = run(c.init_producer_id("t", TIMEOUT))
    second = run(c.init_producer_id("t", TIMEOUT))
    assert second == ProducerIdAndEpoch(100, 1)
    with pytest.raises(ProducerFencedError, match="epoch 0 was fenced; the id is at epoch 1"):
        run(c.add_partitions("t", *first, [A0]))
    with pytest.raises(ProducerFencedError):
        run(c.end_transaction("t", *first, commit=True))
    run(c.add_partitions("t", *second, [A0]))  # the newest goes on


def test_a_transaction_prepare_before_markers_then_complete():
    log, clock = FakeLog(), Clock()
    c = coordinator(log, clock)
    pid = run(c.init_producer_id("t", TIMEOUT))
    clock.now += 5
    run(c.add_partitions("t", *pid, [A0]))
    start = clock.now
    clock.now += 5
    run(c.add_partitions("t", *pid, [A0]))  # already in: nothing written
    offsets = run(c.add_offsets("t", *pid, "g"))
    assert offsets == TopicPartition("__consumer_offsets", GroupCoordinator.partition_for("g"))
    run(c.add_offsets("t", *pid, "g"))  # already in
    run(c.add_partitions("t", *pid, [B1, A0]))
    m = c.transactions["t"]
    assert (m.state, m.partitions, m.groups, m.start_ms) == (
        S.ONGOING, {A0, B1, offsets}, {"g"}, start)
    work = run(c.end_transaction("t", *pid, commit=True))
    assert log.states() == ["EMPTY", "ONGOING", "ONGOING", "ONGOING", "PREPARE_COMMIT"]
    assert (work.transactional_id, work.producer_id, work.producer_epoch, work.commit,
            set(work.partitions), work.coordinator_epoch) == ("t", 100, 0, True,
                                                             {A0, B1, offsets}, 1)
    assert c.pending_markers() == [work]
    done = run(c.markers_done(work))
    assert done.state is S.COMPLETE_COMMIT and c.pending_markers() == []
    assert log.states()[-1] == "COMPLETE_COMMIT"
    # A retried commit of a complete one is answered without a write; the next begins.
    assert run(c.end_transaction("t", *pid, commit=True)) is None
    run(c.add_partitions("t", *pid, [B1]))
    assert c.transactions["t"].partitions == {B1}


def test_no_marker_work_before_the_prepare_record_is_durable():
    log = FakeLog()
    c = coordinator(log)

    async def scenario() -> None:
        pid = await c.init_producer_id("t", TIMEOUT)
        await c.add_partitions("t", *pid, [A0])
        log.gate = asyncio.Event()
        ending = asyncio.create_task(c.end_transaction("t", *pid, commit=False))
        await asyncio.sleep(0)
        assert not ending.done() and c.pending_markers() == []
        assert c.transactions["t"].state is S.ONGOING  # not kept before it is written
        assert c.describe("t")["writing"] == "PREPARE_ABORT"
        # Meanwhile every other step on the id is told to retry.
        for step in (c.add_partitions("t", *pid, [B1]), c.init_producer_id("t", TIMEOUT),
                     c.end_transaction("t", *pid, commit=False), c.abort("t")):
            with pytest.raises(ConcurrentTransactionsError, match="PREPARE_ABORT"):
                await step
        log.gate.set()
        work = await ending
        assert work.commit is False and log.states()[-1] == "PREPARE_ABORT"

    run(scenario())


def test_a_write_that_fails_changes_nothing():
    log = FakeLog()
    c = coordinator(log)
    pid = run(c.init_producer_id("t", TIMEOUT))
    run(c.add_partitions("t", *pid, [A0]))
    before = c.transactions["t"]
    log.fail = RequestTimeoutError("no answer")
    with pytest.raises(RequestTimeoutError):
        run(c.end_transaction("t", *pid, commit=True))
    assert c.transactions["t"] is before and c.writing == {}
    with pytest.raises(RequestTimeoutError):
        run(c.init_producer_id("new", TIMEOUT))
    assert "new" not in c.transactions
    log.fail = None
    assert run(c.end_transaction("t", *pid, commit=True)).commit


def test_unknown_ids_and_wrong_producer_ids_are_refused():
    c = coordinator()
    with pytest.raises(InvalidProducerIdMappingError, match=r"init_producer_id\) first"):
        run(c.add_partitions("nobody", 1, 0, [A0]))
    pid = run(c.init_producer_id("t", TIMEOUT))
    with pytest.raises(InvalidProducerIdMappingError, match="belongs to producer 100, not 5"):
        run(c.add_partitions("t", 5, pid.producer_epoch, [A0]))
    with pytest.raises(InvalidProducerIdMappingError):
        run(c.add_offsets("t", 5, pid.producer_epoch, "g"))
    with pytest.raises(InvalidProducerIdMappingError):
        run(c.end_transaction("t", 5, pid.producer_epoch, commit=True))
    with pytest.raises(ProducerFencedError):
        run(c.add_offsets("t", pid.producer_id, 7, "g"))
    assert c.transactions["t"].state is S.EMPTY


@pytest.mark.parametrize("timeout", [0, -1, 900_001, "60000", True, 1.5])
def test_a_bad_timeout_is_refused_and_nothing_written(timeout):
    log = FakeLog()
    c = coordinator(log)
    with pytest.raises(InvalidTransactionTimeoutError, match="transaction_timeout_ms"):
        run(c.init_producer_id("t", timeout))
    assert log.written == [] and c.transactions == {}


def test_the_maximum_timeout_is_the_coordinators():
    c = coordinator(max_timeout_ms=1000)
    run(c.init_producer_id("t", 1000))
    with pytest.raises(InvalidTransactionTimeoutError, match="<= 1000"):
        run(c.init_producer_id("t", 1001))


@pytest.mark.parametrize("args, message", [
    (("", TIMEOUT), "transactional_id must be a non-empty string"),
    ((None, TIMEOUT), "transactional_id"),
])
def test_a_bad_transactional_id_is_refused(args, message):
    with pytest.raises(InvalidArgumentError, match=message):
        run(coordinator().init_producer_id(*args))


@pytest.mark.parametrize("partitions, message", [
    ([], "at least one partition"),
    ([("a", -1)], "not a topic partition"),
    ([("", 0)], "not a topic partition"),
    (["a"], "not a topic partition"),
])
def test_bad_partitions_are_refused(partitions, message):
    c = coordinator()
    pid = run(c.init_producer_id("t", TIMEOUT))
    with pytest.raises(InvalidArgumentError, match=message):
        run(c.add_partitions("t", *pid, partitions))
    with pytest.raises(InvalidArgumentError, match="group_id"):
        run(c.add_offsets("t", *pid, ""))


def test_an_init_while_a_transaction_is_ongoing_fences_and_aborts_it_first():
    log = FakeLog()
    c = coordinator(log)
    old = run(c.init_producer_id("t", TIMEOUT))
    run(c.add_partitions("t", *old, [A0, B1]))
    with pytest.raises(ConcurrentTransactionsError, match="fenced and being aborted"):
        run(c.init_producer_id("t", TIMEOUT))
    assert log.states()[-1] == "PREPARE_ABORT"
    [work] = c.pending_markers()
    assert (work.producer_id, work.producer_epoch, work.commit, work.partitions) == (
        100, 1, False, (A0, B1))
    # The zombie can neither commit nor add; the new one waits for the markers.
    with pytest.raises(ProducerFencedError):
        run(c.end_transaction("t", *old, commit=True))
    with pytest.raises(ConcurrentTransactionsError, match="PREPARE_ABORT"):
        run(c.init_producer_id("t", TIMEOUT))
    run(c.markers_done(work))
    assert run(c.init_producer_id("t", TIMEOUT)) == ProducerIdAndEpoch(100, 2)
    assert log.states() == ["EMPTY", "ONGOING", "PREPARE_ABORT", "COMPLETE_ABORT", "EMPTY"]


def test_exhausted_epochs_take_a_new_producer_id():
    log = FakeLog()
    c = coordinator(log)
    run(c.init_producer_id("t", TIMEOUT))
    # The id has used its epochs up to the last one a producer may get.
    m = c.transactions["t"]
    c.transactions["t"] = dataclasses.replace(m, producer_epoch=MAX_PRODUCER_EPOCH - 2)
    last = run(c.init_producer_id("t", TIMEOUT))
    assert last == ProducerIdAndEpoch(100, MAX_PRODUCER_EPOCH - 1)
    run(c.add_partitions("t", *last, [A0]))
    # Fencing it takes the coordinator's reserved epoch; the retry gets a new producer id.
    with pytest.raises(ConcurrentTransactionsError):
        run(c.init_producer_id("t", TIMEOUT))
    [work] = c.pending_markers()
    assert work.producer_epoch == MAX_PRODUCER_EPOCH
    run(c.markers_done(work))
    assert run(c.init_producer_id("t", TIMEOUT)) == ProducerIdAndEpoch(101, 0)
    assert run(c.init_producer_id("t", TIMEOUT)) == ProducerIdAndEpoch(101, 1)


def test_ending_refuses_what_the_state_does_not_allow():
    c = coordinator()
    pid = run(c.init_producer_id("t", TIMEOUT))
    for commit in (True, False):
        with pytest.raises(InvalidTxnStateError, match="EMPTY \\(none was begun\\)"):
            run(c.end_transaction("t", *pid, commit=commit))
    run(c.add_partitions("t", *pid, [A0]))
    work = run(c.end_transaction("t", *pid, commit=True))
    with pytest.raises(ConcurrentTransactionsError, match="commit is being completed"):
        run(c.end_transaction("t", *pid, commit=True))
    with pytest.raises(InvalidTxnStateError, match="cannot abort: the transaction is "
                                                   "PREPARE_COMMIT"):
        run(c.end_transaction("t", *pid, commit=False))
    with pytest.raises(ConcurrentTransactionsError, match="nothing joins it"):
        run(c.add_partitions("t", *pid, [B1]))
    with pytest.raises(ConcurrentTransactionsError, match="nothing joins it"):
        run(c.add_offsets("t", *pid, "g"))
    run(c.markers_done(work))
    with pytest.raises(InvalidTxnStateError, match="cannot abort: the transaction is "
                                                   "COMPLETE_COMMIT"):
        run(c.end_transaction("t", *pid, commit=False))
    with pytest.raises(InvalidTxnStateError, match="markers were not awaited"):
        run(c.markers_done(work))


def test_markers_of_another_coordinator_or_another_end_are_refused():
    log = FakeLog()
    c = coordinator(log, epoch=3)
    pid = run(c.init_producer_id("t", TIMEOUT))
    run(c.add_partitions("t", *pid, [A0]))
    work = run(c.end_transaction("t", *pid, commit=True))
    with pytest.raises(TransactionCoordinatorFencedError, match="epoch 2 handed to the "
                                                                "coordinator of epoch 3"):
        run(c.markers_done(work._replace(coordinator_epoch=2)))
    with pytest.raises(InvalidTxnStateError, match="abort markers were not awaited"):
        run(c.markers_done(work._replace(commit=False)))
    assert c.transactions["t"].state is S.PREPARE_COMMIT


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced():
    log, clock = FakeLog(), Clock()
    c = coordinator(log, clock)
    pid = run(c.init_producer_id("t", 1000))
    other = run(c.init_producer_id("u", 5000))
    run(c.add_partitions("t", *pid, [A0]))
    run(c.add_partitions("u", *other, [B1]))
    clock.now += 1000
    assert run(c.expire()) == []  # at its timeout, not past it
    clock.now += 1
    [work] = run(c.expire())
    assert (work.transactional_id, work.producer_epoch, work.commit) == ("t", 1, False)
    assert c.transactions["u"].state is S.ONGOING
    with pytest.raises(ProducerFencedError, match="PREPARE_ABORT"):
        run(c.end_transaction("t", *pid, commit=True))
    assert run(c.expire()) == []  # being aborted already
    run(c.markers_done(work))
    with pytest.raises(ProducerFencedError, match="COMPLETE_ABORT"):
        run(c.add_partitions("t", *pid, [A0]))


def test_a_failed_expiry_is_tried_again():
    log, clock = FakeLog(), Clock()
    c = coordinator(log, clock)
    pid = run(c.init_producer_id("t", 1000))
    run(c.add_partitions("t", *pid, [A0]))
    clock.now += 2000
    log.fail = RequestTimeoutError("no answer")
    assert run(c.expire()) == [] and c.transactions["t"].state is S.ONGOING
    log.fail = None
    assert [w.transactional_id for w in run(c.expire())] == ["t"]


class GatedLog(FakeLog):
    """Holds the writes of one transactional id (``held``) until ``gate`` is set."""

    def __init__(self, held: str) -> None:
        super().__init__()
        self.held = f'["txn", "{held}"]'.encode()

    async def __call__(self, partition: int, record: Record) -> None:
        if record[0] == self.held and self.gate is not None:
            await self.gate.wait()
        self.written.append((partition, record))


def test_expiry_looks_at_each_id_as_it_is_when_reached():
    log, clock = GatedLog("a"), Clock()
    c = coordinator(log, clock)

    async def scenario() -> None:
        a = await c.init_producer_id("a", 1000)
        b = await c.init_producer_id("b", 1000)
        await c.add_partitions("a", *a, [A0])
        await c.add_partitions("b", *b, [B1])
        clock.now += 2000
        log.gate = asyncio.Event()
        expiring = asyncio.create_task(c.expire())
        await asyncio.sleep(0)  # the abort of "a" is being written ...
        await c.end_transaction("b", *b, commit=True)  # ... as "b" commits, not yet aborted
        log.gate.set()
        assert [w.transactional_id for w in await expiring] == ["a"]
        assert c.transactions["b"].state is S.PREPARE_COMMIT  # not overwritten by an abort

    run(scenario())


def test_id_expiry_looks_at_each_id_as_it_is_when_reached():
    log, clock = GatedLog("a"), Clock()
    c = coordinator(log, clock, id_expiration_ms=10_000)

    async def scenario() -> None:
        await c.init_producer_id("a", TIMEOUT)
        await c.init_producer_id("b", TIMEOUT)
        clock.now += 20_000
        log.gate = asyncio.Event()
        expiring = asyncio.create_task(c.expire_transactional_ids())
        await asyncio.sleep(0)  # the tombstone of "a" is being written ...
        b = await c.init_producer_id("b", TIMEOUT)  # ... as "b" is used again
        log.gate.set()
        assert await expiring == ["a"]
        assert c.transactions["b"].producer_epoch == b.producer_epoch  # not forgotten

    run(scenario())


def test_a_restarted_coordinator_finishes_the_markers_and_keeps_the_timeouts():
    log, clock = FakeLog(), Clock()
    c = coordinator(log, clock, epoch=1)
    a = run(c.init_producer_id("a", 1000))
    b = run(c.init_producer_id("b", 1000))
    run(c.add_partitions("a", *a, [A0]))
    run(c.add_partitions("b", *b, [B1]))
    old_work = run(c.end_transaction("a", *a, commit=True))
    clock.now += 600
    d = coordinator(log, clock, epoch=2, transactions=log.replay())
    [work] = d.pending_markers()
    assert work._replace(coordinator_epoch=1) == old_work and work.coordinator_epoch == 2
    with pytest.raises(TransactionCoordinatorFencedError):
        run(d.markers_done(old_work))
    run(d.markers_done(work))
    assert log.replay()["a"].state is S.COMPLETE_COMMIT
    # b's timeout still counts from its start before the restart.
    clock.now += 399
    assert run(d.expire()) == []
    clock.now += 2
    assert [w.transactional_id for w in run(d.expire())] == ["b"]


def test_an_operator_aborts_a_hanging_transaction():
    log = FakeLog()
    c = coordinator(log)
    pid = run(c.init_producer_id("t", TIMEOUT))
    with pytest.raises(InvalidTxnStateError, match="EMPTY: no transaction is open"):
        run(c.abort("t"))
    run(c.add_partitions("t", *pid, [A0]))
    work = run(c.abort("t"))
    assert (work.commit, work.producer_epoch) == (False, 1)
    assert run(c.abort("t")) == work  # already aborting: the same markers
    with pytest.raises(ProducerFencedError):
        run(c.end_transaction("t", *pid, commit=True))
    with pytest.raises(TransactionalIdNotFoundError, match="'nobody'"):
        run(c.abort("nobody"))
    pid = run(c.init_producer_id("u", TIMEOUT))
    run(c.add_partitions("u", *pid, [A0]))
    run(c.end_transaction("u", *pid, commit=True))
    with pytest.raises(InvalidTxnStateError, match="its commit is decided"):
        run(c.abort("u"))


def test_idle_transactional_ids_expire_with_a_tombstone():
    log, clock = FakeLog(), Clock()
    c = coordinator(log, clock, id_expiration_ms=10_000)
    run(c.init_producer_id("idle", TIMEOUT))
    pid = run(c.init_producer_id("open", TIMEOUT))
    run(c.add_partitions("open", *pid, [A0]))
    clock.now += 10_000
    assert run(c.expire_transactional_ids()) == []
    clock.now += 1
    assert run(c.expire_transactional_ids()) == ["idle"]
    assert log.states("idle") == ["EMPTY", "tombstone"]
    assert sorted(c.transactions) == ["open"]
    assert sorted(log.replay()) == ["open"]
    # The id comes back as new: a new producer id.
    assert run(c.init_producer_id("idle", TIMEOUT)).producer_epoch == 0


def test_describe_and_list():
    clock = Clock()
    c = coordinator(clock=clock)
    pid = run(c.init_producer_id("t", TIMEOUT))
    run(c.init_producer_id("u", TIMEOUT))
    run(c.add_partitions("t", *pid, [A0]))
    clock.now += 250
    d = c.describe("t")
    assert (d["state"], d["age_ms"], d["partitions"], d["writing"], d["coordinator_epoch"]) == (
        "ONGOING", 250, ["a:0"], None, 1)
    assert [x["transactional_id"] for x in c.list_transactions()] == ["t", "u"]
    assert [x["transactional_id"] for x in c.list_transactions(["ongoing"])] == ["t"]
    assert [x["transactional_id"] for x in c.list_transactions(min_age_ms=250)] == ["t"]
    assert c.list_transactions(min_age_ms=251) == []
    with pytest.raises(InvalidArgumentError, match="unknown transaction state"):
        c.list_transactions(["OPEN"])
    with pytest.raises(TransactionalIdNotFoundError):
        c.describe("nobody")


def test_a_recovering_producer_bumps_its_own_epoch_and_a_retry_gets_the_same_answer():
    log = FakeLog()
    c = coordinator(log)
    first = run(c.init_producer_id("t", TIMEOUT))
    bumped = run(c.init_producer_id("t", TIMEOUT, expected=first))
    assert bumped == ProducerIdAndEpoch(100, 1)
    assert c.transactions["t"].last_producer_epoch == 0
    # Its answer was lost: the retry names epoch 0 again and gets epoch 1, not 2.
    assert run(c.init_producer_id("t", TIMEOUT, expected=first)) == bumped
    assert log.replay()["t"].last_producer_epoch == 0  # survives a restart
    # A plain init (a new incarnation) clears it: the old one can no longer recover.
    newest = run(c.init_producer_id("t", TIMEOUT))
    assert newest == ProducerIdAndEpoch(100, 2)
    written = len(log.written)
    with pytest.raises(ProducerFencedError, match="epoch 0 was fenced; the id is at epoch 2"):
        run(c.init_producer_id("t", TIMEOUT, expected=first))
    with pytest.raises(ProducerFencedError, match="epoch 1 was fenced"):
        run(c.init_producer_id("t", TIMEOUT, expected=bumped))
    with pytest.raises(ProducerFencedError, match="not to producer 55"):
        run(c.init_producer_id("t", TIMEOUT, expected=ProducerIdAndEpoch(55, 2)))
    assert len(log.written) == written and c.transactions["t"].producer_epoch == 2


def test_a_recovering_producer_unknown_to_the_coordinator_gets_a_new_id():
    c = coordinator()
    assert run(c.init_producer_id("t", TIMEOUT, expected=ProducerIdAndEpoch(55, 3))) == (
        ProducerIdAndEpoch(100, 0))


def test_a_recovering_producer_at_its_last_epoch_gets_a_new_id_once():
    c = coordinator()
    run(c.init_producer_id("t", TIMEOUT))
    m = c.transactions["t"]
    c.transactions["t"] = dataclasses.replace(m, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    last = ProducerIdAndEpoch(100, MAX_PRODUCER_EPOCH - 1)
    rotated = run(c.init_producer_id("t", TIMEOUT, expected=last))
    assert rotated == ProducerIdAndEpoch(101, 0)
    assert c.transactions["t"].previous_producer_id == 100
    assert run(c.init_producer_id("t", TIMEOUT, expected=last)) == rotated  # a retry
    with pytest.raises(ProducerFencedError):  # the old id at an epoch it never had last
        run(c.init_producer_id("t", TIMEOUT, expected=ProducerIdAndEpoch(100, 3)))


@pytest.mark.parametrize("expected", [(-5, 0), (100, -1), (100, MAX_PRODUCER_EPOCH + 1),
                                      ("100", 0)])
def test_a_bad_expected_producer_is_refused(expected):
    c = coordinator()
    run(c.init_producer_id("t", TIMEOUT))
    with pytest.raises(InvalidArgumentError, match="expected producer"):
        run(c.init_producer_id("t", TIMEOUT, expected=expected))
