"""Name changes in a log directory are synced before anything relies on them.

``PowerLoss`` stands in for ``raylog.storage.files``: it makes each change for real and
remembers it until its directory is synced. ``crash_copy`` copies the directory as a power
loss at that moment could leave it: every change not yet synced undone (a created file
gone, a deleted one back, a rename reversed). File bytes are copied as written: this
simulates the names a power loss can lose, not torn data, which test_recovery covers.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from raylog.records import read_records
from raylog.storage import LogConfig, PartitionLog, files
from raylog.storage.log import CLEAN_SHUTDOWN_FILE
from tests.unit.logutil import FakeClock, all_records, batch_of

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=256, retention_ms=None)


class PowerLoss:
    """Does every name change and directory sync for real, and records them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.root = root
        self.pending: list[tuple] = []  # changes whose directory was not synced since
        self.events: list[tuple[str, str]] = []
        self.copies: list[Path] = []
        self.copy_each_event = False
        self._counter = itertools.count()
        self._real = {name: getattr(files, name) for name in
                      ("create", "remove", "replace", "fsync_dir")}
        for name in self._real:
            monkeypatch.setattr(files, name, getattr(self, name))

    def _watched(self, path: Path) -> bool:
        """Only the log directories under ``root``: not the crash copies opened later."""
        return Path(path) == self.root or self.root in Path(path).parents

    def _event(self, kind: str, path: Path) -> None:
        self.events.append((kind, Path(path).name))
        if self.copy_each_event:
            self.copies.append(self.crash_copy())

    def create(self, path: Path, flags: int = 0) -> int:
        existed = Path(path).exists()
        fd = self._real["create"](path, flags)
        if not existed and self._watched(path):
            self.pending.append(("create", Path(path)))
            self._event("create", path)
        return fd

    def remove(self, path: Path) -> None:
        path = Path(path)
        if path.exists() and self._watched(path):
            self.pending.append(("remove", path, path.read_bytes()))
            self._real["remove"](path)
            self._event("remove", path)
        else:
            self._real["remove"](path)

    def replace(self, source: Path, target: Path) -> None:
        target = Path(target)
        old = target.read_bytes() if target.exists() else None
        self._real["replace"](source, target)
        if self._watched(target):
            self.pending.append(("replace", Path(source), target, old))
            self._event("replace", target)

    def fsync_dir(self, path: Path) -> None:
        self._real["fsync_dir"](path)
        self.pending = [c for c in self.pending if c[1].parent != Path(path)]
        if self._watched(path):
            self._event("sync", path)

    def crash_copy(self) -> Path:
        """A copy of every log directory under ``root`` after a power loss now."""
        dest = self.root.parent / f"crash-{next(self._counter)}"
        shutil.copytree(self.root, dest)
        for change in reversed(self.pending):
            where = dest / change[1].relative_to(self.root)
            if change[0] == "create":
                where.unlink(missing_ok=True)
            elif change[0] == "remove":
                where.write_bytes(change[2])
            else:
                target = dest / change[2].relative_to(self.root)
                target.rename(where)
                if change[3] is not None:
                    target.write_bytes(change[3])
        return dest


@pytest.fixture
def power(monkeypatch, tmp_path) -> PowerLoss:
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
