"""The coordinator's watch on group members living in Ray actors (actors/groups.py,
MemberWatch) through a fake member actor with knobs: only Ray's death notice removes a
member (issue 22, item 5). A member Ray cannot reach for a moment (ActorUnavailableError:
a network blip, a node under pressure) keeps its partitions, and nobody else is granted
them meanwhile: ownership intervals never overlap. No Ray cluster.
"""

from __future__ import annotations

import asyncio

from ray.exceptions import ActorDiedError, ActorUnavailableError

from actors.groups import MemberWatch
from raylog.groups.coordinator import GroupCoordinator
from raylog.types import TopicPartition
from tests.unit.logutil import FakeClock

TOPICS = {"t": 4}
ALL = {TopicPartition("t", p) for p in range(4)}
SESSION_MS = 10_000


class FakeMemberActor:
    """MemberActor with knobs: ``kill`` (Ray's DEAD notice; a check raises ActorDiedError),
    ``set_unreachable`` (the RESTARTING notice; a check raises ActorUnavailableError; then
    ALIVE again), ``renew`` (the notices' subscription was renewed: None). Counts checks."""

    def __init__(self) -> None:
        self.unreachable = False
        self.dead = False
        self.checks = 0
        self.listening: list[asyncio.Queue] = []

    def _announce(self, state: str | None) -> None:
        for queue in self.listening:
            queue.put_nowait(state)

    def set_unreachable(self, value: bool = True) -> None:
        self.unreachable = value
        self._announce("RESTARTING" if value else "ALIVE")

    def kill(self) -> None:
        self.dead = True
        self._announce("DEAD")

    def renew(self) -> None:
        self._announce(None)

    def listen(self) -> asyncio.Queue:
        self.listening.append(asyncio.Queue())
        return self.listening[-1]

    def stop_listening(self, queue: asyncio.Queue) -> None:
        self.listening.remove(queue)

    async def check(self) -> None:
        self.checks += 1
        await asyncio.sleep(0)
        if self.dead:
            raise ActorDiedError()
        if self.unreachable:
            raise ActorUnavailableError("the connection to the actor's node broke", None)


class Group:
    """A coordinator with members a (in the watched actor) and b (a driver), and the
    ownership intervals each was granted, in heartbeat rounds."""

    def __init__(self) -> None:
        self.clock = FakeClock(0)
        self.coordinator = GroupCoordinator(self.clock)
        self.round = 0
        self.intervals: list[tuple[str, TopicPartition, int, int | None]] = []
        self.owned: dict[str, set[TopicPartition]] = {"a": set(), "b": set()}
        for member, actor in (("a", "actor-a"), ("b", None)):
            self.coordinator.join("g", member, "client", ["t"], None, SESSION_MS,
                                  "range", TOPICS, actor)
            self.coordinator.membership_durable("g", self.coordinator.group("g").generation)

    def members(self) -> set[str]:
        return set(self.coordinator.group("g").members)

    def beat(self) -> None:
        """Every member heartbeats, releasing what it is told to revoke; the clock moves
        one 100 ms step, well inside the session."""
        self.round += 1
        self.clock.advance(100)
        for member in sorted(self.members()):
            answer = self.coordinator.heartbeat("g", member, sorted(self.owned[member]))
            now = set(answer.owned - answer.revoke)
            for tp in now - self.owned[member]:
                self.intervals.append((member, tp, self.round, None))
            for tp in self.owned[member] - now:
                self._close(member, tp)
            self.owned[member] = now
        for gone in set(self.owned) - self.members():
            for tp in self.owned.pop(gone):
                self._close(gone, tp)

    def _close(self, member: str, tp: TopicPartition) -> None:
        for i, (m, p, start, end) in enumerate(self.intervals):
            if (m, p, end) == (member, tp, None):
                self.intervals[i] = (m, p, start, self.round)

    def assert_no_overlap(self) -> None:
        for m, p, start, end in self.intervals:
            for n, q, other_start, other_end in self.intervals:
                if p == q and m != n:
                    end_, other_end_ = end or 10**9, other_end or 10**9
                    assert end_ <= other_start or other_end_ <= start, self.intervals


def watch(group: Group, actor: FakeMemberActor) -> tuple[MemberWatch, list[str]]:
    died: list[str] = []

    async def on_died() -> None:
        for group_id, member_id in group.coordinator.members_of_actor("actor-a"):
            group.coordinator.leave(group_id, member_id, TOPICS)
            died.append(member_id)

    w = MemberWatch(actor, "actor-a",
                    lambda: bool(group.coordinator.members_of_actor("actor-a")), on_died)
    return w, died


def test_an_unreachable_member_keeps_its_partitions_and_a_dead_one_loses_them():
    async def scenario() -> None:
        group = Group()
        actor = FakeMemberActor()
        w, died = watch(group, actor)
        task = asyncio.create_task(w.run())
        for _ in range(5):
            await asyncio.sleep(0)
            group.beat()
        a_owns = set(group.owned["a"])
        assert a_owns and group.owned["a"] | group.owned["b"] == ALL
        # Asked once; from then on the watch waits for Ray's notices: however many rounds
        # pass, no call is made to the actor (a polling watch checks it again and again).
        assert actor.checks == 1

        actor.set_unreachable()
        for _ in range(20):  # unreachable through many heartbeat rounds
            await asyncio.sleep(0)
            group.beat()
        assert w.unreachable and actor.checks == 1
        assert "a" in group.members() and group.owned["a"] == a_owns
        assert not group.owned["b"] & a_owns  # b was granted none of them meanwhile

        actor.set_unreachable(False)
        for _ in range(5):
            await asyncio.sleep(0)
        assert not w.unreachable and not task.done()

        actor.renew()  # a notice may have been missed: the watch asks the actor again
        for _ in range(5):
            await asyncio.sleep(0)
        assert actor.checks == 2 and not task.done()

        actor.set_unreachable()  # restarting, then dead: both notices count, in order
        actor.kill()
        await asyncio.wait_for(task, 5)
        assert died == ["a"] and not actor.listening
        for _ in range(3):
            group.beat()
        assert group.owned["b"] == ALL
        group.assert_no_overlap()

    asyncio.run(scenario())


def test_an_actor_dead_before_its_watch_began_loses_its_members_at_the_first_check():
    async def scenario() -> None:
        group = Group()
        actor = FakeMemberActor()
        actor.dead = True  # no notice will come: it was published before
        w, died = watch(group, actor)
        await asyncio.wait_for(w.run(), 5)
        assert died == ["a"] and actor.checks == 1

    asyncio.run(scenario())


def test_an_unreachable_member_is_removed_by_its_session_not_by_the_watch():
    async def scenario() -> None:
        group = Group()
        actor = FakeMemberActor()
        w, died = watch(group, actor)
        task = asyncio.create_task(w.run())
        group.beat()
        group.beat()
        actor.set_unreachable()
        for _ in range(10):
            await asyncio.sleep(0)
        assert "a" in group.members()
        group.clock.advance(SESSION_MS + 1)  # a is silent, b is not
        group.coordinator.heartbeat("g", "b", sorted(group.owned["b"]))
        assert group.coordinator.expire(TOPICS) == [("g", "a")]
        w.poke()  # (as the coordinator's service does when members go)
        await asyncio.wait_for(task, 5)  # nothing left to watch
        assert died == []

    asyncio.run(scenario())
