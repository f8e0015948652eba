"""A partition replica over a real log: roles, epochs, the high watermark, reads below it,
and leaders and followers replicating to each other in-process (no Ray)."""

from __future__ import annotations

import os

import pytest

from raylog.errors import (
    CorruptRecordError,
    FencedEpochError,
    IneligibleReplicaError,
    InvalidArgumentError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownLeaderEpochError,
)
from raylog.metadata import election
from raylog.metadata.election import Change
from raylog.metadata.state import PartitionState
from raylog.records import TABLE_SCHEMA, Codec, iter_headers, read_records
from raylog.replica.isr import NO_BROKER_EPOCH
from raylog.replica.partition import (
    EARLIEST,
    LATEST,
    AlterIsr,
    LeaderAndIsr,
    Partition,
    Role,
    Transition,
)
from raylog.replica.producer_state import SequenceGap
from raylog.replica.truncation import Ask
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.segment import LogSegment
from tests.unit.logutil import FakeClock, all_records, batch_of

NOW = 1_700_000_000_000
BROKER_EPOCH = 21  # of the followers' brokers' processes


def new_partition(tmp_path, configs=None, config: LogConfig | None = None, replica: int = 1,
                  clock: FakeClock | None = None) -> Partition:
    clock = clock or FakeClock(NOW)
    log = PartitionLog(tmp_path / f"r{replica}" / "t-0", config or LogConfig(retention_ms=None),
                       clock=clock)
    return Partition("t", 0, log, replica, configs, clock=clock)


def lead(p: Partition, epoch: int = 0, isr=None, replicas=None) -> Partition:
    """Tell ``p`` it leads at ``epoch`` (alone, unless told otherwise)."""
    isr = (p.replica_id,) if isr is None else tuple(isr)
    replicas = isr if replicas is None else tuple(replicas)
    p.apply(LeaderAndIsr(p.replica_id, epoch, max(p.partition_epoch + 1, epoch), replicas, isr))
    return p


def follow(p: Partition, leader: int, epoch: int, isr=None, replicas=None) -> Transition:
    replicas = tuple(replicas or sorted({leader, p.replica_id}))
    return p.apply(LeaderAndIsr(leader, epoch, max(p.partition_epoch + 1, epoch), replicas,
                                tuple(isr or replicas)))


@pytest.fixture
def partition(tmp_path):
    p = lead(new_partition(tmp_path))
    yield p
    p.log.close()


def append_batches(partition: Partition, count: int, per_batch: int = 3,
                   ts: int = NOW) -> list[bytes]:
    """``count`` batches of ``per_batch`` records; batch i has timestamp ``ts + 10 * i``."""
    values = []
    for i in range(count):
        batch = [b"v%d" % (i * per_batch + j) for j in range(per_batch)]
        partition.append(batch_of(batch, ts=ts + 10 * i), leader_epoch=partition.leader_epoch)
        values.extend(batch)
    return values


def replicated(partition: Partition) -> Partition:
    """Make ``partition`` a leader with a follower (2) in its ISR, so its HW waits for it."""
    return lead(partition, partition.leader_epoch + 1, isr=(1, 2))


def fetched_offsets(data: bytes) -> list[int]:
    return [r.offset for r in read_records(data)]


def sync(follower: Partition, leader: Partition, broker_epoch: int = NO_BROKER_EPOCH) -> None:
    """What the broker's fetcher does: truncate as the leader says, then fetch (at
    ``broker_epoch``) until caught up, then once more to learn the high watermark."""
    step = follower.truncation_step()
    while isinstance(step, Ask):
        follower.truncate(step.truncate_to)
        answer = leader.end_offset_for_epoch(leader.leader_epoch, step.epoch)
        step = follower.truncation_step((step.epoch, tuple(answer)))
    follower.truncate(step.offset)
    for _ in range(1000):
        offset = follower.log_end_offset
        leader.follower_fetched(follower.replica_id, leader.leader_epoch, offset, broker_epoch)
        result = leader.read_for_follower(offset, 1 << 20)
        follower.append_replicated(result.data, result.high_watermark,
                                   result.log_start_offset)
        if not result.data and follower.high_watermark == leader.high_watermark:
            return
    raise AssertionError("the follower never caught up")


def values_of(p: Partition) -> list[bytes]:
    """Every value in the log, across segments."""
    return [r.value for r in all_records(p.log)]


# -- roles and what the controller says -------------------------------------------------------


def test_a_new_replica_serves_nothing_until_told(tmp_path):
    p = new_partition(tmp_path)
    assert p.role is Role.OFFLINE and p.leader_epoch == -1
    with pytest.raises(NotLeaderError):
        p.append(batch_of([b"a"]), leader_epoch=-1)
    with pytest.raises(NotLeaderError):
        p.fetch(0, 100, leader_epoch=-1)
    p.log.close()


def test_apply_reports_each_kind_of_change(tmp_path):
    p = new_partition(tmp_path)
    assert p.apply(LeaderAndIsr(1, 3, 4, (1, 2), (1, 2))) is Transition.LEADER
    assert p.apply(LeaderAndIsr(1, 3, 4, (1, 2), (1, 2))) is Transition.UNCHANGED
    assert p.apply(LeaderAndIsr(1, 3, 5, (1, 2), (1,))) is Transition.UPDATED
    assert p.isr == (1,) and p.replica_set.isr == {1}
    assert p.apply(LeaderAndIsr(1, 2, 9, (1, 2), (1, 2))) is Transition.STALE
    assert p.apply(LeaderAndIsr(1, 3, 4, (1, 2), (1, 2))) is Transition.STALE
    assert p.apply(LeaderAndIsr(2, 4, 6, (1, 2), (1, 2))) is Transition.FOLLOWER
    assert p.role is Role.FOLLOWER and p.leader_id == 2 and p.replica_set is None
    assert p.apply(LeaderAndIsr(2, 4, 7, (1, 2), (2,))) is Transition.UPDATED
    assert p.apply(LeaderAndIsr(None, 5, 8, (1, 2), (2,))) is Transition.OFFLINE
    assert p.role is Role.OFFLINE
    p.log.close()


def test_a_single_replica_leader_commits_each_append(partition):
    info = partition.append(batch_of([b"a", b"b", b"c"]), leader_epoch=0)
    assert (info.base_offset, info.last_offset, info.record_count) == (0, 2, 3)
    assert partition.high_watermark == partition.log_end_offset == 3
    assert partition.append(batch_of([b"d"]), leader_epoch=0).base_offset == 3
    assert partition.high_watermark == 4


def test_append_stamps_the_leader_epoch(partition):
    lead(partition, 5)
    partition.append(batch_of([b"a"]), leader_epoch=5)
    [(_, header)] = list(iter_headers(partition.log.read(0)))
    assert header.leader_epoch == 5


def test_with_a_follower_in_the_isr_the_hw_waits_for_its_fetches(partition):
    replicated(partition)
    append_batches(partition, 2)
    assert (partition.log_end_offset, partition.high_watermark) == (6, 0)
    assert partition.follower_fetched(2, 1, 3) == 3
    assert partition.follower_fetched(2, 1, 6) == 6


def test_a_leader_alone_in_its_isr_again_commits_its_log(partition):
    replicated(partition)
    append_batches(partition, 2)
    lead(partition, 2)
    assert partition.high_watermark == 6


def test_a_reopened_leader_keeps_its_checkpointed_high_watermark(tmp_path):
    first = replicated(new_partition(tmp_path))
    append_batches(first, 2)
    first.follower_fetched(2, first.leader_epoch, 3)
    first.close()
    second = new_partition(tmp_path)
    assert second.high_watermark == 3
    lead(second, 5, isr=(1, 2))
    assert second.high_watermark == 3  # the follower has not fetched in this epoch
    lead(second, 6)
    assert second.high_watermark == 6
    second.log.close()


# -- fences ------------------------------------------------------------------------------------


def test_requests_at_another_epoch_are_refused(partition):
    lead(partition, 2)
    partition.append(batch_of([b"ok"]), leader_epoch=2)
    with pytest.raises(FencedEpochError, match=r"leader epoch 1, replica 1 is at 2"):
        partition.append(batch_of([b"stale"]), leader_epoch=1)
    with pytest.raises(UnknownLeaderEpochError):
        partition.fetch(0, 100, leader_epoch=3)
    with pytest.raises(InvalidArgumentError, match="must carry the leader epoch"):
        partition.list_offset(LATEST, leader_epoch=None)
    assert partition.log_end_offset == 1


def test_a_follower_refuses_appends_and_leader_only_requests(tmp_path):
    p = new_partition(tmp_path)
    follow(p, 2, 3)
    with pytest.raises(NotLeaderError, match=r"replica 1 is not the leader of t-0"):
        p.append(batch_of([b"a"]), leader_epoch=3)
    with pytest.raises(NotLeaderError):
        p.list_offset(EARLIEST, leader_epoch=3)
    with pytest.raises(FencedEpochError):  # the epoch is checked first
        p.append(batch_of([b"a"]), leader_epoch=2)
    assert p.log_end_offset == 0
    p.log.close()


# -- fetching ------------------------------------------------------------------------------------


def test_fetch_returns_everything_below_the_hw(partition):
    append_batches(partition, 3)
    result = partition.fetch(0, 1 << 20, leader_epoch=0)
    assert fetched_offsets(result.data) == list(range(9))
    assert (result.high_watermark, result.log_start_offset, result.log_end_offset) == (9, 0, 9)


def test_fetch_returns_data_only_below_the_hw(partition):
    replicated(partition)
    append_batches(partition, 3)
    assert partition.fetch(0, 1 << 20, leader_epoch=1).data == b""
    partition.follower_fetched(2, 1, 6)
    result = partition.fetch(0, 1 << 20, leader_epoch=1)
    assert fetched_offsets(result.data) == list(range(6))
    assert (result.high_watermark, result.log_end_offset) == (6, 9)
    assert partition.fetch(6, 1 << 20, leader_epoch=1).data == b""
    assert fetched_offsets(partition.fetch(3, 1 << 20, leader_epoch=1).data) == [3, 4, 5]


def test_fetch_at_the_hw_is_empty_and_beyond_the_log_end_out_of_range(partition):
    append_batches(partition, 1)
    assert partition.fetch(3, 1 << 20, leader_epoch=0) == (b"", 3, 0, 3, -1, None)
    with pytest.raises(OffsetOutOfRangeError):
        partition.fetch(4, 1 << 20, leader_epoch=0)


def test_fetch_returns_at_least_one_batch_over_max_bytes(partition):
    append_batches(partition, 3)
    assert fetched_offsets(partition.fetch(0, 1, leader_epoch=0).data) == [0, 1, 2]


def test_a_follower_serves_consumers_below_its_own_high_watermark(tmp_path):
    leader = replicated(new_partition(tmp_path))
    follower = new_partition(tmp_path, replica=2)
    follow(follower, 1, 1)
    append_batches(leader, 2)
    sync(follower, leader)
    assert fetched_offsets(follower.fetch(0, 1 << 20, leader_epoch=1).data) == list(range(6))
    append_batches(leader, 1)
    leader.follower_fetched(2, leader.leader_epoch, 6)
    follower.append_replicated(leader.read_for_follower(6, 1 << 20).data, 6, 0)
    assert (follower.log_end_offset, follower.high_watermark) == (9, 6)
    assert follower.fetch(6, 1 << 20, leader_epoch=1).data == b""  # not committed here yet
    with pytest.raises(OffsetOutOfRangeError):  # beyond its log end: it cannot tell
        follower.fetch(50, 1 << 20, leader_epoch=1)
    assert follower.read_table(0, 6, leader_epoch=1).num_rows == 6
    with pytest.raises(OffsetNotAvailableError):  # here, but not known committed yet
        follower.read_table(0, 9, leader_epoch=1)
    with pytest.raises(OffsetOutOfRangeError):  # beyond its log end
        follower.read_table(0, 10, leader_epoch=1)
    leader.log.close()
    follower.log.close()


def test_a_follower_out_of_the_isr_sends_consumers_to_the_leader(tmp_path):
    follower = new_partition(tmp_path, replica=2)
    follow(follower, 1, 3, isr=(1, 2), replicas=(1, 2))
    assert follower.fetch(0, 1 << 20, leader_epoch=3).data == b""
    follow(follower, 1, 3, isr=(1,), replicas=(1, 2))  # the controller took it out
    with pytest.raises(NotLeaderError, match="not in sync"):
        follower.fetch(0, 1 << 20, leader_epoch=3)
    with pytest.raises(NotLeaderError, match="not in sync"):
        follower.read_table(0, 0, leader_epoch=3)
    follower.log.close()


# -- list_offset and read_table ------------------------------------------------------------------


def test_list_offset_earliest_and_latest(partition):
    assert partition.list_offset(EARLIEST, 0) == (0, -1)
    assert partition.list_offset(LATEST, 0) == (0, -1)
    append_batches(partition, 2)
    assert partition.list_offset("earliest", 0) == (0, -1)
    assert partition.list_offset("latest", 0) == (6, -1)


def test_list_offset_latest_is_the_hw_not_the_log_end(partition):
    replicated(partition)
    append_batches(partition, 2)
    partition.follower_fetched(2, 1, 3)
    assert partition.list_offset(LATEST, 1) == (3, -1)


def test_list_offset_by_timestamp_finds_the_first_record_at_or_after_it(partition):
    append_batches(partition, 3)  # batches at NOW, NOW + 10, NOW + 20
    assert partition.list_offset(0, 0) == (0, NOW)
    assert partition.list_offset(NOW, 0) == (0, NOW)
    assert partition.list_offset(NOW + 1, 0) == (3, NOW + 10)
    assert partition.list_offset(NOW + 20, 0) == (6, NOW + 20)
    assert partition.list_offset(NOW + 21, 0) is None


def test_list_offset_by_timestamp_ignores_records_above_the_hw(partition):
    replicated(partition)
    append_batches(partition, 3)
    partition.follower_fetched(2, 1, 3)
    assert partition.list_offset(NOW, 1) == (0, NOW)
    assert partition.list_offset(NOW + 10, 1) is None


@pytest.mark.parametrize("spec", ["first", "EARLIEST", "", 1.5, None, True, b"latest", "100"])
def test_list_offset_refuses_a_bad_spec(partition, spec):
    with pytest.raises(ValueError, match=r"offset spec must be 'earliest', 'latest', "
                                         r"'last_stable' or a timestamp"):
        partition.list_offset(spec, 0)


def test_read_table_of_the_whole_partition_and_inside_batches(partition):
    values = append_batches(partition, 3)
    table = partition.read_table(0, 9, 0)
    assert table.schema == TABLE_SCHEMA
    assert table.column("offset").to_pylist() == list(range(9))
    assert table.column("value").to_pylist() == values
    assert table.column("timestamp").to_pylist() == [NOW] * 3 + [NOW + 10] * 3 + [NOW + 20] * 3
    assert partition.read_table(1, 8, 0).column("value").to_pylist() == values[1:8]
    assert partition.read_table(4, 4, 0).num_rows == 0


@pytest.mark.parametrize(("start", "end"), [(-1, 3), (0, 10), (5, 4), (10, 12), (9, 10)])
def test_read_table_outside_log_start_and_hw_is_out_of_range(partition, start, end):
    append_batches(partition, 3)
    with pytest.raises(OffsetOutOfRangeError, match=r"outside the readable \[0, 9\)"):
        partition.read_table(start, end, 0)


def test_read_table_below_the_log_start_is_out_of_range(tmp_path):
    config = LogConfig(segment_bytes=1024, retention_ms=None, retention_bytes=1)
    partition = lead(new_partition(tmp_path, config=config))
    try:
        for i in range(8):
            partition.append(batch_of([b"x" * 400], ts=NOW + i), leader_epoch=0)
        partition.enforce_retention()
        start = partition.log.log_start_offset
        assert start > 0
        assert partition.read_table(start, 8, 0).column("offset").to_pylist() == \
            list(range(start, 8))
        with pytest.raises(OffsetOutOfRangeError, match=rf"readable \[{start}, 8\)"):
            partition.read_table(start - 1, 8, 0)
        assert partition.list_offset(EARLIEST, 0) == (start, -1)
    finally:
        partition.log.close()


# -- acks=all and min.insync.replicas -----------------------------------------------------------


@pytest.mark.parametrize("acks", ["all", -1])
def test_acks_all_with_too_small_an_isr_appends_nothing(tmp_path, acks):
    partition = lead(new_partition(tmp_path, {"min_insync_replicas": 2}), isr=(1,),
                     replicas=(1, 2))
    try:
        partition.append(batch_of([b"before"]), leader_epoch=0)
        with pytest.raises(NotEnoughReplicasError, match=r"1 in-sync replicas \[1\], "
                                                         r"min_insync_replicas=2"):
            partition.append(batch_of([b"refused"]), acks=acks, leader_epoch=0)
        assert partition.log_end_offset == partition.high_watermark == 1
        assert values_of(partition) == [b"before"]
    finally:
        partition.log.close()


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_0_and_1_do_not_need_min_insync_replicas(tmp_path, acks):
    partition = lead(new_partition(tmp_path, {"min_insync_replicas": 2}))
    try:
        assert partition.append(batch_of([b"a"]), acks=acks, leader_epoch=0).base_offset == 0
    finally:
        partition.log.close()


def test_acks_all_is_done_once_the_isr_has_it(tmp_path):
    partition = lead(new_partition(tmp_path, {"min_insync_replicas": 2}), isr=(1, 2))
    try:
        info = partition.append(batch_of([b"a", b"b"]), acks="all", leader_epoch=0)
        assert not partition.acks_all_done(info.last_offset)
        partition.follower_fetched(2, 0, 2)
        assert partition.acks_all_done(info.last_offset)
    finally:
        partition.log.close()


def test_acks_all_committed_after_the_isr_shrank_reports_it(tmp_path):
    partition = lead(new_partition(tmp_path, {"min_insync_replicas": 2}), isr=(1, 2),
                     replicas=(1, 2))
    try:
        info = partition.append(batch_of([b"a"]), acks="all", leader_epoch=0)
        lead(partition, 0, isr=(1,), replicas=(1, 2))  # the controller took 2 out
        with pytest.raises(NotEnoughReplicasAfterAppendError):
            partition.acks_all_done(info.last_offset)
    finally:
        partition.log.close()


def test_a_leader_that_stops_leading_fails_its_waiting_acks(tmp_path):
    partition = lead(new_partition(tmp_path), isr=(1, 2))
    info = partition.append(batch_of([b"a"]), acks="all", leader_epoch=0)
    follow(partition, 2, 1)
    with pytest.raises(NotLeaderError):
        partition.acks_all_done(info.last_offset)
    partition.log.close()


def test_the_leader_proposes_isr_changes_its_followers_earn(tmp_path):
    clock = FakeClock(NOW)
    leader = lead(new_partition(tmp_path, {"replica_lag_time_max_ms": 1000}, clock=clock),
                  isr=(1, 2), replicas=(1, 2, 3))
    append_batches(leader, 1)
    assert leader.isr_change_wanted() is None
    clock.advance(1001)
    assert leader.isr_change_wanted() == {1}            # 2 never fetched: out
    leader.follower_fetched(3, 0, 3, BROKER_EPOCH)
    lead(leader, 0, isr=(1,), replicas=(1, 2, 3))       # the controller agreed to shrink
    assert leader.isr_change_wanted() == {1, 3}          # 3 has caught up: in
    leader.log.close()


def three_replica_leader(tmp_path, clock: FakeClock, isr=(1, 2, 3)) -> Partition:
    """Leader 1 of replicas (1, 2, 3), ISR ``isr``, at leader epoch 0 and partition epoch 0,
    with 3 records, every ISR follower caught up (at broker epoch BROKER_EPOCH)."""
    leader = lead(new_partition(tmp_path, clock=clock), 0, isr=isr, replicas=(1, 2, 3))
    append_batches(leader, 1)
    for follower in (2, 3):
        leader.follower_fetched(follower, 0, 3, BROKER_EPOCH)
    return leader


def test_an_isr_change_whose_answer_is_unknown_stays_pending_until_it_is_known(tmp_path):
    """The rule behind asking again: a change sent to the controller and not answered (the
    controller committed it and died before replying, say) may have been made. Until the
    answer comes, the high watermark waits for the members of both ISRs; the same request
    is what is asked again; and the answer's state decides."""
    clock = FakeClock(NOW)
    leader = three_replica_leader(tmp_path, clock, isr=(1, 2))
    request = leader.propose_isr_change()
    assert (request.isr, request.partition_epoch, request.broker_epochs) == \
        ((1, 2, 3), 0, {3: BROKER_EPOCH})
    # No answer. 2 fetches on, 3 does not: 3 is in the maximal ISR, so it holds the HW.
    append_batches(leader, 2)
    leader.follower_fetched(2, 0, 9, BROKER_EPOCH)
    assert leader.isr_change_pending(request) and leader.high_watermark == 3
    assert leader.propose_isr_change() is None  # one at a time
    # The controller's word on the same partition epoch (a full push after its restart,
    # say, had it not committed) changes nothing: still pending.
    assert leader.apply(LeaderAndIsr(1, 0, 0, (1, 2, 3), (1, 2))) is Transition.UNCHANGED
    assert leader.isr_change_pending(request) and leader.high_watermark == 3
    # Asked again, the controller answers with the state the change made (epoch 1).
    leader.isr_change_answered(request, LeaderAndIsr(1, 0, 1, (1, 2, 3), (1, 2, 3)))
    assert not leader.isr_change_pending(request)
    assert leader.isr == (1, 2, 3) and leader.replica_set.pending_isr is None
    leader.follower_fetched(3, 0, 9, BROKER_EPOCH)
    assert leader.high_watermark == 9
    leader.log.close()


def test_a_refused_isr_change_takes_the_state_the_refusal_carries(tmp_path):
    clock = FakeClock(NOW)
    leader = three_replica_leader(tmp_path, clock, isr=(1, 2))
    request = leader.propose_isr_change()
    # Refused: the partition changed meanwhile (2 left the ISR when its broker went).
    leader.isr_change_answered(request, LeaderAndIsr(1, 0, 1, (1, 2, 3), (1,)))
    assert leader.isr == (1,) and leader.partition_epoch == 1
    assert leader.replica_set.pending_isr is None
    # Refused at the partition epoch it was based on (a broker epoch was stale): over.
    again = leader.propose_isr_change()
    assert again.isr == (1, 2, 3) and again.partition_epoch == 1
    leader.isr_change_answered(again, LeaderAndIsr(1, 0, 1, (1, 2, 3), (1,)))
    assert not leader.isr_change_pending(again) and leader.replica_set.pending_isr is None
    assert leader.high_watermark == leader.log_end_offset  # alone again
    leader.log.close()


def test_the_controllers_word_on_a_newer_partition_state_settles_a_pending_change(tmp_path):
    clock = FakeClock(NOW)
    leader = three_replica_leader(tmp_path, clock, isr=(1, 2))
    request = leader.propose_isr_change()
    leader.apply(LeaderAndIsr(1, 0, 1, (1, 2, 3), (1, 2, 3)))  # pushed before the answer
    assert not leader.isr_change_pending(request) and leader.isr == (1, 2, 3)
    # The answer that comes after changes nothing (its state is not newer).
    leader.isr_change_answered(request, LeaderAndIsr(1, 0, 1, (1, 2, 3), (1, 2, 3)))
    assert leader.isr == (1, 2, 3) and leader.partition_epoch == 1
    leader.log.close()


def test_kip_903_a_follower_that_lost_its_tail_rejoins_only_after_fetching_again(tmp_path):
    """Follower 3 caught up, left the ISR, and its broker restarted with a shorter log (it
    lost its page cache). The leader still holds what the former process showed: an
    expansion it proposes from that names the old broker epoch, which the controller
    refuses. Once the new process fetches (at its new broker epoch), 3 is as far as it
    fetched, and joins again only once it reached the high watermark."""
    clock = FakeClock(NOW)
    leader = three_replica_leader(tmp_path, clock)
    append_batches(leader, 2)
    leader.follower_fetched(2, 0, 9, BROKER_EPOCH)
    leader.follower_fetched(3, 0, 9, BROKER_EPOCH)
    follower = new_partition(tmp_path, replica=3)
    follow(follower, 1, 0, isr=(1, 2, 3), replicas=(1, 2, 3))
    sync(follower, leader, BROKER_EPOCH)
    # 3's broker goes (the controller takes it out of the ISR) and comes back having lost
    # the last two batches: its broker epoch is BROKER_EPOCH + 1 now.
    leader.apply(LeaderAndIsr(1, 0, 1, (1, 2, 3), (1, 2)))
    follower.truncate(3)
    stale = leader.propose_isr_change()
    assert stale.isr == (1, 2, 3) and stale.broker_epochs == {3: BROKER_EPOCH}
    with pytest.raises(IneligibleReplicaError):
        alter_isr_for(stale, current_epochs={2: BROKER_EPOCH, 3: BROKER_EPOCH + 1})
    leader.isr_change_answered(stale, LeaderAndIsr(1, 0, 1, (1, 2, 3), (1, 2)))
    # The new process fetches: what it has counts, no more.
    leader.follower_fetched(3, 0, follower.log_end_offset, BROKER_EPOCH + 1)
    assert leader.replica_set.follower(3).log_end_offset == 3
    assert leader.propose_isr_change() is None
    offset = follower.log_end_offset
    follower.append_replicated(leader.read_for_follower(offset, 1 << 20).data,
                               leader.high_watermark, 0)
    leader.follower_fetched(3, 0, follower.log_end_offset, BROKER_EPOCH + 1)
    request = leader.propose_isr_change()
    assert request.isr == (1, 2, 3) and request.broker_epochs == {3: BROKER_EPOCH + 1}
    assert alter_isr_for(request, current_epochs={2: BROKER_EPOCH, 3: BROKER_EPOCH + 1}) \
        .isr == [1, 2, 3]
    leader.log.close()
    follower.log.close()


def alter_isr_for(request: AlterIsr, current_epochs: dict[int, int]) -> Change:
    """What the controller decides about ``request`` (partition as the leader knew it)."""
    p = PartitionState(request.partition, [1, 2, 3], request.leader, request.leader_epoch,
                       sorted(request.replica_set.isr), request.partition_epoch)
    return election.alter_isr(p, request.leader, request.leader_epoch,
                              request.partition_epoch, request.isr, set(current_epochs) | {1},
                              member_epochs=request.broker_epochs, broker_epochs=current_epochs)


# -- a new leader's high watermark (KIP-207) ----------------------------------------------------


def test_kip_207_a_new_leader_answers_offsets_once_its_high_watermark_reaches_its_epoch(
        tmp_path):
    """The old leader committed 12 records; the new one had all of them but knew only 9 as
    committed (its high watermark lags by a fetch). Until its other follower has fetched it
    cannot tell: offset lookups are 'not available yet' (retriable), never an answer that
    would send readers back; a range planned from the old leader's high watermark is too."""
    clock = FakeClock(NOW)
    old = lead(new_partition(tmp_path, clock=clock), 0, isr=(1, 2), replicas=(1, 2, 3))
    new = new_partition(tmp_path, replica=2, clock=clock)
    follow(new, 1, 0, replicas=(1, 2, 3))
    append_batches(old, 3)
    sync(new, old)
    append_batches(old, 1)
    old.follower_fetched(2, 0, 9)
    new.append_replicated(old.read_for_follower(9, 1 << 20).data, old.high_watermark, 0)
    old.follower_fetched(2, 0, 12)
    assert (old.high_watermark, new.log_end_offset, new.high_watermark) == (12, 12, 9)
    assert old.list_offset(LATEST, 0) == (12, -1)
    new.apply(LeaderAndIsr(2, 1, 5, (1, 2, 3), (2, 3)))  # 1 is gone; 2 leads, 3 in sync
    assert new.high_watermark == 9 and new.awaits_high_watermark(12)
    for spec in (EARLIEST, LATEST, NOW):
        with pytest.raises(OffsetNotAvailableError) as refused:
            new.list_offset(spec, 1)
        assert refused.value.retriable
    with pytest.raises(OffsetNotAvailableError):
        new.read_table(0, 12, 1)
    with pytest.raises(OffsetOutOfRangeError):  # past its log end: not a matter of waiting
        new.read_table(0, 13, 1)
    assert not new.awaits_high_watermark(13)
    new.follower_fetched(3, 1, 12)  # 3 had them all too
    assert new.list_offset(LATEST, 1) == (12, -1)
    assert new.read_table(0, 12, 1).num_rows == 12
    old.log.close()
    new.log.close()


def test_kip_207_a_follower_never_lowers_its_high_watermark(tmp_path):
    leader = replicated(new_partition(tmp_path))
    follower = new_partition(tmp_path, replica=2)
    follow(follower, 1, 1)
    append_batches(leader, 2)
    sync(follower, leader)
    assert follower.high_watermark == 6
    # A new leader's answer, from before its high watermark caught up with the old one's.
    follower.append_replicated(b"", 3, 0)
    assert follower.high_watermark == 6
    assert follower.read_table(0, 6, 1).num_rows == 6  # what it showed as committed stays
    leader.log.close()
    follower.log.close()


# -- followers ---------------------------------------------------------------------------------


def test_a_follower_copies_batches_offsets_epochs_and_the_high_watermark(tmp_path):
    leader = lead(new_partition(tmp_path), 4, isr=(1, 2))
    follower = new_partition(tmp_path, replica=2)
    follow(follower, 1, 4)
    values = append_batches(leader, 3)
    sync(follower, leader)
    assert values_of(follower) == values
    assert follower.log.read(0, 1 << 30) == leader.log.read(0, 1 << 30)  # the same bytes
    assert follower.high_watermark == leader.high_watermark == 9
    assert [tuple(e) for e in follower.epochs.entries] == [(4, 0)]
    leader.log.close()
    follower.log.close()


def test_a_follower_that_leads_next_recognises_retries_of_replicated_batches(tmp_path):
    leader = lead(new_partition(tmp_path), 0, isr=(1, 2))
    follower = new_partition(tmp_path, replica=2)
    follow(follower, 1, 0)
    batch = batch_of([b"once"], producer_id=7, producer_epoch=0, base_sequence=0)
    first = leader.append(batch, leader_epoch=0)
    sync(follower, leader)
    lead(follower, 1, isr=(2,), replicas=(1, 2))
    assert follower.append(batch, leader_epoch=1) == first  # the retry gets the first answer
    assert values_of(follower) == [b"once"]
    leader.log.close()
    follower.log.close()


def test_kip_101_a_restarted_follower_keeps_committed_records_its_hw_does_not_cover(tmp_path):
    """KIP-101 scenario 1: the follower's HW lags the leader's. Truncating to it would cut a
    committed record that it then lacks when it leads. Epochs keep it."""
    a = lead(new_partition(tmp_path), 0, isr=(1, 2))
    b = new_partition(tmp_path, replica=2)
    follow(b, 1, 0)
    a.append(batch_of([b"m1"]), leader_epoch=0)
    a.append(batch_of([b"m2"]), leader_epoch=0)
    offset = b.log_end_offset
    a.follower_fetched(2, 0, offset)
    b.append_replicated(a.read_for_follower(offset, 1 << 20).data, a.high_watermark, 0)
    a.follower_fetched(2, 0, b.log_end_offset)  # both committed at the leader; b's HW lags
    assert a.high_watermark == 2 and b.high_watermark == 0
    follow(b, 1, 1)  # b restarts and follows again: it keeps m2
    lead(a, 1, isr=(1, 2))
    sync(b, a)
    assert values_of(b) == [b"m1", b"m2"]
    lead(b, 2, isr=(2,), replicas=(1, 2))  # a dies; b leads with both committed records
    assert values_of(b) == [b"m1", b"m2"]
    a.log.close()
    b.log.close()


def test_kip_101_diverged_replicas_end_up_identical(tmp_path):
    """KIP-101 scenario 2 (and KIP-279 over several epochs): a leader with uncommitted
    records loses leadership; the new leader writes other records at those offsets. When the
    old leader follows, it cuts exactly what the new leader does not have."""
    a = lead(new_partition(tmp_path), 0, isr=(1,), replicas=(1, 2))
    b = new_partition(tmp_path, replica=2)
    follow(b, 1, 0, isr=(1,))
    a.append(batch_of([b"shared"]), leader_epoch=0)
    sync(b, a)
    a.append(batch_of([b"a-only-1"]), leader_epoch=0)     # never replicated
    lead(a, 1, isr=(1,), replicas=(1, 2))
    a.append(batch_of([b"a-only-2"]), leader_epoch=1)     # nor this, of a later epoch
    lead(b, 2, isr=(2,), replicas=(1, 2))                 # unclean: b takes over
    b.append(batch_of([b"b-1"]), leader_epoch=2)
    b.append(batch_of([b"b-2"]), leader_epoch=2)
    follow(a, 2, 2, isr=(2,))
    sync(a, b)
    assert a.last_truncation == 1  # exactly its own records went, nothing it shared
    assert values_of(a) == values_of(b) == [b"shared", b"b-1", b"b-2"]
    assert a.log.read(0, 1 << 30) == b.log.read(0, 1 << 30)
    a.log.close()
    b.log.close()


def test_a_follower_behind_the_leaders_log_start_starts_over_there(tmp_path):
    config = LogConfig(segment_bytes=1024, retention_ms=None, retention_bytes=1)
    leader = lead(new_partition(tmp_path, config=config), 0, isr=(1,), replicas=(1, 2))
    for i in range(8):
        leader.append(batch_of([b"x" * 400], ts=NOW + i), leader_epoch=0)
    leader.enforce_retention()
    start = leader.log.log_start_offset
    follower = new_partition(tmp_path, config=config, replica=2)
    follow(follower, 1, 0, isr=(1,))
    with pytest.raises(OffsetOutOfRangeError):
        leader.follower_fetched(2, 0, 0)
    follower.restart_at(start)
    sync(follower, leader)
    assert follower.log.log_start_offset == start
    assert follower.log_end_offset == leader.log_end_offset
    leader.log.close()
    follower.log.close()


# -- producer state: snapshots and truncation ---------------------------------------------------


def test_producer_state_comes_back_from_a_snapshot_without_reading_old_segments(
        tmp_path, monkeypatch):
    config = LogConfig(segment_bytes=1024, retention_ms=None)
    p = lead(new_partition(tmp_path, config=config))
    for seq in range(6):
        p.append(batch_of([os.urandom(500)], producer_id=9, producer_epoch=0,
                          base_sequence=seq), leader_epoch=0)
    assert p.snapshots.offsets()  # taken at segment rolls
    p.close()
    assert p.snapshots.offsets()[-1] == 6  # and at the clean close
    walked = []
    original = LogSegment.verified_headers

    def recording(segment, *args, **kwargs):
        walked.append(segment.base_offset)
        return original(segment, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "verified_headers", recording)
    reopened = lead(new_partition(tmp_path, config=config), 1)
    try:
        assert walked == []  # the snapshot covers the whole log: no header is read
        retry = batch_of([b"again"], producer_id=9, producer_epoch=0, base_sequence=5)
        assert reopened.append(retry, leader_epoch=1).base_offset == 5  # a duplicate
    finally:
        reopened.log.close()


def test_a_snapshot_past_the_log_end_after_a_crash_is_never_trusted(tmp_path):
    """A roll wrote a snapshot, then a crash lost the records it covers (recovery cut the
    log below it). Trusted, it would make the producer's retry of a lost batch look like a
    duplicate: the retry would be answered and never written."""
    config = LogConfig(segment_bytes=1024, retention_ms=None)
    p = lead(new_partition(tmp_path, config=config))
    for seq in range(3):
        p.append(batch_of([os.urandom(500)], producer_id=9, producer_epoch=0,
                          base_sequence=seq), leader_epoch=0)
    snapshot_at = p.snapshots.offsets()[-1]
    p.log.truncate_to(snapshot_at - 1)  # what recovery does to a torn tail after a crash
    p.log.close()
    assert max(p.snapshots.offsets()) == snapshot_at  # the stale snapshot is still there
    reopened = lead(new_partition(tmp_path, config=config), 1)
    try:
        assert all(o <= reopened.log_end_offset for o in reopened.snapshots.offsets())
        lost = batch_of([b"retried"], producer_id=9, producer_epoch=0,
                        base_sequence=reopened.log_end_offset)
        info = reopened.append(lost, leader_epoch=1)
        assert info.base_offset == reopened.log_end_offset - 1  # written, not a duplicate
        assert values_of(reopened)[-1] == b"retried"
    finally:
        reopened.log.close()


def test_truncation_takes_producer_state_back_with_the_log(tmp_path):
    p = new_partition(tmp_path)
    lead(p, 0, isr=(1,), replicas=(1, 2))
    for seq in range(3):
        p.append(batch_of([b"s%d" % seq], producer_id=5, producer_epoch=0,
                          base_sequence=seq), leader_epoch=0)
    follow(p, 2, 1)
    p.truncate(1)
    lead(p, 2, isr=(1,), replicas=(1, 2))
    batch = batch_of([b"s1 again"], producer_id=5, producer_epoch=0, base_sequence=1)
    assert p.append(batch, leader_epoch=2).base_offset == 1  # appended, not a duplicate
    assert values_of(p) == [b"s0", b"s1 again"]
    p.log.close()


def test_a_damaged_batch_is_never_the_source_of_rebuilt_state(tmp_path):
    """After a clean shutdown nothing is verified on open; rebuilding producer state from
    the headers checks each batch's CRCs, and a damaged one is neither trusted nor served.
    Here a flipped bit turns the last batch's sequence 2 into 3: trusted, it would make the
    producer's real next batch (sequence 3) look like a retry and drop it."""
    p = lead(new_partition(tmp_path))
    for seq in range(3):
        p.append(batch_of([b"v%d" % seq], producer_id=5, producer_epoch=0,
                          base_sequence=seq), leader_epoch=0)
    p.log.close()  # closed without a snapshot: the state is rebuilt from the headers
    segment = p.log.segments[-1].path
    data = bytearray(segment.read_bytes())
    last = [pos for pos, _ in iter_headers(bytes(data))][-1]
    data[last + 60] ^= 0x01  # the low bit of base_sequence
    segment.write_bytes(bytes(data))
    reopened = lead(new_partition(tmp_path), 1)
    try:
        with pytest.raises(CorruptRecordError):
            reopened.log.read(2, 100)
        assert values_of_prefix(reopened, 2) == [b"v0", b"v1"]
        next_batch = batch_of([b"v3"], producer_id=5, producer_epoch=0, base_sequence=3)
        with pytest.raises(SequenceGap):  # waits for sequence 2: not taken for a retry
            reopened.append(next_batch, leader_epoch=1)
    finally:
        reopened.log.close()


def values_of_prefix(p: Partition, end: int) -> list[bytes]:
    return [r.value for r in read_records(p.log.read(0, 1 << 20, max_offset=end))]


# -- configs, describe, the epoch cache ---------------------------------------------------------


def test_update_configs_changes_the_log_config(partition):
    partition.append(batch_of([b"small"]), leader_epoch=0)
    partition.update_configs({"max_message_bytes": 1024, "retention_ms": 5,
                              "min_insync_replicas": 2})
    assert partition.log.config.max_message_bytes == 1024
    assert partition.log.config.retention_ms == 5
    assert partition.configs["min_insync_replicas"] == 2
    with pytest.raises(RecordTooLargeError, match=r"max_message_bytes=1024"):
        partition.append(batch_of([b"x" * 4096], codec=Codec.NONE), leader_epoch=0)
    with pytest.raises(NotEnoughReplicasError):
        partition.append(batch_of([b"y"]), acks="all", leader_epoch=0)


def test_describe_reports_role_epochs_and_offsets(partition):
    append_batches(partition, 2)
    lead(partition, 4)
    described = partition.describe()
    assert {k: described[k] for k in ("topic", "partition", "replica", "role", "leader",
                                      "leader_epoch", "isr", "log_start_offset",
                                      "log_end_offset", "high_watermark", "segments")} == {
        "topic": "t", "partition": 0, "replica": 1, "role": "leader", "leader": 1,
        "leader_epoch": 4, "isr": [1], "log_start_offset": 0, "log_end_offset": 6,
        "high_watermark": 6, "segments": 1}


def test_the_epoch_cache_follows_appends_elections_and_retention(tmp_path):
    """Each leader epoch's first offset is kept beside the log, answers what a follower's
    truncation asks, survives a reopen, is rebuilt from the batches if its file is lost,
    and forgets what retention deleted."""
    from raylog.replica.epochs import LEADER_EPOCH_FILE, UNDEFINED

    clock = FakeClock(NOW)
    config = LogConfig(segment_bytes=1024, retention_ms=1000)
    p = lead(new_partition(tmp_path, config=config, clock=clock), 0)

    def append(batches: int) -> None:  # 3 incompressible records: a segment per batch
        for _ in range(batches):
            p.append(batch_of([os.urandom(400) for _ in range(3)], ts=NOW),
                     leader_epoch=p.leader_epoch)

    append(2)                                            # epoch 0: offsets 0-5
    lead(p, 3)
    append(1)                                            # epoch 3: offsets 6-8
    assert [tuple(e) for e in p.epochs.entries] == [(0, 0), (3, 6)]
    assert tuple(p.end_offset_for_epoch(3, 0)) == (0, 6)
    assert tuple(p.end_offset_for_epoch(3, 2)) == (0, 6)  # the largest epoch at or below
    assert tuple(p.end_offset_for_epoch(3, 3)) == (3, 9)  # the latest: the log end
    assert p.end_offset_for_epoch(3, 4) == UNDEFINED
    p.log.close()

    reopened = new_partition(tmp_path, config=config, clock=clock)
    assert [tuple(e) for e in reopened.epochs.entries] == [(0, 0), (3, 6)]
    reopened.log.close()
    (tmp_path / "r1" / "t-0" / LEADER_EPOCH_FILE).unlink()
    rebuilt = new_partition(tmp_path, config=config, clock=clock)
    assert [tuple(e) for e in rebuilt.epochs.entries] == [(0, 0), (3, 6)]

    clock.advance(10_000)  # every closed segment past retention
    lead(rebuilt, 4)
    assert rebuilt.enforce_retention() > 0
    start = rebuilt.log.log_start_offset
    assert start > 0 and rebuilt.epochs.entries[0].start_offset >= start
    rebuilt.log.close()


def test_deleted_records_are_gone_for_readers_and_followers(tmp_path):
    leader = lead(new_partition(tmp_path), 0, isr=(1, 2), replicas=(1, 2))
    follower = new_partition(tmp_path, replica=2)
    follow(follower, 1, 0)
    append_batches(leader, 10)  # 30 records, batches of 3
    sync(follower, leader)
    with pytest.raises(NotLeaderError):
        follower.delete_records(10, 0)
    for bad in (31, -2, "10"):
        with pytest.raises((OffsetOutOfRangeError, InvalidArgumentError)):
            leader.delete_records(bad, 0)
    assert leader.delete_records(10, 0) == 10  # inside the batch 9..11
    assert leader.list_offset(EARLIEST, 0) == (10, -1)
    assert leader.read_table(10, 12, 0).num_rows == 2
    with pytest.raises(OffsetOutOfRangeError):
        leader.fetch(9, 1 << 20, 0)
    append_batches(leader, 1)
    sync(follower, leader)  # the follower learns the start from its leader's fetch answers
    assert follower.log.log_start_offset == 10
    assert leader.delete_records(-1, 0) == leader.high_watermark == 33
    leader.log.close()
    follower.log.close()
