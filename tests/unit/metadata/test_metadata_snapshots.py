"""Snapshots of the metadata log: a restart loads the newest snapshot and replays only the
events after it, and ends in the state a replay of the whole history gives."""

from __future__ import annotations

import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylog.errors import CorruptSnapshotError, InvalidConfigError, StorageError
from raylog.metadata import MetadataState, MetadataStore
from raylog.metadata.snapshot import (
    AFTER_BYTES_ENV,
    AFTER_EVENTS_ENV,
    CORRUPT_SUFFIX,
    SnapshotPolicy,
    read_snapshot,
    snapshot_path,
    snapshot_positions,
    write_snapshot,
)
from raylog.metadata.state import (
    broker_registered,
    broker_started,
    cluster_created,
    configs_altered,
    partition_changed,
    reassignment,
    topic_created,
    topic_deleted,
)
from raylog.storage import files
from tests.unit.powerloss import FailingDisk, PowerLoss

BROKERS = [0, 1, 2]
NEVER = SnapshotPolicy(after_events=1 << 40, after_bytes=1 << 40)


def opening(*events: dict) -> list[dict]:
    """A cluster's first events: its id, three brokers, their starts, a topic of 4 partitions."""
    return [cluster_created("0123456789abcdef"),
            *(broker_registered(b) for b in BROKERS),
            *(broker_started(b, f"first-{b}") for b in BROKERS),
            topic_created("t", "id-t", [[0, 1, 2]] * 4, {"retention_ms": 1000}),
            *events]


def isr_changes(count: int, state: MetadataState | None = None) -> list[dict]:
    """``count`` ISR changes of topic ``t``, each shrinking or growing one partition's ISR."""
    out = []
    for i in range(count):
        partition = i % 4
        isr = [0, 1, 2] if (i // 4) % 2 else [0, 1]
        out.append(partition_changed("t", partition, leader=0, leader_epoch=0, isr=isr))
    return out


def applied(events: list[dict]) -> MetadataState:
    state = MetadataState()
    for event in events:
        state.apply(event)
    return state


def loaded(directory, policy: SnapshotPolicy = NEVER) -> MetadataState:
    store = MetadataStore(directory, policy)
    try:
        return store.load()
    finally:
        store.close()


def committed(directory, events: list[dict], policy: SnapshotPolicy, step: int = 1
              ) -> MetadataStore:
    """A store (left open) that committed ``events``, ``step`` per commit."""
    store = MetadataStore(directory, policy)
    state = store.load()
    for i in range(0, len(events), step):
        store.commit(state, events[i:i + step])
    return store


# -- the snapshot file ---------------------------------------------------------------------------


def test_a_state_round_trips_through_its_data_and_a_snapshot_file(tmp_path):
    history = opening(*isr_changes(6), configs_altered("t", {"cleanup_policy": "compact"}),
                      reassignment("t", 1, [1, 2, 0]), topic_created("u", "id-u", [[2]], {}),
                      broker_started(1, "second-1"))
    state = applied(history)
    again = MetadataState.from_data(state.to_data())
    assert again.to_data() == state.to_data()
    assert again.topics == state.topics and again.broker_epochs == state.broker_epochs
    assert again.incarnations == state.incarnations and again.broker_ids == state.broker_ids
    write_snapshot(tmp_path, state)
    assert snapshot_positions(tmp_path) == [len(history)]
    assert read_snapshot(tmp_path, len(history)).to_data() == state.to_data()
    assert list(tmp_path.iterdir()) == [snapshot_path(tmp_path, len(history))]  # no .tmp left


def test_a_snapshot_cut_at_any_byte_or_with_any_byte_changed_is_refused(tmp_path):
    write_snapshot(tmp_path, applied(opening(*isr_changes(3))))
    path = snapshot_path(tmp_path, len(opening()) + 3)
    whole = path.read_bytes()
    for size in range(len(whole)):
        path.write_bytes(whole[:size])
        with pytest.raises(CorruptSnapshotError, match=r"torn|not a version"):
            read_snapshot(tmp_path, len(opening()) + 3)
    path.write_bytes(whole + b"\0")
    with pytest.raises(CorruptSnapshotError, match="torn"):
        read_snapshot(tmp_path, len(opening()) + 3)
    for i in range(0, len(whole), 7):
        damaged = bytearray(whole)
        damaged[i] ^= 0x10
        path.write_bytes(bytes(damaged))
        with pytest.raises(CorruptSnapshotError):
            read_snapshot(tmp_path, len(opening()) + 3)
    path.write_bytes(whole)
    os.rename(path, snapshot_path(tmp_path, 5))
    with pytest.raises(CorruptSnapshotError, match="holds position"):
        read_snapshot(tmp_path, 5)


def test_the_policy_has_units_and_defaults_in_one_place_and_refuses_bad_values():
    policy = SnapshotPolicy()
    assert policy.after_events >= 1000 and policy.after_bytes >= 1 << 20
    assert SnapshotPolicy.from_environ({}) == policy
    assert SnapshotPolicy.from_environ({AFTER_EVENTS_ENV: "50", AFTER_BYTES_ENV: "4096"}) == \
        SnapshotPolicy(after_events=50, after_bytes=4096)
    for bad in ("0", "-3", "many"):
        with pytest.raises(InvalidConfigError, match=AFTER_EVENTS_ENV):
            SnapshotPolicy.from_environ({AFTER_EVENTS_ENV: bad})
    assert SnapshotPolicy(after_events=10).due(10, 0) and SnapshotPolicy(after_bytes=10).due(1, 10)
    assert not SnapshotPolicy(after_events=10, after_bytes=10).due(9, 9)


# -- the store: snapshots, truncation, restart ---------------------------------------------------


def test_a_restart_loads_the_snapshot_and_replays_only_the_events_after_it(tmp_path,
                                                                           monkeypatch):
    history = opening(*isr_changes(95))
    store = committed(tmp_path / "meta", history, SnapshotPolicy(after_events=20))
    store.close()
    positions = snapshot_positions(tmp_path / "meta")
    assert len(positions) == 2  # the newest and the one before, no older
    replayed = []
    real_apply = MetadataState.apply
    monkeypatch.setattr(MetadataState, "apply",
                        lambda state, event: (replayed.append(event), real_apply(state, event)))
    reopened = MetadataStore(tmp_path / "meta", NEVER)
    try:
        assert reopened.log.log_start_offset == positions[1] > 0  # the log back to the older
        state = reopened.load()
    finally:
        reopened.close()
    assert replayed == history[positions[0]:]
    assert 0 < len(replayed) < 20
    assert state.to_data() == applied(history).to_data()


def test_segments_below_the_previous_snapshot_are_deleted(tmp_path):
    history = opening(*isr_changes(200))
    store = committed(tmp_path / "meta", history, SnapshotPolicy(after_events=30), step=7)
    try:
        positions = snapshot_positions(tmp_path / "meta")
        assert len(positions) == 2
        assert store.log.segments[0].base_offset == positions[1]
        assert store.log.log_end_offset == len(history)
        # Each snapshot rolled the log: the newest begins a segment.
        assert positions[0] in [s.base_offset for s in store.log.segments]
    finally:
        store.close()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(actions=st.lists(st.tuples(st.sampled_from(["isr", "start", "topic", "delete", "config",
                                                    "restart"]),
                                  st.integers(0, 3), st.integers(1, 6)),
                        min_size=1, max_size=40),
       after_events=st.integers(1, 15))
def test_a_restart_at_any_point_gives_the_state_of_a_replay_of_the_whole_history(
        tmp_path_factory, actions, after_events):
    """Whatever the history, the snapshot policy and the restarts in between, the state the
    store loads equals the state that applying every event from the start gives, broker
    epochs included."""
    directory = tmp_path_factory.mktemp("meta")
    policy = SnapshotPolicy(after_events=after_events)
    history = opening()
    store = committed(directory, history, policy)
    state = store.load()
    topics = 0
    try:
        for kind, n, count in actions:
            if kind == "restart":
                store.close()
                store = MetadataStore(directory, policy)
                state = store.load()
                assert state.to_data() == applied(history).to_data()
                continue
            if kind == "isr":
                events = isr_changes(count + n)[n:]
            elif kind == "start":
                events = [broker_started(n % 3, f"incarnation-{len(history)}")]
            elif kind == "topic":
                topics += 1
                events = [topic_created(f"x{topics}", f"id-{topics}", [[n % 3]] * count, {})]
            elif kind == "delete" and topics:
                events = [topic_deleted(f"x{topics}")]
                topics -= 1
            else:
                events = [configs_altered("t", {"retention_ms": n * count})]
            store.commit(state, events)
            history += events
    finally:
        store.close()
    final = loaded(directory)
    full = applied(history)
    assert final.to_data() == full.to_data()
    assert final.applied == len(history)


def test_broker_epochs_are_log_positions_that_keep_growing_across_snapshots(tmp_path):
    """A broker epoch is the offset of its broker_started event: snapshots and the log's
    truncation neither restart the count nor reuse an offset."""
    directory = tmp_path / "meta"
    policy = SnapshotPolicy(after_events=5)
    store = MetadataStore(directory, policy)
    state = store.load()
    epochs_seen = []
    offsets = []
    try:
        store.commit(state, opening())
        for round_ in range(12):
            offset = store.log.log_end_offset
            store.commit(state, [broker_started(1, f"round-{round_}"), *isr_changes(3)])
            assert state.broker_epochs[1] == offset
            epochs_seen.append(state.broker_epochs[1])
            offsets.append(offset)
            if round_ % 4 == 3:  # restart now and then
                store.close()
                store = MetadataStore(directory, policy)
                state = store.load()
                assert state.broker_epochs[1] == epochs_seen[-1]
        assert store.log.log_start_offset > 0  # the log's beginning is gone
    finally:
        store.close()
    assert epochs_seen == sorted(set(epochs_seen))
    assert loaded(directory).broker_epochs[1] == epochs_seen[-1]


def test_a_replay_of_the_whole_history_is_refused_once_the_log_lost_its_beginning(tmp_path):
    store = committed(tmp_path / "meta", opening(*isr_changes(10)), NEVER)
    try:
        assert list(store.replay()) == opening(*isr_changes(10))
        store.take_snapshot(store.load())
        store.commit(store.load(), isr_changes(2))
        store.take_snapshot(store.load())
        assert store.log.log_start_offset > 0
        with pytest.raises(StorageError, match="load"):
            next(store.replay())
    finally:
        store.close()


def test_appends_after_a_restart_continue_the_offsets(tmp_path):
    directory = tmp_path / "meta"
    store = committed(directory, opening(*isr_changes(30)), SnapshotPolicy(after_events=8))
    end = store.log.log_end_offset
    store.close()
    store = MetadataStore(directory, SnapshotPolicy(after_events=8))
    try:
        state = store.load()
        assert store.append_all(isr_changes(2)) == end == state.applied
    finally:
        store.close()


# -- damaged snapshots ---------------------------------------------------------------------------


def test_a_torn_newest_snapshot_falls_back_to_the_previous_one_and_the_log(tmp_path, caplog):
    history = opening(*isr_changes(60))
    store = committed(tmp_path / "meta", history, SnapshotPolicy(after_events=20))
    store.close()
    newest, previous = snapshot_positions(tmp_path / "meta")[:2]
    path = snapshot_path(tmp_path / "meta", newest)
    whole = path.read_bytes()
    for size in (0, 10, len(whole) // 2, len(whole) - 1):
        copy = tmp_path / f"cut-{size}"
        copy.mkdir()
        for name in os.listdir(tmp_path / "meta"):
            (copy / name).write_bytes((tmp_path / "meta" / name).read_bytes())
        snapshot_path(copy, newest).write_bytes(whole[:size])
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="raylog.metadata.store"):
            store = MetadataStore(copy, NEVER)
            state = store.load()
        assert state.to_data() == applied(history).to_data()
        assert store.snapshot_position == previous
        assert any("CorruptSnapshotError" in r.getMessage() or "torn" in r.getMessage()
                   for r in caplog.records), caplog.records
        # Set aside, not loaded again; the next snapshot keeps the good one.
        assert snapshot_positions(copy) == [previous]
        assert (copy / (snapshot_path(copy, newest).name + CORRUPT_SUFFIX)).exists()
        store.commit(state, isr_changes(3))
        store.take_snapshot(state)
        assert snapshot_positions(copy) == [len(history) + 3, previous]
        store.close()
        assert loaded(copy).to_data() == applied(history + isr_changes(3)).to_data()


def test_a_damaged_newest_snapshot_falls_back_and_never_to_an_empty_state(tmp_path):
    history = opening(*isr_changes(60))
    store = committed(tmp_path / "meta", history, SnapshotPolicy(after_events=20))
    store.close()
    newest, previous = snapshot_positions(tmp_path / "meta")[:2]
    path = snapshot_path(tmp_path / "meta", newest)
    damaged = bytearray(path.read_bytes())
    damaged[-5] ^= 0xFF
    path.write_bytes(bytes(damaged))
    assert loaded(tmp_path / "meta").to_data() == applied(history).to_data()
    # Both damaged: the events before the log start are nowhere, and the store says so.
    damaged = bytearray(snapshot_path(tmp_path / "meta", previous).read_bytes())
    damaged[30] ^= 0xFF
    snapshot_path(tmp_path / "meta", previous).write_bytes(bytes(damaged))
    with pytest.raises(CorruptSnapshotError, match="no usable snapshot"):
        loaded(tmp_path / "meta")


def test_a_log_that_ends_below_its_snapshot_goes_on_after_the_snapshot(tmp_path):
    """Never expected (events are synced before a snapshot), but if the log lost its tail,
    offsets go on after the snapshot rather than being given out again."""
    history = opening(*isr_changes(10))
    store = committed(tmp_path / "meta", history, NEVER)
    state = store.load()
    store.take_snapshot(state)
    store.log.truncate_to(len(history) - 4)
    store.close()
    store = MetadataStore(tmp_path / "meta", NEVER)
    try:
        assert store.load().to_data() == applied(history).to_data()
        assert store.append(isr_changes(1)[0]) == len(history)
    finally:
        store.close()


# -- power loss at every step of a snapshot ------------------------------------------------------


@pytest.mark.parametrize("which", ["first", "third"])
def test_a_power_loss_at_any_step_of_a_snapshot_keeps_every_committed_event(
        tmp_path, monkeypatch, which):
    """The snapshot's writing, the log's truncation, the old snapshots' deletion and the
    roll: a power loss after any file operation (every unsynced byte and name change lost)
    leaves a store that opens with every event committed."""
    power = PowerLoss(monkeypatch, tmp_path / "data")
    directory = power.root / "meta"
    policy = SnapshotPolicy(after_events=10)
    history = opening(*isr_changes(9 if which == "first" else 29))
    store = committed(directory, history, policy)
    state = store.load()
    assert not store.snapshot_due() or which == "first"
    ahead = isr_changes(10)[: 10 - (len(history) - store.snapshot_position)]
    power.copy_each_event = True
    store.commit(state, ahead)  # the commit that takes the snapshot
    power.copy_each_event = False
    history += ahead
    assert store.snapshot_position == len(history)
    assert len(power.copies) >= 5
    kinds = {kind for kind, _ in power.events}
    assert {"create", "replace", "sync", "fsync"} <= kinds
    if which == "third":
        assert "remove" in kinds  # a segment and the oldest snapshot went
    for copy in power.copies:
        reopened = MetadataStore(copy / "meta", policy)
        try:
            assert reopened.load().to_data() == applied(history).to_data(), copy
            assert not list((copy / "meta").glob("*.tmp"))
        finally:
            reopened.close()
    store.close()


# -- one fsync per commit ------------------------------------------------------------------------


def test_a_commit_of_several_events_costs_one_fsync(tmp_path, monkeypatch):
    store = committed(tmp_path / "meta", opening(), NEVER)
    state = store.load()
    synced = []
    real = files.fsync
    monkeypatch.setattr(files, "fsync", lambda fd: (synced.append(fd), real(fd)))
    try:
        offset = store.log.log_end_offset
        store.commit(state, isr_changes(50))
        assert len(synced) == 1
        assert [o for o, _ in store.events(offset)] == list(range(offset, offset + 50))
        synced.clear()
        store.commit(state, isr_changes(1))
        assert len(synced) == 1
    finally:
        store.close()
    assert loaded(tmp_path / "meta").to_data() == state.to_data()


def test_a_commit_whose_fsync_fails_keeps_and_applies_none_of_its_events(tmp_path, monkeypatch):
    disk = FailingDisk(monkeypatch)
    store = committed(tmp_path / "meta", opening(), NEVER)
    state = store.load()
    before = state.to_data()
    disk.failing = True
    with pytest.raises(StorageError):
        store.commit(state, isr_changes(5))
    disk.failing = False
    assert state.to_data() == before
    assert store.log.log_end_offset == len(opening())
    store.close()
    assert loaded(tmp_path / "meta").to_data() == before


def test_a_commit_larger_than_one_batch_is_kept_whole_or_not_at_all(tmp_path, monkeypatch):
    store = committed(tmp_path / "meta", opening(), NEVER)
    state = store.load()
    before = state.to_data()
    big = [configs_altered("t", {"note": "x" * 100_000, "n": i}) for i in range(30)]
    calls = []
    real = files.fsync

    def second_fails(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(files, "fsync", second_fails)
    with pytest.raises(StorageError):
        store.commit(state, big)
    monkeypatch.setattr(files, "fsync", real)
    assert len(calls) >= 2  # the first batch was synced before the second failed
    assert state.to_data() == before
    assert store.log.log_end_offset == len(opening())
    store.commit(state, big)
    assert store.log.log_end_offset == len(opening()) + 30
    store.close()
    assert loaded(tmp_path / "meta").to_data() == state.to_data()


def test_a_snapshot_that_fails_does_not_fail_the_commit_and_is_taken_later(tmp_path,
                                                                          monkeypatch):
    """The commit's events are durable before the snapshot: a disk that refuses the snapshot
    must not turn a committed change into an error for its caller."""
    store = committed(tmp_path / "meta", opening(), SnapshotPolicy(after_events=12))
    state = store.load()
    real = files.replace

    def refuse(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "replace", refuse)
    store.commit(state, isr_changes(5))  # due now: the snapshot fails
    assert state.applied == store.log.log_end_offset == len(opening()) + 5
    assert snapshot_positions(tmp_path / "meta") == []
    monkeypatch.setattr(files, "replace", real)
    store.commit(state, isr_changes(1))
    assert snapshot_positions(tmp_path / "meta") == [len(opening()) + 6]
    store.close()
    assert loaded(tmp_path / "meta").to_data() == state.to_data()
