"""Kafka batches built independently of raylog.kafka (by kafka-python's ``kafka.record``, as a
Kafka client builds them), raylog batches built by raylog's own BatchBuilder, and a switch
between the two implementations of the per-record work."""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator, Sequence

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from raylog.kafka import records, records_py
from raylog.records import BatchBuilder, stamp

# A record as the tests write it: (timestamp, key, value, headers).
Rec = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]

CODERS_BY_NAME = {"python": records_py}
if records._native is not None:
    CODERS_BY_NAME["c"] = records._native
CODER_NAMES = ["python", "c"]


def coder_module(name: str):
    """The module doing the per-record work under ``name`` ("python" or "c")."""
    if name not in CODERS_BY_NAME:
        # CI installs the project, which builds the helper: there its absence is a failure.
        # A checkout run with PYTHONPATH=$PWD (a worktree) may not have built it yet.
        missing = ("raylog.kafka._records (the C helper) is not built: pip install -e . or "
                   "PYTHONPATH=$PWD python -m raylog.kafka.build")
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    return CODERS_BY_NAME[name]


@contextlib.contextmanager
def using(name: str) -> Iterator[None]:
    """Run the block with ``name``'s implementation of the per-record work."""
    chosen = coder_module(name)
    saved = records.coder
    records.coder = chosen
    try:
        yield
    finally:
        records.coder = saved


def kafka_batch(recs: Sequence[Rec], codec: int = 0, *, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1,
                offsets: Sequence[int] | None = None) -> bytes:
    """One Kafka v2 batch as kafka-python's producer builds it (base offset 0, leader epoch
    0). kafka-python sends uncompressed when compressing does not shrink the records."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=1 << 30)
    for i, (ts, key, value, headers) in enumerate(recs):
        builder.append(offsets[i] if offsets else i, ts, key, value, list(headers))
    return bytes(builder.build())


def read_kafka(data: bytes) -> list[tuple]:
    """Every batch in ``data`` read by kafka-python, as (batch fields, records) pairs;
    each batch's CRC checked by kafka-python."""
    out = []
    memory = MemoryRecords(data)
    while (batch := memory.next_batch()) is not None:
        assert batch.validate_crc()
        fields = (batch.base_offset, batch.leader_epoch, batch.last_offset_delta,
                  batch.compression_type, batch.timestamp_type, batch.first_timestamp,
                  batch.max_timestamp, batch.producer_id, batch.producer_epoch,
                  batch.base_sequence, batch.records_count)
        recs = [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
                for r in batch]
        out.append((fields, recs))
    return out


def raylog_batch(recs: Sequence[Rec], *, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1) -> bytes:
    """One unstamped raylog batch as raylog's producer builds it."""
    builder = BatchBuilder(1 << 30, producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=base_sequence)
    for ts, key, value, headers in recs:
        builder.append(ts, key, value, list(headers))
    return builder.build()


def stamped(batch: bytes, base_offset: int, leader_epoch: int) -> bytes:
    out = bytearray(batch)
    stamp(out, base_offset, leader_epoch)
    return bytes(out)


def with_attributes(batch: bytes, attributes: int) -> bytes:
    """A Kafka batch with other attributes, its CRC recomputed (as a client would write it)."""
    out = bytearray(batch)
    struct.pack_into(">h", out, 21, attributes)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)
