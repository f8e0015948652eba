"""What of a stored source batch goes to the target, and in which bytes.

A batch that starts at or after the mirror's position and holds consecutive offsets is
forwarded as it is stored (only its producer fields change, see :mod:`.position`). Two kinds
cannot be: a batch that starts below the position (a compacted source merged batches, or the
copy stopped inside one), and a compacted batch with explicit offsets (the target's leader
refuses those from producers). Their records at or after the position are encoded again as
one dense batch: the Arrow columns are sliced and written once, no record is rebuilt in
Python. Keys, values, timestamps, headers and the timestamp type stay as they were.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from raylog.records.header import BatchHeader
from raylog.records.payload import PAYLOAD_SCHEMA, decode, encode, offsets_of


class Forward(NamedTuple):
    """Bytes to send for source offsets [source_start, source_end), holding ``records``
    records (0: nothing to send, move past the range)."""

    data: bytes | memoryview
    source_start: int
    source_end: int
    records: int


def forward(batch: bytes | memoryview, header: BatchHeader, position: int) -> Forward | None:
    """What to send of ``batch`` (whose header is ``header``) for a copy standing at source
    offset ``position``; None when the batch lies wholly below it."""
    if header.next_offset <= position:
        return None
    if header.control:  # a transaction marker of the source: not a record to copy
        return Forward(b"", max(header.base_offset, position), header.next_offset, 0)
    if header.base_offset >= position and not header.explicit_offsets:
        return Forward(batch, header.base_offset, header.next_offset, header.record_count)
    payload = decode(header, batch)
    first = int(np.searchsorted(offsets_of(header, payload), position, "left"))
    start = max(header.base_offset, position)
    rows = payload.num_rows - first
    if not rows:
        return Forward(b"", start, header.next_offset, 0)
    columns = payload.slice(first).select(PAYLOAD_SCHEMA.names).combine_chunks()
    data = encode(columns.to_batches()[0], codec=header.codec,
                  timestamp_type=header.timestamp_type)
    return Forward(data, start, header.next_offset, rows)
