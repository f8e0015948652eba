"""Damage on disk after a clean shutdown: flipped bytes in older segments, broken indexes.

A clean shutdown means the next open loads segments from their index files without
rescanning them, so this is where damage used to pass unseen. Each test damages the files of
the first (oldest, not active) segment of a closed log, reopens it and checks that every
answer is either right or a CorruptRecordError, and that nothing stored changes.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from raylog.errors import CorruptRecordError
from raylog.records import iter_batches, read_records, read_table
from raylog.storage import LogConfig, PartitionLog
from tests.unit.logutil import FakeClock, all_records, batch_of, files_snapshot

NOW = 1_700_000_000_000
STEP_MS = 100
PEAK_BATCH, PEAK_MS = 4, 2500  # newer than the rest of the first segment, not its last


def timestamp_of(batch: int) -> int:
    return NOW + batch * STEP_MS + (PEAK_MS if batch == PEAK_BATCH else 0)

RETENTION_MS = 60_000
CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=300, retention_ms=RETENTION_MS)


def write_log(directory: Path, batches: int = 40, **changes) -> list[bytes]:
    """A closed log of ``batches`` batches of three records; returns the values."""
    log = PartitionLog(directory, CONFIG.replace(**changes), clock=FakeClock(NOW))
    values = []
    for i in range(batches):
        vals = [b"value-%d" % (i * 3 + j) for j in range(3)]
        keys = [b"k%d" % (i % 5)] * 3 if log.config.compact else None
        log.append(batch_of(vals, ts=timestamp_of(i), keys=keys), leader_epoch=1)
        values.extend(vals)
    assert len(log.segments) >= 4
    log.close()
    return values


def first_segment(directory: Path) -> str:
    return sorted(p.stem for p in directory.glob("*.log"))[0]


def flip(path: Path, position: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def reopen(directory: Path, now: int = NOW, **changes) -> PartitionLog:
    return PartitionLog(directory, CONFIG.replace(**changes), clock=FakeClock(now))


# -- (b) a flipped byte in an older segment: every path that reads it refuses it -------------

MAX_TIMESTAMP_POS = 39  # under the payload CRC; what time lookups and retention use


def damage_second_batch(directory: Path, position: int) -> tuple[int, int]:
    """Flip a byte of the first segment's second batch; its (first offset, timestamp)."""
    path = directory / f"{first_segment(directory)}.log"
    pos, header = list(iter_batches(path.read_bytes()))[1]
    flip(path, pos + position, 0x10)
    return header.base_offset, header.max_timestamp


@pytest.mark.parametrize("where", [MAX_TIMESTAMP_POS, 70, -1])
def test_reads_of_a_damaged_older_batch_raise_and_the_rest_reads(tmp_path, where):
    values = write_log(tmp_path)
    path = tmp_path / f"{first_segment(tmp_path)}.log"
    size = next(h.size for i, (_, h) in enumerate(iter_batches(path.read_bytes())) if i == 1)
    offset, timestamp = damage_second_batch(tmp_path, where % size)
    log = reopen(tmp_path)
    assert log.recovery.clean and log.recovery.segments_recovered == 0
    before = segment_files(tmp_path)
    with pytest.raises(CorruptRecordError):  # consumers and followers
        log.read(offset)
    with pytest.raises(CorruptRecordError):  # time lookups
        log.offsets_for_time(timestamp)
    with pytest.raises(CorruptRecordError):  # Arrow reads
        [read_table(chunk) for chunk in log.read_range(0, log.log_end_offset)]
    # Whatever does not touch the damaged batch still answers, and answers right.
    assert [r.value for r in read_records(log.read(0, max_bytes=1))] == values[:3]
    later = log.segments[1].base_offset
    assert read_records(log.read(later))[0].value == values[later]
    assert log.offsets_for_time(timestamp_of(30)) == (90, timestamp_of(30))
    assert segment_files(tmp_path) == before


def segment_files(directory: Path) -> dict[str, bytes]:
    """The batches stored; index files are derived from them and may be rebuilt."""
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.log"))}


def test_compaction_refuses_a_damaged_older_segment_and_changes_nothing(tmp_path):
    write_log(tmp_path, cleanup_policy="compact")
    damage_second_batch(tmp_path, 70)
    log = reopen(tmp_path, cleanup_policy="compact")
    before = files_snapshot(tmp_path)
    with pytest.raises(CorruptRecordError):
        log.compact()
    assert files_snapshot(tmp_path) == before


def test_rebuilding_the_index_of_a_damaged_flushed_segment_cuts_and_drops_nothing(tmp_path):
    values = write_log(tmp_path)
    stem = first_segment(tmp_path)
    offset, _ = damage_second_batch(tmp_path, 70)
    (tmp_path / f"{stem}.index").unlink()  # forces a rebuild, which verifies every batch
    before = segment_files(tmp_path)
    log = reopen(tmp_path)
    assert log.recovery.segments_recovered == 1 and log.recovery.segments_dropped == 0
    assert segment_files(tmp_path) == before
    assert log.log_end_offset == len(values)
    with pytest.raises(CorruptRecordError):
        log.read(offset)
    later = log.segments[1].base_offset
    assert [r.value for r in all_records_from(log, later)] == values[later:]
    # Its newest timestamp is unknown past the damage: retention must keep it.
    assert reopen_and_retain(log, tmp_path, NOW + RETENTION_MS + 10**6) == 0
    assert segment_files(tmp_path) == before


def all_records_from(log: PartitionLog, start: int):
    out = []
    for chunk in log.read_range(start, log.log_end_offset):
        out.extend(read_records(chunk))
    return out


def reopen_and_retain(log: PartitionLog, directory: Path, now: int) -> int:
    """Segments a retention pass deletes, ``now`` being the clock at open and at the pass."""
    log.close()
    again = reopen(directory, now=now)
    return again.enforce_retention(max_offset=again.segments[-1].base_offset)


# -- (c) broken index files: answers stay right ----------------------------------------------

OFFSET_ENTRY, TIME_ENTRY = 8, 12


def _cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _set_position(path: Path, entry: int, position: int) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into(">I", data, entry * OFFSET_ENTRY + 4, position)
    path.write_bytes(bytes(data))


def _claim_another_offset(directory: Path, stem: str) -> None:
    """Entry 1 still names a batch, in order, inside the file, but claims an offset one
    past the batch's."""
    index = directory / f"{stem}.index"
    data = bytearray(index.read_bytes())
    relative, _ = struct.unpack_from(">II", data, OFFSET_ENTRY)
    struct.pack_into(">I", data, OFFSET_ENTRY, relative + 1)
    index.write_bytes(bytes(data))


DAMAGE = {
    "time index cut to one entry": lambda d, s: _cut(d / f"{s}.timeindex", TIME_ENTRY),
    "time index missing its last entry": lambda d, s: _cut(
        d / f"{s}.timeindex", (d / f"{s}.timeindex").stat().st_size - TIME_ENTRY),
    "empty time index, non-empty index": lambda d, s: _cut(d / f"{s}.timeindex", 0),
    "offset index missing its last entry": lambda d, s: _cut(
        d / f"{s}.index", (d / f"{s}.index").stat().st_size - OFFSET_ENTRY),
    "empty offset index": lambda d, s: _cut(d / f"{s}.index", 0),
    "last index entry past the end": lambda d, s: _set_position(
        d / f"{s}.index", (d / f"{s}.index").stat().st_size // OFFSET_ENTRY - 1, 1 << 20),
    "index entry claiming another offset": _claim_another_offset,
}


def answers(directory: Path, now: int = NOW) -> dict:
    log = reopen(directory, now=now)
    out = {
        "reads": [read_records(log.read(o, max_bytes=1), start_offset=o)[0].offset
                  for o in range(log.log_end_offset)],
        "times": {t: log.offsets_for_time(t) for t in range(NOW - 1, NOW + 41 * STEP_MS, 23)},
        "records": all_records(log),
    }
    log.close()
    return out


@pytest.fixture
def damaged_log(tmp_path):
    """A closed log, its expected answers, and the stem of its first segment."""
    write_log(tmp_path)
    stem = first_segment(tmp_path)
    assert (tmp_path / f"{stem}.index").stat().st_size >= 3 * OFFSET_ENTRY
    assert (tmp_path / f"{stem}.timeindex").stat().st_size >= 3 * TIME_ENTRY
    return tmp_path, answers(tmp_path), stem


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_broken_index_files_give_right_answers(damaged_log, damage):
    directory, expected, stem = damaged_log
    DAMAGE[damage](directory, stem)
    assert answers(directory) == expected


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_any_flipped_bit_in_an_index_gives_right_answers(damaged_log, suffix):
    directory, expected, stem = damaged_log
    path = directory / f"{stem}{suffix}"
    pristine = path.read_bytes()
    bits = random.Random(suffix).sample(range(len(pristine) * 8), 24)
    for bit in bits:
        path.write_bytes(pristine)
        flip(path, bit // 8, 1 << (bit % 8))
        assert answers(directory) == expected, bit


@pytest.mark.parametrize("damage", [*DAMAGE, "flipped timestamp bit"])
def test_retention_by_time_keeps_and_deletes_the_right_segments(damaged_log, damage):
    directory, _, stem = damaged_log
    if damage == "flipped timestamp bit":
        flip(directory / f"{stem}.timeindex", 2 * TIME_ENTRY + 7)  # low bit of entry 2
    else:
        DAMAGE[damage](directory, stem)
    end = segment_ends(directory)[0]
    first_max = max(timestamp_of(i) for i in range(end // 3))
    assert first_max == timestamp_of(PEAK_BATCH) > timestamp_of(end // 3 - 1)
    # Exactly retention_ms old: kept. One millisecond older: the first segment goes.
    kept = reopen(directory, now=first_max + RETENTION_MS)
    assert kept.enforce_retention(max_offset=end) == 0
    kept.close()
    gone = reopen(directory, now=first_max + RETENTION_MS + 1)
    assert gone.enforce_retention(max_offset=end) == 1
    assert gone.log_start_offset == end
    gone.close()


def segment_ends(directory: Path) -> list[int]:
    """Where each segment ends, read from the segment files, not from any index."""
    return [list(iter_batches(p.read_bytes()))[-1][1].next_offset
            for p in sorted(directory.glob("*.log"))]
