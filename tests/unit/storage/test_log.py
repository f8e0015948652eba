"""The partition log: appends, reads, rolling, truncation, time lookups, flushing, bad input."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from raylog.errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from raylog.records import BatchBuilder, Codec, iter_batches, read_records, validate_batch
from raylog.records.header import batch_view
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.log import HIGH_WATERMARK_FILE, RECOVERY_POINT_FILE
from tests.unit.logutil import FakeClock, all_records, batch_of, files_snapshot

NOW = 1_700_000_000_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


def small_config(**changes) -> LogConfig:
    return LogConfig(segment_bytes=4096, index_interval_bytes=256, retention_ms=None).replace(
        **changes)


def fill(log: PartitionLog, batches: int, per_batch: int = 5, ts: int = NOW) -> list[bytes]:
    values = []
    for i in range(batches):
        vals = [b"v%d" % (i * per_batch + j) for j in range(per_batch)]
        log.append(batch_of(vals, ts=ts + i), leader_epoch=3)
        values.extend(vals)
    return values


def test_appends_get_dense_offsets_across_segments(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(), clock=clock)
    infos = [log.append(batch_of([b"a" * 50] * 4, ts=NOW)) for _ in range(60)]
    assert [i.base_offset for i in infos] == list(range(0, 240, 4))
    assert all(i.last_offset == i.base_offset + 3 for i in infos)
    assert len(log.segments) > 3
    assert [s.base_offset for s in log.segments] == sorted({s.base_offset for s in log.segments})
    assert log.log_start_offset == 0 and log.log_end_offset == 240
    assert [r.offset for r in all_records(log)] == list(range(240))


def test_stamps_leader_epoch_and_keeps_payload(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(), clock=clock)
    batch = batch_of([b"x", b"y"])
    log.append(batch_of([b"first"]))
    log.append(batch, leader_epoch=7)
    stored = log.read(1)
    header = validate_batch(stored)
    assert (header.base_offset, header.leader_epoch) == (1, 7)
    assert stored[21:] == batch[21:]


def test_read_returns_whole_batches_within_limits(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(segment_bytes=1 << 20), clock=clock)
    fill(log, 10)
    one = log.read(0, max_bytes=1)  # smaller than a batch: still one whole batch
    assert [r.offset for r in read_records(one)] == [0, 1, 2, 3, 4]
    sizes = [h.size for _, h in iter_batches(log.read(5, max_bytes=1 << 20))]
    some = log.read(7, max_bytes=sum(sizes[:3]) + 10)  # three whole batches, not four
    assert [r.offset for r in read_records(some)] == list(range(5, 20))
    bounded = log.read(0, max_bytes=1 << 20, max_offset=10)  # stops before the batch at 10
    assert [r.offset for r in read_records(bounded)][-1] == 9
    straddling = log.read(0, max_bytes=1 << 20, max_offset=12)  # the batch at 10 holds 11
    assert [r.offset for r in read_records(straddling)][-1] == 14
    assert log.read(50) == b""
    assert log.read(0, max_offset=0) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(51)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1)


def test_rolls_by_size_and_by_age(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(segment_bytes=1 << 20, segment_ms=1000),
                       clock=clock)
    log.append(batch_of([b"a"], ts=NOW))
    clock.advance(999)
    log.append(batch_of([b"b"], ts=NOW + 999))
    assert len(log.segments) == 1
    clock.advance(1)
    log.append(batch_of([b"c"], ts=NOW + 1000))
    assert [s.base_offset for s in log.segments] == [0, 2]
    sized = PartitionLog(tmp_path / "sized", small_config(segment_bytes=2048), clock=clock)
    big = batch_of([os.urandom(700)])
    for _ in range(4):
        sized.append(big)
    assert all(s.size <= 2048 for s in sized.segments)
    assert len(sized.segments) == 4


def test_truncate_removes_whole_batches(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(), clock=clock)
    values = fill(log, 40)
    assert log.truncate_to(200) == 0
    log.truncate_to(103)  # inside the batch 100..104: the whole batch goes
    assert log.log_end_offset == 100
    assert [r.value for r in all_records(log)] == values[:100]
    assert log.append(batch_of([b"new"])).base_offset == 100
    log.truncate_to(12)
    assert log.log_end_offset == 10
    assert [r.value for r in all_records(log)] == values[:10]
    log.close()
    reopened = PartitionLog(tmp_path, small_config(), clock=clock)
    assert reopened.log_end_offset == 10
    assert [r.value for r in all_records(reopened)] == values[:10]


def test_truncate_below_log_start_restarts_there(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(), clock=clock)
    fill(log, 3)
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert all_records(log) == []


def test_offsets_for_time_finds_first_record_at_or_after(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(), clock=clock)
    # Timestamps go up and down: the answer is the first offset with ts >= target.
    stamps = [NOW + (i * 37) % 101 for i in range(300)]
    for i in range(0, 300, 3):
        builder = BatchBuilder()
        for ts in stamps[i:i + 3]:
            builder.append(ts, None, b"x" * 20)
        log.append(builder.build())
    for target in range(NOW - 5, NOW + 105, 3):
        expected = next(((o, t) for o, t in enumerate(stamps) if t >= target), None)
        assert log.offsets_for_time(target) == expected, target
    assert log.offsets_for_time(NOW + 50, max_offset=1) is None
    log.close()
    reopened = PartitionLog(tmp_path, small_config(), clock=clock)
    assert reopened.offsets_for_time(NOW + 77) == next(
        (o, t) for o, t in enumerate(stamps) if t >= NOW + 77)


def test_flush_messages_syncs_every_n_records(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(flush_messages=10), clock=clock)
    fill(log, 1)
    assert log.synced_end_offset == 0
    fill(log, 1)
    assert log.synced_end_offset == 10
    # Records only: opening after a crash checks the active segment whatever the recovery
    # point says, so that point and the indexes wait for a flush, or for a roll.
    assert log.recovery_point == 0
    while len(log.segments) == 1:
        fill(log, 2)
    assert log.synced_end_offset == log.recovery_point == log.log_end_offset
    checkpoint = (tmp_path / RECOVERY_POINT_FILE).read_text().split()
    assert checkpoint[-1] == str(log.log_end_offset)


def test_flush_ms_flushes_on_time(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(flush_ms=100), clock=clock)
    fill(log, 1)
    assert not log.maybe_flush() and log.recovery_point == log.synced_end_offset == 0
    clock.advance(100)
    assert log.maybe_flush() and log.recovery_point == log.synced_end_offset == 5
    fill(log, 1)
    clock.advance(100)
    fill(log, 1)  # an append past flush_ms syncs too
    assert log.synced_end_offset == 15


def test_flush_ms_0_syncs_every_append_as_flush_messages_1(tmp_path, clock):
    for settings in ({"flush_ms": 0}, {"flush_messages": 1}, {"flush.messages": 1}):
        config = LogConfig.from_mapping({"retention_ms": None, **settings})
        assert config.syncs_each_append, settings
        log = PartitionLog(tmp_path / "x", config, clock=clock)
        fill(log, 3)
        assert log.synced_end_offset == log.committable_end_offset == log.log_end_offset
        log.delete()
    assert not small_config(flush_messages=2).syncs_each_append
    assert not small_config(flush_ms=1).syncs_each_append


def test_high_watermark_is_checkpointed_and_clamped(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(), clock=clock)
    fill(log, 4)
    assert log.update_high_watermark(12) == 12
    assert log.update_high_watermark(99) == 20
    log.update_high_watermark(12)
    log.close()
    assert (tmp_path / HIGH_WATERMARK_FILE).exists()
    reopened = PartitionLog(tmp_path, small_config(), clock=clock)
    assert reopened.high_watermark == 12
    reopened.truncate_to(10)
    assert reopened.high_watermark == 10


def test_an_unmoved_high_watermark_is_not_written_again(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(), clock=clock)
    fill(log, 2)
    log.update_high_watermark(5)
    log.checkpoint_high_watermark()
    hw_file = tmp_path / HIGH_WATERMARK_FILE
    hw_file.unlink()  # a write would bring it back
    log.checkpoint_high_watermark()
    assert not hw_file.exists()
    log.update_high_watermark(6)
    log.checkpoint_high_watermark()
    assert hw_file.exists()


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"segment_bytes": -1}, "segment_bytes"),
        ({"segment_bytes": 0}, "segment_bytes"),
        ({"retention_bytes": -5}, "retention_bytes"),
        ({"retention_ms": -2}, "retention_ms"),
        ({"index_interval_bytes": 0}, "index_interval_bytes"),
        ({"flush_messages": 0}, "flush_messages"),
        ({"flush_ms": -2}, "flush_ms"),
        ({"max_message_bytes": 1.5}, "max_message_bytes"),
        ({"delete_retention_ms": -1}, "delete_retention_ms"),
        ({"cleanup_policy": "shred"}, "cleanup_policy"),
        ({"segment_ms": "7d"}, "segment_ms"),
    ],
)
def test_bad_configs_are_refused_naming_field_and_value(settings, field):
    with pytest.raises(InvalidConfigError) as excinfo:
        LogConfig(**settings)
    message = str(excinfo.value)
    assert field in message
    assert repr(next(iter(settings.values()))).strip("'") in message


def test_config_accepts_kafka_spellings_and_unlimited():
    config = LogConfig.from_mapping({"retention.ms": -1, "cleanup.policy": "delete,compact"})
    assert config.retention_ms is None
    assert config.cleanup_policy == "compact,delete" and config.compact and config.delete
    with pytest.raises(InvalidConfigError, match=r"retention\.hours"):
        LogConfig.from_mapping({"retention.hours": 1})


def test_oversized_and_corrupt_batches_leave_the_log_unchanged(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(max_message_bytes=2048), clock=clock)
    fill(log, 3)
    before = files_snapshot(tmp_path)
    with pytest.raises(RecordTooLargeError, match="max_message_bytes=2048"):
        log.append(batch_of([os.urandom(4000)]))
    good = batch_of([b"fine"])
    for position in (0, 10, 17, 30, len(good) - 1):
        corrupt = bytearray(good)
        corrupt[position] ^= 0x40
        with pytest.raises(CorruptRecordError):
            log.append(bytes(corrupt))
    with pytest.raises(CorruptRecordError):
        log.append(good[:-1])
    with pytest.raises(CorruptRecordError):
        log.append(good + b"\0")
    assert log.log_end_offset == 15
    assert files_snapshot(tmp_path) == before
    assert log.append(good).base_offset == 15


def test_compacted_log_refuses_records_without_key(tmp_path, clock):
    log = PartitionLog(tmp_path, small_config(cleanup_policy="compact"), clock=clock)
    with pytest.raises(InvalidRecordError, match="key"):
        log.append(batch_of([b"v"]))
    assert log.log_end_offset == 0
    log.append(batch_of([b"v"], keys=[b"k"]))
    assert log.log_end_offset == 1


def test_append_stored_keeps_offsets_and_refuses_going_back(tmp_path, clock):
    leader = PartitionLog(tmp_path / "leader", small_config(), clock=clock)
    fill(leader, 6)
    follower = PartitionLog(tmp_path / "follower", small_config(), clock=clock)
    offset = 0
    while offset < leader.log_end_offset:
        data = leader.read(offset, max_bytes=600)
        info = follower.append_stored(data)
        offset = info.last_offset + 1
    assert follower.log_end_offset == leader.log_end_offset
    assert all_records(follower) == all_records(leader)
    with pytest.raises(InvalidRecordError, match="below the log end offset"):
        follower.append_stored(leader.read(0))
    assert follower.log_end_offset == leader.log_end_offset


def test_closed_log_refuses_use(tmp_path, clock):
    from raylog.errors import LogClosedError

    log = PartitionLog(tmp_path, small_config(), clock=clock)
    log.close()
    with pytest.raises(LogClosedError):
        log.append(batch_of([b"x"]))
    with pytest.raises(LogClosedError):
        log.read(0)


def test_time_work_pending_tells_an_idle_replica_it_may_sleep(tmp_path):
    """What a replica's maintenance must come back for without new appends: a flush by
    flush_ms, a high watermark not yet checkpointed. Nothing else keeps it awake."""
    clock = FakeClock(1_700_000_000_000)
    log = PartitionLog(tmp_path / "t-0", LogConfig(retention_ms=None), clock=clock)
    log.checkpoint_high_watermark()  # a new log's first checkpoint is pending
    assert not log.time_work_pending()
    log.append(batch_of([b"a", b"b"]))
    assert not log.time_work_pending()  # no flush_ms; the high watermark has not moved
    log.update_high_watermark(log.log_end_offset)
    assert log.time_work_pending()
    log.checkpoint_high_watermark()
    assert not log.time_work_pending()
    log.close()

    timed = PartitionLog(tmp_path / "u-0", LogConfig(retention_ms=None, flush_ms=100),
                         clock=clock)
    timed.checkpoint_high_watermark()
    timed.append(batch_of([b"c"]))
    assert timed.time_work_pending()
    clock.advance(100)
    assert timed.maybe_flush()
    assert not timed.time_work_pending()
    timed.close()


def test_a_log_dropped_without_closing_gives_its_descriptors_back(tmp_path, clock):
    """As after a crash: nothing closed it, yet its segment files are not held open."""
    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_files()
    for i in range(20):
        log = PartitionLog(tmp_path / f"p-{i}", small_config(), clock=clock)
        fill(log, 30)  # several segments
        assert len(log.segments) > 1
        del log
    assert open_files() <= before + 2


def test_delete_records_moves_the_log_start_into_a_segment_durably(tmp_path, clock):
    log = PartitionLog(tmp_path / "p", small_config(), clock=clock)
    fill(log, 40)  # 200 records over several segments
    log.update_high_watermark(150)
    segments = len(log.segments)
    before = files_snapshot(tmp_path / "p")
    for bad in (-1, 151, log.log_end_offset):
        with pytest.raises(OffsetOutOfRangeError, match="outside"):
            log.delete_records(bad)
    assert files_snapshot(tmp_path / "p") == before  # refused: nothing changed
    start = log.delete_records(123)
    assert start == log.log_start_offset == 123 and len(log.segments) < segments
    assert log.segments[0].base_offset < 123  # the start lies inside a kept segment
    with pytest.raises(OffsetOutOfRangeError):
        log.read(122)
    # Reads return whole batches, as Kafka's: the one holding the start comes from its base
    # (120); readers skip what lies below the offset they asked for.
    assert [r.offset for r in all_records(log)][:4] == [120, 121, 122, 123]
    assert log.offsets_for_time(NOW)[0] == 123  # deleted records are never an answer
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(100)  # below the start: it never moves back
    del log  # a crash: the start holds without a clean shutdown
    reopened = PartitionLog(tmp_path / "p", small_config(), clock=clock)
    assert reopened.log_start_offset == 123
    reopened.close()
    reopened = PartitionLog(tmp_path / "p", small_config(), clock=clock)
    assert reopened.log_start_offset == 123
    reopened.truncate_to(110)  # a follower cut below its start: new records are readable
    assert reopened.log_start_offset == reopened.log_end_offset
    fill(reopened, 2)
    assert next(r.offset for r in all_records(reopened)) == reopened.log_start_offset < 123


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4])
def test_a_batch_received_as_a_buffer_is_checked_and_stored_as_bytes_are(tmp_path, clock,
                                                                         codec):
    """A large produced batch reaches the broker as a pa.Buffer (a view of Ray's object
    store) and is read in place through batch_view: the same checks, the same stored bytes."""
    log = PartitionLog(tmp_path, small_config(), clock=clock)
    fill(log, 2)
    good = batch_of([b"fine", b"too"], codec=codec)
    before = files_snapshot(tmp_path)
    for position in (0, 30, len(good) - 1):
        corrupt = bytearray(good)
        corrupt[position] ^= 0x40
        with pytest.raises(CorruptRecordError):
            log.append(batch_view(pa.py_buffer(corrupt)))
    assert files_snapshot(tmp_path) == before
    info = log.append(batch_view(pa.py_buffer(good)), leader_epoch=4)
    assert (info.base_offset, info.last_offset) == (10, 11)
    stored = log.read(10)
    assert validate_batch(stored).leader_epoch == 4 and stored[21:] == good[21:]
    assert [r.value for r in all_records(log)][-2:] == [b"fine", b"too"]
