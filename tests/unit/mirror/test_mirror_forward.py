"""What of a stored batch a mirror sends (as stored, or its tail encoded again), and what
it shows while it runs. No Ray."""

from __future__ import annotations

import io

import pyarrow as pa

from raylog.mirror.forward import forward
from raylog.mirror.status import MirrorStatus, StatusDisplay
from raylog.records import BatchBuilder, read_records, stamp, validate_batch
from raylog.records.header import TimestampType, with_producer
from raylog.records.payload import EXPLICIT_SCHEMA, check_payload, encode


def _stored(base_offset: int, count: int) -> bytes:
    builder = BatchBuilder(timestamp_type=TimestampType.CREATE_TIME)
    for i in range(count):
        builder.append(5000 + i, f"k{i}".encode(), f"v{base_offset + i}".encode(),
                       [("trace", f"t{i}".encode()), ("empty", None)])
    data = bytearray(builder.build())
    stamp(data, base_offset, 3)
    return bytes(data)


def _compacted(base_offset: int, deltas: list[int], last_delta: int) -> bytes:
    n = len(deltas)
    columns = pa.record_batch([
        pa.array([7000 + d for d in deltas], pa.int64()),
        pa.array([f"k{d}".encode() for d in deltas], pa.binary()),
        pa.array([f"v{base_offset + d}".encode() for d in deltas], pa.binary()),
        pa.array([[("h", b"x")]] * n, EXPLICIT_SCHEMA.field("headers").type),
        pa.array(deltas, pa.int32()),
    ], schema=EXPLICIT_SCHEMA)
    data = bytearray(encode(columns, last_offset_delta=last_delta))
    stamp(data, base_offset, 1)
    return bytes(data)


def _as_target(data: bytes, base_offset: int) -> list:
    """The records the target would hold after appending ``data`` at ``base_offset``."""
    out = bytearray(with_producer(data, 1 << 62, 7, 0))
    check_payload(validate_batch(out), out)  # what the target's leader checks
    stamp(out, base_offset, 0)
    return read_records(bytes(out))


def test_a_batch_at_or_after_the_position_goes_as_stored():
    batch = _stored(100, 5)
    sent = forward(memoryview(batch), validate_batch(batch), 100)
    assert bytes(sent.data) == batch
    assert (sent.source_start, sent.source_end, sent.records) == (100, 105, 5)
    assert forward(batch, validate_batch(batch), 105) is None  # copied already


def test_the_tail_of_a_batch_the_copy_stopped_in_is_encoded_again_with_everything():
    batch = _stored(100, 5)
    sent = forward(batch, validate_batch(batch), 102)
    assert (sent.source_start, sent.source_end, sent.records) == (102, 105, 3)
    records = _as_target(sent.data, 0)
    original = read_records(batch)[2:]
    assert [(r.timestamp, r.key, r.value, r.headers) for r in records] == \
        [(r.timestamp, r.key, r.value, r.headers) for r in original]


def test_a_compacted_batch_becomes_a_dense_one_with_its_records():
    batch = _compacted(200, [0, 3, 9], last_delta=11)
    header = validate_batch(batch)
    assert header.explicit_offsets
    sent = forward(batch, header, 200)
    assert (sent.source_start, sent.source_end, sent.records) == (200, 212, 3)
    assert [r.value for r in _as_target(sent.data, 50)] == [b"v200", b"v203", b"v209"]
    tail = forward(batch, header, 204)
    assert (tail.source_start, tail.records) == (204, 1)
    empty = forward(batch, header, 210)  # offsets 210, 211 were compacted away
    assert (empty.records, empty.source_end) == (0, 212)


def test_status_lines_show_rate_and_lag_per_topic():
    now = [0.0]
    status = MirrorStatus(clock=lambda: now[0])
    status.position("east.orders", 0, 10, 50)
    status.position("east.orders", 1, 0, 5)
    status.copied("east.orders", 100)
    status.rows()
    now[0] = 2.0
    status.copied("east.orders", 300)
    [row] = status.rows()
    assert (row.copied, row.rate, row.lag) == (400, 150.0, 45)
    out = io.StringIO()
    display = StatusDisplay(status, out, every_s=3600)
    display.close()
    assert out.getvalue() == "mirror: east.orders: 400 records copied (200/s), lag 45\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_each_topic_is_a_bar_with_its_lag():
    status = MirrorStatus()
    status.position("east.orders", 0, 10, 35)
    status.copied("east.orders", 10)
    status.copied("east.clicks", 3)
    out = _Terminal()
    display = StatusDisplay(status, out)
    display.close()
    shown = out.getvalue()
    assert "east.orders" in shown and "east.clicks" in shown and "lag 25" in shown
