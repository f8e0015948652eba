"""Cold reads: remote segments read from a file:// store give what a broker's range read
gives (both isolation levels), a damaged or missing object is a typed error naming it, and
ranges split into cold pieces and a hot rest (no Ray)."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from raylog.errors import OffsetOutOfRangeError, RemoteObjectError
from raylog.records.kafka_columns import KAFKA_SCHEMA, kafka_table, spark_table
from raylog.replica.partition import READ_COMMITTED, READ_UNCOMMITTED, Partition
from raylog.tiered import layout
from raylog.tiered.cold_plan import ColdPiece, TieredView, split_range
from raylog.tiered.cold_read import (
    aborted_transactions,
    segment_batches,
    segment_spark_table,
    segment_table,
)
from raylog.tiered.store import ObjectStore
from tests.tieredutil import fake_view, upload_segments
from tests.unit.logutil import batch_of
from tests.unit.replica.test_partition import lead, new_partition
from tests.unit.txnutil import ABORT, COMMIT, txn_batch


@pytest.fixture
def partition(tmp_path):
    p = fill(lead(new_partition(tmp_path)))
    yield p
    p.log.close()


def fill(p: Partition) -> Partition:
    """Make ``p`` (a leader at epoch 0 of an empty log) a log of 4 closed segments and an
    active one (offsets in comments), with a committed and an aborted transaction whose abort
    marker is in a later segment than its records, keys, headers, LZ4 and plain batches."""
    p.append(batch_of([b"a0", b"a1", b"a2"], keys=[b"k", None, b"k2"]), leader_epoch=0)  # 0-2
    p.append(txn_batch([b"t0", b"t1"], 7), leader_epoch=0)  # 3-4, aborted at 9
    p.append(txn_batch([b"c0"], 8), leader_epoch=0)  # 5, committed at 6
    p.write_marker(8, 0, COMMIT, coordinator_epoch=1, leader_epoch=0)  # 6
    p.log.roll()
    p.append(batch_of([b"b%d" % i for i in range(100)]), leader_epoch=0)  # 7-106
    p.log.roll()
    p.append(batch_of([b"x"], keys=[b"y"]), leader_epoch=0)  # 107
    p.append(txn_batch([b"t2"], 7, base_sequence=2), leader_epoch=0)  # 108, aborted too
    p.write_marker(7, 0, ABORT, coordinator_epoch=1, leader_epoch=0)  # 109
    p.log.roll()
    p.append(batch_of([b"d0", b"d1"]), leader_epoch=0)  # 110-111
    p.log.roll()
    p.append(batch_of([b"hot"]), leader_epoch=0)  # 112: the active segment
    p._set_hw(p.log_end_offset)
    return p


@pytest.fixture
def uploaded(partition, tmp_path):
    uri = f"file://{tmp_path}/store"
    store = ObjectStore.from_uri(uri)
    segments = upload_segments(partition.log.directory, store, "t", 0)
    return store, segments, uri


def cold_table(store, view, start, end, isolation=READ_UNCOMMITTED):
    pieces, hot = split_range(view, start, end)
    assert hot is None
    tables = []
    for piece in pieces:
        later = [s for s in view.remote if s.base_offset >= piece.segment.base_offset]
        aborted = aborted_transactions(store, later, piece.start, piece.end) \
            if isolation == READ_COMMITTED else ()
        tables.append(segment_table(store, piece.segment, piece.start, piece.end, aborted))
    return pa.concat_tables(tables) if tables else KAFKA_SCHEMA.empty_table()


def test_the_upload_writes_the_layout(uploaded, partition):
    store, segments, _ = uploaded
    assert [(s.base_offset, s.end_offset) for s in segments] == \
        [(0, 6), (7, 106), (107, 109), (110, 111)]
    assert all(s.state == layout.COPY_FINISHED for s in segments)
    # The aborted transaction 3..109 is listed by every segment it overlaps.
    assert [layout.TXN_INDEX in s.files for s in segments] == [True, True, True, False]
    manifest = store.get(f"{segments[2].folder(store.prefix)}/{layout.MANIFEST}")
    assert layout.RemoteSegment.from_json(manifest) == segments[2]


@pytest.mark.parametrize("isolation", [READ_UNCOMMITTED, READ_COMMITTED])
@pytest.mark.parametrize(("start", "end"), [(0, 112), (1, 4), (5, 108), (8, 50), (107, 110),
                                            (109, 112), (3, 3)])
def test_cold_reads_are_what_the_broker_reads(uploaded, partition, start, end, isolation):
    store, segments, uri = uploaded
    view = TieredView.from_answer(fake_view(segments, 0, partition.high_watermark, uri))
    expected = kafka_table(partition.read_table(start, end, 0, isolation), "t", 0)
    assert cold_table(store, view, start, end, isolation).equals(expected)


def test_stored_batches_and_spark_columns_are_the_brokers(uploaded, partition):
    store, segments, _ = uploaded
    third = segments[2]  # 107-109: a plain batch, an aborted one, the abort marker
    aborted = aborted_transactions(store, segments[2:], 107, 110)
    for isolation, drop in ((READ_UNCOMMITTED, ()), (READ_COMMITTED, aborted)):
        assert segment_batches(store, third, 107, 110, drop) == \
            partition.read_batches(107, 110, 0, isolation)
    columns = ["value", "offset", "timestamp", "partition"]
    assert segment_spark_table(store, segments[1], 9, 60, columns).equals(
        spark_table(partition.read_table(9, 60, 0), "t", 0, columns))


def test_aborted_entries_come_from_later_segments(uploaded):
    store, segments, _ = uploaded
    found = aborted_transactions(store, segments, 0, 7)  # marker at 109, in the third
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in found] == [(7, 3, 109)]
    # Listed by each segment it overlaps, found once; and from a later segment alone (the
    # first's upload may have come before the marker).
    assert aborted_transactions(store, segments[2:], 0, 7) == found
    assert aborted_transactions(store, segments, 110, 112) == []


def test_a_damaged_object_is_named(uploaded):
    store, segments, _ = uploaded
    path = f"{segments[1].folder(store.prefix)}/{layout.SEGMENT}"
    data = bytearray(store.get(path))
    data[-1] ^= 1
    store.put(path, bytes(data))
    with pytest.raises(RemoteObjectError, match=re.escape(f"{path} is corrupt: sha256")):
        segment_table(store, segments[1], 7, 10)
    store.put(path, bytes(data[:-1]))
    with pytest.raises(RemoteObjectError, match=r"is corrupt: it holds \d+ bytes; its record says"):
        segment_table(store, segments[1], 7, 10)


def test_a_missing_object_is_named(uploaded):
    store, segments, _ = uploaded
    folder = segments[2].folder(store.prefix)
    store.filesystem.delete_file(f"{folder}/{layout.TXN_INDEX}")
    with pytest.raises(RemoteObjectError, match=re.escape(f"{folder}/txn.index is missing")):
        aborted_transactions(store, segments, 0, 112)
    store.delete_folder(folder)
    with pytest.raises(RemoteObjectError, match=r"segment\.log is missing"):
        segment_table(store, segments[2], 107, 108)


def test_ranges_split_into_cold_pieces_and_a_hot_rest(uploaded):
    _, segments, uri = uploaded
    view = TieredView.from_answer(fake_view(segments, 0, 113, uri, local_log_start=100))
    pieces, hot = split_range(view, 5, 113)
    assert [(p.segment.base_offset, p.start, p.end) for p in pieces] == [(0, 5, 7), (7, 7, 100)]
    assert hot == (100, 113)
    assert split_range(view, 100, 105) == ([], (100, 105))
    assert split_range(view, 3, 3) == ([], None)
    assert split_range(TieredView.local_only(0, 9), 0, 9) == ([], (0, 9))
    assert split_range(view, 1, 2) == ([ColdPiece(segments[0], 1, 2)], None)


def test_a_gap_in_the_remote_segments_is_out_of_range(uploaded):
    _, segments, uri = uploaded
    view = TieredView.from_answer(fake_view([segments[0], segments[2]], 0, 113, uri))
    with pytest.raises(OffsetOutOfRangeError, match=r"\[7, 110\) are below the local"):
        split_range(view, 0, 112)
    assert split_range(view, 107, 110)[0][0].segment == segments[2]


def test_only_finished_uploads_are_readable(uploaded):
    _, segments, uri = uploaded
    started = segments[0].with_state(layout.COPY_STARTED, 1)
    answer = fake_view(segments, 0, 113, uri)
    answer["remote"][0] = started.to_json()
    assert TieredView.from_answer(answer).remote == tuple(segments[1:])
