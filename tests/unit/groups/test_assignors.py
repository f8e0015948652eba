"""Partition assignors: range, round-robin and cooperative-sticky (raylog/groups/assignors.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylog.groups.assignors import (
    ASSIGNORS,
    Assignment,
    cooperative_sticky_assign,
    range_assign,
    round_robin_assign,
)
from raylog.types import TopicPartition

ALL = sorted(ASSIGNORS)
BALANCED = ["round_robin", "cooperative_sticky"]  # balanced over all topics, not per topic


def tps(topic: str, *partitions: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


def subs(**members: str) -> dict[str, frozenset[str]]:
    """subs(a="t,u", b="t") -> {"a": {"t", "u"}, "b": {"t"}}"""
    return {m: frozenset(filter(None, topics.split(","))) for m, topics in members.items()}


def wanted(members: Mapping[str, frozenset[str]], topics: Mapping[str, int]
           ) -> set[TopicPartition]:
    """Every partition of an existing topic that some member subscribes to."""
    return {TopicPartition(t, p) for s in members.values() for t in s if t in topics
            for p in range(topics[t])}


def check_valid(out: Assignment, members: Mapping[str, frozenset[str]],
                topics: Mapping[str, int]) -> None:
    """Every member listed; each wanted partition exactly once, to a subscriber; lists sorted."""
    assert set(out) == set(members)
    given_out = Counter(tp for tps_ in out.values() for tp in tps_)
    duplicates = [tp for tp, n in given_out.items() if n > 1]
    assert not duplicates
    assert set(given_out) == wanted(members, topics)
    for member, assigned in out.items():
        assert assigned == sorted(assigned)
        assert all(tp.topic in members[member] for tp in assigned), (member, assigned)


def spread(out: Assignment) -> int:
    counts = [len(v) for v in out.values()]
    return max(counts) - min(counts)


def moved(before: Mapping[str, list[TopicPartition]], after: Assignment) -> int:
    """Partitions that end up with a different member than the one holding them before."""
    owner = {tp: m for m, held in before.items() for tp in held}
    return sum(1 for m, held in after.items() for tp in held if owner.get(tp) != m)


# -- every assignor ------------------------------------------------------------------------------


@pytest.mark.parametrize("assignor", ALL)
@pytest.mark.parametrize("members,topics", [
    (subs(a="t"), {"t": 5}),
    (subs(a="t", b="t", c="t"), {"t": 7}),
    (subs(a="t,u", b="t,u"), {"t": 3, "u": 5}),
    (subs(a="t", b="t", c="t", d="t"), {"t": 2}),  # more members than partitions
    (subs(a="t,u,v", b="t,v", c="u"), {"t": 4, "u": 3, "v": 1}),
    (subs(a="t", b="t"), {"t": 0}),
])
def test_every_subscribed_partition_assigned_exactly_once(assignor, members, topics):
    check_valid(ASSIGNORS[assignor](members, topics), members, topics)


@pytest.mark.parametrize("assignor", ALL)
def test_unsubscribed_and_unknown_topics_get_nothing(assignor):
    members = subs(a="t,ghost", b="t")
    topics = {"t": 4, "other": 3, "__consumer_offsets": 8}
    out = ASSIGNORS[assignor](members, topics)
    check_valid(out, members, topics)
    assert {tp.topic for held in out.values() for tp in held} == {"t"}


@pytest.mark.parametrize("assignor", ALL)
def test_no_members_and_empty_subscriptions(assignor):
    assert ASSIGNORS[assignor]({}, {"t": 3}) == {}
    assert ASSIGNORS[assignor](subs(a="", b=""), {"t": 3}) == {"a": [], "b": []}


@pytest.mark.parametrize("assignor", ALL)
def test_member_of_only_unknown_topics_gets_an_empty_list(assignor):
    out = ASSIGNORS[assignor](subs(a="t", b="nope"), {"t": 3})
    assert out == {"a": tps("t", 0, 1, 2), "b": []}


@pytest.mark.parametrize("assignor", BALANCED)
@pytest.mark.parametrize("n_members", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("topics", [{"t": 1}, {"t": 6}, {"t": 7, "u": 5}, {"t": 3, "u": 3}])
def test_same_subscriptions_are_balanced_overall(assignor, n_members, topics):
    members = {f"m{i}": frozenset(topics) for i in range(n_members)}
    out = ASSIGNORS[assignor](members, topics)
    check_valid(out, members, topics)
    assert spread(out) <= 1


@pytest.mark.parametrize("assignor", ALL)
def test_deterministic_whatever_the_input_order(assignor):
    topics = {"t": 5, "u": 4, "v": 2}
    members = subs(c="t,u", a="t,u,v", b="u,v")
    reordered = dict(reversed(list(members.items())))
    topics_reordered = dict(reversed(list(topics.items())))
    first = ASSIGNORS[assignor](members, topics)
    assert ASSIGNORS[assignor](members, topics) == first
    assert ASSIGNORS[assignor](reordered, topics_reordered) == first


@pytest.mark.parametrize("assignor", ALL)
def test_heterogeneous_subscriptions_go_to_subscribers_only(assignor):
    members = subs(a="t", b="u", c="t,u")
    topics = {"t": 4, "u": 4}
    out = ASSIGNORS[assignor](members, topics)
    check_valid(out, members, topics)
    assert all(tp.topic == "t" for tp in out["a"])
    assert all(tp.topic == "u" for tp in out["b"])


# -- range ---------------------------------------------------------------------------------------


def test_range_gives_contiguous_ranges_first_members_one_more():
    # Kafka's RangeAssignor: 2 members, 3 partitions -> [0, 1] and [2].
    assert range_assign(subs(a="t", b="t"), {"t": 3}) == {"a": tps("t", 0, 1), "b": tps("t", 2)}
    assert range_assign(subs(a="t", b="t", c="t"), {"t": 7}) == {
        "a": tps("t", 0, 1, 2), "b": tps("t", 3, 4), "c": tps("t", 5, 6)}


def test_range_is_per_topic_so_the_first_member_gets_the_extras_of_every_topic():
    # Kafka's known range behaviour: the remainders of each topic all go to the first member.
    out = range_assign(subs(a="t,u", b="t,u"), {"t": 3, "u": 3})
    assert out == {"a": tps("t", 0, 1) + tps("u", 0, 1), "b": tps("t", 2) + tps("u", 2)}


@pytest.mark.parametrize("n_members", [1, 2, 3, 5])
@pytest.mark.parametrize("topics", [{"t": 1}, {"t": 7}, {"t": 4, "u": 9}])
def test_range_is_balanced_per_topic(n_members, topics):
    members = {f"m{i}": frozenset(topics) for i in range(n_members)}
    out = range_assign(members, topics)
    check_valid(out, members, topics)
    for topic in topics:
        per_member = [sum(tp.topic == topic for tp in held) for held in out.values()]
        assert max(per_member) - min(per_member) <= 1


def test_range_splits_a_topic_among_its_subscribers_only():
    out = range_assign(subs(a="t", b="t,u", c="u"), {"t": 4, "u": 3})
    assert out == {"a": tps("t", 0, 1), "b": tps("t", 2, 3) + tps("u", 0, 1), "c": tps("u", 2)}


# -- round robin ---------------------------------------------------------------------------------


def test_round_robin_deals_partitions_in_turn():
    out = round_robin_assign(subs(a="t,u", b="t,u"), {"t": 3, "u": 3})
    assert out == {"a": tps("t", 0, 2) + tps("u", 1), "b": tps("t", 1) + tps("u", 0, 2)}


def test_round_robin_skips_members_not_subscribed():
    out = round_robin_assign(subs(a="t", b="t,u", c="u"), {"t": 3, "u": 2})
    check_valid(out, subs(a="t", b="t,u", c="u"), {"t": 3, "u": 2})
    assert out["a"] and all(tp.topic == "t" for tp in out["a"])
    assert out["c"] and all(tp.topic == "u" for tp in out["c"])


# -- cooperative sticky --------------------------------------------------------------------------


def test_sticky_without_current_ownership_is_balanced():
    out = cooperative_sticky_assign(subs(a="t", b="t", c="t"), {"t": 8})
    check_valid(out, subs(a="t", b="t", c="t"), {"t": 8})
    assert sorted(len(v) for v in out.values()) == [2, 3, 3]


def test_sticky_keeps_a_balanced_assignment_as_is():
    members = subs(a="t", b="t", c="t")
    current = {"a": tps("t", 5, 0), "b": tps("t", 1, 3), "c": tps("t", 4, 2)}
    out = cooperative_sticky_assign(members, {"t": 6}, current)
    assert out == {m: sorted(held) for m, held in current.items()}


def test_sticky_adding_a_member_moves_exactly_the_minimum():
    # 6 partitions, 2 -> 3 members: the newcomer needs 2, and only those 2 move.
    topics = {"t": 6}
    before = cooperative_sticky_assign(subs(a="t", b="t"), topics)
    after = cooperative_sticky_assign(subs(a="t", b="t", c="t"), topics, before)
    check_valid(after, subs(a="t", b="t", c="t"), topics)
    assert moved(before, after) == 2
    assert len(after["c"]) == 2
    assert set(after["a"]) <= set(before["a"]) and set(after["b"]) <= set(before["b"])


@pytest.mark.parametrize("owners,newcomer", [
    ("ab", "c"),  # the newcomer sorts last
    ("bc", "a"),  # the newcomer sorts first
    ("ac", "b"),
])
def test_sticky_adding_a_member_with_an_odd_count_moves_the_minimum(owners, newcomer):
    # 7 partitions, 2 -> 3 members: the newcomer's fair share is 2 (3 + 2 + 2), so 2 moves
    # suffice whichever existing member held 4.
    topics = {"t": 7}
    before = cooperative_sticky_assign({m: frozenset("t") for m in owners}, topics)
    members = {m: frozenset("t") for m in owners + newcomer}
    after = cooperative_sticky_assign(members, topics, before)
    check_valid(after, members, topics)
    assert spread(after) <= 1
    assert moved(before, after) == 2, (before, after)


def test_sticky_keeps_a_balanced_assignment_whoever_holds_the_extra():
    # 7 partitions over 3 members held 2/3/2 is already balanced: nothing should move.
    members = subs(a="t", b="t", c="t")
    current = {"a": tps("t", 0, 1), "b": tps("t", 2, 3, 4), "c": tps("t", 5, 6)}
    out = cooperative_sticky_assign(members, {"t": 7}, current)
    assert out == current


@pytest.mark.parametrize("leaver", ["a", "b", "c"])
def test_sticky_removing_a_member_moves_only_its_partitions(leaver):
    topics = {"t": 7, "u": 2}
    everyone = subs(a="t,u", b="t,u", c="t,u")
    before = cooperative_sticky_assign(everyone, topics)
    rest = {m: s for m, s in everyone.items() if m != leaver}
    after = cooperative_sticky_assign(rest, topics, before)
    check_valid(after, rest, topics)
    assert spread(after) <= 1
    for member in rest:
        assert set(before[member]) <= set(after[member])
    assert moved({m: before[m] for m in rest}, after) == len(before[leaver])


def test_sticky_drops_current_partitions_that_no_longer_qualify():
    members = subs(a="t", b="t,u")
    topics = {"t": 2, "u": 2}
    current = {"a": tps("t", 0, 5) + tps("u", 0) + tps("gone", 0), "b": tps("t", 1)}
    out = cooperative_sticky_assign(members, topics, current)
    check_valid(out, members, topics)
    # a keeps t-0 (still valid and subscribed); only b takes u, so t-1 moves to a for balance.
    assert out == {"a": tps("t", 0, 1), "b": tps("u", 0, 1)}


def test_sticky_gives_a_partition_claimed_twice_to_one_member():
    members = subs(a="t", b="t")
    out = cooperative_sticky_assign(members, {"t": 2}, {"a": tps("t", 0), "b": tps("t", 0)})
    check_valid(out, members, {"t": 2})


def test_sticky_heterogeneous_balances_where_subscriptions_allow():
    # b can only take t; a takes all of u and gives t up to b.
    members = subs(a="t,u", b="t")
    topics = {"t": 2, "u": 2}
    out = cooperative_sticky_assign(members, topics, {"a": tps("t", 0, 1)})
    check_valid(out, members, topics)
    assert out == {"a": tps("u", 0, 1), "b": tps("t", 0, 1)}


# -- properties ----------------------------------------------------------------------------------

TOPIC_NAMES = ["t", "u", "v", "w"]
MEMBER_NAMES = ["m0", "m1", "m2", "m3", "m4", "m5"]


@st.composite
def scenarios(draw, same_subscriptions: bool = False):
    """(members, topics, current): current ownership is disjoint and may name stale partitions."""
    topics = draw(st.dictionaries(st.sampled_from(TOPIC_NAMES), st.integers(0, 9), max_size=4))
    names = draw(st.lists(st.sampled_from(MEMBER_NAMES), min_size=1, max_size=6, unique=True))
    # Subscriptions may name topics that do not exist.
    topic_sets = st.frozensets(st.sampled_from(TOPIC_NAMES), max_size=4)
    if same_subscriptions:
        shared = draw(topic_sets)
        members = {m: shared for m in names}
    else:
        members = {m: draw(topic_sets) for m in names}
    # Current ownership over a superset of today's partitions (partitions and topics that
    # went away, members that left), each partition held by at most one member.
    universe = [TopicPartition(t, p) for t in TOPIC_NAMES for p in range(10)]
    holders = [*names, "gone-member", None]
    current: dict[str, list[TopicPartition]] = {}
    for tp in draw(st.lists(st.sampled_from(universe), unique=True, max_size=30)):
        holder = draw(st.sampled_from(holders))
        if holder is not None:
            current.setdefault(holder, []).append(tp)
    return members, topics, current


def locally_balanced(out: Assignment, members: Mapping[str, frozenset[str]]) -> bool:
    """No member holds two more than another member that could take one of its partitions."""
    return not any(len(out[g]) - len(out[t]) >= 2 and
                   any(tp.topic in members[t] for tp in out[g])
                   for g in out for t in out)


@settings(max_examples=75, deadline=None)
@given(scenarios(), st.sampled_from(ALL))
def test_property_every_assignor_is_valid(scenario, assignor):
    members, topics, current = scenario
    out = ASSIGNORS[assignor](members, topics, current)
    check_valid(out, members, topics)
    assert ASSIGNORS[assignor](members, topics, current) == out


@settings(max_examples=75, deadline=None)
@given(scenarios(same_subscriptions=True), st.sampled_from(BALANCED))
def test_property_same_subscriptions_balanced(scenario, assignor):
    members, topics, current = scenario
    assert spread(ASSIGNORS[assignor](members, topics, current)) <= 1


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_property_sticky_valid_and_balanced_where_subscriptions_allow(scenario):
    members, topics, current = scenario
    out = cooperative_sticky_assign(members, topics, current)
    check_valid(out, members, topics)
    assert locally_balanced(out, members), out


@settings(max_examples=100, deadline=None)
@given(scenarios(same_subscriptions=True))
def test_property_sticky_keeps_current_partitions_up_to_the_fair_share(scenario):
    members, topics, current = scenario
    out = cooperative_sticky_assign(members, topics, current)
    check_valid(out, members, topics)
    assert spread(out) <= 1
    valid = wanted(members, topics)
    fair = len(valid) // len(members)
    for member in members:
        still_valid = set(current.get(member, ())) & valid
        kept = still_valid & set(out[member])
        assert len(kept) >= min(len(still_valid), fair), (member, current, out)
