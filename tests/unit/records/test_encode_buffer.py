"""payload.encode_buffer (the columnar producer's encoding into pooled memory) and
header.batch_view (how a broker reads a batch that came as a buffer): the same batch bytes
as encode's, and a buffer read in place."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from raylog.client.tables import payload_table
from raylog.errors import InvalidRecordError
from raylog.records import Codec, encode, validate_batch
from raylog.records.header import batch_view
from raylog.records.payload import check_payload, encode_buffer

PRODUCERS = [{}, {"producer_id": 7, "producer_epoch": 3, "base_sequence": 1_000},
             {"producer_id": 7, "producer_epoch": 3, "base_sequence": 0, "transactional": True}]


def columns(rows: int, keys: bool = False, headers: bool = False) -> pa.Table:
    values = [bytes([i % 251]) * (1 + i % 120) for i in range(rows)]
    table = {"value": values, "timestamp": np.arange(rows, dtype=np.int64) * 7 + 5}
    if keys:
        table["key"] = [None if i % 3 == 0 else b"k%d" % i for i in range(rows)]
    if headers:
        table["headers"] = [[{"key": "h", "value": b"%d" % i}] if i % 2 else []
                            for i in range(rows)]
    return payload_table(pa.table(table))


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4])
@pytest.mark.parametrize("fields", PRODUCERS, ids=["plain", "idempotent", "transactional"])
@pytest.mark.parametrize("shape", [(1, False, False), (5_000, False, False),
                                   (3_000, True, True)], ids=["one", "values", "keys-headers"])
def test_encode_buffer_writes_the_batch_encode_writes(codec, fields, shape):
    table = columns(*shape)
    buffer = encode_buffer(table, codec=codec, **fields)
    assert isinstance(buffer, pa.Buffer)
    assert buffer.to_pybytes() == encode(table, codec=codec, **fields)
    assert check_payload(validate_batch(buffer), buffer).equals(table)


def test_encode_buffer_refuses_what_encode_refuses():
    with pytest.raises(ValueError, match="at least one record"):
        encode_buffer(columns(3).slice(0, 0))
    with pytest.raises(ValueError, match="payload columns"):
        encode_buffer(pa.table({"value": [b"x"]}))
    with pytest.raises(ValueError, match="unknown codec"):
        encode_buffer(columns(3), codec=5)


def test_batch_view_reads_a_buffer_in_place_and_leaves_bytes_as_they_are():
    batch = encode(columns(10))
    assert batch_view(batch) is batch
    buffer = pa.py_buffer(bytearray(batch))
    view = batch_view(buffer)
    assert isinstance(view, memoryview) and view.format == "B" and view == batch
    # a view of the buffer's memory, not a copy
    assert np.frombuffer(buffer, np.uint8).ctypes.data == \
        np.frombuffer(view, np.uint8).ctypes.data
    with pytest.raises(InvalidRecordError, match="bytes or a buffer"):
        batch_view(12)
