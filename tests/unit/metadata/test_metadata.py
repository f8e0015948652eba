"""Cluster metadata: the event state machine, its durable log, and replica placement."""

from __future__ import annotations

import itertools
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from raylog.errors import (
    InvalidReplicationFactorError,
    NoBrokersError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from raylog.metadata import (
    MetadataState,
    MetadataStore,
    PartitionState,
    TopicState,
    assign_replicas,
)
from raylog.metadata.state import (
    broker_registered,
    broker_started,
    cluster_created,
    configs_altered,
    coordinator_started,
    partition_changed,
    partitions_added,
    topic_created,
    topic_deleted,
)
from tests.unit.powerloss import PowerLoss

CLUSTER = cluster_created("0123456789abcdef")


def state_of(*events: dict) -> MetadataState:
    """A state that applied ``events``, after the cluster_created every log begins with."""
    state = MetadataState()
    if not events or events[0].get("type") != "cluster_created":
        state.apply(CLUSTER)
    for event in events:
        state.apply(event)
    return state


def a_history() -> list[dict]:
    """Events touching every handler, in an order the controller could write them."""
    return [
        CLUSTER,
        broker_registered(0),
        broker_registered(1),
        topic_created("orders", "id-orders", [["n1", "n2"], ["n2", "n3"]], {"retention_ms": 1000}),
        topic_created("clicks", "id-clicks", [["n3"]], {}),
        partitions_added("orders", [["n3", "n1"]]),
        partition_changed("orders", 0, leader="n2", leader_epoch=1, isr=["n2"]),
        configs_altered("clicks", {"cleanup_policy": "compact"}),
        partition_changed("orders", 2, leader="n1", leader_epoch=1, isr=["n1", "n2"],
                          replicas=["n1", "n2"]),
        topic_created("tmp", "id-tmp", [["n1"]], {}),
        topic_deleted("tmp"),
        partition_changed("clicks", 0, leader=None, leader_epoch=1, isr=[]),
    ]


# -- applying events -----------------------------------------------------------------------------


def test_topic_created_makes_partitions_led_by_their_first_replica():
    state = state_of(topic_created("t", "id-1", [["a", "b"], ["b", "c"]], {"retention_ms": 5}))
    topic = state.topic("t")
    assert topic == TopicState("t", "id-1", [
        PartitionState(0, ["a", "b"], "a", 0, ["a", "b"]),
        PartitionState(1, ["b", "c"], "b", 0, ["b", "c"]),
    ], {"retention_ms": 5})
    assert topic.replication_factor == 2
    assert state.applied == 2  # the cluster_created event and this one


def test_topic_created_copies_what_it_keeps_from_the_event():
    replicas, configs = [["a", "b"]], {"retention_ms": 5}
    event = topic_created("t", "id-1", replicas, configs)
    state = state_of(event)
    replicas[0].append("c")
    configs["retention_ms"] = 6
    partition = state.topic("t").partition(0)
    assert partition.replicas == ["a", "b"]
    assert partition.isr == ["a", "b"]
    assert state.topic("t").configs == {"retention_ms": 5}


def test_topic_created_twice_raises_topic_exists_and_keeps_the_first():
    state = state_of(topic_created("t", "id-1", [["a"]], {}))
    with pytest.raises(TopicExistsError, match=r"topic 't' already exists"):
        state.apply(topic_created("t", "id-2", [["b"], ["c"]], {}))
    assert state.topic("t").topic_id == "id-1"
    assert len(state.topic("t").partitions) == 1
    assert state.applied == 2  # the cluster_created event and this one


def test_topic_deleted_removes_the_topic():
    state = state_of(topic_created("t", "id-1", [["a"]], {}),
                     topic_created("u", "id-2", [["a"]], {}))
    state.apply(topic_deleted("t"))
    assert list(state.topics) == ["u"]
    with pytest.raises(UnknownTopicError, match=r"unknown topic 't'"):
        state.topic("t")


def test_a_deleted_topic_can_be_created_again():
    state = state_of(topic_created("t", "id-1", [["a"]], {}), topic_deleted("t"),
                     topic_created("t", "id-2", [["b"]], {}))
    assert state.topic("t").topic_id == "id-2"
    assert state.topic("t").partition(0).leader == "b"


def test_partitions_added_numbers_new_partitions_after_the_old_ones():
    state = state_of(topic_created("t", "id-1", [["a", "b"]], {}),
                     partitions_added("t", [["b", "a"], ["a", "b"]]))
    partitions = state.topic("t").partitions
    assert [p.partition for p in partitions] == [0, 1, 2]
    assert partitions[1] == PartitionState(1, ["b", "a"], "b", 0, ["b", "a"])
    assert partitions[2].leader == "a"


def test_configs_altered_replaces_the_configs():
    state = state_of(topic_created("t", "id-1", [["a"]], {"retention_ms": 5, "segment_ms": 9}),
                     configs_altered("t", {"cleanup_policy": "compact"}))
    assert state.topic("t").configs == {"cleanup_policy": "compact"}


def test_partition_changed_sets_leader_epoch_and_isr():
    state = state_of(topic_created("t", "id-1", [["a", "b", "c"]], {}),
                     partition_changed("t", 0, leader="b", leader_epoch=4, isr=["b", "c"]))
    assert state.topic("t").partition(0) == PartitionState(0, ["a", "b", "c"], "b", 4, ["b", "c"],
                                                                partition_epoch=1)


def test_partition_changed_may_move_replicas_and_leave_no_leader():
    state = state_of(topic_created("t", "id-1", [["a", "b"]], {}),
                     partition_changed("t", 0, leader=None, leader_epoch=1, isr=[],
                                       replicas=["c", "d"]))
    assert state.topic("t").partition(0) == PartitionState(0, ["c", "d"], None, 1, [],
                                                           partition_epoch=1)


def test_every_partition_change_bumps_the_partition_epoch_and_replays_alike():
    events = [topic_created("t", "id-1", [["a", "b"]], {}),
              partition_changed("t", 0, leader="a", leader_epoch=0, isr=["a"]),
              partition_changed("t", 0, leader="b", leader_epoch=1, isr=["b"])]
    assert state_of(*events).topic("t").partition(0).partition_epoch == 2
    assert state_of(*events).topic("t") == state_of(*events).topic("t")


@pytest.mark.parametrize("event", [
    topic_deleted("missing"),
    partitions_added("missing", [["a"]]),
    configs_altered("missing", {}),
    partition_changed("missing", 0, leader="a", leader_epoch=1, isr=["a"]),
], ids=lambda e: e["type"])
def test_events_for_unknown_topics_raise_unknown_topic(event):
    state = state_of(topic_created("t", "id-1", [["a"]], {}))
    before = state.snapshot()
    with pytest.raises(UnknownTopicError, match=r"unknown topic 'missing'"):
        state.apply(event)
    assert state.topics == before
    assert state.applied == 2  # the cluster_created event and this one


@pytest.mark.parametrize("partition", [1, 7, -1, True, "0", None])
def test_partition_changed_for_unknown_partition_raises(partition):
    state = state_of(topic_created("t", "id-1", [["a"]], {}))
    before = state.snapshot()
    with pytest.raises(UnknownPartitionError, match=r"topic 't' has partitions 0..0"):
        state.apply(partition_changed("t", partition, leader="a", leader_epoch=1, isr=["a"]))
    assert state.topics == before
    assert state.applied == 2  # the cluster_created event and this one


@pytest.mark.parametrize("event", [{"type": "topic_renamed", "name": "t"}, {}, {"type": None}])
def test_unknown_event_types_are_refused(event):
    state = MetadataState()
    with pytest.raises(ValueError, match=r"unknown metadata event"):
        state.apply(event)
    assert state.applied == 0


def test_snapshot_is_a_deep_copy():
    state = state_of(topic_created("t", "id-1", [["a"]], {}))
    snap = state.snapshot()
    state.apply(partition_changed("t", 0, leader="a", leader_epoch=3, isr=["a"]))
    assert snap["t"].partition(0).leader_epoch == 0


def test_the_history_applies_to_the_expected_state():
    state = state_of(*a_history())
    assert sorted(state.topics) == ["clicks", "orders"]
    orders = state.topic("orders")
    assert [(p.replicas, p.leader, p.leader_epoch, p.isr) for p in orders.partitions] == [
        (["n1", "n2"], "n2", 1, ["n2"]),
        (["n2", "n3"], "n2", 0, ["n2", "n3"]),
        (["n1", "n2"], "n1", 1, ["n1", "n2"]),
    ]
    assert state.topic("clicks").configs == {"cleanup_policy": "compact"}
    assert state.topic("clicks").partition(0).leader is None
    assert state.applied == len(a_history())


def test_replicas_by_broker_lists_every_replica_on_its_broker():
    state = state_of(*a_history())
    by_broker = state.replicas_by_broker()
    assert {broker: sorted(tps) for broker, tps in by_broker.items()} == {
        "n1": [("orders", 0), ("orders", 2)],
        "n2": [("orders", 0), ("orders", 1), ("orders", 2)],
        "n3": [("clicks", 0), ("orders", 1)],
    }
    assert MetadataState().replicas_by_broker() == {}


def test_a_log_begins_with_its_cluster_and_broker_ids_are_given_once():
    state = MetadataState()
    with pytest.raises(ValueError, match="must begin with cluster_created"):
        state.apply(topic_created("t", "id", [[0]], {}))
    state.apply(CLUSTER)
    assert state.cluster_id == "0123456789abcdef" and state.next_broker_id == 0
    state.apply(broker_registered(0))
    state.apply(broker_registered(1))
    assert state.broker_ids == {0, 1} and state.next_broker_id == 2
    with pytest.raises(ValueError, match="given out twice"):
        state.apply(broker_registered(1))
    with pytest.raises(ValueError, match="created a second time"):
        state.apply(cluster_created("fedcba9876543210"))


def test_every_start_of_a_broker_gives_it_a_higher_broker_epoch_that_replays_alike(tmp_path):
    """A broker's epoch is the place in the log of the event that recorded its process's
    start (KIP-903: an ISR expansion must name the current one)."""
    history = [CLUSTER, broker_registered(0), broker_registered(1),
               broker_started(0, "first"), broker_started(1, "other"),
               broker_started(0, "second")]
    state = state_of(*history)
    assert state.broker_epochs == {0: 5, 1: 4}
    assert state.incarnations == {0: "second", 1: "other"}
    assert state_of(*history[:4]).broker_epochs == {0: 3}  # before the restart: lower
    store = MetadataStore(tmp_path / "meta")
    for event in history:
        store.append(event)
    store.close()
    assert replayed(tmp_path / "meta")[0].broker_epochs == state.broker_epochs


def test_every_start_of_the_transaction_coordinator_gives_a_higher_epoch_that_survives(
        tmp_path):
    """The transaction coordinator's epoch is the place in the log of the event that
    recorded its start: it grows with every controller that takes over, also across a
    snapshot and a replay."""
    history = [CLUSTER, broker_registered(0), coordinator_started(), broker_started(0, "a"),
               coordinator_started()]
    assert state_of().coordinator_epoch == 0  # none yet
    assert state_of(*history[:3]).coordinator_epoch == 2
    state = state_of(*history)
    assert state.coordinator_epoch == 4
    assert MetadataState.from_data(state.to_data()).coordinator_epoch == 4
    store = MetadataStore(tmp_path / "meta")
    for event in history:
        store.append(event)
    store.close()
    assert replayed(tmp_path / "meta")[0].coordinator_epoch == 4


# -- the metadata log ----------------------------------------------------------------------------


def replayed(directory: Path) -> tuple[MetadataState, list[dict]]:
    store = MetadataStore(directory)
    try:
        events = list(store.replay())
    finally:
        store.close()
    return state_of(*events), events


def test_append_returns_dense_offsets(tmp_path):
    store = MetadataStore(tmp_path / "meta")
    try:
        assert [store.append(e) for e in a_history()] == list(range(len(a_history())))
    finally:
        store.close()


def test_replay_after_reopen_rebuilds_equal_state(tmp_path):
    directory = tmp_path / "meta"
    live = MetadataState()
    store = MetadataStore(directory)
    for event in a_history():
        store.append(event)
        live.apply(event)
    store.close()

    state, events = replayed(directory)
    assert events == a_history()
    assert state.topics == live.topics
    assert state.applied == live.applied

    again, _ = replayed(directory)
    assert again.topics == state.topics


def test_appends_after_reopen_continue_the_log(tmp_path):
    directory = tmp_path / "meta"
    history = a_history()
    store = MetadataStore(directory)
    for event in history[:4]:
        store.append(event)
    store.close()
    store = MetadataStore(directory)
    assert [store.append(e) for e in history[4:]] == list(range(4, len(history)))
    store.close()
    assert replayed(directory)[1] == history


def test_replay_of_an_empty_store_yields_nothing(tmp_path):
    state, events = replayed(tmp_path / "meta")
    assert events == []
    assert state.topics == {}


def test_a_power_loss_right_after_an_append_keeps_every_event(tmp_path, monkeypatch):
    """Each append is synced before it returns (flush_messages=1): a power loss, which takes
    every byte not fsynced and every name change not synced, keeps every event appended."""
    power = PowerLoss(monkeypatch, tmp_path / "data")
    history = a_history()
    store = MetadataStore(power.root / "meta")
    try:
        for i, event in enumerate(history, start=1):
            store.append(event)
            assert store.log.synced_end_offset == store.log.log_end_offset == i
            _, events = replayed(power.crash_copy() / "meta")
            assert events == history[:i]
    finally:
        store.close()


def test_each_append_fsyncs_the_segment(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    store = MetadataStore(tmp_path / "meta")
    try:
        monkeypatch.setattr(os, "fsync", recording_fsync)
        for event in a_history()[:3]:
            synced.clear()
            store.append(event)
            assert any(path.endswith(".log") for path in synced), synced
    finally:
        monkeypatch.undo()
        store.close()


def test_a_crash_copy_taken_right_after_append_replays_every_event(tmp_path):
    """Copy the directory while the store is open (no clean-shutdown marker): a crash image."""
    directory = tmp_path / "meta"
    history = a_history()
    store = MetadataStore(directory)
    try:
        for i, event in enumerate(history, start=1):
            store.append(event)
            crash = tmp_path / f"crash-{i}"
            shutil.copytree(directory, crash)
            state, events = replayed(crash)
            assert events == history[:i]
            assert state.topics == state_of(*history[:i]).topics
    finally:
        store.close()


def test_a_crash_copy_reopens_as_unclean_and_loses_nothing(tmp_path):
    directory = tmp_path / "meta"
    store = MetadataStore(directory)
    try:
        for event in a_history():
            store.append(event)
        shutil.copytree(directory, tmp_path / "crash")
    finally:
        store.close()
    reopened = MetadataStore(tmp_path / "crash")
    try:
        assert reopened.log.recovery.clean is False
        assert reopened.log.recovery.bytes_truncated == 0
        assert reopened.log.log_end_offset == len(a_history())
    finally:
        reopened.close()


# -- placement -----------------------------------------------------------------------------------


def leader_counts(brokers, *assignments) -> Counter:
    counts = Counter({b: 0 for b in brokers})
    for assignment in assignments:
        counts.update(nodes[0] for nodes in assignment)
    return counts


def spread(counts: Counter) -> int:
    return max(counts.values()) - min(counts.values())


GRID = [(b, p, rf) for b in (1, 2, 3, 5) for p in (1, 2, 3, 4, 7, 12) for rf in (1, 2, 3)
        if rf <= b]


@pytest.mark.parametrize(("n_brokers", "partitions", "rf"), GRID)
def test_each_partition_gets_rf_distinct_live_brokers(n_brokers, partitions, rf):
    brokers = [f"node-{i}" for i in range(n_brokers)]
    assignment = assign_replicas(brokers, partitions, rf)
    assert len(assignment) == partitions
    for nodes in assignment:
        assert len(nodes) == rf
        assert len(set(nodes)) == rf
        assert set(nodes) <= set(brokers)


@pytest.mark.parametrize(("n_brokers", "partitions", "rf"), GRID)
def test_leaders_are_balanced(n_brokers, partitions, rf):
    brokers = [f"node-{i}" for i in range(n_brokers)]
    assert spread(leader_counts(brokers, assign_replicas(brokers, partitions, rf))) <= 1


@pytest.mark.parametrize(("n_brokers", "first", "second", "rf"),
                         [(3, 4, 5, 2), (3, 1, 1, 3), (4, 3, 6, 2), (5, 7, 3, 1), (5, 2, 9, 3)])
def test_leaders_stay_balanced_across_topics_with_existing_assignments(n_brokers, first, second,
                                                                       rf):
    brokers = [f"node-{i}" for i in range(n_brokers)]
    one = assign_replicas(brokers, first, rf)
    two = assign_replicas(brokers, second, rf, existing=one)
    assert spread(leader_counts(brokers, one, two)) <= 1
    three = assign_replicas(brokers, 4, rf, existing=[*one, *two])
    assert spread(leader_counts(brokers, one, two, three)) <= 1


def test_new_leaders_go_to_brokers_leading_the_fewest():
    brokers = ["a", "b", "c"]
    existing = [["a", "b"], ["a", "c"], ["a", "b"], ["b", "c"]]  # leaders: a 3, b 1
    assignment = assign_replicas(brokers, 3, 2, existing=existing)
    assert [nodes[0] for nodes in assignment].count("a") == 0
    assert leader_counts(brokers, existing, assignment) == Counter({"a": 3, "b": 2, "c": 2})


def test_replicas_are_spread_over_brokers():
    brokers = [f"node-{i}" for i in range(4)]
    assignment = assign_replicas(brokers, 6, 2)
    replicas = Counter(dict.fromkeys(brokers, 0))  # a broker left out counts as 0
    replicas.update(itertools.chain.from_iterable(assignment))
    assert spread(replicas) <= 1


def test_placement_is_deterministic_and_ignores_broker_order():
    brokers = ["n3", "n1", "n2", "n4"]
    first = assign_replicas(brokers, 9, 3)
    assert assign_replicas(brokers, 9, 3) == first
    assert assign_replicas(list(reversed(brokers)), 9, 3) == first
    assert first[0][0] == "n1"  # ties break by sorted broker order


def test_zero_partitions_assign_nothing():
    assert assign_replicas(["a"], 0, 1) == []


@pytest.mark.parametrize("brokers", [[], ()])
def test_no_brokers_raises(brokers):
    with pytest.raises(NoBrokersError, match=r"no live brokers"):
        assign_replicas(brokers, 3, 1)


def test_replication_factor_above_brokers_names_both_numbers():
    with pytest.raises(InvalidReplicationFactorError) as info:
        assign_replicas(["a", "b"], 3, 5)
    message = str(info.value)
    assert "replication factor 5" in message
    assert "(2)" in message
