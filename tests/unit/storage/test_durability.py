"""Name changes in a log directory are synced before anything relies on them, and what a
log syncs survives a power loss.

``PowerLoss`` (tests/unit/powerloss.py) stands in for ``raylog.storage.files``: it makes each
change for real and remembers it until it is synced. ``crash_copy`` copies the directory as a
power loss at that moment could leave it. Most tests here undo names only (a created file
gone, a deleted one back, a rename reversed) and copy bytes as written: they are about the
names a power loss can lose, not torn data, which test_recovery covers. The last ones drop
unsynced bytes too.
"""

from __future__ import annotations

import pytest

from raylog.errors import LogClosedError, StorageError
from raylog.records import read_records
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.log import CLEAN_SHUTDOWN_FILE
from tests.unit.logutil import FakeClock, all_records, batch_of
from tests.unit.powerloss import FailingDisk, PowerLoss

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=256, retention_ms=None)


@pytest.fixture
def power(monkeypatch, tmp_path) -> PowerLoss:
    return PowerLoss(monkeypatch, tmp_path / "data", lose_bytes=False)


@pytest.fixture
def power_loss(monkeypatch, tmp_path) -> PowerLoss:
    """Unsynced bytes are lost too."""
    return PowerLoss(monkeypatch, tmp_path / "data")


def fill(log: PartitionLog, batches: int, start: int = 0, keyed: bool = False) -> None:
    for i in range(start, start + batches):
        keys = [b"k%d" % (i % 4)] * 3 if keyed else None
        log.append(batch_of([b"v%d-%d" % (i, j) for j in range(3)], ts=NOW + i, keys=keys))


def test_a_power_loss_after_reopening_finds_no_stale_marker(power):
    directory = power.root / "p-0"
    log = PartitionLog(directory, CONFIG, clock=FakeClock(NOW))
    fill(log, 5)
    log.close()
    assert (directory / CLEAN_SHUTDOWN_FILE).exists()
    log = PartitionLog(directory, CONFIG, clock=FakeClock(NOW))
    fill(log, 3, start=5)  # unflushed: only a recovery that checks the tail may keep them
    copy = power.crash_copy() / "p-0"
    assert not (copy / CLEAN_SHUTDOWN_FILE).exists()
    reopened = PartitionLog(copy, CONFIG, clock=FakeClock(NOW))
    assert not reopened.recovery.clean and reopened.recovery.segments_recovered >= 1
    assert reopened.log_end_offset == 24


def test_every_operation_returns_with_its_name_changes_synced(power):
    directory = power.root / "p-0"
    clock = FakeClock(NOW)
    config = CONFIG.replace(cleanup_policy="compact,delete", retention_ms=10_000,
                            delete_retention_ms=0)
    steps = {
        "open a new log": lambda: PartitionLog(directory, config, clock=clock),
        "append across rolls": lambda: fill(log, 30, keyed=True),
        "flush": lambda: log.flush(),
        "retention": lambda: (clock.advance(20_000), log.enforce_retention(
            max_offset=log.segments[2].base_offset)),
        "compact": lambda: log.compact(),
        "truncate": lambda: log.truncate_to(log.log_end_offset - 10),
        "roll": lambda: log.roll(),
        "checkpoint the high watermark": lambda: (log.update_high_watermark(60),
                                                  log.checkpoint_high_watermark()),
        "close": lambda: log.close(),
        "reopen": lambda: PartitionLog(directory, config, clock=clock),
    }
    log = None
    for name, step in steps.items():
        before = len(power.events)
        result = step()
        if isinstance(result, PartitionLog):
            log = result
        assert power.pending == [], name
        assert len(power.events) > before or name in ("append across rolls",), name
    removed = [name for kind, name in power.events if kind == "remove"]
    assert any(name.endswith(".log") for name in removed)  # retention and compaction ran


def test_the_marker_is_created_only_after_everything_it_vouches_for_is_durable(power):
    log = PartitionLog(power.root / "p-0", CONFIG, clock=FakeClock(NOW))
    fill(log, 12)
    start = len(power.events)
    log.close()
    closing = power.events[start:]
    marker = closing.index(("create", CLEAN_SHUTDOWN_FILE))
    assert closing[marker - 1][0] == "sync" and closing[marker + 1][0] == "sync"
    assert power.pending == []


def records_by_key(log: PartitionLog) -> dict[bytes, bytes]:
    return {r.key: r.value for r in all_records(log)}


def test_a_power_loss_at_any_step_of_compaction_loses_no_newest_value(power):
    directory = power.root / "p-0"
    config = CONFIG.replace(cleanup_policy="compact")
    log = PartitionLog(directory, config, clock=FakeClock(NOW))
    fill(log, 40, keyed=True)
    log.roll()
    log.flush()
    expected, end = records_by_key(log), log.log_end_offset
    power.copy_each_event = True
    assert log.compact().segments_cleaned >= 2
    power.copy_each_event = False
    assert len(power.copies) > 6
    for copy in power.copies:
        reopened = PartitionLog(copy / "p-0", config, clock=FakeClock(NOW))
        assert reopened.log_end_offset == end, copy
        assert records_by_key(reopened) == expected, copy
        offsets = [r.offset for r in all_records(reopened)]
        assert offsets == sorted(set(offsets)), copy


@pytest.mark.parametrize("operation", ["retention", "truncate"])
def test_a_power_loss_while_deleting_segments_leaves_no_gap(power, operation):
    directory = power.root / "p-0"
    clock = FakeClock(NOW)
    config = CONFIG.replace(retention_ms=10)
    log = PartitionLog(directory, config, clock=clock)
    fill(log, 40)
    log.flush()
    assert len(log.segments) >= 4
    power.copy_each_event = True
    if operation == "retention":
        clock.advance(1000)
        assert log.enforce_retention(max_offset=log.segments[-2].base_offset) >= 2
    else:
        log.truncate_to(log.segments[1].base_offset + 1)
    power.copy_each_event = False
    assert len(power.copies) >= 4
    for copy in power.copies:
        reopened = PartitionLog(copy / "p-0", config, clock=clock)
        start = reopened.log_start_offset
        offsets = [r.offset for chunk in reopened.read_range(start, reopened.log_end_offset)
                   for r in read_records(chunk)]
        assert offsets == list(range(start, reopened.log_end_offset)), copy


# -- bytes: what is synced survives, what is not may go ----------------------------------------


def reopened_offsets(copy, config: LogConfig) -> list[int]:
    log = PartitionLog(copy / "p-0", config, clock=FakeClock(NOW))
    return [r.offset for r in all_records(log)] if log.log_end_offset else []


def test_without_flush_settings_a_power_loss_takes_back_what_was_not_flushed(power_loss):
    log = PartitionLog(power_loss.root / "p-0", CONFIG, clock=FakeClock(NOW))
    fill(log, 5)
    log.flush()
    fill(log, 3, start=5)  # in the page cache only (but for a roll's sync of its segment)
    synced = log.synced_end_offset
    assert 15 <= synced < log.log_end_offset == 24
    assert reopened_offsets(power_loss.crash_copy(), CONFIG) == list(range(synced))


@pytest.mark.parametrize("settings", [{"flush_messages": 1}, {"flush_ms": 0}])
def test_with_every_append_synced_a_power_loss_keeps_every_append_that_returned(
        power_loss, settings):
    config = CONFIG.replace(**settings)
    log = PartitionLog(power_loss.root / "p-0", config, clock=FakeClock(NOW))
    for i in range(12):  # across rolls (segment_bytes=2048)
        fill(log, 1, start=i)
        assert log.synced_end_offset == log.log_end_offset == 3 * (i + 1)
        assert reopened_offsets(power_loss.crash_copy(), config) == list(range(3 * (i + 1)))
    assert len(log.segments) > 2


def test_a_power_loss_never_leaves_a_hole_between_segments(power_loss):
    """A roll syncs the old segment before the new one's name is durable: else a power loss
    could keep the new, empty segment after losing the old one's tail (records 15 to 17 of
    the log below gone, its end still 18)."""
    log = PartitionLog(power_loss.root / "p-0", CONFIG, clock=FakeClock(NOW))
    fill(log, 5)
    log.close()
    log = PartitionLog(power_loss.root / "p-0", CONFIG, clock=FakeClock(NOW))
    power_loss.copy_each_event = True
    fill(log, 12, start=5)
    power_loss.copy_each_event = False
    assert len(log.segments) >= 5 and len(power_loss.copies) >= 4
    for copy in power_loss.copies:
        offsets = reopened_offsets(copy, CONFIG)
        assert offsets == list(range(len(offsets))) and len(offsets) >= 15, copy
        assert PartitionLog(copy / "p-0", CONFIG, clock=FakeClock(NOW)).log_end_offset == \
            len(offsets), copy


def test_an_append_whose_sync_fails_writes_nothing(monkeypatch, tmp_path):
    disk = FailingDisk(monkeypatch)
    config = CONFIG.replace(flush_messages=1)
    log = PartitionLog(tmp_path / "p-0", config, clock=FakeClock(NOW))
    fill(log, 2)
    disk.failing = True
    with pytest.raises(StorageError, match="Input/output error"):
        fill(log, 1, start=2)
    assert log.log_end_offset == log.synced_end_offset == log.committable_end_offset == 6
    assert [r.offset for r in all_records(log)] == list(range(6))
    disk.failing = False
    fill(log, 1, start=2)  # the retry lands where the failed one would have
    assert [r.value for r in all_records(log)][6:] == [b"v2-0", b"v2-1", b"v2-2"]
    log.close()


def test_a_follower_append_whose_sync_fails_writes_nothing(monkeypatch, tmp_path):
    disk = FailingDisk(monkeypatch)
    config = CONFIG.replace(flush_messages=1)
    leader = PartitionLog(tmp_path / "a", CONFIG, clock=FakeClock(NOW))
    fill(leader, 8)
    follower = PartitionLog(tmp_path / "b", config, clock=FakeClock(NOW))
    disk.failing = True
    with pytest.raises(StorageError):
        follower.append_stored(leader.read(0, 1 << 20))
    assert follower.log_end_offset == 0 and follower.segments[-1].size == 0
    disk.failing = False
    info = follower.append_stored(leader.read(0, 1 << 20))
    assert follower.synced_end_offset == follower.log_end_offset == info.last_offset + 1 > 0


def test_a_log_that_can_neither_sync_nor_cut_closes_itself(monkeypatch, tmp_path):
    """As Kafka takes a failing log directory offline: nothing more is served or counted
    from a log holding records it could not sync; opening it again recovers."""
    disk = FailingDisk(monkeypatch, truncate=True)
    config = CONFIG.replace(flush_messages=1)
    log = PartitionLog(tmp_path / "p-0", config, clock=FakeClock(NOW))
    fill(log, 2)
    disk.failing = True
    with pytest.raises(StorageError, match="neither be synced"):
        fill(log, 1, start=2)
    assert log.committable_end_offset == 6 < log.log_end_offset
    with pytest.raises(LogClosedError, match="neither be synced"):
        log.read(0)
    with pytest.raises(LogClosedError):
        fill(log, 1, start=3)
    log.close()  # releases what it holds, leaves no clean-shutdown marker
    disk.failing = False
    assert not (tmp_path / "p-0" / CLEAN_SHUTDOWN_FILE).exists()
    reopened = PartitionLog(tmp_path / "p-0", config, clock=FakeClock(NOW))
    assert not reopened.recovery.clean and reopened.log_end_offset in (6, 9)
