"""Transactions in a partition replica: markers, producer state, the last stable offset,
the aborted-transaction index as the replica keeps it, and read_committed reads (no Ray)."""

from __future__ import annotations

import shutil

import pytest

from raylog.errors import (
    InvalidArgumentError,
    InvalidBatchAttributesError,
    NotLeaderError,
    OffsetNotAvailableError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
)
from raylog.records import iter_headers, read_records
from raylog.replica.partition import Partition
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.txn_index import AbortedTxn
from tests.unit.logutil import batch_of
from tests.unit.replica.test_partition import follow, lead, new_partition, sync
from tests.unit.txnutil import ABORT, COMMIT, marker, txn_batch


@pytest.fixture
def leader(tmp_path):
    p = lead(new_partition(tmp_path))
    yield p
    p.log.close()


def test_a_producer_cannot_append_a_marker(leader):
    with pytest.raises(InvalidBatchAttributesError, match="marker"):
        leader.append(marker(COMMIT, 7), leader_epoch=0)
    assert leader.log_end_offset == 0


def test_read_batches_leaves_markers_out(leader):
    leader.append(txn_batch([b"a", b"b"], 7), leader_epoch=0)
    leader.log.append(marker(COMMIT, 7), 0)  # as the coordinator's write will
    leader.append(batch_of([b"c"]), leader_epoch=0)
    leader._set_hw(leader.log_end_offset)
    data = leader.read_batches(0, 4, leader_epoch=0)
    assert [h.base_offset for _, h in iter_headers(data)] == [0, 3]
    assert [r.value for r in read_records(data)] == [b"a", b"b", b"c"]
    assert leader.read_table(0, 4, leader_epoch=0).column("offset").to_pylist() == [0, 1, 3]


# -- markers, producer state and the last stable offset ----------------------------------------


def test_markers_close_transactions_and_move_the_last_stable_offset(leader):
    leader.append(batch_of([b"plain"]), leader_epoch=0)  # 0
    leader.append(txn_batch([b"a"], 7), leader_epoch=0)  # 1
    leader.append(txn_batch([b"b"], 8), leader_epoch=0)  # 2
    assert (leader.high_watermark, leader.last_stable_offset) == (3, 1)
    described = leader.describe()
    assert (described["last_stable_offset"], described["ongoing_transactions"]) == \
        (1, {7: 1, 8: 2})
    info = leader.write_marker(7, 0, ABORT, coordinator_epoch=1, leader_epoch=0)
    assert info.base_offset == 3
    assert leader.last_stable_offset == 2  # 8's still open
    assert leader.log.aborted_transactions(0, 9) == [AbortedTxn(7, 1, 3, 2)]
    assert leader.write_marker(8, 0, COMMIT, coordinator_epoch=1, leader_epoch=0).base_offset == 4
    assert leader.last_stable_offset == leader.high_watermark == 5
    # The coordinator's retry: nothing open any more, nothing written.
    assert leader.write_marker(8, 0, COMMIT, coordinator_epoch=1, leader_epoch=0) is None
    assert leader.log_end_offset == 5


def test_write_marker_failure_modes(leader):
    leader.append(txn_batch([b"a"], 7, producer_epoch=2), leader_epoch=0)
    with pytest.raises(ProducerFencedError):
        leader.write_marker(7, 1, ABORT, coordinator_epoch=0, leader_epoch=0)
    leader.write_marker(7, 2, COMMIT, coordinator_epoch=5, leader_epoch=0)
    leader.append(txn_batch([b"b"], 7, producer_epoch=2, base_sequence=1), leader_epoch=0)
    with pytest.raises(TransactionCoordinatorFencedError):
        leader.write_marker(7, 2, ABORT, coordinator_epoch=4, leader_epoch=0)
    # A new incarnation: the coordinator aborts at the bumped epoch, fencing the zombie.
    leader.write_marker(7, 3, ABORT, coordinator_epoch=5, leader_epoch=0)
    with pytest.raises(ProducerFencedError):
        leader.append(txn_batch([b"z"], 7, producer_epoch=2, base_sequence=2), leader_epoch=0)
    with pytest.raises(NotLeaderError):
        follow(leader, 2, 1)
        leader.write_marker(7, 3, ABORT, coordinator_epoch=5, leader_epoch=1)


def _transactions(p):
    """Committed 7 (offsets 0-1, marker 2), aborted 8 (3, 5, marker 6), 9 open from 4,
    a plain batch at 7."""
    p.append(txn_batch([b"c1", b"c2"], 7), leader_epoch=p.leader_epoch)
    p.write_marker(7, 0, COMMIT, 0, leader_epoch=p.leader_epoch)
    p.append(txn_batch([b"x1"], 8), leader_epoch=p.leader_epoch)
    p.append(txn_batch([b"open"], 9), leader_epoch=p.leader_epoch)
    p.append(txn_batch([b"x2"], 8, base_sequence=1), leader_epoch=p.leader_epoch)
    p.write_marker(8, 0, ABORT, 0, leader_epoch=p.leader_epoch)
    p.append(batch_of([b"plain"]), leader_epoch=p.leader_epoch)


def test_a_follower_keeps_the_same_transactions_and_takes_them_over(tmp_path):
    leader = lead(new_partition(tmp_path), 0, isr=(1, 2))
    follower = new_partition(tmp_path, replica=2)
    follow(follower, 1, 0)
    _transactions(leader)
    sync(follower, leader)
    assert follower.producers.ongoing == leader.producers.ongoing == {9: 4}
    assert follower.log.aborted_transactions(0, 9) == leader.log.aborted_transactions(0, 9) \
        == [AbortedTxn(8, 3, 6, 4)]
    assert follower.last_stable_offset == leader.last_stable_offset == 4
    lead(follower, 1, isr=(2,), replicas=(1, 2))  # the leader dies
    assert follower.last_stable_offset == 4
    follower.write_marker(9, 0, COMMIT, 0, leader_epoch=1)
    assert follower.last_stable_offset == follower.high_watermark == 9
    leader.log.close()
    follower.log.close()


def test_truncation_reopens_the_transactions_it_cuts_the_markers_of(tmp_path):
    p = lead(new_partition(tmp_path))
    _transactions(p)
    p.truncate(6)  # as a follower would: the abort marker goes
    assert p.producers.ongoing == {8: 3, 9: 4}
    assert p.log.aborted_transactions(0, 9) == []
    p.log.close()


def test_transactions_survive_a_clean_reopen_and_a_crash(tmp_path):
    p = lead(new_partition(tmp_path))
    _transactions(p)
    p.log.roll()  # a snapshot at the next append covers the transactions so far
    p.append(txn_batch([b"late"], 10), leader_epoch=0)
    expected = p.producers.to_json()
    crashed = tmp_path / "crashed"
    shutil.copytree(p.log.directory, crashed)  # no clean shutdown
    p.close()
    reopened = lead(new_partition(tmp_path))
    assert reopened.producers.to_json() == expected
    assert reopened.producers.ongoing == {9: 4, 10: 8}
    assert reopened.log.aborted_transactions(0, 9) == [AbortedTxn(8, 3, 6, 4)]
    reopened.log.close()
    again = Partition("t", 0, PartitionLog(crashed, LogConfig(retention_ms=None)), 1)
    assert again.producers.to_json() == expected
    assert again.log.aborted_transactions(0, 9) == [AbortedTxn(8, 3, 6, 4)]
    again.log.close()


def test_a_corrupt_txn_index_is_rebuilt_from_the_log(tmp_path):
    p = lead(new_partition(tmp_path))
    _transactions(p)
    directory = p.log.directory
    p.close()
    (directory / "00000000000000000000.txnindex").write_bytes(b"\x01" * 40)
    reopened = lead(new_partition(tmp_path))
    assert reopened.log.aborted_transactions(0, 9) == [AbortedTxn(8, 3, 6, 4)]
    assert reopened.producers.ongoing == {9: 4}
    assert not reopened.log.txn_index_damaged
    reopened.log.close()


# -- reading with an isolation level -----------------------------------------------------------


def test_read_committed_fetch_stops_at_the_lso_and_names_the_aborted(leader):
    _transactions(leader)
    assert leader.high_watermark == 8 and leader.last_stable_offset == 4
    uncommitted = leader.fetch(0, 1 << 20, leader_epoch=0)
    assert uncommitted.aborted is None
    assert [r.value for r in read_records(uncommitted.data)] == \
        [b"c1", b"c2", b"x1", b"open", b"x2", b"plain"]
    committed = leader.fetch(0, 1 << 20, 0, isolation="read_committed")
    assert committed.last_stable_offset == 4
    assert [h.base_offset for _, h in iter_headers(committed.data)] == [0, 2, 3]
    assert committed.aborted == (AbortedTxn(8, 3, 6, 4),)
    leader.write_marker(9, 0, COMMIT, 0, leader_epoch=0)
    assert leader.fetch(8, 1 << 20, 0, isolation="read_committed").aborted == ()
    with pytest.raises(InvalidArgumentError):
        leader.fetch(0, 1 << 20, 0, isolation="committed")


def test_read_committed_tables_and_batches_leave_aborted_records_out(leader):
    _transactions(leader)
    with pytest.raises(OffsetNotAvailableError, match="last stable offset"):
        leader.read_table(0, 8, 0, isolation="read_committed")
    leader.write_marker(9, 0, COMMIT, 0, leader_epoch=0)
    table = leader.read_table(0, 9, 0, isolation="read_committed")
    assert table.column("value").to_pylist() == [b"c1", b"c2", b"open", b"plain"]
    assert table.column("offset").to_pylist() == [0, 1, 4, 7]
    data = leader.read_batches(0, 9, 0, isolation="read_committed")
    assert [h.base_offset for _, h in iter_headers(data)] == [0, 4, 7]
    # read_uncommitted (the default) shows the aborted records, never the markers.
    assert leader.read_table(0, 9, 0).column("offset").to_pylist() == [0, 1, 3, 4, 5, 7]
