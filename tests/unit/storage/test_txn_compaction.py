"""Compaction of a log holding transactions (raylog/storage/txn_cleaning.py): aborted
records go and never supersede, undecided ones stay and hold the clean boundary back,
markers stay while their transaction's records may be read, and go (with their index
entries) once delete.retention.ms old and their records are gone."""

from __future__ import annotations

import pytest

from raylog.records import iter_headers
from raylog.replica.partition import LeaderAndIsr, Partition
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.txn_index import AbortedTxn
from tests.unit.logutil import FakeClock, batch_of
from tests.unit.txnutil import ABORT, COMMIT, txn_batch

NOW = 1_700_000_000_000
RETENTION = 60_000
CONFIG = LogConfig(cleanup_policy="compact", retention_ms=None, delete_retention_ms=RETENTION,
                   min_cleanable_dirty_ratio=0.01)


@pytest.fixture
def clock():
    return FakeClock(NOW)


@pytest.fixture
def leader(tmp_path, clock):
    p = Partition("t", 0, PartitionLog(tmp_path / "t-0", CONFIG, clock=clock), 1, clock=clock)
    p.apply(LeaderAndIsr(1, 0, 0, (1,), (1,)))
    yield p
    p.log.close()


def _put(p: Partition, key: bytes, value: bytes, producer_id: int | None = None,
         sequence: int = 0) -> int:
    batch = batch_of([value], keys=[key], ts=p.clock()) if producer_id is None else \
        txn_batch([value], producer_id, base_sequence=sequence, keys=[key], ts=p.clock())
    return p.append(batch, leader_epoch=0).base_offset


def _compact(p: Partition) -> None:
    p.log.roll()  # every segment but an empty active one is cleanable
    p.log.update_high_watermark(p.log_end_offset)
    p.log.compact(max_offset=p.log_end_offset)


def _records(p: Partition, isolation: str = "read_uncommitted") -> list[tuple]:
    table = p.read_table(p.log.log_start_offset, p.high_watermark, 0, isolation=isolation)
    return list(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                    table.column("value").to_pylist(), strict=True))


def _markers(p: Partition) -> list[int]:
    return [h.base_offset for chunk in p.log.read_range(0, p.log_end_offset)
            for _, h in iter_headers(chunk) if h.control]


def test_compaction_keeps_committed_drops_aborted_and_leaves_undecided(leader, clock):
    _put(leader, b"k0", b"committed", 7)                       # 0
    _put(leader, b"k1", b"committed", 7, 1)                    # 1
    leader.write_marker(7, 0, COMMIT, 0, leader_epoch=0)       # 2
    _put(leader, b"k0", b"aborted", 8)                         # 3
    _put(leader, b"k2", b"aborted", 8, 1)                      # 4
    leader.write_marker(8, 0, ABORT, 0, leader_epoch=0)        # 5
    _put(leader, b"k1", b"plain")                              # 6
    _put(leader, b"k0", b"open", 9)                            # 7
    _compact(leader)
    # The aborted records went; the newer aborted k0 did not supersede the committed one;
    # the undecided k0 stays beside it; the markers stay (too young).
    assert _records(leader) == [(0, b"k0", b"committed"), (6, b"k1", b"plain"),
                                (7, b"k0", b"open")]
    assert _markers(leader) == [2, 5]
    assert leader.log.aborted_transactions(0, 9) == [AbortedTxn(8, 3, 5, 6)]
    assert leader.log.clean_end_offset == 7  # the undecided record is cleaned again later
    assert leader.producers.ongoing == {9: 7}

    # Old enough: the abort marker goes with its entry (its records are gone); the commit
    # marker stays, since its k0 is still in the log.
    clock.advance(2 * RETENTION)
    _compact(leader)
    assert _markers(leader) == [2]
    assert leader.log.aborted_transactions(0, 9) == []

    # 9 commits, then a plain k0 supersedes both transactions' last records: each commit
    # marker goes once no record of its transaction is left and it is old enough.
    leader.write_marker(9, 0, COMMIT, 0, leader_epoch=0)       # 8
    _put(leader, b"k0", b"last")                               # 9
    _compact(leader)
    assert _records(leader) == [(6, b"k1", b"plain"), (9, b"k0", b"last")]
    assert _markers(leader) == [8]  # 7's marker was old already; 9's is young
    clock.advance(2 * RETENTION)
    _put(leader, b"k3", b"later")
    _compact(leader)
    assert _markers(leader) == []
    assert _records(leader, "read_committed") == [(6, b"k1", b"plain"), (9, b"k0", b"last"),
                                                  (10, b"k3", b"later")]


def test_a_compacted_log_reopens_to_the_same_transactions(leader, clock, tmp_path):
    _put(leader, b"k0", b"committed", 7)
    leader.write_marker(7, 0, COMMIT, 0, leader_epoch=0)
    _put(leader, b"k0", b"aborted", 8)
    leader.write_marker(8, 0, ABORT, 0, leader_epoch=0)
    _put(leader, b"k1", b"open", 9)
    _compact(leader)
    before = (leader.producers.ongoing, leader.log.aborted_transactions(0, 9),
              _records(leader))
    leader.close()
    reopened = Partition("t", 0, PartitionLog(tmp_path / "t-0", CONFIG, clock=clock), 1,
                         clock=clock)
    reopened.apply(LeaderAndIsr(1, 0, 0, (1,), (1,)))
    assert (reopened.producers.ongoing, reopened.log.aborted_transactions(0, 9),
            _records(reopened)) == before
    reopened.log.close()


def test_a_partly_kept_transactional_batch_stays_transactional(leader):
    leader.append(txn_batch([b"a", b"b"], 7, keys=[b"k0", b"k1"]), leader_epoch=0)
    leader.write_marker(7, 0, COMMIT, 0, leader_epoch=0)
    _put(leader, b"k0", b"newer")
    _compact(leader)
    headers = [h for chunk in leader.log.read_range(0, leader.log_end_offset)
               for _, h in iter_headers(chunk)]
    assert headers[0].explicit_offsets and headers[0].transactional
    assert _records(leader, "read_committed") == [(1, b"k1", b"b"), (3, b"k0", b"newer")]
