"""The rules of a drain and a roll (raylog/metadata/drain.py), without Ray."""

from __future__ import annotations

import pytest

from raylog.errors import (
    InvalidArgumentError,
    LastInSyncReplicaError,
    OfflinePartitionsError,
    UnknownBrokerError,
)
from raylog.metadata import drain
from raylog.metadata.election import Change
from raylog.metadata.state import PartitionState, TopicState


def part(replicas, leader, isr, number=0, epoch=5) -> PartitionState:
    return PartitionState(number, list(replicas), leader, epoch, list(isr))


def topic(*partitions: PartitionState, name="t") -> list[tuple[TopicState, PartitionState]]:
    t = TopicState(name, "id", list(partitions), {})
    return [(t, p) for p in partitions]


def test_a_drained_leader_hands_over_to_the_next_in_sync_replica_in_replica_order():
    p = part([1, 2, 3], leader=1, isr=[1, 3, 2])
    assert drain.drained_leader(p, 1, live={1, 2, 3}) == Change(2, 6, [1, 3, 2])
    # not in sync, or not live, is passed over
    assert drain.drained_leader(part([1, 2, 3], 1, [1, 3]), 1, {1, 2, 3}) == Change(3, 6, [1, 3])
    assert drain.drained_leader(p, 1, live={1, 3}) == Change(3, 6, [1, 3, 2])


def test_a_drained_broker_that_does_not_lead_moves_no_leader():
    assert drain.drained_leader(part([1, 2, 3], 2, [1, 2, 3]), 1, {1, 2, 3}) is None


def test_a_leader_with_no_other_live_in_sync_replica_keeps_leading():
    assert drain.drained_leader(part([1, 2, 3], 1, [1]), 1, {1, 2, 3}) is None
    assert drain.drained_leader(part([1, 2, 3], 1, [1, 2]), 1, {1, 3}) is None


def test_a_drained_broker_leaves_the_isr_but_never_empties_it_nor_leaves_where_it_leads():
    assert drain.left_isr(part([1, 2, 3], 2, [1, 2, 3]), 1) == Change(2, 5, [2, 3])
    assert drain.left_isr(part([1, 2, 3], 2, [2, 3]), 1) is None      # not a member
    assert drain.left_isr(part([1, 2, 3], 1, [1, 2]), 1) is None      # still leads (forced)
    assert drain.left_isr(part([1, 2, 3], None, [1]), 1) is None      # the last member


def test_draining_the_last_live_in_sync_replica_is_refused_naming_the_partitions():
    partitions = topic(part([1, 2, 3], 1, [1], 0), part([1, 2, 3], 2, [1, 2, 3], 1),
                       part([3, 1, 2], 1, [1, 3], 2))
    with pytest.raises(LastInSyncReplicaError, match=r"broker 1 .* 2 partitions \(t-0, t-2\)"):
        drain.check_drain(partitions, 1, known={1, 2, 3}, live={1, 2}, force=False)
    # forced: allowed, and said which go offline
    assert drain.check_drain(partitions, 1, {1, 2, 3}, {1, 2}, force=True) == ["t-0", "t-2"]
    # with broker 3 live, only t-0 is stranded
    assert drain.stranded(partitions, 1, {1, 2, 3}) == ["t-0"]


def test_unknown_brokers_are_named_with_the_known_ones():
    with pytest.raises(UnknownBrokerError, match=r"unknown broker 7 \(the cluster's brokers: "
                                                 r"1, 2, 3\)"):
        drain.check_drain([], 7, known={1, 2, 3}, live={1, 2, 3}, force=True)
    with pytest.raises(UnknownBrokerError, match=r"unknown brokers 5, 9 "):
        drain.roll_order([1, 9, 5], known={1, 2, 3}, live={1, 2, 3}, partitions=[])


def test_a_roll_restarts_live_brokers_in_the_order_asked_or_by_id():
    healthy = topic(part([1, 2, 3], 1, [1, 2, 3]))
    assert drain.roll_order(None, {1, 2, 3}, {3, 1, 2}, healthy) == [1, 2, 3]
    assert drain.roll_order([3, 1, 3], {1, 2, 3}, {1, 2, 3}, healthy) == [3, 1]
    with pytest.raises(InvalidArgumentError, match=r"broker 2 is not alive"):
        drain.roll_order([2], {1, 2, 3}, {1, 3}, healthy)


def test_a_roll_refuses_to_begin_with_offline_partitions():
    partitions = topic(part([1, 2, 3], 1, [1, 2, 3], 0), part([2, 3, 1], None, [2], 1),
                       part([2, 3, 1], 2, [2], 2))
    with pytest.raises(OfflinePartitionsError, match=r"2 partitions have no live leader "
                                                     r"\(t-1, t-2\)"):
        drain.roll_order(None, {1, 2, 3}, {1, 3}, partitions)


def test_what_a_roll_waits_for_between_steps():
    partitions = topic(part([1, 2, 3], 1, [1, 2, 3], 0), part([1, 2, 3], 1, [1, 2], 1),
                       part([1, 2, 3], 1, [1, 2, 3], 2))
    assert drain.not_in_sync(partitions, {1, 2, 3}) == ["t-1"]
    assert drain.not_in_sync(partitions, {1, 2}) == ["t-0", "t-1", "t-2"]  # 3 is down


def test_long_lists_are_cut_in_messages():
    names = [f"t-{i}" for i in range(25)]
    assert drain.named(names).endswith("t-9 and 15 more")


def test_the_brokers_of_a_draining_node_are_drained_within_its_deadline():
    now = 1_000_000
    served = {0: "n0", 1: "n1", 2: "n2", 3: "n1"}
    draining = {"n1": now + 20_000, "n9": now + 5_000}  # n9 serves no broker
    # each broker of the node, in broker order; the deadline less the margin to stop it
    assert drain.node_drains(draining, served, set(), now) == [
        (1, 20 - drain.STOP_MARGIN_S), (3, 20 - drain.STOP_MARGIN_S)]
    # once each: a broker handled for that node is not drained again
    assert drain.node_drains(draining, served, {(1, "n1")}, now) == [
        (3, 20 - drain.STOP_MARGIN_S)]
    # ... but it is when it is served by another node that drains later
    assert drain.node_drains({"n2": 0}, {1: "n2"}, {(1, "n1")}, now) == [
        (1, drain.NODE_DRAIN_LONGEST_S)]


def test_a_node_drain_is_bounded_without_a_deadline_and_tried_past_one():
    now = 1_000_000
    assert drain.node_drains({"n": 0}, {1: "n"}, set(), now) == [
        (1, drain.NODE_DRAIN_LONGEST_S)]
    assert drain.node_drains({"n": now + 3600_000}, {1: "n"}, set(), now, longest_s=30) == [
        (1, 30)]
    assert drain.node_drains({"n": now - 1}, {1: "n"}, set(), now) == [
        (1, drain.NODE_DRAIN_SHORTEST_S)]
    assert drain.node_drains({}, {1: "n"}, set(), now) == []


def test_a_drain_record_gives_back_the_drains_of_brokers_that_did_not_restart():
    incarnations = {1: "a", 2: "b", 3: "c"}
    record = drain.drain_record({1, 2, 3}, {2: "node-2", 3: "node-3"}, incarnations)
    assert drain.restored_drains(record, incarnations) == ({1, 2, 3},
                                                           {2: "node-2", 3: "node-3"})
    # broker 3 restarted since (the roll's restart, or its node came back): not drained
    assert drain.restored_drains(record, {**incarnations, 3: "c2"}) == ({1, 2},
                                                                        {2: "node-2"})
    assert drain.restored_drains(None, incarnations) == (set(), {})
