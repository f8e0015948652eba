"""Offsets committed inside a transaction: pending until their marker, committed or dropped
by it, and replayed from the log's batches (raylog/groups/txn_offsets.py)."""

from __future__ import annotations

import pytest

from raylog.errors import (
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
    UnstableOffsetCommitError,
)
from raylog.groups.coordinator import GroupCoordinator, OffsetAndMetadata
from raylog.groups.txn_offsets import TxnOffsets, check_transaction, transactional_batch
from raylog.records import decode, validate_batch
from raylog.records.reader import batch_records
from raylog.types import TopicPartition

TP0, TP1 = TopicPartition("in", 0), TopicPartition("in", 1)
PID, EPOCH = 4242, 3


def om(offset: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(offset, "", 1000)


def records(group: str, offsets: dict[TopicPartition, int]) -> list[tuple[bytes, bytes]]:
    return [GroupCoordinator.offset_record(group, tp, om(o)) for tp, o in offsets.items()]


def coordinator_with_pending(group: str = "g", partition: int = 5) -> GroupCoordinator:
    c = GroupCoordinator(lambda: 0)
    c.apply_commit(group, {TP0: om(10)})
    c.txn.appended(partition, PID, EPOCH, 0, 2, {group: {TP0: om(20), TP1: om(21)}})
    return c


def test_pending_offsets_are_not_committed_until_the_commit_marker():
    c = coordinator_with_pending()
    assert c.committed("g", [TP0, TP1]) == {TP0: om(10), TP1: None}
    c.txn_marker(5, PID, EPOCH, commit=True)
    assert c.committed("g", [TP0, TP1], require_stable=True) == {TP0: om(20), TP1: om(21)}


def test_an_abort_marker_drops_them():
    c = coordinator_with_pending()
    c.txn_marker(5, PID, EPOCH, commit=False)
    assert c.committed("g", [TP0, TP1], require_stable=True) == {TP0: om(10), TP1: None}
    assert c.txn.pending == {}


def test_a_marker_ends_only_its_producer_in_its_partition():
    c = coordinator_with_pending()
    c.txn_marker(6, PID, EPOCH, commit=True)       # another partition
    c.txn_marker(5, PID + 1, EPOCH, commit=True)   # another producer
    assert c.committed("g", [TP0]) == {TP0: om(10)}
    assert c.txn.unstable("g", [TP0, TP1]) == [TP0, TP1]


def test_require_stable_refuses_a_partition_with_pending_offsets_retriably():
    c = coordinator_with_pending()
    with pytest.raises(UnstableOffsetCommitError) as e:
        c.committed("g", [TP1], require_stable=True)
    assert e.value.retriable and e.value.kafka_code == 88
    other = TopicPartition("in", 2)
    assert c.committed("g", [other], require_stable=True) == {other: None}
    assert c.committed("other-group", [TP0], require_stable=True) == {TP0: None}


def test_a_marker_told_twice_applies_once_and_a_later_plain_commit_stays():
    c = coordinator_with_pending()
    c.txn_marker(5, PID, EPOCH, commit=True)
    c.apply_commit("g", {TP0: om(30)})
    c.txn_marker(5, PID, EPOCH, commit=True)  # the replay and the marker writer both tell
    assert c.committed("g", [TP0]) == {TP0: om(30)}


def test_sequences_continue_within_an_epoch_and_start_over_after_a_newer_marker():
    t = TxnOffsets()
    assert t.next_sequence(5, PID, EPOCH) == 0
    t.appended(5, PID, EPOCH, 0, 2, {"g": {TP0: om(1)}})
    assert t.next_sequence(5, PID, EPOCH) == 2
    assert t.next_sequence(6, PID, EPOCH) == 0  # per partition
    t.end(5, PID, EPOCH, commit=True)           # same epoch: the sequence goes on
    assert t.next_sequence(5, PID, EPOCH) == 2
    t.end(5, PID, EPOCH + 1, commit=False)      # a fence's marker: a newer epoch from 0
    assert t.next_sequence(5, PID, EPOCH + 1) == 0
    assert t.next_sequence(5, PID, EPOCH) == 0


def test_replay_keeps_an_open_transaction_pending_and_applies_markers_in_log_order():
    c = GroupCoordinator(lambda: 0)
    c.load_batch(5, -1, -1, -1, False, None, records("g", {TP0: 10}))
    c.load_batch(5, PID, EPOCH, 0, True, None, records("g", {TP0: 20}))
    c.load_batch(5, -1, -1, -1, False, None, records("g", {TP1: 5}))
    c.load_batch(5, PID + 1, 0, 0, True, None, records("g", {TP1: 7}))
    c.load_batch(5, PID + 1, 0, -1, True, False, [])  # the second producer aborted
    c.finish_load()
    assert c.committed("g", [TP0, TP1]) == {TP0: om(10), TP1: om(5)}
    assert c.txn.unstable("g", [TP0, TP1]) == [TP0]  # the first is still open
    assert c.txn.next_sequence(5, PID, EPOCH) == 1
    c.txn_marker(5, PID, EPOCH, commit=True)         # its marker arrives after the restart
    assert c.committed("g", [TP0, TP1], require_stable=True) == {TP0: om(20), TP1: om(5)}


def test_replay_of_a_committed_transaction_then_a_plain_commit():
    c = GroupCoordinator(lambda: 0)
    c.load_batch(5, PID, EPOCH, 0, True, None, records("g", {TP0: 20}))
    c.load_batch(5, PID, EPOCH, -1, True, True, [])
    c.load_batch(5, -1, -1, -1, False, None, records("g", {TP0: 25}))
    assert c.committed("g", [TP0], require_stable=True) == {TP0: om(25)}


def test_the_batch_is_transactional_with_the_producers_id_epoch_and_sequence():
    batch = transactional_batch(records("g", {TP0: 20, TP1: 21}), PID, EPOCH, 7, 1000)
    header = validate_batch(batch)
    assert header.transactional and not header.control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, EPOCH, 7)
    found = [(r.key, r.value) for r in batch_records(header, decode(header, batch))]
    assert GroupCoordinator.transactional_offsets(found) == {"g": {TP0: om(20), TP1: om(21)}}


def describe(state="ONGOING", groups=("g",), pid=PID, epoch=EPOCH):
    return {"producer_id": pid, "producer_epoch": epoch, "state": state,
            "groups": list(groups)}


def test_check_transaction():
    check_transaction(describe(), "t", PID, EPOCH, "g")
    with pytest.raises(InvalidProducerIdMappingError):
        check_transaction(None, "t", PID, EPOCH, "g")
    with pytest.raises(InvalidProducerIdMappingError):
        check_transaction(describe(pid=PID + 1), "t", PID, EPOCH, "g")
    with pytest.raises(ProducerFencedError):
        check_transaction(describe(epoch=EPOCH + 1), "t", PID, EPOCH, "g")
    with pytest.raises(InvalidTxnStateError):
        check_transaction(describe(groups=()), "t", PID, EPOCH, "g")
    with pytest.raises(InvalidTxnStateError):
        check_transaction(describe(state="PREPARE_COMMIT"), "t", PID, EPOCH, "g")
    with pytest.raises(InvalidTxnStateError):
        check_transaction(describe(state="EMPTY", groups=()), "t", PID, EPOCH, "g")


def test_describe_shows_pending_offsets():
    c = coordinator_with_pending()
    c.group("g")
    assert c.describe("g")["pending_transactional"] == {"in:0": 20, "in:1": 21}
