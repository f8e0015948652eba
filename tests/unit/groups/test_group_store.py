"""The coordinator's writes to __consumer_offsets (raylog/groups/store.py, offsets_writer.py)
against a leader that is a real Partition with knobs: it can hold a batch (a slow persist),
lose its answer after appending (a retried persist), refuse a batch's numbering (the
producer-state rules), or forget its producers (a new leader without their state). No Ray.

What must hold (issue 22, item 6): a commit whose member was fenced while its record was on
its way is not applied, and what __consumer_offsets says agrees with what is applied (a
coordinator replaying the log finds what memory has); completion order never decides which
commit wins; a commit sent again is not appended again; every wait ends at its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable

import pytest

from raylog.errors import (
    InvalidProducerEpochError,
    NotLeaderError,
    NotPartitionOwnerError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    RequestTimeoutError,
    UnknownMemberError,
)
from raylog.groups.coordinator import GroupCoordinator, OffsetAndMetadata
from raylog.groups.offsets_writer import OffsetsWriter, Write
from raylog.groups.store import GroupStore
from raylog.records.header import iter_headers
from raylog.replica.partition import LeaderAndIsr, Partition
from raylog.replica.producer_state import ProducerStates, SequenceGap
from raylog.storage import AppendInfo, LogConfig, PartitionLog
from raylog.types import TopicPartition
from tests.unit.logutil import FakeClock, all_records

NOW = 1_700_000_000_000
TOPICS = {"t": 4}
P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)
SESSION_MS = 10_000


class Leader:
    """The leader of __consumer_offsets-0: a real Partition (one replica) behind knobs."""

    def __init__(self, tmp_path) -> None:
        clock = FakeClock(NOW)
        log = PartitionLog(tmp_path / "__consumer_offsets-0", LogConfig(retention_ms=None),
                           clock=clock)
        self.partition = Partition("__consumer_offsets", 0, log, 1, clock=clock)
        self.partition.apply(LeaderAndIsr(1, 0, 0, (1,), (1,)))
        self.gate: asyncio.Event | None = None  # while set and not open, sends wait
        self.lose_answers = 0   # append, then answer with a timeout, this many times
        self.refuse: list[BaseException] = []  # raised instead of appending, in turn
        self.sends = 0

    def hold(self) -> None:
        self.gate = asyncio.Event()

    def open(self) -> None:
        self.gate.set()

    def forget_producers(self) -> None:
        """As a new leader whose producer state lacks what the old one had."""
        self.partition.producers = ProducerStates()

    async def append(self, number: int, batch: bytes) -> AppendInfo:
        assert number == 0
        self.sends += 1
        await asyncio.sleep(0)
        if self.gate is not None:
            await self.gate.wait()
        if self.refuse:
            raise self.refuse.pop(0)
        try:
            info = self.partition.append(batch, "all", 0)
        except SequenceGap as gap:  # the producer-state rules: a gap is an error
            raise OutOfOrderSequenceError(f"expected sequence {gap.expected}") from None
        if self.lose_answers:
            self.lose_answers -= 1
            raise RequestTimeoutError("the answer was lost")
        return info

    def records(self) -> list[tuple[bytes, bytes | None]]:
        return [(r.key, r.value) for r in all_records(self.partition.log)]

    def batches(self) -> int:
        return sum(1 for _ in iter_headers(self.partition.log.read(0, 64 << 20)))

    def replay(self) -> GroupCoordinator:
        """What a restarted coordinator finds."""
        restarted = GroupCoordinator(FakeClock(NOW))
        for key, value in self.records():
            restarted.load(key, value)
        restarted.finish_load()
        return restarted


class Setup:
    def __init__(self, tmp_path) -> None:
        self.leader = Leader(tmp_path)
        self.clock = FakeClock(NOW)
        self.coordinator = GroupCoordinator(self.clock)
        self.tasks: list[asyncio.Task] = []
        ids = iter(range(1000, 2000))
        self.store = GroupStore(self.coordinator, 1, self.leader.append, lambda: next(ids),
                                lambda work: self.tasks.append(asyncio.create_task(work)),
                                backoff_s=(0.001, 0.01))

    def join_now(self, member_id: str, topics: dict[str, int] = TOPICS):
        """Join, and have the group record written (not waited for)."""
        self.coordinator.join("g", member_id, "client", ["t"], None, SESSION_MS, "range",
                              topics)
        return self.store.persist_membership("g")

    async def join(self, member_id: str, topics: dict[str, int] = TOPICS) -> None:
        assert await self.store.wait(self.join_now(member_id, topics), 5)

    def beat(self, member_id: str, owned=None) -> set[TopicPartition]:
        """A heartbeat reporting ``owned`` (default: what the member owns, minus what it is
        told to revoke: released); what it owns after it."""
        member = self.coordinator.group("g").members[member_id]
        reported = set(member.owned) - set(member.owned - member.target) if owned is None \
            else owned
        return set(self.coordinator.heartbeat("g", member_id, sorted(reported)).owned)

    def ticket(self, member_id: str | None, **offsets: int):
        entries = {TopicPartition("t", int(p[1:])): OffsetAndMetadata(o)
                   for p, o in offsets.items()}
        generation = self.coordinator.group("g").members[member_id].generation \
            if member_id is not None else -1
        return self.coordinator.check_commit("g", member_id, generation, entries)

    def committed(self, tp: TopicPartition = P0) -> int | None:
        om = self.coordinator.committed("g", [tp])[tp]
        return None if om is None else om.offset

    def replayed(self, tp: TopicPartition = P0) -> int | None:
        om = self.leader.replay().committed("g", [tp])[tp]
        return None if om is None else om.offset

    async def settle(self) -> None:
        while not self.store.idle():
            await asyncio.sleep(0.001)


def run(tmp_path, scenario: Callable[[Setup], Awaitable[None]]) -> Setup:
    setup = Setup(tmp_path)

    async def main() -> None:
        try:
            await asyncio.wait_for(scenario(setup), 30)
        finally:
            for task in setup.tasks:
                task.cancel()
            setup.leader.partition.log.close()

    asyncio.run(main())
    return setup


async def started(setup: Setup, coro) -> asyncio.Task:
    """``coro`` as a task, once the store has taken it in (queued or sent)."""
    task = asyncio.create_task(coro)
    for _ in range(10):
        await asyncio.sleep(0)
    return task


# -- idempotence and order ---------------------------------------------------------------------


def test_a_commit_sent_again_after_a_lost_answer_is_in_the_log_once(tmp_path):
    async def scenario(s: Setup) -> None:
        await s.join("a")
        assert s.beat("a") == {TopicPartition("t", p) for p in range(4)}
        before = s.leader.batches()
        s.leader.lose_answers = 2
        await s.store.commit(s.ticket("a", p0=10), 5)
        assert s.committed() == 10
        assert s.leader.sends >= 3 and s.leader.batches() == before + 1
        assert s.replayed() == 10

    run(tmp_path, scenario)


def test_completion_order_never_decides_which_commit_wins(tmp_path):
    """The first commit's persist is slow and its answer is lost; the second is decided
    after it and must win, in memory and in the log, however the sends interleave."""
    async def scenario(s: Setup) -> None:
        await s.join("a")
        s.beat("a")
        s.leader.hold()
        s.leader.lose_answers = 1
        first = await started(s, s.store.commit(s.ticket("a", p0=10), 5))
        second = await started(s, s.store.commit(s.ticket("a", p0=20), 5))
        s.leader.open()
        await first
        await second
        assert s.committed() == 20 and s.replayed() == 20
        offsets = [v for k, v in s.leader.records() if b'"offset"' in k]
        assert len(offsets) == 2  # each once, in the order decided

    run(tmp_path, scenario)


def test_a_lower_commit_by_the_owner_is_applied(tmp_path):
    """Going back is the owner's right (a seek), as in Kafka: only stale or retried commits
    must not move an offset back."""
    async def scenario(s: Setup) -> None:
        await s.join("a")
        s.beat("a")
        await s.store.commit(s.ticket("a", p0=50), 5)
        await s.store.commit(s.ticket("a", p0=7), 5)
        assert s.committed() == 7 and s.replayed() == 7

    run(tmp_path, scenario)


@pytest.mark.parametrize("refusal", [
    OutOfOrderSequenceError("gap"), InvalidProducerEpochError("old epoch")])
def test_a_refused_numbering_starts_a_new_epoch_and_the_records_land(tmp_path, refusal):
    async def scenario(s: Setup) -> None:
        await s.join("a")
        s.beat("a")
        writer = s.store.writer("g")
        epoch = writer.epoch
        s.leader.refuse = [refusal]
        await s.store.commit(s.ticket("a", p0=10), 5)
        assert writer.epoch == epoch + 1 and writer.next_sequence == 1
        assert s.committed() == s.replayed() == 10

    run(tmp_path, scenario)


def test_a_leader_that_forgot_the_producer_gets_a_new_epoch_not_a_gap(tmp_path):
    """After a failover to a leader without this producer's state, the next batch (sequence
    above 0) is refused; the writer renumbers from 0 under a new epoch instead of sending the
    same batch into the same refusal, and nothing waits for a timeout."""
    async def scenario(s: Setup) -> None:
        await s.join("a")
        s.beat("a")
        await s.store.commit(s.ticket("a", p0=10), 5)
        writer = s.store.writer("g")
        assert writer.next_sequence > 0
        s.leader.forget_producers()
        await s.store.commit(s.ticket("a", p0=11), 5)
        assert writer.epoch == 1
        assert s.committed() == s.replayed() == 11

    run(tmp_path, scenario)


def test_a_batch_refused_for_good_fails_its_commit_and_the_next_goes_on(tmp_path):
    async def scenario(s: Setup) -> None:
        await s.join("a")
        s.beat("a")
        s.leader.refuse = [RecordTooLargeError("too large")]
        with pytest.raises(RecordTooLargeError):
            await s.store.commit(s.ticket("a", p0=10), 5)
        assert s.committed() is None
        await s.store.commit(s.ticket("a", p0=11), 5)
        assert s.committed() == s.replayed() == 11

    run(tmp_path, scenario)


def test_leadership_moving_is_ridden_out_with_the_same_batch(tmp_path):
    async def scenario(s: Setup) -> None:
        await s.join("a")
        s.beat("a")
        writer = s.store.writer("g")
        epoch = writer.epoch
        s.leader.refuse = [NotLeaderError("moving"), NotLeaderError("moving")]
        await s.store.commit(s.ticket("a", p0=10), 5)
        assert writer.epoch == epoch and s.committed() == s.replayed() == 10

    run(tmp_path, scenario)


# -- fencing -----------------------------------------------------------------------------------


def test_a_commit_fenced_while_queued_is_never_written(tmp_path):
    async def scenario(s: Setup) -> None:
        await s.join("a")
        s.beat("a")
        await s.store.commit(s.ticket("a", p0=5), 5)
        s.leader.hold()  # the group record of b's join is on its way: a's commit queues
        await started(s, asyncio.sleep(0, s.join_now("b")))
        assert s.store.writer("g").in_flight
        commit = await started(s, s.store.commit(s.ticket("a", p0=10), 5))
        s.beat("a", owned=set())  # a gives everything up before its commit is sent
        s.leader.open()
        with pytest.raises(NotPartitionOwnerError):
            await commit
        await s.settle()
        assert s.committed() == s.replayed() == 5
        assert b'"offset": 10' not in b"".join(v or b"" for _, v in s.leader.records())

    run(tmp_path, scenario)


@pytest.mark.parametrize("fence", ["released", "left"])
def test_a_commit_fenced_while_on_its_way_is_not_applied_and_the_log_agrees(tmp_path, fence):
    """The race of item 6: a's commit is in flight when a loses the partition. The commit
    is not applied; the partition goes to nobody until the log says again what memory says;
    then b gets it, reads the old offset, and its own commits go on from there."""
    async def scenario(s: Setup) -> None:
        await s.join("z")
        s.beat("z")
        await s.store.commit(s.ticket("z", p0=50), 5)
        await s.join("b")  # the range assignor gives b (sorted first) t-0 and t-1
        assert P0 in s.coordinator.group("g").members["b"].target
        s.leader.hold()
        stale = await started(s, s.store.commit(s.ticket("z", p0=100), 5))
        assert s.store.writer("g").in_flight  # on its way
        if fence == "released":
            assert P0 not in s.beat("z")  # releases what it was told to revoke
        else:
            s.coordinator.leave("g", "z", TOPICS)
            s.store.persist_membership("g")
        for _ in range(3):
            owned = s.beat("b")
            assert P0 not in owned, "granted while a fenced commit may be in the log"
        assert P1 in owned  # the others move
        s.leader.open()
        with pytest.raises(NotPartitionOwnerError if fence == "released"
                           else UnknownMemberError):
            await stale
        await s.settle()
        assert s.committed() == 50
        # The stale record is in the log; the record restoring 50 is behind it.
        assert any(b'"offset": 100' in (v or b"") for _, v in s.leader.records())
        assert s.replayed() == 50
        assert P0 in s.beat("b")
        await s.store.commit(s.ticket("b", p0=60), 5)
        assert s.committed() == s.replayed() == 60

    run(tmp_path, scenario)


def test_a_commit_outside_the_group_on_its_way_when_a_member_joins(tmp_path):
    """Allowed while the group has no members; a member joining meanwhile is granted the
    partition only after the commit is in, and starts from it."""
    async def scenario(s: Setup) -> None:
        s.leader.hold()
        outside = await started(s, s.store.commit(s.ticket(None, p0=80), 5))
        s.join_now("a")
        assert s.beat("a") == set()
        s.leader.open()
        await outside  # nobody owned it meanwhile: applied
        await s.settle()
        assert P0 in s.beat("a")
        assert s.committed() == s.replayed() == 80
        with pytest.raises(UnknownMemberError):  # and now the group has a member
            s.ticket(None, p0=90)

    run(tmp_path, scenario)


# -- deadlines and durable membership ------------------------------------------------------------


def test_a_hung_persist_answers_at_the_deadline_and_membership_goes_on(tmp_path):
    async def scenario(s: Setup) -> None:
        await s.join("a")
        s.beat("a")
        s.leader.hold()
        with pytest.raises(RequestTimeoutError, match="still being written"):
            await s.store.commit(s.ticket("a", p0=10), 0.05)
        with pytest.raises(RequestTimeoutError, match="nothing was stored"):
            await s.store.commit(s.ticket("a", p0=11), 0.05)  # queued behind: withdrawn
        # Membership changes do not wait: b joins, a leaves, both at once.
        s.coordinator.join("g", "b", "client", ["t"], None, SESSION_MS, "range", TOPICS)
        write = s.store.persist_membership("g")
        with pytest.raises(RequestTimeoutError):
            await s.store.wait(write, 0.05)
        assert s.beat("b") == set()  # not durable yet: granted nothing
        s.leader.open()
        await s.settle()
        assert s.committed() == s.replayed() == 10  # the first was applied after all
        s.beat("a")  # releases what goes to b
        assert s.beat("b") == {TopicPartition("t", 2), TopicPartition("t", 3)}

    run(tmp_path, scenario)


def test_nothing_is_granted_before_the_members_group_record_is_durable(tmp_path):
    async def scenario(s: Setup) -> None:
        s.leader.hold()
        s.coordinator.join("g", "a", "client", ["t"], None, SESSION_MS, "range", TOPICS)
        s.store.persist_membership("g")
        assert s.beat("a") == set()
        s.leader.open()
        await s.settle()
        assert s.beat("a") == {TopicPartition("t", p) for p in range(4)}
        assert "a" in s.leader.replay().group("g").pending

    run(tmp_path, scenario)


def test_a_deleted_group_stays_deleted_and_later_commits_follow_the_tombstones(tmp_path):
    async def scenario(s: Setup) -> None:
        await s.store.commit(s.ticket(None, p0=3, p1=4), 5)
        await s.store.delete("g", 5)
        assert s.coordinator.group_ids() == [] and s.leader.replay().group_ids() == []
        await s.store.commit(s.ticket(None, p1=9), 5)
        assert s.committed(P1) == s.replayed(P1) == 9 and s.replayed(P0) is None

    run(tmp_path, scenario)


# -- a random walk -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_no_stale_or_retried_commit_moves_an_offset_back(tmp_path, seed):
    """Two members of a group of one partition leave and rejoin at random, so that t-0
    changes hands; each owner commits positions that only grow from where it started (the
    committed offset when it was granted) while the leader holds batches, loses answers and
    forgets producers at random. The committed offset never goes back; memory and the
    replayed log agree whenever the store is idle."""
    rng = random.Random(seed)
    one = {"t": 1}

    async def scenario(s: Setup) -> None:
        await s.join("a", one)
        await s.join("b", one)
        position: dict[str, int] = {}
        seen = [0]
        pending: list[asyncio.Task] = []
        for _ in range(80):
            group = s.coordinator.group("g")
            for member in sorted(group.members):
                if P0 in s.beat(member):
                    position.setdefault(member, s.committed() or 0)
            owner = group.owner.get(P0)
            action = rng.random()
            if action < 0.5 and owner in position:
                position[owner] += rng.randint(0, 5)
                ticket = s.ticket(owner, p0=position[owner])
                pending.append(asyncio.create_task(s.store.commit(ticket, 1)))
            elif action < 0.6:
                member = rng.choice(["a", "b"])
                s.coordinator.leave("g", member, one)
                position.pop(member, None)
                s.join_now(member, one)
            elif action < 0.7:
                s.leader.lose_answers += 1
            elif action < 0.75:
                s.leader.forget_producers()
            elif action < 0.85 and (s.leader.gate is None or s.leader.gate.is_set()):
                s.leader.hold()
            if s.leader.gate is not None and rng.random() < 0.3:
                s.leader.open()
            await asyncio.sleep(0.001)
            now = s.committed() or 0
            assert now >= seen[-1], f"went back from {seen[-1]} to {now}"
            seen.append(now)
        if s.leader.gate is not None:
            s.leader.open()
        for task in pending:  # each was applied, or refused for a reason
            with contextlib.suppress(NotPartitionOwnerError, UnknownMemberError,
                                     RequestTimeoutError):
                await task
        await s.settle()
        assert (s.committed() or 0) >= seen[-1]
        assert s.committed() == s.replayed()
        assert seen[-1] > 0, (s.coordinator.held, s.coordinator.group("g").describe(), position)

    run(tmp_path, scenario)


# -- the writer alone --------------------------------------------------------------------------


class Records(Write):
    def __init__(self, *records: tuple[bytes, bytes]) -> None:
        self._records = list(records)
        self.outcome: object = None

    def records(self):
        return self._records

    def durable(self) -> None:
        self.outcome = "durable"

    def failed(self, error: BaseException) -> None:
        self.outcome = error


def test_a_refusal_under_an_unknown_name_still_ends_in_a_new_epoch(tmp_path):
    class Stuck(RequestTimeoutError):
        """A retriable refusal the writer does not know by name."""

    async def scenario(s: Setup) -> None:
        s.leader.refuse = [Stuck("refused") for _ in range(25)]
        writer = OffsetsWriter(0, s.leader.append, lambda: 7, backoff_s=(0, 0))
        task = asyncio.create_task(writer.run())
        write = Records((b"k", b"v"))
        writer.submit(write)
        while write.outcome is None:
            await asyncio.sleep(0.001)
        task.cancel()
        assert write.outcome == "durable" and writer.epoch == 1
        assert s.leader.records() == [(b"k", b"v")]

    run(tmp_path, scenario)
