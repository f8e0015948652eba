"""A partition replica over a real log: roles, epochs, the high watermark, reads below it."""

from __future__ import annotations

import os

import pytest

from raylog.errors import (
    FencedEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from raylog.partition import EARLIEST, LATEST, Partition, Role
from raylog.records import TABLE_SCHEMA, Codec, iter_headers, read_records
from raylog.storage import LogConfig, PartitionLog
from tests.unit.logutil import FakeClock, batch_of

NOW = 1_700_000_000_000


def new_partition(tmp_path, configs=None, config: LogConfig | None = None) -> Partition:
    log = PartitionLog(tmp_path / "t-0", config or LogConfig(retention_ms=None),
                       clock=FakeClock(NOW))
    return Partition("t", 0, log, "r1", configs)


@pytest.fixture
def partition(tmp_path):
    p = new_partition(tmp_path)
    yield p
    p.log.close()


def append_batches(partition: Partition, count: int, per_batch: int = 3,
                   ts: int = NOW) -> list[bytes]:
    """``count`` batches of ``per_batch`` records; batch i has timestamp ``ts + 10 * i``."""
    values = []
    for i in range(count):
        batch = [b"v%d" % (i * per_batch + j) for j in range(per_batch)]
        partition.append(batch_of(batch, ts=ts + 10 * i))
        values.extend(batch)
    return values


def replicated(partition: Partition) -> Partition:
    """Make ``partition`` a leader with a follower, so its HW no longer follows its log end."""
    partition.become_leader(partition.leader_epoch + 1, ["r1", "r2"])
    return partition


def fetched_offsets(data: bytes) -> list[int]:
    return [r.offset for r in read_records(data)]


# -- appending and the high watermark ------------------------------------------------------------


def test_a_new_partition_is_a_single_replica_leader(partition):
    assert partition.role is Role.LEADER
    assert partition.leader_epoch == 0
    assert partition.isr == ["r1"]
    assert partition.name == "t-0"
    assert partition.high_watermark == 0


def test_single_replica_leader_append_moves_the_hw_to_the_log_end(partition):
    info = partition.append(batch_of([b"a", b"b", b"c"]))
    assert (info.base_offset, info.last_offset, info.record_count) == (0, 2, 3)
    assert partition.high_watermark == partition.log.log_end_offset == 3
    info = partition.append(batch_of([b"d"]))
    assert info.base_offset == 3
    assert partition.high_watermark == 4


def test_append_stamps_the_leader_epoch(partition):
    partition.become_leader(5, ["r1"])
    partition.append(batch_of([b"a"]), leader_epoch=5)
    [(_, header)] = list(iter_headers(partition.log.read(0)))
    assert header.leader_epoch == 5


def test_reopening_a_single_replica_log_commits_everything_it_holds(tmp_path):
    first = new_partition(tmp_path)
    replicated(first)
    append_batches(first, 2)
    assert first.high_watermark == 0
    first.log.close()
    log = PartitionLog(tmp_path / "t-0", LogConfig(retention_ms=None))
    second = Partition("t", 0, log, "r1")
    try:
        assert second.high_watermark == 6
    finally:
        log.close()


def test_with_a_follower_in_the_isr_the_hw_stays_put(partition):
    replicated(partition)
    append_batches(partition, 2)
    assert partition.log.log_end_offset == 6
    assert partition.high_watermark == 0


def test_becoming_sole_leader_again_commits_the_log(partition):
    replicated(partition)
    append_batches(partition, 2)
    partition.become_leader(partition.leader_epoch + 1, ["r1"])
    assert partition.high_watermark == 6


# -- fetching ------------------------------------------------------------------------------------


def test_fetch_returns_everything_below_the_hw(partition):
    append_batches(partition, 3)
    result = partition.fetch(0, 1 << 20)
    assert fetched_offsets(result.data) == list(range(9))
    assert (result.high_watermark, result.log_start_offset, result.log_end_offset) == (9, 0, 9)


def test_fetch_returns_data_only_below_the_hw(partition):
    replicated(partition)
    append_batches(partition, 3)
    assert partition.fetch(0, 1 << 20).data == b""

    partition.log.update_high_watermark(6)
    result = partition.fetch(0, 1 << 20)
    assert fetched_offsets(result.data) == list(range(6))
    assert (result.high_watermark, result.log_end_offset) == (6, 9)
    assert partition.fetch(6, 1 << 20).data == b""
    assert fetched_offsets(partition.fetch(3, 1 << 20).data) == [3, 4, 5]


def test_fetch_at_the_hw_is_empty(partition):
    append_batches(partition, 1)
    assert partition.fetch(3, 1 << 20) == (b"", 3, 0, 3)


def test_fetch_beyond_the_log_end_is_out_of_range(partition):
    append_batches(partition, 1)
    with pytest.raises(OffsetOutOfRangeError):
        partition.fetch(4, 1 << 20)


def test_fetch_returns_at_least_one_batch_over_max_bytes(partition):
    append_batches(partition, 3)
    assert fetched_offsets(partition.fetch(0, 1).data) == [0, 1, 2]


# -- list_offset ---------------------------------------------------------------------------------


def test_list_offset_earliest_and_latest(partition):
    assert partition.list_offset(EARLIEST) == (0, -1)
    assert partition.list_offset(LATEST) == (0, -1)
    append_batches(partition, 2)
    assert partition.list_offset("earliest") == (0, -1)
    assert partition.list_offset("latest") == (6, -1)


def test_list_offset_latest_is_the_hw_not_the_log_end(partition):
    replicated(partition)
    append_batches(partition, 2)
    partition.log.update_high_watermark(3)
    assert partition.list_offset(LATEST) == (3, -1)


def test_list_offset_by_timestamp_finds_the_first_record_at_or_after_it(partition):
    append_batches(partition, 3)  # batches at NOW, NOW + 10, NOW + 20
    assert partition.list_offset(0) == (0, NOW)
    assert partition.list_offset(NOW) == (0, NOW)
    assert partition.list_offset(NOW + 1) == (3, NOW + 10)
    assert partition.list_offset(NOW + 10) == (3, NOW + 10)
    assert partition.list_offset(NOW + 20) == (6, NOW + 20)


def test_list_offset_past_the_last_timestamp_is_none(partition):
    assert partition.list_offset(NOW) is None
    append_batches(partition, 3)
    assert partition.list_offset(NOW + 21) is None


def test_list_offset_by_timestamp_ignores_records_above_the_hw(partition):
    replicated(partition)
    append_batches(partition, 3)
    partition.log.update_high_watermark(3)
    assert partition.list_offset(NOW) == (0, NOW)
    assert partition.list_offset(NOW + 10) is None


@pytest.mark.parametrize("spec", ["first", "EARLIEST", "", 1.5, None, True, b"latest", "100"])
def test_list_offset_refuses_a_bad_spec(partition, spec):
    with pytest.raises(ValueError, match=r"offset spec must be 'earliest', 'latest' or a "
                                         r"timestamp"):
        partition.list_offset(spec)


# -- read_table ----------------------------------------------------------------------------------


def test_read_table_of_the_whole_partition(partition):
    values = append_batches(partition, 3)
    table = partition.read_table(0, 9)
    assert table.schema == TABLE_SCHEMA
    assert table.column("offset").to_pylist() == list(range(9))
    assert table.column("value").to_pylist() == values
    assert table.column("timestamp").to_pylist() == [NOW] * 3 + [NOW + 10] * 3 + [NOW + 20] * 3


def test_read_table_bounded_inside_batches(partition):
    values = append_batches(partition, 3)
    table = partition.read_table(1, 8)
    assert table.column("offset").to_pylist() == list(range(1, 8))
    assert table.column("value").to_pylist() == values[1:8]
    one = partition.read_table(4, 5)
    assert one.column("offset").to_pylist() == [4]
    assert one.column("value").to_pylist() == [values[4]]


@pytest.mark.parametrize(("start", "end"), [(0, 0), (4, 4), (9, 9)])
def test_empty_read_table_ranges_give_an_empty_table(partition, start, end):
    append_batches(partition, 3)
    table = partition.read_table(start, end)
    assert table.num_rows == 0
    assert table.schema == TABLE_SCHEMA


def test_read_table_of_an_empty_partition(partition):
    table = partition.read_table(0, 0)
    assert table.num_rows == 0
    assert table.schema == TABLE_SCHEMA


@pytest.mark.parametrize(("start", "end"), [(-1, 3), (0, 10), (5, 4), (10, 12), (9, 10)])
def test_read_table_outside_log_start_and_hw_is_out_of_range(partition, start, end):
    append_batches(partition, 3)
    with pytest.raises(OffsetOutOfRangeError, match=r"outside the readable \[0, 9\)"):
        partition.read_table(start, end)


def test_read_table_stops_at_the_hw(partition):
    replicated(partition)
    append_batches(partition, 3)
    partition.log.update_high_watermark(3)
    assert partition.read_table(0, 3).num_rows == 3
    with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 3\)"):
        partition.read_table(0, 4)


def test_read_table_below_the_log_start_is_out_of_range(tmp_path):
    config = LogConfig(segment_bytes=1024, retention_ms=None, retention_bytes=1)
    partition = new_partition(tmp_path, config=config)
    try:
        for i in range(8):
            partition.append(batch_of([b"x" * 400], ts=NOW + i))
        partition.log.enforce_retention()
        start = partition.log.log_start_offset
        assert start > 0
        assert partition.read_table(start, 8).column("offset").to_pylist() == list(range(start, 8))
        with pytest.raises(OffsetOutOfRangeError, match=rf"readable \[{start}, 8\)"):
            partition.read_table(start - 1, 8)
        assert partition.list_offset(EARLIEST) == (start, -1)
    finally:
        partition.log.close()


# -- acks, roles and fencing ---------------------------------------------------------------------


@pytest.mark.parametrize("acks", ["all", -1])
def test_acks_all_with_too_small_an_isr_appends_nothing(tmp_path, acks):
    partition = new_partition(tmp_path, {"min_insync_replicas": 2})
    try:
        partition.append(batch_of([b"before"]))
        with pytest.raises(NotEnoughReplicasError, match=r"1 in-sync replicas, "
                                                         r"min_insync_replicas=2"):
            partition.append(batch_of([b"refused"]), acks=acks)
        assert partition.log.log_end_offset == 1
        assert partition.high_watermark == 1
        assert [r.value for r in read_records(partition.log.read(0))] == [b"before"]
    finally:
        partition.log.close()


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_0_and_1_do_not_need_min_insync_replicas(tmp_path, acks):
    partition = new_partition(tmp_path, {"min_insync_replicas": 2})
    try:
        assert partition.append(batch_of([b"a"]), acks=acks).base_offset == 0
    finally:
        partition.log.close()


def test_acks_all_with_a_large_enough_isr_appends(tmp_path):
    partition = new_partition(tmp_path, {"min_insync_replicas": 2})
    try:
        partition.become_leader(1, ["r1", "r2"])
        assert partition.append(batch_of([b"a"]), acks="all").base_offset == 0
        assert partition.log.log_end_offset == 1
    finally:
        partition.log.close()


def test_become_leader_with_an_older_epoch_is_fenced(partition):
    partition.become_leader(3, ["r1"])
    with pytest.raises(FencedEpochError, match=r"t-0: request at leader epoch 2, replica is at 3"):
        partition.become_leader(2, ["r1", "r2"])
    assert partition.leader_epoch == 3
    assert partition.isr == ["r1"]


def test_become_leader_at_the_same_or_a_newer_epoch_is_accepted(partition):
    partition.become_leader(3, ["r1"])
    partition.become_leader(3, ["r1", "r2"])
    assert partition.isr == ["r1", "r2"]
    partition.become_leader(4, ["r1"])
    assert partition.leader_epoch == 4


def test_append_with_an_older_leader_epoch_is_fenced(partition):
    partition.become_leader(2, ["r1"])
    partition.append(batch_of([b"ok"]), leader_epoch=2)
    with pytest.raises(FencedEpochError, match=r"leader epoch 1, replica is at 2"):
        partition.append(batch_of([b"stale"]), leader_epoch=1)
    assert partition.log.log_end_offset == 1


def test_append_without_a_leader_epoch_is_not_fenced(partition):
    partition.become_leader(2, ["r1"])
    assert partition.append(batch_of([b"a"]), leader_epoch=None).base_offset == 0


def test_a_follower_refuses_appends(partition):
    partition.role = Role.FOLLOWER
    with pytest.raises(NotLeaderError, match=r"replica r1 is not the leader of t-0"):
        partition.append(batch_of([b"a"]))
    with pytest.raises(NotLeaderError):
        partition.append(batch_of([b"a"]), leader_epoch=0)
    assert partition.log.log_end_offset == 0


def test_a_follower_checks_the_epoch_first(partition):
    partition.become_leader(2, ["r1"])
    partition.role = Role.FOLLOWER
    with pytest.raises(FencedEpochError):
        partition.append(batch_of([b"a"]), leader_epoch=1)


def test_a_follower_that_becomes_leader_accepts_appends(partition):
    partition.role = Role.FOLLOWER
    partition.become_leader(1, ["r1"])
    assert partition.role is Role.LEADER
    assert partition.append(batch_of([b"a"]), leader_epoch=1).base_offset == 0


# -- configs and describe ------------------------------------------------------------------------


def test_update_configs_changes_the_log_config(partition):
    partition.append(batch_of([b"small"]))
    partition.update_configs({"max_message_bytes": 1024, "retention_ms": 5,
                              "min_insync_replicas": 2})
    assert partition.log.config.max_message_bytes == 1024
    assert partition.log.config.retention_ms == 5
    assert partition.configs["min_insync_replicas"] == 2
    with pytest.raises(RecordTooLargeError, match=r"max_message_bytes=1024"):
        partition.append(batch_of([b"x" * 4096], codec=Codec.NONE))
    with pytest.raises(NotEnoughReplicasError):
        partition.append(batch_of([b"y"]), acks="all")


def test_update_configs_replaces_earlier_overrides(tmp_path):
    partition = new_partition(tmp_path, {"min_insync_replicas": 3})
    try:
        partition.update_configs({})
        assert partition.configs["min_insync_replicas"] == 1
        assert partition.log.config == LogConfig()
    finally:
        partition.log.close()


def test_describe_reports_role_epoch_and_offsets(partition):
    append_batches(partition, 2)
    partition.become_leader(4, ["r1"])
    described = partition.describe()
    assert {k: described[k] for k in ("topic", "partition", "replica", "role", "leader_epoch",
                                      "isr", "log_start_offset", "log_end_offset",
                                      "high_watermark", "segments")} == {
        "topic": "t", "partition": 0, "replica": "r1", "role": "leader", "leader_epoch": 4,
        "isr": ["r1"], "log_start_offset": 0, "log_end_offset": 6, "high_watermark": 6,
        "segments": 1,
    }


def test_the_epoch_cache_follows_appends_elections_and_retention(tmp_path):
    """Each leader epoch's first offset is kept beside the log, answers what a follower's
    truncation asks, survives a reopen, is rebuilt from the batches if its file is lost,
    and forgets what retention deleted."""
    from raylog.replication.epochs import LEADER_EPOCH_FILE, UNDEFINED

    clock = FakeClock(NOW)
    config = LogConfig(segment_bytes=1024, retention_ms=1000)
    log = PartitionLog(tmp_path / "t-0", config, clock=clock)
    p = Partition("t", 0, log, "r1")

    def append(batches: int) -> None:  # 3 incompressible records: a segment per batch
        for _ in range(batches):
            p.append(batch_of([os.urandom(400) for _ in range(3)], ts=NOW))

    append(2)                                            # epoch 0: offsets 0-5
    p.become_leader(3, ["r1"])
    append(1)                                            # epoch 3: offsets 6-8
    assert [tuple(e) for e in p.epochs.entries] == [(0, 0), (3, 6)]
    assert tuple(p.end_offset_for_epoch(0)) == (0, 6)
    assert tuple(p.end_offset_for_epoch(2)) == (0, 6)    # the largest epoch at or below
    assert tuple(p.end_offset_for_epoch(3)) == (3, 9)    # the latest: the log end
    assert p.end_offset_for_epoch(4) == UNDEFINED
    log.close()

    reopened = Partition("t", 0, PartitionLog(tmp_path / "t-0", config, clock=clock), "r1")
    assert [tuple(e) for e in reopened.epochs.entries] == [(0, 0), (3, 6)]
    reopened.log.close()
    (tmp_path / "t-0" / LEADER_EPOCH_FILE).unlink()
    rebuilt = Partition("t", 0, PartitionLog(tmp_path / "t-0", config, clock=clock), "r1")
    assert [tuple(e) for e in rebuilt.epochs.entries] == [(0, 0), (3, 6)]

    clock.advance(10_000)  # every closed segment past retention
    assert rebuilt.enforce_retention() > 0
    start = rebuilt.log.log_start_offset
    assert start > 0 and rebuilt.epochs.entries[0].start_offset >= start
    rebuilt.log.close()
