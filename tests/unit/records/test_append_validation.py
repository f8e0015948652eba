"""The leader refuses a batch whose checksums are right but whose content is malformed.

Each batch here is built the way a buggy producer would: the payload or a header field is
wrong, then both CRCs are recomputed so that only the content check can tell. Every refusal
is a CorruptRecordError that leaves the log's end offset and every file unchanged.
"""

from __future__ import annotations

import lz4.frame
import pyarrow as pa
import pytest

from raylog.errors import CorruptRecordError, InvalidRecordError
from raylog.records import HEADER_SIZE, PAYLOAD_SCHEMA, Codec, read_records, validate_batch
from raylog.records.header import pack_header
from raylog.records.payload import check_payload, decode, encode
from raylog.storage import LogConfig, PartitionLog
from tests.unit.logutil import FakeClock, batch_of, files_snapshot

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256, retention_ms=None)
GOOD = batch_of([b"a", b"b", b"c"], ts=NOW)


def reseal(batch: bytes, payload: bytes | None = None, **fields: int) -> bytes:
    """``batch`` with its payload and/or header fields replaced, both CRCs valid again."""
    header = validate_batch(batch)
    values = {
        "attributes": header.attributes, "last_offset_delta": header.last_offset_delta,
        "first_timestamp": header.first_timestamp, "max_timestamp": header.max_timestamp,
        "record_count": header.record_count, "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch, "base_sequence": header.base_sequence,
    }
    values.update(fields)
    body = batch[HEADER_SIZE:] if payload is None else payload
    return pack_header(payload=body, **values) + body


def ipc(columns: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, columns.schema) as writer:
        writer.write(columns)
    return sink.getvalue().to_pybytes()


def arrow_of(batch: bytes) -> bytes:
    """The uncompressed Arrow IPC stream inside an LZ4 batch."""
    return lz4.frame.decompress(batch[HEADER_SIZE:])


def records(timestamps: list[int]) -> pa.RecordBatch:
    n = len(timestamps)
    return pa.record_batch([timestamps, [None] * n, [b"v"] * n, [[]] * n], schema=PAYLOAD_SCHEMA)


STRING_VALUES = pa.record_batch(
    [[NOW] * 3, [None] * 3, ["a", "b", "c"], [[]] * 3],
    schema=PAYLOAD_SCHEMA.set(2, pa.field("value", pa.string())))

MALFORMED = {
    "payload is not Arrow IPC": lambda: reseal(GOOD, lz4.frame.compress(b"not arrow" * 50)),
    "payload is random bytes, uncompressed": lambda: reseal(GOOD, b"\x07" * 300,
                                                            attributes=0),
    "Arrow stream cut short": lambda: reseal(GOOD, lz4.frame.compress(arrow_of(GOOD)[:-40])),
    "wrong column type": lambda: reseal(GOOD, lz4.frame.compress(ipc(STRING_VALUES))),
    "record count above the payload's": lambda: reseal(GOOD, record_count=4,
                                                       last_offset_delta=3),
    "record count below the payload's": lambda: reseal(GOOD, record_count=2,
                                                       last_offset_delta=1),
    "LZ4 flag over an uncompressed payload": lambda: reseal(GOOD, arrow_of(GOOD)),
    "no-compression flag over an LZ4 payload": lambda: reseal(GOOD, attributes=0),
    "max timestamp below a record's": lambda: reseal(GOOD, max_timestamp=NOW - 1),
    "max timestamp above every record's": lambda: reseal(GOOD, max_timestamp=NOW + 7),
    "first timestamp above a record's": lambda: reseal(
        encode(records([NOW + 5, NOW + 1, NOW + 9])), first_timestamp=NOW + 6),
    "first timestamp not the first record's": lambda: reseal(
        encode(records([NOW + 5, NOW + 1, NOW + 9])), first_timestamp=NOW + 1),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_batch_with_valid_crcs_is_refused_and_changes_nothing(tmp_path, name):
    log = PartitionLog(tmp_path, CONFIG, clock=FakeClock(NOW))
    for i in range(4):
        log.append(batch_of([b"x%d" % i] * 20, ts=NOW + i), leader_epoch=1)
    log.flush()
    before, end = files_snapshot(tmp_path), log.log_end_offset
    bad = MALFORMED[name]()
    validate_batch(bad)  # framing and both CRCs are right: only the content is wrong
    with pytest.raises(CorruptRecordError):
        log.append(bad, leader_epoch=1)
    assert log.log_end_offset == end
    log.flush()
    assert files_snapshot(tmp_path) == before
    # The offset a bad batch would have taken is not poisoned: the next batch gets it.
    assert log.append(GOOD, leader_epoch=1).base_offset == end
    assert [r.value for r in read_records(log.read(end))] == [b"a", b"b", b"c"]


# Both CRCs right, but the header contradicts itself: refused before the payload is read.
INCONSISTENT_HEADERS = {
    "offset deltas beyond the record count": lambda: reseal(GOOD, last_offset_delta=5),
    "offset deltas short of the record count": lambda: reseal(GOOD, last_offset_delta=1),
    "a negative record count": lambda: reseal(GOOD, record_count=-3),
}


@pytest.mark.parametrize("name", list(INCONSISTENT_HEADERS))
def test_a_header_that_contradicts_itself_is_refused_and_changes_nothing(tmp_path, name):
    log = PartitionLog(tmp_path, CONFIG, clock=FakeClock(NOW))
    log.append(batch_of([b"x"] * 20, ts=NOW), leader_epoch=1)
    log.flush()
    before, end = files_snapshot(tmp_path), log.log_end_offset
    with pytest.raises(CorruptRecordError):
        log.append(INCONSISTENT_HEADERS[name](), leader_epoch=1)
    log.flush()
    assert (log.log_end_offset, files_snapshot(tmp_path)) == (end, before)
    assert log.append(GOOD, leader_epoch=1).base_offset == end


def test_the_check_accepts_what_the_codec_builds():
    for codec in Codec:
        batch = encode(records([NOW + 5, NOW + 1, NOW + 9]), codec=codec)
        assert check_payload(validate_batch(batch), batch).num_rows == 3


def test_a_producer_cannot_send_explicit_offsets(tmp_path):
    explicit = pa.Table.from_arrays(
        [*decode(validate_batch(GOOD), GOOD).columns, pa.array([0, 1, 2], pa.int32())],
        schema=PAYLOAD_SCHEMA.append(pa.field("offset_delta", pa.int32(), nullable=False)))
    log = PartitionLog(tmp_path, CONFIG, clock=FakeClock(NOW))
    with pytest.raises(InvalidRecordError, match="explicit offsets"):
        log.append(encode(explicit))
    assert log.log_end_offset == 0


def test_unverified_append_is_for_batches_a_writer_built_itself(tmp_path):
    log = PartitionLog(tmp_path, CONFIG, clock=FakeClock(NOW))
    assert log.append(GOOD, verify_payload=False).record_count == 3
    with pytest.raises(CorruptRecordError):  # the CRCs are still checked
        log.append(GOOD[:-1] + bytes([GOOD[-1] ^ 1]), verify_payload=False)


def test_a_malformed_producer_batch_spends_its_sequence_but_a_damaged_one_does_not(tmp_path):
    """The leader refuses both. A malformed batch (CRCs right) was built so by its producer:
    its sequence is spent, so the producer's next batch is taken. A damaged one (a CRC
    wrong) may have a damaged sequence too: nothing is recorded for its producer."""
    from raylog.replica.partition import LeaderAndIsr, Partition

    partition = Partition("p", 0, PartitionLog(tmp_path / "p-0", CONFIG, clock=FakeClock(NOW)),
                          0)
    partition.apply(LeaderAndIsr(0, 0, 0, (0,), (0,)))
    first = reseal(GOOD, producer_id=7, producer_epoch=0, base_sequence=0)
    partition.append(first, leader_epoch=0)
    malformed = reseal(GOOD, lz4.frame.compress(b"not arrow" * 50), producer_id=7,
                       producer_epoch=0, base_sequence=3)
    with pytest.raises(CorruptRecordError):
        partition.append(malformed, leader_epoch=0)
    damaged = bytearray(reseal(GOOD, producer_id=7, producer_epoch=0, base_sequence=6))
    damaged[-1] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC"):
        partition.append(bytes(damaged), leader_epoch=0)
    nxt = reseal(GOOD, producer_id=7, producer_epoch=0, base_sequence=6)
    # After the first: nothing else was appended.
    assert partition.append(nxt, leader_epoch=0).base_offset == 3
    partition.log.close()
