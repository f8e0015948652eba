"""Transactions in the producer state (raylog.replica.producer_state): what opens and closes
a transaction, fencing by markers, the aborted transactions, snapshots and rebuilds."""

from __future__ import annotations

import json

import pytest

from raylog.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
)
from raylog.records import parse_header, stamp
from raylog.records.control import Marker, read_marker
from raylog.replica.producer_state import ProducerStates, SequenceGap
from raylog.storage import AppendInfo
from raylog.storage.txn_index import AbortedTxn
from tests.unit.logutil import batch_of
from tests.unit.txnutil import ABORT, COMMIT, marker, txn_batch


class Log:
    """Batches appended one after another, each applied to ``states`` as a replica does;
    ``applied`` keeps (header, marker) as a replay from the log would give them."""

    def __init__(self) -> None:
        self.states = ProducerStates()
        self.end = 0
        self.applied: list = []

    def add(self, batch: bytes):
        data = bytearray(batch)
        stamp(data, self.end, 0)
        header = parse_header(data)
        mark = read_marker(header, data) if header.control else None
        if mark is not None and not self.states.check_marker(
                header.producer_id, header.producer_epoch, mark):
            return "skipped"
        if mark is None:
            assert self.states.check(header) is None
        info = AppendInfo(header.base_offset, header.last_offset, header.max_timestamp,
                          header.record_count)
        self.end = header.next_offset
        self.applied.append((header, mark))
        return self.states.accept(header, info, mark)


def test_a_transactional_batch_opens_and_a_marker_closes():
    log = Log()
    log.add(batch_of([b"x"]))  # not transactional: opens nothing
    assert log.states.first_unstable_offset() is None
    log.add(txn_batch([b"a", b"b"], 7))
    log.add(txn_batch([b"c"], 7, base_sequence=2))
    assert log.states.ongoing == {7: 1}
    assert log.add(marker(COMMIT, 7)) is None  # a commit indexes nothing
    assert log.states.ongoing == {} and log.states.first_unstable_offset() is None
    log.add(txn_batch([b"d"], 7, base_sequence=3))  # the next transaction
    assert log.states.ongoing == {7: 5}


def test_an_abort_yields_its_entry_with_the_stable_offset_after_it():
    log = Log()
    log.add(txn_batch([b"a"], 7))  # 0
    log.add(txn_batch([b"b"], 8))  # 1
    log.add(txn_batch([b"c"], 7, base_sequence=1))  # 2
    assert log.states.first_unstable_offset() == 0
    assert log.add(marker(ABORT, 7)) == AbortedTxn(7, 0, 3, 1)  # 8's transaction still open
    assert log.states.first_unstable_offset() == 1
    assert log.add(marker(ABORT, 8)) == AbortedTxn(8, 1, 4, 5)  # none open: after the marker


def test_a_marker_of_an_older_producer_epoch_is_fenced():
    log = Log()
    log.add(txn_batch([b"a"], 7, producer_epoch=3))
    with pytest.raises(ProducerFencedError):
        log.add(marker(ABORT, 7, producer_epoch=2))
    assert log.states.ongoing == {7: 0}


def test_a_marker_of_an_older_coordinator_is_fenced():
    log = Log()
    log.add(txn_batch([b"a"], 7))
    log.add(marker(COMMIT, 7, coordinator_epoch=5))
    log.add(txn_batch([b"b"], 7, base_sequence=1))
    with pytest.raises(TransactionCoordinatorFencedError):
        log.add(marker(ABORT, 7, coordinator_epoch=4))
    assert log.states.ongoing == {7: 2}


def test_a_newer_epochs_marker_fences_the_older_epochs_data():
    log = Log()
    log.add(txn_batch([b"a"], 7, producer_epoch=0))
    # init_transactions of a new incarnation: the coordinator aborts at the bumped epoch.
    assert log.add(marker(ABORT, 7, producer_epoch=1)) == AbortedTxn(7, 0, 1, 2)
    with pytest.raises(ProducerFencedError):  # the zombie's next batch
        log.states.check(parse_header(txn_batch([b"z"], 7, producer_epoch=0, base_sequence=1)))
    # ProducerFencedError is an InvalidProducerEpochError: callers catching that still do.
    assert issubclass(ProducerFencedError, InvalidProducerEpochError)
    with pytest.raises(SequenceGap):  # the new epoch starts at sequence 0
        log.states.check(parse_header(txn_batch([b"n"], 7, producer_epoch=1, base_sequence=1)))
    log.add(txn_batch([b"n"], 7, producer_epoch=1))
    assert log.states.ongoing == {7: 2}


def test_a_marker_with_nothing_open_is_not_written_again():
    log = Log()
    log.add(txn_batch([b"a"], 7))
    log.add(marker(COMMIT, 7))
    assert log.add(marker(COMMIT, 7)) == "skipped"  # the coordinator's retry
    assert log.end == 2
    # A producer unknown here (it wrote nothing to this partition): the marker is written,
    # so that its older epochs are fenced here too, and no aborted transaction comes of it.
    assert log.add(marker(ABORT, 9, producer_epoch=4)) is None
    with pytest.raises(ProducerFencedError):
        log.states.check(parse_header(txn_batch([b"z"], 9, producer_epoch=3)))


def test_a_control_batch_without_its_marker_is_refused():
    data = bytearray(marker(COMMIT, 7))
    stamp(data, 0, 0)
    with pytest.raises(CorruptRecordError, match="without its marker"):
        ProducerStates().accept(parse_header(data), AppendInfo(0, 0, 0, 1))


def _history() -> Log:
    log = Log()
    log.add(txn_batch([b"a"], 7))
    log.add(txn_batch([b"b"], 8))
    log.add(batch_of([b"c"], producer_id=9))
    log.add(marker(ABORT, 7, coordinator_epoch=2))
    log.add(txn_batch([b"d"], 7, base_sequence=1))
    return log


def test_rebuild_from_the_log_gives_the_same_state():
    log = _history()
    rebuilt = ProducerStates()
    assert rebuilt.rebuild(log.applied) == [AbortedTxn(7, 0, 3, 1)]
    assert rebuilt.to_json() == log.states.to_json()
    assert rebuilt.ongoing == {8: 1, 7: 4}


def test_snapshots_carry_ongoing_transactions():
    log = _history()
    data = json.loads(json.dumps(log.states.to_json()))
    assert data["version"] == 3
    loaded = ProducerStates.from_json(data)
    assert loaded.ongoing == {8: 1, 7: 4} and loaded.first_unstable_offset() == 1
    assert loaded.to_json() == log.states.to_json()
    with pytest.raises(TransactionCoordinatorFencedError):  # the coordinator epoch too
        loaded.check_marker(7, 0, Marker(ABORT, 1))


def test_a_version_2_snapshot_still_loads():
    v2 = {"version": 2, "producers": [[7, 0, 3, [[0, 0, [0, 2, 5, 3]]]]]}
    states = ProducerStates.from_json(v2)
    assert states.ongoing == {} and states.to_json()["producers"] == \
        [[7, 0, 3, [[0, 0, [0, 2, 5, 3]]], -1, -1]]


def test_a_producer_with_a_transaction_open_is_not_forgotten():
    states = ProducerStates(max_producers=2)
    log = Log()
    log.states = states
    log.add(txn_batch([b"a"], 1))
    log.add(batch_of([b"b"], producer_id=2))
    log.add(batch_of([b"c"], producer_id=3))  # over the limit: 2 goes, not 1
    assert states.ongoing == {1: 0}
    assert len(states) == 2
    assert states.check(parse_header(txn_batch([b"d"], 1, base_sequence=1))) is None
