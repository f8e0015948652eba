"""Consumer groups without Ray: the Group state machine (raylog/groups/group.py) and the
GroupCoordinator (raylog/groups/coordinator.py), with a fake clock in ms."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from raylog.errors import (
    CommitFailedError,
    GroupNotEmptyError,
    IllegalGenerationError,
    NotPartitionOwnerError,
    UnknownGroupError,
    UnknownMemberError,
)
from raylog.groups.assignors import ASSIGNORS
from raylog.groups.coordinator import (
    OFFSETS_TOPIC_PARTITIONS,
    GroupCoordinator,
    OffsetAndMetadata,
)
from raylog.groups.group import Group, GroupState, Heartbeat
from raylog.records.partitioner import key_partition
from raylog.types import TopicPartition

SESSION_MS = 1_000


def tps(topic: str, *partitions: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in partitions}


def range_of(n: int) -> set[TopicPartition]:
    return tps("t", *range(n))


def check_ownership(group: Group) -> None:
    """Invariant 4 on the group's own records: no partition ever had two owners, and the
    owner map agrees with the members' owned sets."""
    for generation, snapshot in group.history:
        held = Counter(tp for owned in snapshot.values() for tp in owned)
        assert not [tp for tp, n in held.items() if n > 1], (generation, snapshot)
    assert {tp: m.member_id for m in group.members.values() for tp in m.owned} == group.owner


class Clock:
    """A fake clock in ms for the coordinator."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


# == Group ========================================================================================


class Harness:
    """A group with a fake clock, checked after every step; members remember their last answer
    the way a consumer does, and release what they were told to revoke when asked to."""

    def __init__(self, topics: dict[str, int], assignor: str = "cooperative_sticky") -> None:
        self.group = Group("g", assignor)
        self.topics = dict(topics)
        self.now = 0
        self.last: dict[str, Heartbeat] = {}

    def join(self, member_id: str, topics=None, pattern=None, actor_id=None):
        member = self.group.join(member_id, "client", topics, pattern, SESSION_MS, self.now,
                                 self.topics, actor_id)
        check_ownership(self.group)
        return member

    def beat(self, member_id: str, release: bool = True) -> Heartbeat:
        last = self.last.get(member_id)
        owned = set(last.owned) if last else set()
        if release and last:
            owned -= last.revoke
        answer = self.group.heartbeat(member_id, sorted(owned), self.now)
        self.last[member_id] = answer
        check_ownership(self.group)
        return answer

    def leave(self, member_id: str) -> bool:
        self.last.pop(member_id, None)
        removed = self.group.remove(member_id, self.topics)
        check_ownership(self.group)
        return removed

    def change_topics(self, **topics: int) -> None:
        self.topics = {t: n for t, n in {**self.topics, **topics}.items() if n}
        self.group.topics_changed(self.topics)
        check_ownership(self.group)

    def settle(self, rounds: int = 3) -> None:
        """Every member heartbeats, releasing, `rounds` times in turn: the first round tells each
        its revocations, the second releases them, the third grants what others released."""
        for _ in range(rounds):
            for member_id in sorted(self.group.members):
                self.beat(member_id)

    def owned(self, member_id: str) -> set[TopicPartition]:
        return set(self.group.members[member_id].owned)

    def target(self, member_id: str) -> set[TopicPartition]:
        return set(self.group.members[member_id].target)


def test_unknown_assignor_is_refused():
    with pytest.raises(ValueError, match="unknown assignor 'nope'"):
        Group("g", "nope")


@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
def test_first_member_is_granted_everything_on_its_first_heartbeat(assignor):
    h = Harness({"t": 3}, assignor)
    assert h.group.state is GroupState.EMPTY
    member = h.join("a", ["t"])
    assert member.target == tps("t", 0, 1, 2) and not member.owned
    assert h.group.state is GroupState.RECONCILING
    answer = h.beat("a")
    assert answer == Heartbeat(h.group.generation, frozenset(tps("t", 0, 1, 2)), frozenset(),
                               False)
    assert h.group.state is GroupState.STABLE
    assert h.group.members["a"].generation == h.group.generation


def test_a_member_with_nothing_to_own_is_stable_at_once():
    h = Harness({"t": 2})
    h.join("a", ["other"])
    assert h.group.state is GroupState.STABLE
    assert h.beat("a") == Heartbeat(1, frozenset(), frozenset(), False)


def test_generation_increments_on_every_membership_and_topic_change():
    h = Harness({"t": 4})
    assert h.group.generation == 0
    h.join("a", ["t"])
    assert h.group.generation == 1
    h.beat("a")
    assert h.group.generation == 1  # heartbeats never change it
    h.join("b", ["t"])
    assert h.group.generation == 2
    h.join("b", ["t"])
    assert h.group.generation == 3  # re-subscribing is a change too
    h.change_topics(t=6)
    assert h.group.generation == 4
    h.leave("b")
    assert h.group.generation == 5
    assert not h.leave("b")
    assert h.group.generation == 5  # removing an unknown member is not a change
    h.now = SESSION_MS + 1
    assert h.group.expire(h.now, h.topics) == ["a"]
    assert h.group.generation == 6
    assert h.group.expire(h.now, h.topics) == []
    assert h.group.generation == 6
    assert Group("restarted", generation=41).generation == 41


def test_handoff_waits_for_the_old_owner_to_release():
    h = Harness({"t": 6})
    h.join("a", ["t"])
    h.beat("a")
    assert h.owned("a") == tps("t", *range(6))

    h.join("b", ["t"])
    moving = h.target("b")
    assert len(moving) == 3 and moving <= h.owned("a")
    assert h.group.state is GroupState.RECONCILING

    # b asks first: nothing is free yet.
    answer = h.beat("b")
    assert not answer.owned and answer.pending
    # a heartbeats still owning everything: it is told what to revoke, and keeps owning it.
    answer = h.beat("a", release=False)
    assert answer.revoke == moving and answer.owned == frozenset(range_of(6))
    assert h.beat("b").owned == frozenset()
    # a heartbeats again without releasing (its listener is still committing): still a's.
    assert h.beat("a", release=False).revoke == moving
    assert h.beat("b").owned == frozenset()
    assert all(h.group.owner[tp] == "a" for tp in moving)

    # a releases; b gets them on its next heartbeat.
    answer = h.beat("a")
    assert answer.owned == frozenset(h.target("a")) and not answer.revoke
    assert not set(h.group.owner) & moving
    answer = h.beat("b")
    assert answer.owned == moving and not answer.pending and not answer.revoke
    assert h.group.state is GroupState.STABLE


@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
def test_no_partition_ever_has_two_owners_while_members_come_and_go(assignor):
    h = Harness({"t": 5, "u": 3}, assignor)
    for member_id in ["a", "b", "c"]:
        h.join(member_id, ["t", "u"])
        if "b" in h.group.members:
            h.beat("b", release=False)
        h.beat(member_id)
    h.settle()
    assert h.group.state is GroupState.STABLE
    h.leave("a")
    h.join("d", ["t"])
    h.beat("d")
    h.beat("c", release=False)
    h.settle()
    assert h.group.state is GroupState.STABLE
    assert set(h.group.owner) == tps("t", *range(5)) | tps("u", 0, 1, 2)


def test_a_removed_members_partitions_go_to_others_on_their_next_heartbeat():
    h = Harness({"t": 4})
    h.join("a", ["t"])
    h.join("b", ["t"])
    h.settle()
    held_by_b = h.owned("b")
    assert held_by_b and h.group.state is GroupState.STABLE
    generation = h.group.generation
    assert h.leave("b")
    assert h.group.generation == generation + 1
    assert not set(h.group.owner) & held_by_b  # free at once: b is gone
    assert h.target("a") == range_of(4)
    answer = h.beat("a")
    assert answer.owned == frozenset(range_of(4)) and not answer.pending
    assert h.group.state is GroupState.STABLE


def test_expire_removes_members_past_their_session_timeout():
    h = Harness({"t": 2})
    h.join("a", ["t"])
    h.join("b", ["t"])
    h.settle()
    h.now = 500
    h.beat("b")
    h.now = SESSION_MS            # a was last seen at 0: exactly the timeout is still alive
    assert h.group.expire(h.now, h.topics) == []
    h.now = SESSION_MS + 1
    assert h.group.expire(h.now, h.topics) == ["a"]
    check_ownership(h.group)
    assert set(h.group.members) == {"b"}
    assert h.beat("b").owned == frozenset(range_of(2))
    h.now = 10 * SESSION_MS
    assert h.group.expire(h.now, h.topics) == ["b"]
    assert h.group.state is GroupState.EMPTY and not h.group.owner


def test_time_the_coordinator_did_not_run_does_not_count_against_sessions():
    clock = Clock()
    c = GroupCoordinator(clock)
    member = c.join("g", None, "a", ["t"], None, SESSION_MS, "range", {"t": 1}).member_id
    clock.now = 3 * SESSION_MS         # the controller was stopped: nobody could be heard
    c.credit(3 * SESSION_MS - 10)      # its own stall, credited: seen 10 ms ago, as it were
    assert c.expire({"t": 1}) == []
    clock.now += SESSION_MS - 10       # silent for exactly a session of running time
    assert c.expire({"t": 1}) == []
    clock.now += 1                     # past it: gone
    assert c.expire({"t": 1}) == [("g", member)]


def test_a_join_refreshes_the_session():
    h = Harness({"t": 1})
    h.join("a", ["t"])
    h.now = 900
    h.join("a", ["t"])
    h.now = 1_500
    assert h.group.expire(h.now, h.topics) == []


def test_added_partitions_are_assigned_and_granted():
    h = Harness({"t": 2})
    h.join("a", ["t"])
    h.join("b", ["t"])
    h.settle()
    h.change_topics(t=4)
    assert h.target("a") | h.target("b") == range_of(4)
    assert h.group.state is GroupState.RECONCILING
    h.settle()
    assert h.group.state is GroupState.STABLE
    assert set(h.group.owner) == range_of(4)


def test_a_deleted_topic_is_dropped_from_ownership_at_once():
    h = Harness({"t": 2, "u": 2})
    h.join("a", ["t", "u"])
    h.settle()
    h.change_topics(u=0)
    assert h.group.members["a"].topics == {"t"}
    assert h.owned("a") == h.target("a") == range_of(2)
    assert h.group.state is GroupState.STABLE
    # The member still reports u until it hears of the change; that changes nothing.
    answer = h.beat("a", release=False)
    assert answer.owned == frozenset(range_of(2)) and not answer.revoke
    # Recreated, the topic is subscribed again (the subscription named it).
    h.change_topics(u=1)
    assert h.group.members["a"].topics == {"t", "u"}
    h.settle()
    assert h.owned("a") == range_of(2) | tps("u", 0)


def test_a_subscription_to_a_missing_topic_resolves_when_it_appears():
    h = Harness({"t": 1})
    h.join("a", ["t", "later"])
    assert h.group.members["a"].topics == {"t"}
    h.change_topics(later=2)
    assert h.group.members["a"].topics == {"t", "later"}
    h.settle()
    assert h.owned("a") == tps("t", 0) | tps("later", 0, 1)


def test_pattern_subscriptions_pick_up_new_topics_but_never_internal_ones():
    h = Harness({"orders": 1, "payments": 1, "__consumer_offsets": 8, "__orders": 1})
    h.join("all", pattern=".*")
    h.join("o", pattern="o.*|__o.*")
    assert h.group.members["all"].topics == {"orders", "payments"}
    assert h.group.members["o"].topics == {"orders"}
    h.change_topics(orders_eu=2, __other=1)
    assert h.group.members["o"].topics == {"orders", "orders_eu"}
    assert h.group.members["all"].topics == {"orders", "orders_eu", "payments"}
    h.settle()
    assert h.group.state is GroupState.STABLE
    assert {tp.topic for tp in h.group.owner} == {"orders", "orders_eu", "payments"}


def test_resubscribing_revokes_what_is_no_longer_subscribed():
    h = Harness({"t": 1, "u": 1})
    h.join("a", ["t", "u"])
    h.settle()
    h.join("a", ["u"])
    assert h.target("a") == tps("u", 0)
    assert h.beat("a", release=False).revoke == tps("t", 0)
    h.settle()
    assert h.owned("a") == tps("u", 0) and h.group.state is GroupState.STABLE


# -- commits -------------------------------------------------------------------------------------


def test_commit_checks_generation_ownership_and_membership():
    h = Harness({"t": 2})
    h.join("a", ["t"])
    h.beat("a")
    gen_a = h.group.members["a"].generation
    h.group.check_commit("a", gen_a, sorted(range_of(2)))
    h.group.check_commit("a", gen_a, [("t", 0)])  # plain tuples, as they arrive over Ray
    h.group.check_commit("a", gen_a, [])
    with pytest.raises(IllegalGenerationError, match="generation"):
        h.group.check_commit("a", gen_a - 1, [("t", 0)])
    with pytest.raises(IllegalGenerationError):
        h.group.check_commit("a", gen_a + 1, [("t", 0)])
    with pytest.raises(NotPartitionOwnerError, match="does not own"):
        h.group.check_commit("a", gen_a, [("t", 0), ("t", 7)])
    with pytest.raises(UnknownMemberError, match="join again"):
        h.group.check_commit("zombie", gen_a, [("t", 0)])
    with pytest.raises(UnknownMemberError, match="active members"):
        h.group.check_commit(None, -1, [("t", 0)])
    for error in (IllegalGenerationError, NotPartitionOwnerError, UnknownMemberError):
        assert issubclass(error, CommitFailedError)


def test_commit_of_a_partition_being_revoked_is_allowed_until_released():
    h = Harness({"t": 2})
    h.join("a", ["t"])
    h.beat("a")
    h.join("b", ["t"])
    answer = h.beat("a", release=False)
    assert answer.revoke
    (revoked,) = answer.revoke
    # a commits what it processed before giving the partition up: the usual listener commit.
    h.group.check_commit("a", answer.generation, [revoked])
    h.beat("a")
    with pytest.raises(NotPartitionOwnerError):
        h.group.check_commit("a", answer.generation, [revoked])
    h.beat("b")
    h.group.check_commit("b", h.group.members["b"].generation, [revoked])


def test_commit_from_a_stale_generation_is_refused_after_a_heartbeat():
    h = Harness({"t": 4})
    h.join("a", ["t"])
    old = h.beat("a").generation
    h.join("b", ["t"])
    # a has not heard of the new generation yet: its commits at the old one still count.
    h.group.check_commit("a", old, [("t", 0)])
    new = h.beat("a", release=False).generation
    assert new > old
    with pytest.raises(IllegalGenerationError):
        h.group.check_commit("a", old, [("t", 0)])
    h.group.check_commit("a", new, [("t", 0)])


def test_commit_from_a_removed_member_is_refused():
    h = Harness({"t": 1})
    h.join("a", ["t"])
    generation = h.beat("a").generation
    h.leave("a")
    with pytest.raises(UnknownMemberError):
        h.group.check_commit("a", generation, [("t", 0)])
    with pytest.raises(UnknownMemberError):
        h.group.heartbeat("a", [("t", 0)], h.now)
    h.group.check_commit(None, -1, [("t", 0)])  # outside group management, group empty


def test_describe_reports_members_and_state():
    h = Harness({"t": 2})
    h.join("a", ["t"], actor_id="actor-1")
    h.beat("a")
    out = h.group.describe()
    assert out["group_id"] == "g" and out["state"] == "stable"
    assert out["generation"] == 1 and out["assignor"] == "cooperative_sticky"
    (member,) = out["members"]
    assert member == {"member_id": "a", "client_id": "client", "actor_id": "actor-1",
                      "kafka": False, "generation": 1, "topics": ["t"],
                      "owned": sorted(range_of(2)), "target": sorted(range_of(2))}


# -- random sequences ----------------------------------------------------------------------------

MEMBER_IDS = ["m0", "m1", "m2", "m3"]
TOPIC_NAMES = ["a", "b", "c", "__internal"]
PATTERNS = [".*", "a|c", "b.*", "_.*"]


class GroupMachine(RuleBasedStateMachine):
    """Random joins, leaves, heartbeats (releasing or not), timeouts and topic changes.

    Members behave like consumers: they report what their last answer said they own, minus
    what it told them to revoke when they release. ``released`` holds the members that made a
    releasing heartbeat knowing the latest change (their last answer was of the current
    generation), ``after_all`` those that heartbeated again once every member had. When every
    member is in ``after_all``, the group must be stable with every subscribed partition owned.
    """

    @initialize(assignor=st.sampled_from(sorted(ASSIGNORS)))
    def start(self, assignor):
        self.group = Group("g", assignor)
        self.topics = {"a": 2, "b": 3}
        self.now = 0
        self.last: dict[str, Heartbeat | None] = {}
        self.seen_at: dict[str, int] = {}         # generation of each member's last answer
        self.released: set[str] = set()           # released knowing the latest change
        self.after_all: set[str] = set()          # heartbeated after all had released
        self.generation = self.group.generation
        self.deleted: set[TopicPartition] = set()  # partitions that ever went away

    # -- steps -----------------------------------------------------------------------------------

    def _changed(self) -> None:
        assert self.group.generation > self.generation
        self.generation = self.group.generation
        self.released.clear()
        self.after_all.clear()

    def _forget(self, member_id: str) -> None:
        del self.last[member_id]
        self.seen_at.pop(member_id, None)

    def _snapshot(self) -> dict[str, set[TopicPartition]]:
        return {m.member_id: set(m.owned) for m in self.group.members.values()}

    @rule(member_id=st.sampled_from(MEMBER_IDS),
          topics=st.frozensets(st.sampled_from(TOPIC_NAMES), max_size=3),
          pattern=st.none() | st.sampled_from(PATTERNS))
    def join(self, member_id, topics, pattern):
        before = self._snapshot()
        self.group.join(member_id, "client", None if pattern else sorted(topics), pattern,
                        SESSION_MS, self.now, self.topics)
        self.last.setdefault(member_id, None)
        assert self._snapshot() == {**before, member_id: before.get(member_id, set())}
        self._changed()

    @precondition(lambda self: self.group.members)
    @rule(data=st.data())
    def leave(self, data):
        member_id = data.draw(st.sampled_from(sorted(self.group.members)))
        assert self.group.remove(member_id, self.topics)
        self._forget(member_id)
        self._changed()

    @precondition(lambda self: self.group.members)
    @rule(data=st.data(), release=st.booleans())
    def heartbeat(self, data, release):
        self._beat(data.draw(st.sampled_from(sorted(self.group.members))), release)

    def _beat(self, member_id, release):
        last = self.last[member_id]
        owned = set(last.owned) if last else set()
        if release and last:
            owned -= last.revoke
        # Its last answer is of this generation: the revocations it knows are the current ones.
        informed = self.seen_at.get(member_id) == self.group.generation
        before = set(self.group.members[member_id].owned)
        answer = self.group.heartbeat(member_id, sorted(owned), self.now)
        member = self.group.members[member_id]
        granted = set(answer.owned) - before
        assert granted <= member.target, "granted a partition outside the target"
        assert answer.owned == frozenset(member.owned)
        assert answer.revoke == frozenset(member.owned - member.target)
        assert answer.pending == bool(member.target - member.owned)
        assert answer.generation == self.group.generation == member.generation
        self.last[member_id] = answer
        self.seen_at[member_id] = answer.generation
        if set(self.group.members) <= self.released:
            self.after_all.add(member_id)
        if informed and (release or not last.revoke):
            self.released.add(member_id)

    @rule(ms=st.integers(0, 700))
    def tick(self, ms):
        self.now += ms
        expired = self.group.expire(self.now, self.topics)
        for member_id in expired:
            self._forget(member_id)
        if expired:
            self._changed()

    @rule(topic=st.sampled_from(TOPIC_NAMES), partitions=st.integers(0, 4))
    def change_topic(self, topic, partitions):
        old = self.topics.get(topic, 0)
        if partitions < old:  # a topic never shrinks: it is deleted
            partitions = 0
        self.deleted |= tps(topic, *range(partitions, old))
        self.topics = {t: n for t, n in {**self.topics, topic: partitions}.items() if n}
        self.group.topics_changed(self.topics)
        self._changed()

    @precondition(lambda self: self.group.members)
    @rule()
    def settle(self):
        # One round to learn the current revocations, one to release them, one to be granted
        # what members later in the round released.
        for _ in range(3):
            for member_id in sorted(self.group.members):
                self._beat(member_id, release=True)
        self.check_settled()

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def one_owner_per_partition(self):
        check_ownership(self.group)

    @invariant()
    def owned_is_target_or_not_yet_released(self):
        # Grants come from the target only (checked on every heartbeat), so whatever a member
        # owns outside its target it was told it owns and has not released yet; and the group
        # never thinks a member owns a partition the member was not told about.
        for member in self.group.members.values():
            last = self.last[member.member_id]
            assert member.owned <= (set(last.owned) if last else set())

    @invariant()
    def members_never_hold_the_same_live_partition(self):
        held = Counter(tp for m in self.group.members
                       for tp in (self.last[m].owned if self.last[m] else ())
                       if tp not in self.deleted)
        assert not [tp for tp, n in held.items() if n > 1]

    @invariant()
    def settled_after_everyone_released_and_heartbeated(self):
        if self.group.members and set(self.group.members) <= self.after_all:
            self.check_settled()

    @invariant()
    def state_matches_members(self):
        members = self.group.members.values()
        if not members:
            assert self.group.state is GroupState.EMPTY
        elif all(m.owned == m.target for m in members):
            assert self.group.state is GroupState.STABLE
        else:
            assert self.group.state is GroupState.RECONCILING

    def check_settled(self):
        assert self.group.state is GroupState.STABLE, self.group.describe()
        subscribed = {TopicPartition(t, p) for m in self.group.members.values()
                      for t in m.topics for p in range(self.topics[t])}
        assert set(self.group.owner) == subscribed
        assert all(tp.topic in self.group.members[m].topics
                   for tp, m in self.group.owner.items())


GroupMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_group_random_sequences = GroupMachine.TestCase


# == GroupCoordinator =============================================================================

TOPICS = {"t": 4, "u": 2}


def join(c: GroupCoordinator, group_id="g", member_id=None, topics=("t",), assignor="range",
         actor_id=None, durable=True):
    """Join; with ``durable``, the group record naming the member is then written, as the
    controller's store does."""
    member = c.join(group_id, member_id, "client", list(topics), None, SESSION_MS, assignor,
                    TOPICS, actor_id)
    if durable:
        c.membership_durable(group_id, c.group(group_id).generation)
    return member


def commit_of(*partitions: tuple[str, int]) -> dict[TopicPartition, OffsetAndMetadata]:
    return {TopicPartition(*tp): OffsetAndMetadata(0) for tp in partitions}


def replay(records) -> GroupCoordinator:
    """A fresh coordinator (a restarted controller) that replayed ``records`` in order."""
    c = GroupCoordinator(Clock())
    for key, value in records:
        c.load(key, value)
    return c


def test_join_creates_the_group_and_names_the_member():
    c = GroupCoordinator(Clock())
    assert c.group_ids() == []
    member = join(c)
    assert member.member_id.startswith("client-") and len(member.member_id) > len("client-")
    group = c.group("g")
    assert group.assignor == "range" and group.generation == 1
    assert set(group.members) == {member.member_id}
    assert join(c, member_id="mine").member_id == "mine"
    assert c.group("g").generation == 2
    assert c.group_ids() == ["g"]
    assert join(c).member_id != member.member_id


def test_join_uses_the_coordinators_clock():
    clock = Clock()
    c = GroupCoordinator(clock)
    clock.now = 5_000
    join(c, member_id="a")
    clock.now = 5_000 + SESSION_MS
    assert c.expire(TOPICS) == []
    clock.now += 1
    assert c.expire(TOPICS) == [("g", "a")]


def test_heartbeat_and_leave_through_the_coordinator():
    c = GroupCoordinator(Clock())
    join(c, member_id="a", topics=("t", "u"))
    answer = c.heartbeat("g", "a", [])
    assert answer.owned == frozenset(tps("t", 0, 1, 2, 3) | tps("u", 0, 1))
    assert c.leave("g", "a", TOPICS)
    assert not c.leave("g", "a", TOPICS)
    assert not c.leave("nope", "a", TOPICS)
    assert c.group("g").state is GroupState.EMPTY


def test_a_group_that_empties_restarts_above_its_generation():
    c = GroupCoordinator(Clock())
    join(c, member_id="a")
    join(c, member_id="b")
    c.leave("g", "a", TOPICS)
    c.leave("g", "b", TOPICS)
    assert c.group("g").generation == 4
    join(c, member_id="a", assignor="round_robin")  # a new group, with the new assignor
    assert c.group("g").generation == 5
    assert c.group("g").assignor == "round_robin"


def test_a_group_restarts_above_its_persisted_generation():
    c = replay([GroupCoordinator.generation_record("g", 41)])
    assert c.generations == {"g": 41}
    join(c, member_id="a")
    assert c.group("g").generation == 42
    # The persisted generation wins over a lower one in memory, and the other way round.
    c.leave("g", "a", TOPICS)
    c.generations["g"] = 100
    join(c, member_id="a")
    assert c.group("g").generation == 101
    c.leave("g", "a", TOPICS)
    c.generations["g"] = 3
    join(c, member_id="a")
    assert c.group("g").generation == 103


def test_a_commit_from_before_a_restart_stays_fenced():
    c = GroupCoordinator(Clock())
    join(c, member_id="a")
    old = c.heartbeat("g", "a", []).generation
    restarted = replay([GroupCoordinator.generation_record("g", c.group("g").generation)])
    with pytest.raises(UnknownMemberError):
        restarted.check_commit("g", "a", old, commit_of(("t", 0)))
    join(restarted, member_id="a")
    with pytest.raises((IllegalGenerationError, NotPartitionOwnerError)):
        restarted.check_commit("g", "a", old, commit_of(("t", 0)))
    assert restarted.group("g").generation > old


def test_after_a_restart_a_member_missing_from_the_records_is_unknown():
    # Records without a membership (a group persisted only its generation): nobody is
    # pending, so a member is unknown and loses what it held before it joins again.
    # (Members that are in the records rejoin keeping their partitions: test_group_recovery.)
    c = GroupCoordinator(Clock())
    join(c, member_id="a")
    c.heartbeat("g", "a", [])
    records = [GroupCoordinator.generation_record("g", c.group("g").generation)]
    with_offsets = replay([*records, GroupCoordinator.offset_record(
        "g", TopicPartition("t", 0), OffsetAndMetadata(3))])
    with pytest.raises(UnknownMemberError):
        with_offsets.heartbeat("g", "a", [("t", 0)])
    # A group that never committed (only its generation persisted) must behave the same.
    without_offsets = replay(records)
    with pytest.raises(UnknownMemberError):
        without_offsets.heartbeat("g", "a", [("t", 0)])


def test_offset_and_generation_records_round_trip_through_load():
    c = GroupCoordinator(Clock())
    offsets = {TopicPartition("t", 0): OffsetAndMetadata(10, "meta", 1_234),
               TopicPartition("t", 3): OffsetAndMetadata(0),
               TopicPartition("u", 1): OffsetAndMetadata(7, "", 99)}
    c.apply_commit("g", offsets)
    c.apply_commit("h", {TopicPartition("t", 0): OffsetAndMetadata(5)})
    records = [GroupCoordinator.offset_record(group_id, tp, om)
               for group_id, committed in c.offsets.items() for tp, om in committed.items()]
    records += [GroupCoordinator.generation_record("g", 7),
                GroupCoordinator.generation_record("g", 9),  # the later record wins
                GroupCoordinator.generation_record("h", 2)]
    restarted = replay(records)
    assert restarted.offsets == c.offsets
    assert restarted.generations == {"g": 9, "h": 2}
    assert restarted.committed("g", sorted(offsets)) == offsets
    assert restarted.group_ids() == ["g", "h"]


def test_records_are_keyed_per_group_and_partition():
    key, value = GroupCoordinator.offset_record("g", TopicPartition("t", 0), OffsetAndMetadata(1))
    other, _ = GroupCoordinator.offset_record("g", TopicPartition("t", 1), OffsetAndMetadata(1))
    assert isinstance(key, bytes) and isinstance(value, bytes) and key != other
    assert GroupCoordinator.offset_record("g", TopicPartition("t", 0), None) == (key, None)
    gkey, gvalue = GroupCoordinator.generation_record("g", 3)
    assert gkey not in (key, other) and isinstance(gvalue, bytes)
    assert GroupCoordinator.generation_record("g", None) == (gkey, None)
    assert GroupCoordinator.generation_record("h", 3)[0] != gkey


def test_tombstones_delete_offsets_and_generations():
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    restarted = replay([
        GroupCoordinator.offset_record("g", tp0, OffsetAndMetadata(5)),
        GroupCoordinator.offset_record("g", tp1, OffsetAndMetadata(6)),
        GroupCoordinator.generation_record("g", 4),
        GroupCoordinator.offset_record("g", tp0, None),
        GroupCoordinator.generation_record("g", None),
        GroupCoordinator.offset_record("nobody", tp0, None),  # a tombstone for nothing
        GroupCoordinator.generation_record("nobody", None),
    ])
    assert restarted.committed("g", [tp0, tp1]) == {tp0: None, tp1: OffsetAndMetadata(6)}
    assert restarted.generations == {}
    assert "nobody" not in restarted.group_ids()


def test_a_deleted_group_stays_deleted_after_replay():
    # What the controller's delete_group writes: a tombstone per offset, then one for the
    # group, then forget(). Replaying the same records must also forget the group.
    tp = TopicPartition("t", 0)
    live = GroupCoordinator(Clock())
    live.apply_commit("g", {tp: OffsetAndMetadata(5)})
    live.generations["g"] = 3
    records = [GroupCoordinator.offset_record("g", tp, OffsetAndMetadata(5)),
               GroupCoordinator.generation_record("g", 3)]
    live.check_empty("g")
    records += [GroupCoordinator.offset_record("g", committed, None)
                for committed in live.offsets["g"]]
    records.append(GroupCoordinator.generation_record("g", None))
    live.forget("g")
    restarted = replay(records)
    assert restarted.group_ids() == live.group_ids() == []
    with pytest.raises(UnknownGroupError):
        restarted.check_empty("g")


def test_committed_returns_none_for_partitions_without_a_commit():
    c = GroupCoordinator(Clock())
    tp = TopicPartition("t", 0)
    assert c.committed("g", [tp]) == {tp: None}
    c.apply_commit("g", {tp: OffsetAndMetadata(3)})
    c.apply_commit("g", {tp: OffsetAndMetadata(8, "x")})
    assert c.committed("g", [("t", 0), ("t", 1)]) == {tp: OffsetAndMetadata(8, "x"),
                                                      TopicPartition("t", 1): None}
    assert c.committed("other", [tp]) == {tp: None}


def test_check_commit_through_the_coordinator():
    c = GroupCoordinator(Clock())
    c.check_commit("unknown", None, -1, commit_of(("t", 0)))  # manual assignment, no group
    with pytest.raises(UnknownGroupError):
        c.check_commit("unknown", "a", 1, commit_of(("t", 0)))
    join(c, member_id="a")
    generation = c.heartbeat("g", "a", []).generation
    c.check_commit("g", "a", generation, commit_of(("t", 0)))
    with pytest.raises(IllegalGenerationError):
        c.check_commit("g", "a", generation - 1, commit_of(("t", 0)))
    with pytest.raises(NotPartitionOwnerError):
        c.check_commit("g", "a", generation, commit_of(("u", 0)))
    with pytest.raises(UnknownMemberError):
        c.check_commit("g", "b", generation, commit_of(("t", 0)))
    with pytest.raises(UnknownMemberError):
        c.check_commit("g", None, -1, commit_of(("t", 0)))


def test_check_empty():
    c = GroupCoordinator(Clock())
    with pytest.raises(UnknownGroupError, match="'g'"):
        c.check_empty("g")
    join(c, member_id="a")
    with pytest.raises(GroupNotEmptyError, match="1 active members"):
        c.check_empty("g")
    c.leave("g", "a", TOPICS)
    c.check_empty("g")
    c.apply_commit("offsets-only", {TopicPartition("t", 0): OffsetAndMetadata(1)})
    c.check_empty("offsets-only")


def test_forget_drops_the_group_its_offsets_and_generation():
    c = GroupCoordinator(Clock())
    join(c, member_id="a")
    c.leave("g", "a", TOPICS)
    c.apply_commit("g", {TopicPartition("t", 0): OffsetAndMetadata(1)})
    c.generations["g"] = c.group("g").generation
    c.forget("g")
    assert c.group_ids() == [] and c.generations == {} and c.offsets == {}
    with pytest.raises(UnknownGroupError):
        c.group("g")
    with pytest.raises(UnknownGroupError):
        c.describe("g")
    assert c.committed("g", [("t", 0)]) == {TopicPartition("t", 0): None}
    c.forget("never-existed")
    join(c, member_id="a")
    assert c.group("g").generation == 1  # a forgotten group starts from scratch


def test_members_of_actor():
    c = GroupCoordinator(Clock())
    join(c, "g", "a", actor_id="actor-1")
    join(c, "g", "b", actor_id="actor-2")
    join(c, "h", "c", actor_id="actor-1")
    join(c, "h", "d")
    assert sorted(c.members_of_actor("actor-1")) == [("g", "a"), ("h", "c")]
    assert c.members_of_actor("actor-2") == [("g", "b")]
    assert c.members_of_actor("actor-3") == []
    c.leave("g", "a", TOPICS)
    assert c.members_of_actor("actor-1") == [("h", "c")]


def test_topics_changed_reaches_groups_with_members_only():
    c = GroupCoordinator(Clock())
    join(c, "g", "a")
    join(c, "h", "b")
    c.leave("h", "b", TOPICS)
    generations = {g: c.group(g).generation for g in ("g", "h")}
    c.topics_changed({**TOPICS, "t": 6})
    assert c.group("g").generation == generations["g"] + 1
    assert c.group("h").generation == generations["h"]
    assert c.group("g").members["a"].target == tps("t", *range(6))


def test_group_with_only_offsets_is_an_empty_group_at_its_persisted_generation():
    c = replay([GroupCoordinator.offset_record("g", TopicPartition("t", 0),
                                               OffsetAndMetadata(4)),
                GroupCoordinator.generation_record("g", 6)])
    group = c.group("g")
    assert group.state is GroupState.EMPTY and group.generation == 6
    with pytest.raises(UnknownGroupError):
        c.group("nope")


@pytest.mark.parametrize("group_id", ["g", "orders-consumers", "", "ünïcode", "x" * 300])
@pytest.mark.parametrize("partitions", [1, 3, OFFSETS_TOPIC_PARTITIONS, 50])
def test_partition_for_is_stable_and_in_range(group_id, partitions):
    p = GroupCoordinator.partition_for(group_id, partitions)
    assert 0 <= p < partitions
    assert GroupCoordinator.partition_for(group_id, partitions) == p
    assert p == key_partition(group_id.encode(), partitions)


def test_partition_for_matches_kafkas_hash_and_defaults_to_the_offsets_topic_size():
    assert GroupCoordinator.partition_for("foobar", 50) == 16  # Kafka's murmur2 test vector
    assert GroupCoordinator.partition_for("g") == GroupCoordinator.partition_for(
        "g", OFFSETS_TOPIC_PARTITIONS)
    spread = {GroupCoordinator.partition_for(f"group-{i}") for i in range(200)}
    assert spread == set(range(OFFSETS_TOPIC_PARTITIONS))


def test_describe_includes_committed_offsets():
    c = GroupCoordinator(Clock())
    join(c, member_id="a", topics=("t",))
    c.heartbeat("g", "a", [])
    c.apply_commit("g", {TopicPartition("t", 1): OffsetAndMetadata(11),
                         TopicPartition("t", 0): OffsetAndMetadata(10)})
    out = c.describe("g")
    assert out["group_id"] == "g" and out["state"] == "stable"
    assert out["assignor"] == "range" and out["generation"] == 1
    assert [m["member_id"] for m in out["members"]] == ["a"]
    assert out["offsets"] == {"t:0": 10, "t:1": 11}
    assert list(out["offsets"]) == ["t:0", "t:1"]
    with pytest.raises(UnknownGroupError):
        c.describe("nope")
