"""How an actor answers an analytics block (raylog.records.kafka_columns.analytics_block): a
table Ray would keep inline as an Arrow IPC stream in ``bytes`` (Ray writes ``bytes`` whole;
a table's out-of-band buffers it writes with unwritten gaps, which carried the answering
process's freed memory: docs/tiered.md), a larger one as it is."""

from __future__ import annotations

import pyarrow as pa

from raylog.records.kafka_columns import KAFKA_SCHEMA, analytics_block, kafka_table
from raylog.records.payload import TABLE_SCHEMA
from raylog.util.ray_inline import INLINE_SETTING, OBJECT_STORE_ARGUMENT_BYTES, inline_limit


def records(n: int) -> pa.Table:
    return kafka_table(pa.table({
        "offset": pa.array(range(n), pa.int64()),
        "timestamp": pa.array([7] * n, pa.int64()),
        "key": pa.array([b"k%d" % i for i in range(n)], pa.binary()),
        "value": pa.array([b"v" * 100] * n, pa.binary()),
        "headers": pa.array([[("h", b"x")]] * n, TABLE_SCHEMA.field("headers").type),
    }), "t", 3)


def test_a_table_ray_keeps_inline_is_answered_as_an_ipc_stream_of_the_same_table():
    table = records(10)
    assert table.nbytes <= OBJECT_STORE_ARGUMENT_BYTES
    block = analytics_block(table, OBJECT_STORE_ARGUMENT_BYTES)
    assert type(block) is bytes
    read = pa.ipc.open_stream(block).read_all()
    assert read.schema == KAFKA_SCHEMA and read.equals(table)


def test_a_slice_is_answered_as_the_slice_only():
    table = records(1000).slice(10, 5)
    read = pa.ipc.open_stream(analytics_block(table, OBJECT_STORE_ARGUMENT_BYTES)).read_all()
    assert read.equals(table) and read.column("offset").to_pylist() == list(range(10, 15))


def test_a_table_above_the_inline_limit_is_answered_as_it_is():
    table = records(2000)
    assert table.nbytes > OBJECT_STORE_ARGUMENT_BYTES
    assert analytics_block(table, OBJECT_STORE_ARGUMENT_BYTES) is table
    small = records(10)
    assert analytics_block(small, 16) is small  # a process that keeps less inline
    assert type(analytics_block(records(2000), table.nbytes)) is bytes  # at the limit: inline


def test_the_limit_is_rays_setting_in_this_process():
    assert inline_limit({}) == OBJECT_STORE_ARGUMENT_BYTES
    assert inline_limit({INLINE_SETTING: str(4 << 20)}) == 4 << 20
