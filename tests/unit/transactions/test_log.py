"""The records of __transaction_state: round trips, replay, and what is refused on load."""

from __future__ import annotations

import json

import pytest

from raylog.errors import CorruptRecordError, UnsupportedFormatVersionError
from raylog.groups.coordinator import GroupCoordinator
from raylog.records.partitioner import key_partition
from raylog.transactions.coordinator import TransactionCoordinator
from raylog.transactions.log import (
    TRANSACTION_STATE_PARTITIONS,
    decision_key,
    decision_tombstone,
    decode,
    decode_decision,
    encode,
    encode_decision,
    encode_key,
    load,
    partition_for,
    tombstone,
)
from raylog.transactions.state import JointCommit, Member, TransactionMetadata, TransactionState
from raylog.types import TopicPartition

S = TransactionState
A0, B3 = TopicPartition("a", 0), TopicPartition("b", 3)


async def write_nothing(partition: int, record: tuple) -> None:
    raise AssertionError("a load writes nothing")


def metadata(tid: str = "t", pid: int = 7) -> TransactionMetadata:
    return TransactionMetadata.new(tid, pid, 60_000, 10).bump_epoch(60_000, 11)


def ongoing(tid: str = "t", start: int = 100) -> TransactionMetadata:
    return metadata(tid).add([A0, B3], ["g"], start)


@pytest.mark.parametrize("m", [
    metadata(), ongoing(), ongoing().prepare_end(True, 200), ongoing().prepare_end(False, 200),
    ongoing().prepare_end(True, 200).complete(300), ongoing().fence(150).prepare_end(False, 150),
    ongoing().prepare_end(False, 200).complete(300),
], ids=lambda m: m.state.name)
def test_every_written_state_round_trips(m):
    key, value = encode(m)
    assert decode(key, value) == m


def test_states_never_written_are_refused_by_encode():
    with pytest.raises(ValueError, match="PREPARE_EPOCH_FENCE is never written"):
        encode(ongoing().fence(150))
    with pytest.raises(ValueError, match="DEAD"):
        encode(metadata().dead(20))


def test_the_key_is_fixed_and_the_value_versioned():
    key, value = encode(ongoing())
    assert key == encode_key("t") == tombstone("t")[0] == b'["txn", "t"]'
    fields = json.loads(value)
    assert fields["version"] == 1 and fields["state"] == "ONGOING"
    assert fields["partitions"] == [["a", 0], ["b", 3]] and fields["groups"] == ["g"]


def test_partition_for_is_the_hash_groups_use():
    assert partition_for("t") == key_partition(b"t", TRANSACTION_STATE_PARTITIONS)
    assert partition_for("some-app-0", 50) == GroupCoordinator.partition_for("some-app-0", 50)
    assert {partition_for(f"id-{i}") for i in range(200)} == set(range(8))


def test_load_keeps_the_last_record_per_key_and_drops_tombstones():
    a, b, c = ongoing("a"), ongoing("b"), metadata("c")
    records = [encode(a), encode(b), encode(c), encode(a.prepare_end(True, 200)),
               tombstone("c"), encode(b.prepare_end(False, 210)),
               encode(b.prepare_end(False, 210).complete(220)), tombstone("never-seen")]
    loaded = load(records).transactions
    assert sorted(loaded) == ["a", "b"]
    assert loaded["a"].state is S.PREPARE_COMMIT
    assert loaded["b"].state is S.COMPLETE_ABORT
    # What was being prepared is marker work for the new coordinator, at its epoch.
    [work] = TransactionCoordinator(write_nothing, coordinator_epoch=5,
                                    transactions=loaded).pending_markers()
    assert (work.transactional_id, work.commit, work.partitions, work.coordinator_epoch) == (
        "a", True, (A0, B3), 5)


def test_a_tombstone_then_a_new_record_brings_the_id_back():
    records = [encode(metadata("a")), tombstone("a"), encode(metadata("a", pid=9))]
    assert load(records).transactions["a"].producer_id == 9


def test_an_ongoing_transaction_keeps_its_start_time():
    loaded = load([encode(ongoing(start=1234))]).transactions
    assert loaded["t"].start_ms == 1234
    assert TransactionCoordinator(write_nothing, coordinator_epoch=0,
                                  transactions=loaded).pending_markers() == []


@pytest.mark.parametrize("key, value, message", [
    (b"not json", b"{}", "unreadable key"),
    (b'["group", "g"]', b"{}", "not the key of a transactional id"),
    (b'["txn", ""]', b"{}", "not the key of a transactional id"),
    (b'["txn", "t"]', b"{not json", "is not JSON"),
    (b'["txn", "t"]', b"[1, 2]", "version None"),
    (b'["txn", "t"]', b'{"version": 0, "state": "ONGOING"}', "has version 0; this raylog "
                                                             "reads version 1"),
    (b'["txn", "t"]', b'{"version": 1}', "malformed: KeyError"),
])
def test_a_record_that_cannot_be_read_stops_the_load(key, value, message):
    records = [encode(ongoing()), (key, value)]
    with pytest.raises(CorruptRecordError, match=message):
        load(records)


@pytest.mark.parametrize("change, message", [
    ({"state": "NOT_A_STATE"}, "NOT_A_STATE"),
    ({"state": "PREPARE_EPOCH_FENCE"}, "never written"),
    ({"state": "DEAD"}, "never written"),
    ({"producer_epoch": "3"}, "producer_epoch is '3'"),
    ({"producer_id": True}, "producer_id is True"),
    ({"partitions": [["a", "0"]]}, "partition"),
    ({"partitions": [["a"]]}, "malformed"),
    ({"groups": [1]}, "groups"),
])
def test_a_malformed_value_is_corrupt(change, message):
    key, value = encode(ongoing())
    fields = {**json.loads(value), **change}
    with pytest.raises(CorruptRecordError, match=message):
        decode(key, json.dumps(fields).encode())


DECISION = JointCommit("w", (Member("a", 7, 0), Member("b", 8, 3)), 500)


def test_a_joint_commit_decision_round_trips_under_its_own_key():
    key, value = encode_decision(DECISION)
    assert key == decision_key("w") == decision_tombstone("w")[0] == b'["joint_commit", "w"]'
    assert json.loads(value) == {"version": 1, "members": [["a", 7, 0], ["b", 8, 3]],
                                 "decided_ms": 500}
    assert decode_decision(key, value) == DECISION


def test_load_keeps_decisions_beside_the_ids_until_their_tombstone():
    other = JointCommit("x", (Member("c", 9, 0),), 600)
    records = [encode(ongoing("a")), encode_decision(DECISION), encode_decision(other),
               encode(ongoing("a").prepare_end(True, 200)), decision_tombstone("x")]
    loaded = load(records)
    assert loaded.decisions == {"w": DECISION}
    assert loaded.transactions["a"].state is S.PREPARE_COMMIT
    # An id named like a write id is another key: neither hides the other.
    assert load([encode(metadata("w")), encode_decision(DECISION)]).transactions.keys() == {"w"}


@pytest.mark.parametrize("value, message", [
    (b"{not json", "is not JSON"),
    (b'{"version": 1, "members": [], "decided_ms": 1}', "no members"),
    (b'{"version": 1, "members": [["a", "7", 0]], "decided_ms": 1}', "member"),
    (b'{"version": 1, "members": [["a", 7]], "decided_ms": 1}', "malformed"),
    (b'{"version": 1, "members": [["a", 7, 0]]}', "malformed: KeyError"),
    (b'{"version": 0, "members": [["a", 7, 0]], "decided_ms": 1}', "has version 0"),
])
def test_a_decision_that_cannot_be_read_stops_the_load(value, message):
    with pytest.raises(CorruptRecordError, match=message):
        load([encode_decision(DECISION), (decision_key("w"), value)])


def test_a_newer_decision_version_is_refused_as_such():
    value = json.dumps({"version": 2, "members": [["a", 7, 0]], "decided_ms": 1}).encode()
    with pytest.raises(UnsupportedFormatVersionError, match="version 2"):
        load([(decision_key("w"), value)])
