"""Compaction works on the dirty range: the clean boundary, the dirty ratio, only segments
that shrink are rewritten; and the work a log hands to another thread (a pass's build, a
flush, the deletion of retired segments) while its owner goes on using it."""

from __future__ import annotations

import dataclasses
import os
import threading

import pyarrow as pa
import pytest

from raylog.errors import CorruptRecordError, InvalidConfigError
from raylog.metadata.topics import log_config, normalize_configs
from raylog.storage import LogConfig, PartitionLog, cleaner
from raylog.storage.cleaner import CLEANED_SUFFIX
from raylog.storage.handoff import DELETED_SUFFIX, delete_retired
from raylog.storage.log import RECOVERY_POINT_FILE
from tests.unit.logutil import FakeClock, all_records, batch_of
from tests.unit.powerloss import PowerLoss

NOW = 1_700_000_000_000
DAY = 24 * 3600 * 1000
CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=256, retention_ms=None,
                   cleanup_policy="compact", delete_retention_ms=DAY,
                   min_cleanable_dirty_ratio=0.0)


def write(log: PartitionLog, keys: list[bytes], tag: str) -> None:
    for i, key in enumerate(keys):
        log.append(batch_of([b"%s-%d" % (tag.encode(), i)], keys=[key], ts=NOW))


def newest(log: PartitionLog) -> dict[bytes, bytes]:
    return {r.key: r.value for r in all_records(log)}


def inodes(log: PartitionLog) -> dict[int, int]:
    return {s.base_offset: os.stat(s.path).st_ino for s in log.segments[:-1]}


def cleaned_log(directory, **changes) -> PartitionLog:
    """A log of 100 updates to 5 keys, rolled and compacted once."""
    log = PartitionLog(directory, CONFIG.replace(**changes), clock=FakeClock(NOW))
    write(log, [b"k%d" % (i % 5) for i in range(100)], "old")
    log.roll()
    assert log.compact().segments_cleaned > 1
    return log


def test_the_boundary_follows_the_cleaned_segments_and_survives_a_reopen(tmp_path):
    log = cleaned_log(tmp_path)
    assert log.clean_end_offset == 100
    write(log, [b"n%d" % i for i in range(3)], "new")  # in the active segment: not cleanable
    assert log.compact().segments_read == 0
    assert log.clean_end_offset == 100
    log.close()
    assert PartitionLog(tmp_path, CONFIG).clean_end_offset == 100


def test_already_clean_segments_are_not_rewritten(tmp_path):
    log = cleaned_log(tmp_path)
    write(log, [b"n%d" % i for i in range(60)], "new")  # distinct keys: nothing to remove
    log.roll()
    before = inodes(log)
    stats = log.compact()
    assert stats.segments_read == len(before) and stats.segments_cleaned == 0
    assert inodes(log) == before
    assert log.clean_end_offset == log.log_end_offset

    # One update of a key whose record lies in one clean segment: that one alone shrinks.
    holder = next(s.base_offset for s in log.segments
                  if any(r.key == b"n7" for r in all_records(log)
                         if s.base_offset <= r.offset < s.next_offset))
    write(log, [b"n7", b"fresh"], "update")
    log.roll()
    expected = newest(log)
    before = inodes(log)
    stats = log.compact()
    assert stats.segments_cleaned == 1
    after = inodes(log)
    assert {b for b in before if after.get(b) != before[b]} == {holder}
    assert newest(log) == expected


def test_a_pass_waits_for_the_dirty_ratio(tmp_path):
    log = PartitionLog(tmp_path, CONFIG.replace(min_cleanable_dirty_ratio=0.5),
                       clock=FakeClock(NOW))
    write(log, [b"d%d" % i for i in range(45)], "distinct")
    log.roll()
    assert log.dirty_ratio() == 1
    assert log.compact().segments_cleaned == 0  # nothing shrinks, yet it is clean now
    assert log.clean_end_offset == 45 and log.dirty_ratio() == 0
    clean_bytes = sum(s.size for s in log.segments[:-1])
    write(log, [b"d%d" % i for i in range(6)], "update")
    log.roll()
    assert 0 < log.dirty_ratio() < 0.5
    assert log.compact().segments_read == 0  # not due: nothing read
    assert log.clean_end_offset == 45
    while sum(s.size for s in log.segments[:-1]) < 2 * clean_bytes:
        write(log, [b"d%d" % i for i in range(6, 9)], "more")
        log.roll()
    assert log.dirty_ratio() >= 0.5
    stats = log.compact()
    assert stats.segments_read > 0 and stats.dirty_ratio >= 0.5 and stats.segments_cleaned > 0
    assert log.clean_end_offset == log.log_end_offset
    assert log.dirty_ratio() == 0


def test_the_dirty_ratio_is_a_topic_config_from_0_to_1():
    assert log_config(normalize_configs({"min.cleanable.dirty.ratio": "0.25"})) \
        .min_cleanable_dirty_ratio == 0.25
    assert LogConfig().min_cleanable_dirty_ratio == 0.5
    for bad in (-0.1, 1.5, "half", True):
        with pytest.raises(InvalidConfigError, match=r"min[._]cleanable[._]dirty[._]ratio"):
            normalize_configs({"min.cleanable.dirty.ratio": bad})


def test_a_truncation_below_the_boundary_lowers_it_durably(tmp_path):
    log = cleaned_log(tmp_path)
    write(log, [b"n%d" % i for i in range(40)], "new")
    log.truncate_to(60)
    assert log.clean_end_offset == log.log_end_offset <= 60
    end = log.log_end_offset
    log.close()
    assert PartitionLog(tmp_path, CONFIG).clean_end_offset == end


def test_a_power_loss_at_any_step_of_a_pass_of_several_swaps_changes_nothing(monkeypatch,
                                                                             tmp_path):
    power = PowerLoss(monkeypatch, tmp_path / "data")
    directory = power.root / "p-0"
    log = PartitionLog(directory, CONFIG, clock=FakeClock(NOW))
    # Batches of three updates of one key, three batches a segment: each segment shrinks,
    # and no two fit one segment together, so each is a swap of its own.
    for i in range(12):
        log.append(batch_of([b"v%d-%d" % (i, j) for j in range(3)], keys=[b"k%d" % (i % 4)] * 3,
                            ts=NOW))
    log.roll()
    log.flush()
    expected, end = newest(log), log.log_end_offset
    power.copy_each_event = True
    stats = log.compact()
    power.copy_each_event = False
    swaps = [name for kind, name in power.events if kind == "replace" and name.endswith(
        ".log.swap")]
    assert len(swaps) >= 2 and stats.segments_cleaned >= 2
    for copy in power.copies:
        reopened = PartitionLog(copy / "p-0", CONFIG, clock=FakeClock(NOW))
        assert reopened.log_end_offset == end, copy
        assert newest(reopened) == expected, copy
        offsets = [r.offset for r in all_records(reopened)]
        assert offsets == sorted(set(offsets)), copy
        assert reopened.clean_end_offset in (0, end), copy


# -- the work a log hands to another thread ---------------------------------------------------

def test_a_pass_built_on_another_thread_while_the_log_serves(tmp_path):
    log = PartitionLog(tmp_path, CONFIG, clock=FakeClock(NOW))
    write(log, [b"k%d" % (i % 7) for i in range(300)], "old")
    log.roll()
    job = log.start_compaction()
    assert log.start_compaction() is None  # one pass at a time
    builder = threading.Thread(target=job.build)
    builder.start()
    rounds, model = 0, newest(log)
    while builder.is_alive() or rounds < 3:
        assert newest(log) == model  # reads while the pass builds
        key, tag = b"k%d" % (rounds % 7), f"during-{rounds}"
        write(log, [key], tag)
        model[key] = f"{tag}-0".encode()
        rounds += 1
    builder.join()
    expected = newest(log)
    stats = log.finish_compaction(job)
    assert stats.segments_cleaned > 0
    assert newest(log) == expected
    assert [r.offset for r in all_records(log)] == sorted(r.offset for r in all_records(log))
    log.close()
    assert newest(PartitionLog(tmp_path, CONFIG)) == expected


def test_a_pass_reads_segments_the_owner_deletes_meanwhile(tmp_path):
    """Retention deletes (and closes) segments the pass is reading; the pass reads its own
    descriptors, and only its output for segments still in the log is swapped in."""
    clock = FakeClock(NOW)
    log = PartitionLog(tmp_path, CONFIG.replace(cleanup_policy="compact,delete"), clock=clock)
    write(log, [b"k%d" % (i % 7) for i in range(300)], "old")
    log.roll()
    log.defer_deletions = True
    job = log.start_compaction()
    doomed_end = log.segments[3].base_offset
    log.advance_log_start(doomed_end)
    retired = log.take_retired()
    assert len(retired) == 3 and all(s.path.name.endswith(DELETED_SUFFIX) for s in retired)
    deleter = threading.Thread(target=delete_retired, args=(retired,))
    deleter.start()
    job.build()  # reads all the segments it planned, the retired ones too
    deleter.join()
    assert not list(tmp_path.glob(f"*{DELETED_SUFFIX}"))
    expected = {k: v for k, v in newest(log).items()}
    stats = log.finish_compaction(job)
    assert stats.segments_cleaned > 0
    assert log.log_start_offset == doomed_end
    assert newest(log) == expected
    assert not list(tmp_path.glob(f"*{CLEANED_SUFFIX}"))


def test_a_pass_planned_before_a_truncation_is_discarded(tmp_path):
    log = PartitionLog(tmp_path, CONFIG, clock=FakeClock(NOW))
    write(log, [b"k%d" % (i % 7) for i in range(300)], "old")
    log.roll()
    job = log.start_compaction()
    job.build()
    log.truncate_to(150)
    expected = newest(log)
    segments = log.segments
    assert job.stats.segments_cleaned > 0
    assert log.finish_compaction(job).segments_cleaned == 0
    assert log.segments == segments and newest(log) == expected
    assert not list(tmp_path.glob(f"*{CLEANED_SUFFIX}"))
    assert log.start_compaction() is not None  # the next pass may come


def test_a_segment_that_changed_between_a_pass_s_two_reads_fails_the_pass(monkeypatch,
                                                                         tmp_path):
    """A pass reads each segment once to decide what stays and again to copy it: if the
    second read does not find the records of the first (the file changed under the pass's
    descriptor), the pass fails cleanly and leaves nothing behind."""
    log = PartitionLog(tmp_path, CONFIG, clock=FakeClock(NOW))
    write(log, [b"k%d" % (i % 7) for i in range(300)], "old")
    log.roll()
    expected = newest(log)
    scan = cleaner._scan

    def short_scan(segment, txns):  # the first read saw one batch fewer than the second sees
        found = scan(segment, txns)
        count = found.batches.pop()[1]
        return dataclasses.replace(found, keys=pa.chunked_array(found.keys.chunks[:-1]),
                                   offsets=found.offsets[:-count],
                                   tombstones=found.tombstones[:-count],
                                   discard=found.discard[:-count])

    monkeypatch.setattr(cleaner, "_scan", short_scan)
    job = log.start_compaction()
    with pytest.raises(CorruptRecordError, match="changed while it was cleaned"):
        job.build()
    assert log.finish_compaction(job).segments_cleaned == 0
    assert newest(log) == expected
    assert not list(tmp_path.glob(f"*{CLEANED_SUFFIX}"))


def test_retired_segments_left_by_a_crash_are_removed_at_open(tmp_path):
    clock = FakeClock(NOW)
    log = PartitionLog(tmp_path, CONFIG.replace(cleanup_policy="delete"), clock=clock)
    write(log, [b"k%d" % i for i in range(100)], "v")
    log.defer_deletions = True
    start = log.segments[2].base_offset
    log.advance_log_start(start)
    assert len(list(tmp_path.glob(f"*.log{DELETED_SUFFIX}"))) == 2
    del log  # a crash: no close
    reopened = PartitionLog(tmp_path, CONFIG.replace(cleanup_policy="delete"), clock=clock)
    assert not list(tmp_path.glob(f"*{DELETED_SUFFIX}"))
    assert reopened.log_start_offset == start
    assert [r.offset for r in all_records(reopened)] == list(range(start, 100))


@pytest.mark.parametrize("truncate", [False, True])
def test_a_flush_on_another_thread_checkpoints_unless_the_log_was_truncated(tmp_path,
                                                                            truncate):
    clock = FakeClock(NOW)
    log = PartitionLog(tmp_path, CONFIG.replace(cleanup_policy="delete", flush_ms=1000),
                       clock=clock)
    write(log, [b"k%d" % i for i in range(50)], "v")
    assert log.start_flush() is None  # not due yet
    clock.advance(1000)
    job = log.start_flush()
    assert job is not None and job.end == 50 and log.start_flush() is None
    if truncate:
        log.truncate_to(30)
    runner = threading.Thread(target=job.run)
    runner.start()
    write(log, [b"x"], "during")
    runner.join()
    log.finish_flush(job)
    checkpoint = int((tmp_path / RECOVERY_POINT_FILE).read_text().split("\n")[2])
    if truncate:
        assert not job.done and checkpoint <= 30 and log.recovery_point <= 30
    else:
        assert job.done and checkpoint == 50 and log.recovery_point == 50
        assert log.synced_end_offset == 50


def test_a_flush_job_writes_no_checkpoint_into_a_deleted_log_s_directory(tmp_path):
    """The directory of a deleted partition may be made again for a new topic of the same
    name: a flush job planned before the deletion must not write its recovery point there."""
    clock = FakeClock(NOW)
    log = PartitionLog(tmp_path / "t-0", CONFIG.replace(cleanup_policy="delete", flush_ms=1000),
                       clock=clock)
    write(log, [b"k%d" % i for i in range(10)], "v")
    clock.advance(1000)
    job = log.start_flush()
    log.delete()
    (tmp_path / "t-0").mkdir()  # a new topic's replica, same name
    job.run()
    assert not job.done and not (tmp_path / "t-0" / RECOVERY_POINT_FILE).exists()
