"""Opening a log after a crash: torn writes, corrupt batches, missing or broken indexes.

A crash is simulated by copying the log directory while the log is open: the copy holds what
the files held at that moment, with no clean-shutdown marker and index files that lag.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylog.records import Codec, iter_batches, read_records
from raylog.replica.partition import LeaderAndIsr, Partition
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.log import CLEAN_SHUTDOWN_FILE
from raylog.storage.txn_index import AbortedTxn
from tests.unit.logutil import FakeClock, all_records, batch_of
from tests.unit.txnutil import ABORT, txn_batch

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=300, retention_ms=None)


def crash_copy(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    (dest / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    return dest


def write_log(directory: Path, batches: int, codec: Codec = Codec.LZ4,
              flush_after: int | None = None) -> tuple[PartitionLog, list[bytes]]:
    log = PartitionLog(directory, CONFIG, clock=FakeClock(NOW))
    values: list[bytes] = []
    for i in range(batches):
        vals = [b"value-%d" % (i * 3 + j) for j in range(3)]
        log.append(batch_of(vals, ts=NOW + i, codec=codec), leader_epoch=1)
        values.extend(vals)
        if flush_after is not None and i == flush_after:
            log.flush()
    return log, values


def last_segment_batches(log_dir: Path) -> tuple[Path, list[tuple[int, int]]]:
    """The last segment file and (position, size) of each batch in it."""
    path = sorted(log_dir.glob("*.log"))[-1]
    return path, [(pos, h.size) for pos, h in iter_batches(path.read_bytes())]


@pytest.fixture
def no_fsync(monkeypatch):
    """fsync only matters to a real power loss; these crashes are simulated by copying."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.mark.parametrize("codec", [Codec.LZ4, Codec.NONE])
def test_cut_at_every_byte_of_the_last_batches_keeps_the_whole_ones(tmp_path, codec, no_fsync):
    log, values = write_log(tmp_path / "live", 9, codec=codec, flush_after=2)
    snapshot = crash_copy(tmp_path / "live", tmp_path / "snapshot")
    segment_path, batches = last_segment_batches(snapshot)
    assert len(batches) >= 3, "the last segment should hold several batches"
    base_of_segment = int(segment_path.stem)
    boundaries = {pos for pos, _ in batches}
    for cut in range(batches[-2][0], segment_path.stat().st_size):
        trial = crash_copy(snapshot, tmp_path / f"cut-{cut}")
        with open(trial / segment_path.name, "r+b") as f:
            f.truncate(cut)
        reopened = PartitionLog(trial, CONFIG, clock=FakeClock(NOW))
        whole = [pos + size for pos, size in batches if pos + size <= cut]
        expected_end = base_of_segment + 3 * len(whole)
        assert reopened.log_end_offset == expected_end, cut
        assert not reopened.recovery.clean
        assert reopened.recovery.bytes_truncated == cut - whole[-1]
        records = all_records(reopened)
        assert [r.offset for r in records] == list(range(expected_end))
        assert [r.value for r in records] == values[:expected_end]
        if cut in boundaries or cut % 97 == 0:
            # The recovered log takes appends at the right offset and reopens cleanly.
            assert reopened.append(batch_of([b"after"])).base_offset == expected_end
            reopened.close()
            again = PartitionLog(trial, CONFIG, clock=FakeClock(NOW))
            assert again.recovery.clean and again.log_end_offset == expected_end + 1
            again.close()
        else:
            reopened.close()
        shutil.rmtree(trial)
    log.close()


def test_corrupt_batch_in_an_unflushed_middle_segment_drops_what_follows(tmp_path):
    log, values = write_log(tmp_path / "live", 40, flush_after=2)
    segments = [(s.base_offset, s.path.name) for s in log.segments]
    assert len(segments) >= 4
    snapshot = crash_copy(tmp_path / "live", tmp_path / "snapshot")
    base, name = segments[2]
    data = bytearray((snapshot / name).read_bytes())
    second_batch = next(pos for pos, _ in list(iter_batches(bytes(data)))[1:2])
    data[second_batch + 40] ^= 0xFF  # inside the CRC-covered part of its second batch
    (snapshot / name).write_bytes(bytes(data))
    reopened = PartitionLog(snapshot, CONFIG, clock=FakeClock(NOW))
    assert reopened.log_end_offset == base + 3  # the first batch of that segment survives
    assert reopened.recovery.segments_dropped == len(segments) - 3
    assert [r.value for r in all_records(reopened)] == values[: base + 3]
    assert sorted(p.name for p in snapshot.glob("*.log"))[-1] == name
    reopened.close()
    log.close()


def test_flushed_segments_before_the_recovery_point_are_not_rescanned(tmp_path):
    log, _ = write_log(tmp_path / "live", 40)
    log.flush()
    log.append(batch_of([b"unflushed"]))
    snapshot = crash_copy(tmp_path / "live", tmp_path / "snapshot")
    reopened = PartitionLog(snapshot, CONFIG, clock=FakeClock(NOW))
    assert reopened.recovery.segments_recovered == 1  # only the last segment
    assert reopened.log_end_offset == log.log_end_offset
    reopened.close()
    log.close()


INDEX_DAMAGE = {
    "offset index deleted": lambda d, s: (d / f"{s}.index").unlink(),
    "time index deleted": lambda d, s: (d / f"{s}.timeindex").unlink(),
    "offset index torn": lambda d, s: _truncate(d / f"{s}.index", 3),
    "time index torn": lambda d, s: _truncate(d / f"{s}.timeindex", 5),
    "offset index garbage": lambda d, s: (d / f"{s}.index").write_bytes(os.urandom(64)),
    "offset index stale": lambda d, s: (d / f"{s}.index").write_bytes(
        (0).to_bytes(4, "big") + (7).to_bytes(4, "big")),
    "time index out of order": lambda d, s: (d / f"{s}.timeindex").write_bytes(
        (NOW + 50).to_bytes(8, "big") + (1).to_bytes(4, "big")
        + (NOW).to_bytes(8, "big") + (2).to_bytes(4, "big")),
    "time index past the end": lambda d, s: (d / f"{s}.timeindex").write_bytes(
        (NOW).to_bytes(8, "big") + (99_999).to_bytes(4, "big")),
}


def _truncate(path: Path, drop: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(max(path.stat().st_size - drop, 0))


@pytest.mark.parametrize("damage", sorted(INDEX_DAMAGE))
@pytest.mark.parametrize("which", ["first", "last"])
def test_broken_indexes_are_rebuilt(tmp_path, damage, which):
    log, values = write_log(tmp_path, 40)
    expected_times = {t: log.offsets_for_time(t) for t in range(NOW - 1, NOW + 42, 5)}
    log.close()
    stems = sorted(p.stem for p in tmp_path.glob("*.log"))
    stem = stems[0] if which == "first" else stems[-1]
    assert (tmp_path / f"{stem}.index").stat().st_size > 0
    INDEX_DAMAGE[damage](tmp_path, stem)
    reopened = PartitionLog(tmp_path, CONFIG, clock=FakeClock(NOW))
    assert reopened.recovery.clean
    assert reopened.recovery.segments_recovered == 1
    assert [r.value for r in all_records(reopened)] == values
    for offset in range(0, len(values), 2):
        assert read_records(reopened.read(offset, max_bytes=1), start_offset=offset)[0].offset \
            == offset
    assert {t: reopened.offsets_for_time(t) for t in expected_times} == expected_times
    reopened.close()
    # The rebuilt index was written back: the next open trusts it.
    assert PartitionLog(tmp_path, CONFIG).recovery.segments_recovered == 0


def test_missing_checkpoints_mean_recovering_everything(tmp_path):
    log, values = write_log(tmp_path / "live", 30)
    log.flush()
    snapshot = crash_copy(tmp_path / "live", tmp_path / "snapshot")
    for checkpoint in snapshot.glob("*-checkpoint"):
        checkpoint.write_text("garbage")
    reopened = PartitionLog(snapshot, CONFIG, clock=FakeClock(NOW))
    assert reopened.recovery.segments_recovered == len(reopened.segments)
    assert [r.value for r in all_records(reopened)] == values
    log.close()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=30),
    flush_at=st.integers(0, 30),
    cut_back=st.integers(0, 3000),
)
def test_a_crash_leaves_a_prefix_that_includes_every_flushed_batch(tmp_path_factory, sizes,
                                                                  flush_at, cut_back):
    root = tmp_path_factory.mktemp("crash")
    log = PartitionLog(root / "live", CONFIG, clock=FakeClock(NOW))
    appended, flushed_end = [], 0
    for i, n in enumerate(sizes):
        vals = [os.urandom(8) + b"-%d" % i for _ in range(n)]
        log.append(batch_of(vals), leader_epoch=i)
        appended.extend(vals)
        if i == flush_at:
            log.flush()
            flushed_end = log.log_end_offset
    snapshot = crash_copy(root / "live", root / "snapshot")
    segment = sorted(snapshot.glob("*.log"))[-1]
    size = segment.stat().st_size
    segment_start = int(segment.stem)
    cut = max(size - cut_back, 0)
    # A crash tears only what was written after the last flush.
    if segment_start < flushed_end:
        flushed_bytes = sum(h.size for _, h in iter_batches(segment.read_bytes())
                            if h.base_offset < flushed_end)
        cut = max(cut, flushed_bytes)
    with open(segment, "r+b") as f:
        f.truncate(cut)
    reopened = PartitionLog(snapshot, CONFIG, clock=FakeClock(NOW))
    records = all_records(reopened)
    assert [r.value for r in records] == appended[: len(records)]
    assert [r.offset for r in records] == list(range(len(records)))
    assert len(records) >= flushed_end
    reopened.close()
    log.close()


def test_opening_a_log_lists_its_directory_once(tmp_path, monkeypatch):
    """Leftovers of retention and compaction are found in the one listing the opening takes,
    and so are the segments."""
    log, values = write_log(tmp_path / "log", 30)
    segments = len(log.segments)
    log.close()
    directory = tmp_path / "log"
    for leftover in ("00000000000000000999.log.deleted", "00000000000000000999.log.cleaned",
                     "00000000000000000999.index.swap"):
        (directory / leftover).write_bytes(b"left by a crash")
    listed: list[str] = []
    for name in ("listdir", "scandir"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda path=".", _real=real, _name=name: (
            listed.append(_name) if Path(path) == directory else None, _real(path))[1])
    log = PartitionLog(directory, CONFIG, clock=FakeClock(NOW))
    monkeypatch.undo()
    try:
        assert len(listed) == 1, listed
        assert len(log.segments) == segments > 1
        assert [r.value for r in all_records(log)] == values
        assert not [p for p in directory.iterdir() if "999" in p.name]
    finally:
        log.close()


class _Crash(Exception):
    pass


def test_a_crash_between_an_abort_marker_and_its_index_entry(tmp_path, no_fsync):
    """The marker is in the log, its aborted-transaction entry is not: opening puts the
    entry back (the log is the truth), and read_committed readers never see the aborted
    records."""
    live = tmp_path / "live"
    p = Partition("t", 0, PartitionLog(live, CONFIG, clock=FakeClock(NOW)), 1)
    p.apply(LeaderAndIsr(1, 0, 0, (1,), (1,)))
    p.append(batch_of([b"before"]), leader_epoch=0)
    p.append(txn_batch([b"aborted"], 7), leader_epoch=0)
    p.append(batch_of([b"after"]), leader_epoch=0)

    def crash(entry: AbortedTxn) -> None:
        crash_copy(live, tmp_path / "crashed")  # what the disk holds at this moment
        raise _Crash

    p.log.add_aborted = crash
    with pytest.raises(_Crash):
        p.write_marker(7, 0, ABORT, 0, leader_epoch=0)
    p.log.close()
    assert not list((tmp_path / "crashed").glob("*.txnindex"))
    log = PartitionLog(tmp_path / "crashed", CONFIG, clock=FakeClock(NOW))
    assert log.log_end_offset == 4  # the marker is there
    reopened = Partition("t", 0, log, 1)
    reopened.apply(LeaderAndIsr(1, 1, 1, (1,), (1,)))
    assert log.aborted_transactions(0, 4) == [AbortedTxn(7, 1, 3, 4)]
    assert list((tmp_path / "crashed").glob("*.txnindex"))
    log.update_high_watermark(4)
    table = reopened.read_table(0, 4, 1, isolation="read_committed")
    assert table.column("value").to_pylist() == [b"before", b"after"]
    reopened.close()
