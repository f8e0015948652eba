"""Transaction attributes and control batches: the bits, their validation, markers written
and read back, and every reader of batches skipping markers."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from raylog.errors import CorruptRecordError, InvalidArgumentError, InvalidBatchAttributesError
from raylog.kafka.batch import _parse
from raylog.kafka.records import to_kafka
from raylog.kafka.records_py import decode_records
from raylog.mirror.forward import forward
from raylog.records import (
    PAYLOAD_SCHEMA,
    encode,
    iter_batches,
    read_records,
    read_table,
    stamp,
    validate_batch,
)
from raylog.records.control import Marker, MarkerType, control_batch, read_marker
from raylog.records.header import (
    CONTROL_BIT,
    EXPLICIT_OFFSETS_BIT,
    KNOWN_ATTRIBUTE_BITS,
    TRANSACTIONAL_BIT,
    pack_header,
)


def data_batch(n: int = 2, *, transactional: bool = False, producer_id: int = 5,
               epoch: int = 0, sequence: int = 0, base_offset: int = 0) -> bytes:
    columns = pa.record_batch([list(range(10, 10 + n)), [b"k"] * n, [b"v%d" % i for i in range(n)],
                               [[] for _ in range(n)]], schema=PAYLOAD_SCHEMA)
    batch = bytearray(encode(columns, producer_id=producer_id, producer_epoch=epoch,
                             base_sequence=sequence, transactional=transactional))
    stamp(batch, base_offset, 0)
    return bytes(batch)


def marker(kind: MarkerType = MarkerType.COMMIT, base_offset: int = 0, **kw) -> bytes:
    fields = {"producer_id": 5, "producer_epoch": 0, "coordinator_epoch": 2,
              "timestamp": 99, **kw}
    batch = bytearray(control_batch(kind, **fields))
    stamp(batch, base_offset, 0)
    return bytes(batch)


def test_bits_are_distinct_and_known():
    assert len({EXPLICIT_OFFSETS_BIT, TRANSACTIONAL_BIT, CONTROL_BIT}) == 3
    assert KNOWN_ATTRIBUTE_BITS & (TRANSACTIONAL_BIT | CONTROL_BIT) == \
        TRANSACTIONAL_BIT | CONTROL_BIT


@pytest.mark.parametrize("kind", list(MarkerType))
def test_marker_round_trip(kind):
    batch = marker(kind, producer_id=41, producer_epoch=3, coordinator_epoch=7, timestamp=1234)
    header = validate_batch(batch)
    assert header.control and header.transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (41, 3, -1)
    assert header.record_count == 1 and header.first_timestamp == header.max_timestamp == 1234
    assert read_marker(header, batch) == Marker(kind, 7)


def test_transactional_data_batch_carries_its_bit():
    header = validate_batch(data_batch(transactional=True))
    assert header.transactional and not header.control
    assert not validate_batch(data_batch()).transactional


def _with_attributes(attributes: int, *, producer_id: int = 5, producer_epoch: int = 0,
                     records: int = 1) -> bytes:
    columns = pa.record_batch([[1] * records, [b"k"] * records, [b"v"] * records,
                               [[]] * records], schema=PAYLOAD_SCHEMA)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, PAYLOAD_SCHEMA) as writer:
        writer.write(columns)
    payload = sink.getvalue().to_pybytes()
    return pack_header(payload=payload, attributes=attributes, last_offset_delta=records - 1,
                       first_timestamp=1, max_timestamp=1, record_count=records,
                       producer_id=producer_id, producer_epoch=producer_epoch) + payload


@pytest.mark.parametrize("attributes, producer, records, what", [
    (CONTROL_BIT, (5, 0), 1, "not marked transactional"),
    (TRANSACTIONAL_BIT, (-1, -1), 1, "no producer"),
    (TRANSACTIONAL_BIT, (5, -1), 1, "no producer"),
    (TRANSACTIONAL_BIT | CONTROL_BIT, (-1, 0), 1, "no producer"),
    (TRANSACTIONAL_BIT | CONTROL_BIT, (5, 0), 2, "a marker is one record"),
])
def test_inconsistent_attributes_are_refused(attributes, producer, records, what):
    batch = _with_attributes(attributes, producer_id=producer[0], producer_epoch=producer[1],
                             records=records)
    with pytest.raises(InvalidBatchAttributesError, match=what):
        validate_batch(batch)
    # A corrupt record to every reader that walks batches.
    with pytest.raises(CorruptRecordError):
        list(iter_batches(batch))


def test_unknown_bit_still_refused():
    with pytest.raises(CorruptRecordError, match="unknown attributes"):
        validate_batch(_with_attributes(0x80))


def test_marker_arguments_checked():
    with pytest.raises(InvalidArgumentError):
        control_batch(MarkerType.ABORT, producer_id=-1, producer_epoch=0, coordinator_epoch=0,
                      timestamp=0)
    with pytest.raises(InvalidArgumentError):
        control_batch(MarkerType.ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=-1,
                      timestamp=0)


def test_read_marker_refuses_data_and_bad_records():
    batch = data_batch(1, transactional=True)
    with pytest.raises(CorruptRecordError, match="not a control batch"):
        read_marker(validate_batch(batch), batch)
    # A control batch whose record is not a marker (a producer's forgery, say).
    forged = _with_attributes(TRANSACTIONAL_BIT | CONTROL_BIT)
    with pytest.raises(CorruptRecordError, match="no marker"):
        read_marker(validate_batch(forged), forged)


def test_readers_skip_markers():
    buf = data_batch(2, transactional=True) + marker(base_offset=2) + \
        data_batch(1, base_offset=3, sequence=2)
    assert [r.offset for r in read_records(buf)] == [0, 1, 3]
    assert read_table(buf).column("offset").to_pylist() == [0, 1, 3]
    assert read_records(marker(base_offset=7)) == []
    assert read_table(marker(base_offset=7)).num_rows == 0


def test_kafka_fetch_shows_a_marker_as_a_kafka_control_batch():
    buf = data_batch(2, transactional=True) + marker(MarkerType.ABORT, base_offset=2,
                                                     coordinator_epoch=9)
    out = memoryview(to_kafka(buf))
    first = _parse(out, 0)  # kafka_batches refuses these: it checks a Produce request
    second = _parse(out, first.size)
    assert first.is_transactional and not first.is_control
    assert second.is_transactional and second.is_control
    assert (second.base_offset, second.producer_id, second.producer_epoch) == (2, 5, 0)
    columns = decode_records(second.records, second.record_count)
    key, value = bytes(columns.key_data), bytes(columns.value_data)  # one record
    assert struct.unpack(">hh", key) == (0, 0)  # Kafka's ControlRecordType.ABORT
    assert struct.unpack(">hi", value) == (0, 9)


def test_mirror_copies_no_marker():
    batch = marker(base_offset=4)
    sent = forward(batch, validate_batch(batch), 0)
    assert (sent.records, bytes(sent.data), sent.source_start, sent.source_end) == \
        (0, b"", 4, 5)
