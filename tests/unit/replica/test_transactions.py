"""Transactions in a partition replica: markers, producer state, the last stable offset,
the aborted-transaction index as the replica keeps it, and read_committed reads (no Ray)."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidBatchAttributesError
from raylog.records import iter_headers, read_records
from tests.unit.logutil import batch_of
from tests.unit.replica.test_partition import lead, new_partition
from tests.unit.txnutil import COMMIT, marker, txn_batch


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
