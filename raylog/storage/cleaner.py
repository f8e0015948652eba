"""Log compaction: keep the newest record of every key, at its original offset.

The cleaner works on the segments below the active one (and below the high watermark). It
first maps every key to the offset of its newest record in that range, then rewrites each
batch keeping only those records. Batches left whole are copied byte for byte; filtered ones
are re-encoded with an explicit ``offset_delta`` column, so every kept record keeps its offset
and the batch keeps its offset range. A tombstone (value None) that is the newest record of
its key survives until its segment's newest record is ``delete_retention_ms`` old, so that
consumers have time to see the deletion.

Crash safety: the output of a pass is written beside the segments it replaces
(``*.cleaned``), renamed ``*.swap`` once durable, and only then are the old segments deleted
and the output renamed into place; :func:`finish_interrupted_cleaning`, run when a log opens,
discards output that never reached ``.swap`` and completes a swap a crash interrupted.

Memory: the key map holds every distinct key of the cleaned range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylog.records.header import BatchHeader, stamp, validate_batch
from raylog.records.payload import EXPLICIT_SCHEMA, decode, encode, offsets_of
from raylog.storage import files
from raylog.storage.config import LogConfig
from raylog.storage.segment import LOG_SUFFIX, LogSegment

CLEANED_SUFFIX = ".cleaned"  # a pass's output while it is written
SWAP_SUFFIX = ".swap"  # the output, durable, while it replaces the segments it covers


@dataclasses.dataclass
class CleanerStats:
    segments_cleaned: int = 0
    records_read: int = 0
    records_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


class Compactor:
    """The compaction passes of one partition log.

    Owns only when it last cleaned; the segments belong to the log, whose list it edits in
    place when a pass swaps a merged segment in. Time comes from ``clock`` (milliseconds).
    Not safe for concurrent use: the log's owner serializes calls.
    """

    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int]) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self._cleaned_to = -1  # a pass has seen the segments ending at or below this
        self._last_clean_ms = clock()

    def compact(self, segments: list[LogSegment], limit: int) -> CleanerStats:
        """Keep only the newest record per key in ``segments`` before the active (last) one
        and entirely below ``limit``. Kept records keep their offsets. Does nothing (empty
        stats) unless a segment rolled since the last pass or ``delete_retention_ms`` passed,
        since nothing else can change what compaction keeps."""
        stats = CleanerStats()
        cleanable = [s for s in segments[:-1] if s.next_offset <= limit]
        now = self.clock()
        if not cleanable or (cleanable[-1].next_offset <= self._cleaned_to
                             and now - self._last_clean_ms < self.config.delete_retention_ms):
            return stats
        self._cleaned_to = cleanable[-1].next_offset
        self._last_clean_ms = now
        newest = newest_offsets(batch for s in cleanable for batch in s.batches())
        horizon = now - self.config.delete_retention_ms
        for group in self._groups(cleanable):
            cleaned = LogSegment(self.directory, group[0].base_offset,
                                 self.config.index_interval_bytes, create=True,
                                 suffix=CLEANED_SUFFIX)
            for segment in group:
                drop_tombstones = segment.max_timestamp < horizon
                for header, buf, pos in segment.batches():
                    stats.records_read += header.record_count
                    out = clean_batch(header, buf, pos, newest, drop_tombstones)
                    if out is None:
                        stats.records_removed += header.record_count
                        continue
                    out_header = validate_batch(out)
                    cleaned.append_stored(out_header, out)
                    stats.records_removed += header.record_count - out_header.record_count
                stats.bytes_before += segment.size
            stats.bytes_after += cleaned.size
            stats.segments_cleaned += len(group)
            _swap_in(segments, group, cleaned)
        return stats

    def _groups(self, segments: list[LogSegment]) -> list[list[LogSegment]]:
        """Consecutive segments whose total size fits one segment, merged when cleaned (and
        whose offsets fit the 32-bit deltas of one segment's index)."""
        groups: list[list[LogSegment]] = []
        for segment in segments:
            if groups and (
                sum(s.size for s in groups[-1]) + segment.size <= self.config.segment_bytes
                and segment.next_offset - groups[-1][0].base_offset <= 2**32 - 1
            ):
                groups[-1].append(segment)
            else:
                groups.append([segment])
        return groups


def _swap_in(segments: list[LogSegment], group: list[LogSegment], cleaned: LogSegment) -> None:
    # Each step is durable before the next (renames and deletions sync the directory): a
    # crash leaves either the old segments, or a .swap that the next open finishes swapping
    # in, never a merged segment beside an old one it overlaps.
    cleaned.flush()
    cleaned.rename_suffix(SWAP_SUFFIX)
    for segment in group:
        segment.delete()
    cleaned.rename_suffix("")
    i = segments.index(group[0])
    segments[i:i + len(group)] = [cleaned]


def finish_interrupted_cleaning(directory: Path, index_interval_bytes: int) -> None:
    """Discard compaction output never swapped in; complete a swap a crash interrupted.
    Runs when a log opens, before its segments are listed."""
    for path in directory.glob(f"*{CLEANED_SUFFIX}"):
        files.remove(path)
    files.fsync_dir(directory)
    for path in sorted(directory.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
        base = int(path.name.split(".")[0])
        swapped = LogSegment(directory, base, index_interval_bytes, suffix=SWAP_SUFFIX)
        swapped.recover()
        for old in directory.glob(f"*{LOG_SUFFIX}"):
            old_base = int(old.name[: -len(LOG_SUFFIX)])
            if base <= old_base < max(swapped.next_offset, base + 1):
                LogSegment(directory, old_base, 1).delete()
        swapped.rename_suffix("")
        swapped.close()
        for leftover in directory.glob(f"*{SWAP_SUFFIX}"):
            files.remove(leftover)
        files.fsync_dir(directory)


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
