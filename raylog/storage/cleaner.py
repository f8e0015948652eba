"""Log compaction: keep the newest record of every key, at its original offset.

The cleaner works on the segments below the active one (and below the high watermark). It
first maps every key to the offset of its newest record in that range, then rewrites each
batch keeping only those records. Batches left whole are copied byte for byte; filtered ones
are re-encoded with an explicit ``offset_delta`` column, so every kept record keeps its offset
and the batch keeps its offset range. A tombstone (value None) that is the newest record of
its key survives until its segment's newest record is ``delete_retention_ms`` old, so that
consumers have time to see the deletion.

Memory: the key map holds every distinct key of the cleaned range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylog.records.header import BatchHeader, stamp
from raylog.records.payload import EXPLICIT_SCHEMA, decode, encode, offsets_of


@dataclasses.dataclass
class CleanerStats:
    segments_cleaned: int = 0
    records_read: int = 0
    records_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


def newest_offsets(batches: Iterable[tuple[BatchHeader, bytes | memoryview, int]]
                   ) -> dict[bytes, int]:
    """Map each key to the offset of its newest record in ``batches`` (in offset order)."""
    newest: dict[bytes, int] = {}
    for header, buf, pos in batches:
        payload = decode(header, buf, pos)
        newest.update(zip(payload.column(1).to_pylist(), offsets_of(header, payload).tolist(),
                          strict=True))
    newest.pop(None, None)
    return newest


def clean_batch(header: BatchHeader, buf: bytes | memoryview, pos: int,
                newest: dict[bytes, int], drop_tombstones: bool) -> bytes | memoryview | None:
    """The batch at ``buf[pos:]`` with superseded records removed.

    Returns the original bytes when nothing is removed and None when nothing is left.
    """
    payload = decode(header, buf, pos)
    offsets = offsets_of(header, payload)
    keys = payload.column(1).to_pylist()
    keep = np.fromiter(
        (key is None or newest.get(key) == offset for key, offset in
         zip(keys, offsets.tolist(), strict=True)),
        dtype=bool, count=len(keys),
    )
    if drop_tombstones:
        keep &= ~pc.is_null(payload.column(2)).to_numpy(zero_copy_only=False) | \
            pc.is_null(payload.column(1)).to_numpy(zero_copy_only=False)
    kept = int(keep.sum())
    if kept == len(keep):
        return memoryview(buf)[pos:pos + header.size]
    if kept == 0:
        return None
    columns = payload.select(range(4)).filter(pa.array(keep))
    deltas = pa.array((offsets[keep] - header.base_offset).astype(np.int32))
    table = pa.Table.from_arrays([*columns.columns, deltas], schema=EXPLICIT_SCHEMA)
    out = bytearray(encode(
        table,
        codec=header.codec,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        last_offset_delta=header.last_offset_delta,
    ))
    stamp(out, header.base_offset, header.leader_epoch)
    return out
