"""The partition balancer's planner (raylog/metadata/balance.py), without Ray."""

from __future__ import annotations

import random

import pytest

from raylog.errors import InvalidArgumentError, UnknownBrokerError
from raylog.metadata.balance import Load, check_brokers, plan_balance
from raylog.metadata.placement import assign_replicas
from raylog.metadata.state import PartitionState, TopicState


def topic(name: str, assignment: list[list[int]], configs: dict | None = None,
          isr: dict[int, list[int]] | None = None) -> TopicState:
    isr = isr or {}
    return TopicState(name, name + "-id", [
        PartitionState(i, list(r), r[0], 0, list(isr.get(i, r))) for i, r in
        enumerate(assignment)], configs or {})


def placed(name: str, brokers: list[int], partitions: int, factor: int,
           existing=()) -> TopicState:
    return topic(name, assign_replicas(brokers, partitions, factor, existing))


def applied(topics: list[TopicState], plan) -> list[TopicState]:
    """The topics once every move of ``plan`` is done (new replicas in sync, the preferred
    leader leading)."""
    targets = {(m.topic, m.partition): list(m.target) for m in plan.moves}
    out = []
    for t in topics:
        parts = []
        for p in t.partitions:
            target = targets.get((t.name, p.partition), p.replicas)
            parts.append(PartitionState(p.partition, list(target), target[0], p.leader_epoch + 1,
                                        list(target)))
        out.append(TopicState(t.name, t.topic_id, parts, dict(t.configs)))
    return out


def sizes_of(topics: list[TopicState], size) -> dict:
    return {(t.name, p.partition, b): size(t.name, p.partition)
            for t in topics for p in t.partitions for b in p.replicas}


def spread(counts: dict[int, int]) -> int:
    return max(counts.values()) - min(counts.values())


# -- a balanced cluster ----------------------------------------------------------------------

def test_a_balanced_cluster_gets_an_empty_plan():
    topics = [placed("a", [0, 1, 2], 6, 3)]
    topics.append(placed("b", [0, 1, 2], 4, 2, [p.replicas for p in topics[0].partitions]))
    plan = plan_balance(topics, live={0, 1, 2})
    assert plan.moves == ()
    assert plan.before == plan.after


def test_no_topics_no_moves():
    assert plan_balance([], live={0}).moves == ()


# -- a broker joins --------------------------------------------------------------------------

def test_a_new_broker_gets_its_share_of_replicas_and_leaders():
    topics = [placed("a", [0, 1, 2], 8, 3)]
    plan = plan_balance(topics, live={0, 1, 2, 3})
    replicas = {b: load.replicas for b, load in plan.after.items()}
    leaders = {b: load.leaders for b, load in plan.after.items()}
    assert replicas == {0: 6, 1: 6, 2: 6, 3: 6}
    assert leaders == {0: 2, 1: 2, 2: 2, 3: 2}
    assert plan.before[3].replicas == 0
    for move in plan.moves:
        assert len(set(move.target)) == len(move.target) == 3
        assert set(move.added) <= {3}


def test_the_plan_converges_an_applied_plan_plans_nothing_more():
    topics = [placed("a", [0, 1, 2], 12, 3)]
    topics.append(placed("b", [0, 1, 2], 5, 2, [p.replicas for p in topics[0].partitions]))
    sizes = sizes_of(topics, lambda t, p: (p + 1) * 1000 * (3 if t == "a" else 1))
    plan = plan_balance(topics, live={0, 1, 2, 3, 4}, sizes=sizes)
    assert plan.moves
    after = applied(topics, plan)
    again = plan_balance(after, live={0, 1, 2, 3, 4}, sizes=sizes_of(
        after, lambda t, p: (p + 1) * 1000 * (3 if t == "a" else 1)))
    assert again.moves == ()


def test_half_of_the_replicas_move_to_a_new_broker():
    # Four equal one-replica partitions on broker 0; broker 1 joins: two move, no more.
    topics = [topic("a", [[0], [0], [0], [0]])]
    sizes = {("a", 0, 0): 100, ("a", 1, 0): 100, ("a", 2, 0): 100, ("a", 3, 0): 100}
    plan = plan_balance(topics, live={0, 1}, sizes=sizes)
    assert plan.bytes == 200 and len(plan.moves) == 2


def test_even_bytes_pick_the_cheapest_moves_that_suffice():
    topics = [topic("a", [[0], [0], [0], [0], [1], [1]])]
    sizes = {("a", 0, 0): 1000, ("a", 1, 0): 10, ("a", 2, 0): 10, ("a", 3, 0): 10,
             ("a", 4, 1): 10, ("a", 5, 1): 10}
    # Counts 4/2: one replica must move. Moving the 1000-byte one would only swap which
    # broker is full (30 vs 1020), so a 10-byte one goes, and nothing else moves.
    plan = plan_balance(topics, live={0, 1}, sizes=sizes)
    assert [m.bytes for m in plan.moves if not m.leader_only] == [10]


def test_bytes_are_evened_by_a_swap_when_counts_are_even():
    topics = [topic("a", [[0], [0], [1], [1]])]
    sizes = {("a", 0, 0): 1000, ("a", 1, 0): 900, ("a", 2, 1): 100, ("a", 3, 1): 50}
    plan = plan_balance(topics, live={0, 1}, sizes=sizes)
    after = {b: load.bytes for b, load in plan.after.items()}
    assert abs(after[0] - after[1]) < abs(1900 - 150)
    assert {b: load.replicas for b, load in plan.after.items()} == {0: 2, 1: 2}
    assert abs(after[0] - after[1]) <= 200  # 1000+50 vs 900+100


def test_leaders_only_are_moved_when_replicas_are_even():
    # every partition led by broker 0, replicas even: leader moves, no bytes.
    topics = [topic("a", [[0, 1, 2]] * 6)]
    plan = plan_balance(topics, live={0, 1, 2}, sizes=sizes_of(topics, lambda t, p: 5000))
    assert plan.bytes == 0
    assert all(m.leader_only for m in plan.moves)
    assert {b: load.leaders for b, load in plan.after.items()} == {0: 2, 1: 2, 2: 2}


# -- a broker leaves -------------------------------------------------------------------------

def down(topics: list[TopicState], broker: int) -> None:
    """As the controller leaves them when ``broker`` goes: out of every ISR, leading none."""
    for t in topics:
        for p in t.partitions:
            if broker in p.replicas:
                p.isr = [b for b in p.isr if b != broker]
                if p.leader == broker:
                    p.leader = p.isr[0]


def test_a_broker_to_empty_loses_every_replica_to_live_brokers():
    topics = [placed("a", [0, 1, 2, 3], 8, 2)]
    down(topics, 3)
    plan = plan_balance(topics, live={0, 1, 2}, remove={3})
    assert plan.after[3].replicas == 0
    for move in plan.moves:
        assert 3 not in move.target
    counts = {b: plan.after[b].replicas for b in (0, 1, 2)}
    assert spread(counts) <= 1


def test_a_live_broker_can_be_emptied_too():
    topics = [placed("a", [0, 1, 2], 6, 2)]
    plan = plan_balance(topics, live={0, 1, 2}, remove={2})
    assert plan.after[2].replicas == 0 and plan.after[2].leaders == 0


def test_never_a_move_to_a_dead_broker():
    topics = [placed("a", [0, 1, 2, 3], 8, 2)]
    down(topics, 3)  # not to be emptied: its partitions stay, none goes to it
    plan = plan_balance(topics, live={0, 1, 2})
    for move in plan.moves:
        assert 3 not in move.added
        assert 3 in move.target or 3 not in move.replicas


def test_partitions_that_cannot_move_are_left_and_named():
    # a-0 keeps a replica (2) out of its ISR: it waits; a-1 loses its out-of-sync one
    topics = [topic("a", [[0, 2, 1], [0, 1]], isr={0: [0, 1], 1: [0]})]
    plan = plan_balance(topics, live={0, 1, 2}, remove={1})
    assert [m.partition for m in plan.moves if 1 in m.removed] == [1]
    assert [why.split(":")[0] for why in plan.skipped] == ["a-0"]


# -- the rules ------------------------------------------------------------------------------

def test_no_move_of_a_partition_below_min_insync_or_under_reassignment():
    topics = [topic("a", [[0, 1, 2]] * 4, configs={"min_insync_replicas": 3},
                    isr={0: [0, 1]})]
    topics[0].partitions[1].target = [0, 1, 3]
    plan = plan_balance(topics, live={0, 1, 2, 3})
    moved = {m.partition for m in plan.moves}
    assert 0 not in moved and 1 not in moved


def test_a_new_preferred_leader_is_in_the_isr_or_added_by_the_plan():
    topics = [topic("a", [[0, 1, 2]] * 6, isr={i: [0, 1, 2] for i in range(6)})]
    plan = plan_balance(topics, live={0, 1, 2, 3})
    for move in plan.moves:
        p = topics[0].partitions[move.partition]
        assert move.target[0] in p.isr or move.target[0] not in p.replicas


def test_the_limit_per_broker_is_kept():
    topics = [placed("a", [0, 1], 8, 1)]
    plan = plan_balance(topics, live={0, 1, 2}, max_replicas={2: 1})
    assert plan.after[2].replicas == 1


def test_the_plan_is_deterministic():
    topics = [placed("a", [0, 1, 2], 9, 2)]
    sizes = sizes_of(topics, lambda t, p: 7 * p)
    assert plan_balance(topics, {0, 1, 2, 3}, sizes) == plan_balance(topics, {3, 2, 1, 0}, sizes)


@pytest.mark.parametrize("seed", range(40))
def test_random_clusters_converge_and_keep_every_rule(seed):
    rng = random.Random(seed)
    old = list(range(rng.randint(1, 4)))
    topics, existing = [], []
    for name in "abc"[: rng.randint(1, 3)]:
        t = placed(name, old, rng.randint(1, 10), rng.randint(1, len(old)), existing)
        existing += [p.replicas for p in t.partitions]
        topics.append(t)
    size = {(t.name, p.partition): rng.choice([0, 10, 1000, 50_000])
            for t in topics for p in t.partitions}
    sizes = sizes_of(topics, lambda t, p: size[t, p])
    live = set(old) | set(range(len(old), len(old) + rng.randint(0, 3)))
    factor = max(t.replication_factor for t in topics)
    remove = set()
    for b in old:  # brokers to empty, while enough stay for every topic
        if rng.random() < 0.3 and len(live - remove) > factor:
            remove.add(b)
    plan = plan_balance(topics, live, sizes, remove=remove)
    by_tp = {(t.name, p.partition): p for t in topics for p in t.partitions}
    for move in plan.moves:
        assert len(set(move.target)) == len(move.target) == len(move.replicas)
        assert set(move.added) <= live - remove
        p = by_tp[move.topic, move.partition]
        assert move.target[0] in p.isr or move.target[0] not in p.replicas
    assert all(plan.after[b].replicas == 0 for b in remove)
    brokers = sorted(live - remove)
    assert spread({b: plan.after[b].replicas for b in brokers}) <= 1
    # Leaders move among a partition's replicas only: one-replica partitions may leave
    # them uneven, never more than before.
    leaders_before = spread({b: plan.before.get(b, Load(0, 0, 0)).leaders for b in brokers})
    assert spread({b: plan.after[b].leaders for b in brokers}) <= max(1, leaders_before)
    after = applied(topics, plan)
    again = plan_balance(after, live - remove, sizes_of(after, lambda t, p: size[t, p]))
    assert again.moves == ()
    assert sum(load.replicas for load in plan.after.values()) == \
        sum(load.replicas for load in plan.before.values())


# -- bad input -------------------------------------------------------------------------------

def test_unknown_brokers_are_named():
    with pytest.raises(UnknownBrokerError, match=r"^remove: unknown brokers 7, 9 .*0, 1, 2"):
        check_brokers("remove", [9, 1, 7], known={0, 1, 2})
    with pytest.raises(InvalidArgumentError, match="integers"):
        check_brokers("remove", ["1"], known={1})
    assert check_brokers("remove", [2, 1, 2], known={0, 1, 2}) == [1, 2]


def test_no_live_broker_left_is_refused():
    with pytest.raises(InvalidArgumentError, match="no live broker"):
        plan_balance([placed("a", [0], 1, 1)], live={0}, remove={0})


@pytest.mark.parametrize("bad", [-1, 1.5, "10"])
def test_bad_sizes_are_refused(bad):
    with pytest.raises(InvalidArgumentError, match="a-0"):
        plan_balance([placed("a", [0], 1, 1)], live={0}, sizes={("a", 0, 0): bad})


def test_a_negative_tolerance_is_refused():
    with pytest.raises(InvalidArgumentError, match="disk_tolerance"):
        plan_balance([], live={0}, disk_tolerance=-0.1)
