"""Retention by time and size, and compaction checked against a dict model."""

from __future__ import annotations

import random
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylog.errors import OffsetOutOfRangeError
from raylog.records import read_records
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.log import CLEAN_SHUTDOWN_FILE
from tests.unit.logutil import FakeClock, all_records, batch_of

NOW = 1_700_000_000_000
MINUTE = 60_000


def retention_log(tmp_path, clock, **changes) -> PartitionLog:
    config = LogConfig(segment_bytes=2048, index_interval_bytes=256, retention_ms=None)
    return PartitionLog(tmp_path, config.replace(**changes), clock=clock)


def append_minutes(log: PartitionLog, clock: FakeClock, minutes: int) -> None:
    """One batch per minute, each stamped with the clock's time."""
    for i in range(minutes):
        log.append(batch_of([b"m%d-%d" % (i, j) for j in range(4)], ts=clock.now))
        clock.advance(MINUTE)


def test_time_retention_deletes_old_segments_and_moves_log_start(tmp_path):
    clock = FakeClock(NOW)
    log = retention_log(tmp_path, clock, retention_ms=10 * MINUTE)
    append_minutes(log, clock, 30)
    before = len(log.segments)
    assert log.enforce_retention() > 0
    assert len(log.segments) < before
    start = log.log_start_offset
    assert start > 0
    for segment in log.segments[:-1]:
        assert clock.now - segment.max_timestamp <= 10 * MINUTE
    with pytest.raises(OffsetOutOfRangeError):
        log.read(start - 1)
    assert read_records(log.read(start))[0].offset == start
    assert log.log_end_offset == 120
    log.close()
    assert PartitionLog(tmp_path, log.config).log_start_offset == start


def test_an_expired_active_segment_is_rolled_and_deleted(tmp_path):
    clock = FakeClock(NOW)
    log = retention_log(tmp_path, clock, retention_ms=MINUTE, segment_bytes=1 << 20)
    append_minutes(log, clock, 3)
    assert len(log.segments) == 1
    clock.advance(2 * MINUTE)
    assert log.enforce_retention() == 1
    assert (log.log_start_offset, log.log_end_offset) == (12, 12)
    assert all_records(log) == []
    assert log.append(batch_of([b"next"], ts=clock.now)).base_offset == 12


def test_size_retention_keeps_the_newest_segments_over_the_limit(tmp_path):
    clock = FakeClock(NOW)
    log = retention_log(tmp_path, clock, retention_bytes=5000)
    append_minutes(log, clock, 40)
    log.enforce_retention()
    sizes = [s.size for s in log.segments]
    assert sum(sizes) >= 5000 > sum(sizes) - sizes[0]
    assert [r.offset for r in all_records(log)] == list(range(log.log_start_offset, 160))


def test_retention_stops_at_the_high_watermark(tmp_path):
    clock = FakeClock(NOW)
    log = retention_log(tmp_path, clock, retention_ms=MINUTE)
    append_minutes(log, clock, 20)
    clock.advance(10 * MINUTE)
    log.enforce_retention(max_offset=30)
    # Every segment wholly below offset 30 expired and went; the one holding 30 stays.
    assert 0 < log.log_start_offset <= 30 < log.segments[0].next_offset


def test_compact_only_policy_keeps_everything_on_retention(tmp_path):
    clock = FakeClock(NOW)
    log = retention_log(tmp_path, clock, retention_ms=MINUTE, cleanup_policy="compact")
    for i in range(10):
        log.append(batch_of([b"v"], keys=[b"k%d" % i], ts=clock.now))
    clock.advance(10 * MINUTE)
    assert log.enforce_retention() == 0
    assert log.log_start_offset == 0


# -- compaction --------------------------------------------------------------------------------

def compacted_log(directory, clock, delete_retention_ms=5 * MINUTE,
                  segment_bytes=2048, min_cleanable_dirty_ratio=0.0) -> PartitionLog:
    """A compacted log whose passes run whenever a segment is dirty (ratio 0), unless told."""
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=256, retention_ms=None,
                       cleanup_policy="compact", delete_retention_ms=delete_retention_ms,
                       min_cleanable_dirty_ratio=min_cleanable_dirty_ratio)
    return PartitionLog(directory, config, clock=clock)


class Model:
    """What compaction must preserve: every record ever appended, and each key's newest."""

    def __init__(self) -> None:
        self.history: dict[int, tuple[bytes, bytes | None]] = {}
        self.timestamps: dict[int, int] = {}
        self.newest: dict[bytes, int] = {}

    def append(self, log: PartitionLog, clock: FakeClock, entries) -> None:
        keys = [k for k, _ in entries]
        values = [v for _, v in entries]
        info = log.append(batch_of(values, keys=keys, ts=clock.now))
        for offset, (key, value) in enumerate(entries, start=info.base_offset):
            self.history[offset] = (key, value)
            self.timestamps[offset] = clock.now
            self.newest[key] = offset

    def check(self, log: PartitionLog, tombstone_horizon: int | None = None) -> None:
        records = all_records(log)
        by_offset = {r.offset: r for r in records}
        # Nothing invented, nothing moved: each record is what was appended at its offset.
        for r in records:
            assert self.history[r.offset] == (r.key, r.value)
        # The newest record of every key survives, unless it is an expired tombstone.
        active = log.active_segment
        for key, offset in self.newest.items():
            value = self.history[offset][1]
            if offset in by_offset:
                continue
            assert value is None, f"lost the newest value of {key!r} at offset {offset}"
            # A tombstone may go once its segment is old enough, so it was at least that old.
            assert tombstone_horizon is not None and self.timestamps[offset] < tombstone_horizon
        # In the cleaned part, no key appears twice.
        cleaned = [r for r in records if r.offset < active.base_offset]
        assert len({r.key for r in cleaned}) == len(cleaned)
        # Every kept record can be found by offset.
        for r in records[:: max(len(records) // 20, 1)]:
            assert read_records(log.read(r.offset, max_bytes=1), start_offset=r.offset)[0] == r


def test_compaction_keeps_newest_per_key_and_original_offsets(tmp_path):
    clock = FakeClock(NOW)
    log = compacted_log(tmp_path, clock)
    model = Model()
    rng = random.Random(7)
    for _ in range(120):
        entries = [(b"key-%d" % rng.randrange(15), b"value-%d" % rng.randrange(10**6))
                   for _ in range(rng.randrange(1, 5))]
        model.append(log, clock, entries)
        clock.advance(1000)
    active_bytes = log.active_segment.read_all()
    end = log.log_end_offset
    stats = log.compact()
    assert stats.records_removed > 0 and stats.bytes_after < stats.bytes_before
    assert log.active_segment.read_all() == active_bytes
    assert log.log_end_offset == end
    model.check(log)
    log.close()
    model.check(PartitionLog(tmp_path, log.config, clock=clock))


def test_tombstones_live_for_delete_retention_then_go(tmp_path):
    clock = FakeClock(NOW)
    log = compacted_log(tmp_path, clock, delete_retention_ms=10 * MINUTE)
    model = Model()
    for i in range(40):
        model.append(log, clock, [(b"k%d" % (i % 8), b"v%d" % i)])
    for i in range(8):
        model.append(log, clock, [(b"k%d" % i, None)])  # delete every key
    for i in range(60):
        model.append(log, clock, [(b"other%d" % (i % 3), b"x%d" % i)])
    log.compact()
    model.check(log)
    tombstones = [r for r in all_records(log) if r.value is None]
    assert len(tombstones) == 8  # still visible to consumers
    clock.advance(11 * MINUTE)
    log.compact()
    model.check(log, tombstone_horizon=clock.now - 10 * MINUTE)
    assert not [r for r in all_records(log) if r.key.startswith(b"k")]


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    workload=st.lists(
        st.one_of(
            st.tuples(st.just("append"),
                      st.lists(st.tuples(st.integers(0, 12),
                                         st.none() | st.binary(min_size=1, max_size=30)),
                               min_size=1, max_size=6)),
            st.tuples(st.just("compact"), st.integers(0, 20 * MINUTE)),
        ),
        min_size=1, max_size=80,
    )
)
def test_compaction_never_loses_the_newest_value_of_a_key(tmp_path_factory, workload):
    directory = tmp_path_factory.mktemp("compact")
    clock = FakeClock(NOW)
    log = compacted_log(directory, clock)
    model = Model()
    for op, arg in workload:
        if op == "append":
            model.append(log, clock, [(b"key-%d" % k, v) for k, v in arg])
            clock.advance(1000)
        else:
            clock.advance(arg)
            log.compact()
            model.check(log, tombstone_horizon=clock.now - log.config.delete_retention_ms)
    log.close()
    shutil.rmtree(directory)


def test_interrupted_compaction_is_finished_or_discarded_on_open(tmp_path):
    clock = FakeClock(NOW)
    original = tmp_path / "original"
    log = compacted_log(original, clock)
    model = Model()
    for i in range(150):
        model.append(log, clock, [(b"k%d" % (i % 5), b"v%d" % i)])
    segments = len(log.segments)
    log.close()
    # Compact a copy to get the output a crash could leave behind; larger segments make
    # the cleaner merge the small ones that shrink into one.
    shutil.copytree(original, tmp_path / "compacted")
    done = compacted_log(tmp_path / "compacted", clock, segment_bytes=1 << 20)
    done.compact()
    first = done.segments[0]
    cleaned_bytes = first.read_all()
    expected = all_records(done)
    assert len(done.segments) < segments - 2 and len(expected) < 150
    done.close()

    # Crash before the swap: the ".cleaned" output is discarded, the original stays.
    before_swap = tmp_path / "before-swap"
    shutil.copytree(original, before_swap)
    (before_swap / f"{first.path.name}.cleaned").write_bytes(cleaned_bytes)
    (before_swap / CLEAN_SHUTDOWN_FILE).unlink()
    reopened = compacted_log(before_swap, clock)
    assert [r.offset for r in all_records(reopened)] == list(range(150))
    assert not list(before_swap.glob("*.cleaned"))

    # Crash during the swap: the ".swap" output replaces the segments it covers.
    during_swap = tmp_path / "during-swap"
    shutil.copytree(original, during_swap)
    (during_swap / f"{first.path.name}.swap").write_bytes(cleaned_bytes)
    (during_swap / CLEAN_SHUTDOWN_FILE).unlink()
    reopened = compacted_log(during_swap, clock, segment_bytes=1 << 20)
    assert all_records(reopened) == expected
    assert not list(during_swap.glob("*.swap"))
    model.check(reopened)
