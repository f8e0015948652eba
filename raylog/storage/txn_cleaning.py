"""What compaction must know of the transactions in the segments it cleans (cleaner.py).

Kafka's cleaner is the model (LogCleaner's transaction handling), with its rules:

- a record of an **aborted** transaction is removed, and never supersedes another record
  of its key: a read_committed reader never saw it, and the committed value must stay;
- a record of a transaction **not yet decided** (its marker is not among the cleanable
  segments: the transaction is open, or its marker is in the active segment) is kept and
  neither supersedes nor is superseded: its outcome is unknown. The pass's clean boundary
  stops at the first such record, so that the segments holding them are cleaned again once
  the outcome is known;
- a **marker** stays while a record of its transaction may be in the log: an abort marker
  goes once its segment's newest record is ``delete_retention_ms`` old (the pass removes
  its transaction's records in the same swap), a commit marker at that age once no record
  of its transaction is kept; its entry in the aborted-transaction index goes with it.
  Until then a reader may still meet the records, and the marker that decides them.

The outcomes are read from the batch headers (and the markers' records) of the cleanable
segments in offset order, before their records are: one read of 65 bytes per batch.
Plain Python on the pass's thread; it reads only the pass's read-only segment copies.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from raylog.records.control import MarkerType, read_marker
from raylog.records.header import BatchHeader
from raylog.storage.segment import LogSegment


@dataclasses.dataclass
class _Marker:
    type: MarkerType
    batches: list[int]  # base offsets of its transaction's data batches, in order


@dataclasses.dataclass
class Transactions:
    """The transactions of the cleanable segments, by batch base offset."""

    aborted: set[int] = dataclasses.field(default_factory=set)  # data batches
    undecided: set[int] = dataclasses.field(default_factory=set)  # data batches
    markers: dict[int, _Marker] = dataclasses.field(default_factory=dict)  # by offset
    first_undecided: int | None = None
    committed: set[int] = dataclasses.field(default_factory=set)  # data batches
    kept: dict[int, bool] = dataclasses.field(default_factory=dict)  # of each committed
    # batch, whether the pass keeps any of its records (filled as segments are decided)
    removed_markers: set[int] = dataclasses.field(default_factory=set)

    @classmethod
    def read(cls, readers: list[LogSegment]) -> Transactions:
        """Decide every transactional batch of ``readers`` (cleanable segments, in order)."""
        txns = cls()
        open_batches: dict[int, list[int]] = {}
        for reader in readers:
            for position, header in reader.walk():
                if header.control:
                    marker = read_marker(header, reader.read(position, header.size))
                    batches = open_batches.pop(header.producer_id, [])
                    txns.markers[header.base_offset] = _Marker(marker.type, batches)
                    (txns.aborted if marker.type is MarkerType.ABORT else txns.committed
                     ).update(batches)
                elif header.transactional:
                    open_batches.setdefault(header.producer_id, []).append(header.base_offset)
        for batches in open_batches.values():
            txns.undecided.update(batches)
        if txns.undecided:
            txns.first_undecided = min(txns.undecided)
        return txns

    def __bool__(self) -> bool:
        return bool(self.markers or self.undecided)

    def unkeyed(self, header: BatchHeader) -> bool:
        """Whether the batch's records stay out of the key map: markers, and the records
        of aborted or undecided transactions."""
        return header.control or header.base_offset in self.aborted or \
            header.base_offset in self.undecided

    def discarded(self, header: BatchHeader) -> bool:
        """Whether the batch's records go whatever their keys: an aborted transaction's."""
        return header.base_offset in self.aborted

    def decide_markers(self, batches: list[tuple[int, int]], offsets: np.ndarray,
                       keep: np.ndarray, old_enough: bool) -> None:
        """One segment's records are decided (``keep``, beside ``offsets``; ``batches``:
        base offset and record count of each batch): note which committed batches keep a
        record, and remove (in ``keep``) the markers that may go."""
        at = 0
        for base, count in batches:
            marker = self.markers.get(base)
            if base in self.committed:
                self.kept[base] = bool(keep[at:at + count].any())
            elif marker is not None and old_enough and (marker.type is MarkerType.ABORT or
                                 not any(self.kept.get(b, True) for b in marker.batches)):
                keep[at] = False
                self.removed_markers.add(base)
            at += count
        if at != len(offsets):
            raise ValueError(f"{at} records in the batches, {len(offsets)} scanned")
