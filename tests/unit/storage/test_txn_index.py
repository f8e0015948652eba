"""The aborted-transaction index: its file, lookups, and how the log keeps it with its
segments (roll, truncation, retention, delete_records, compaction's renames, opening)."""

from __future__ import annotations

import struct

import pytest

from raylog.errors import CorruptTxnIndexError
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TxnIndex
from tests.unit.logutil import FakeClock, batch_of

NOW = 1_700_000_000_000


def test_entries_round_trip_through_the_file(tmp_path):
    index = TxnIndex(tmp_path / "0.txnindex")
    assert not index.path.exists()  # made only with the first entry
    index.append(AbortedTxn(7, 0, 3, 1))
    index.append(AbortedTxn(8, 1, 5, 6))
    index.sync()
    again = TxnIndex(index.path)
    again.load(0, 10)
    assert again.entries == [AbortedTxn(7, 0, 3, 1), AbortedTxn(8, 1, 5, 6)]
    with pytest.raises(ValueError, match="not after"):
        again.append(AbortedTxn(9, 2, 5, 6))


def test_overlapping_finds_transactions_holding_an_offset_of_the_range(tmp_path):
    index = TxnIndex(tmp_path / "0.txnindex")
    for entry in [AbortedTxn(1, 0, 2, 3), AbortedTxn(2, 4, 6, 7), AbortedTxn(3, 5, 9, 10)]:
        index.append(entry)
    assert [e.producer_id for e in index.overlapping(0, 1)] == [1]
    assert [e.producer_id for e in index.overlapping(3, 5)] == [2]
    assert [e.producer_id for e in index.overlapping(6, 7)] == [2, 3]
    assert index.overlapping(10, 20) == []


def test_truncation_and_restore_keep_marker_order(tmp_path):
    index = TxnIndex(tmp_path / "0.txnindex")
    index.append(AbortedTxn(1, 0, 2, 3))
    index.append(AbortedTxn(2, 4, 6, 7))
    assert index.restore(AbortedTxn(1, 0, 2, 3)) is False  # there already
    index.truncate_to(6)
    assert index.entries == [AbortedTxn(1, 0, 2, 3)]
    assert index.restore(AbortedTxn(3, 3, 4, 5)) is True
    assert index.restore(AbortedTxn(4, 0, 1, 2)) is True  # before the others: rewritten
    reread = TxnIndex(index.path)
    reread.load(0, 10)
    assert [e.last_offset for e in reread.entries] == [1, 2, 4]
    index.truncate_to(0)
    assert not index.path.exists()


def test_entries_past_the_segment_end_are_dropped_on_load(tmp_path):
    index = TxnIndex(tmp_path / "0.txnindex")
    index.append(AbortedTxn(1, 0, 2, 3))
    index.append(AbortedTxn(2, 4, 6, 7))  # its marker was cut with a torn tail
    again = TxnIndex(index.path)
    again.load(0, 5)
    assert again.entries == [AbortedTxn(1, 0, 2, 3)]
    assert index.path.stat().st_size == 32


@pytest.mark.parametrize("damage", [
    b"\x00" * 5,  # a torn entry
    struct.pack(">qqqq", 1, 0, 3, 4) + struct.pack(">qqqq", 2, 0, 2, 3),  # out of order
    struct.pack(">qqqq", 1, 5, 3, 4),  # first offset after the marker
    struct.pack(">qqqq", -1, 0, 3, 4),  # no producer
    struct.pack(">qqqq", 1, 0, 3, 9),  # a stable offset past the marker
    struct.pack(">qqqq", 1, 0, 1, 2),  # a marker below the segment's base offset (2)
])
def test_a_corrupt_file_is_refused(tmp_path, damage):
    path = tmp_path / "0.txnindex"
    path.write_bytes(damage)
    with pytest.raises(CorruptTxnIndexError):
        TxnIndex(path).load(2, 10)


def _txn_files(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(TXN_INDEX_SUFFIX))


def _log(tmp_path, **config) -> PartitionLog:
    return PartitionLog(tmp_path / "t-0", LogConfig(**{"retention_ms": None, **config}),
                        clock=FakeClock(NOW))


def test_the_log_indexes_in_the_markers_segment_and_looks_across_segments(tmp_path):
    log = _log(tmp_path)
    for _ in range(3):
        log.append(batch_of([b"x"]))
    log.add_aborted(AbortedTxn(7, 0, 2, 3))
    log.roll()
    log.append(batch_of([b"y"]))
    log.add_aborted(AbortedTxn(8, 1, 3, 4))  # began in the first segment
    assert _txn_files(log.directory) == ["00000000000000000000.txnindex",
                                         "00000000000000000003.txnindex"]
    assert log.aborted_transactions(1, 2) == [AbortedTxn(7, 0, 2, 3), AbortedTxn(8, 1, 3, 4)]
    assert log.aborted_transactions(3, 4) == [AbortedTxn(8, 1, 3, 4)]
    log.close()
    reopened = _log(tmp_path)
    assert reopened.aborted_transactions(0, 4) == [AbortedTxn(7, 0, 2, 3),
                                                   AbortedTxn(8, 1, 3, 4)]
    assert not reopened.txn_index_damaged
    # Truncation takes the entries of the markers it cuts, and the files of whole segments.
    reopened.truncate_to(3)
    assert _txn_files(reopened.directory) == ["00000000000000000000.txnindex"]
    reopened.truncate_to(2)
    assert _txn_files(reopened.directory) == [] and reopened.aborted_transactions(0, 9) == []
    reopened.close()


def test_retention_and_delete_records_take_the_index_with_the_segment(tmp_path):
    log = _log(tmp_path)
    for i in range(3):
        log.append(batch_of([b"x"]))
        log.add_aborted(AbortedTxn(7, i, i, i + 1))
        log.roll()
    log.append(batch_of([b"x"]))
    log.update_high_watermark(log.log_end_offset)
    assert len(_txn_files(log.directory)) == 3
    log.delete_records(2)
    assert _txn_files(log.directory) == ["00000000000000000002.txnindex"]
    assert log.aborted_transactions(0, 9) == [AbortedTxn(7, 2, 2, 3)]
    log.close()


def test_retention_by_time_deletes_it_too(tmp_path):
    clock = FakeClock(NOW)
    log = PartitionLog(tmp_path / "t-0", LogConfig(retention_ms=1000), clock=clock)
    log.append(batch_of([b"x"], ts=NOW))
    log.add_aborted(AbortedTxn(7, 0, 0, 1))
    log.roll()
    log.append(batch_of([b"y"], ts=NOW + 5000))
    clock.advance(2000)
    assert log.enforce_retention() == 1
    assert _txn_files(log.directory) == []
    log.close()


def test_a_corrupt_file_is_emptied_on_open_and_reported(tmp_path):
    log = _log(tmp_path)
    log.append(batch_of([b"x"]))
    log.add_aborted(AbortedTxn(7, 0, 0, 1))
    log.close()
    (log.directory / "00000000000000000000.txnindex").write_bytes(b"garbage")
    reopened = _log(tmp_path)
    assert reopened.txn_index_damaged  # its owner rebuilds from the batches
    assert reopened.aborted_transactions(0, 9) == []
    assert _txn_files(reopened.directory) == []
    reopened.close()
