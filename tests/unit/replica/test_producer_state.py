"""Sequence order and retries per producer: raylog.replica.producer_state, Partition.append and the
leader's wait for a gap (HostedReplica.produce). A gap is never accepted, and nothing but a
real append is answered with offsets."""

from __future__ import annotations

import asyncio
import json
import os

import crc32c
import pytest

from actors.hosting import HostedReplica
from raylog.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnknownProducerIdError,
)
from raylog.records import BatchBuilder, parse_header
from raylog.replica.partition import LeaderAndIsr, Partition
from raylog.replica.producer_state import (
    RECENT_BATCHES,
    ProducerSnapshots,
    ProducerStates,
    Refusal,
    SequenceGap,
)
from raylog.storage import AppendInfo, LogConfig, PartitionLog
from tests.unit.logutil import FakeClock, all_records

NOW = 1_700_000_000_000


def batch(values: list[bytes], producer_id: int = 7, sequence: int = 0, epoch: int = 0
          ) -> bytes:
    builder = BatchBuilder()
    for v in values:
        builder.append(NOW, None, v)
    builder.set_producer(producer_id, epoch, sequence)
    return builder.build()


class Leader(Partition):
    """A partition told to lead at epoch 0 that appends at that epoch: these tests are about
    producer sequences, not epochs."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.apply(LeaderAndIsr(self.replica_id, 0, 0, (self.replica_id,),
                                (self.replica_id,)))

    def append(self, batch, acks=1, leader_epoch=0, checked=None):
        return super().append(batch, acks, leader_epoch, checked)


@pytest.fixture
def partition(tmp_path) -> Partition:
    log = PartitionLog(tmp_path, LogConfig(max_message_bytes=4096), clock=FakeClock(NOW))
    return Leader("t", 0, log, 0)


def test_batches_append_in_sequence_order_and_gaps_wait(partition):
    first, second, third = batch([b"a", b"b"], sequence=0), batch([b"c"], sequence=2), \
        batch([b"d"], sequence=3)
    with pytest.raises(SequenceGap) as gap:
        partition.append(second)
    assert (gap.value.expected, gap.value.known) == (0, False)
    assert partition.log.log_end_offset == 0  # nothing stored while it waits
    partition.append(first)
    partition.append(second)
    partition.append(third)
    assert [r.value for r in all_records(partition.log)] == [b"a", b"b", b"c", b"d"]


def test_a_retry_gets_its_first_answer_instead_of_a_second_copy(partition):
    once = batch([b"x", b"y"], sequence=0)
    first = partition.append(once)
    partition.append(batch([b"z"], sequence=2))
    again = partition.append(once)  # its acknowledgement was lost; the producer resends
    assert again == first and again.base_offset == 0  # its real offsets
    assert [r.value for r in all_records(partition.log)] == [b"x", b"y", b"z"]


def test_producers_are_independent_and_keyless_batches_are_not_tracked(partition):
    partition.append(batch([b"p1"], producer_id=1, sequence=0))
    partition.append(batch([b"p2"], producer_id=2, sequence=0))
    partition.append(batch([b"p1b"], producer_id=1, sequence=1))
    anonymous = BatchBuilder()
    anonymous.append(NOW, None, b"anon")
    partition.append(anonymous.build())
    partition.append(anonymous.build())  # no producer id: appended twice, as sent
    assert len(all_records(partition.log)) == 5


def test_an_unknown_producer_mid_sequence_is_never_accepted(partition):
    """The leader has no state for producer 9 (it never saw it, or lost it): a batch of it
    that does not start at 0 is a gap, however long it waits; its error says so."""
    late = batch([b"late"], producer_id=9, sequence=500)
    with pytest.raises(SequenceGap) as gap:
        partition.append(late)
    assert not gap.value.known
    error = gap.value.error("t-0", 0.5)
    assert isinstance(error, UnknownProducerIdError) and error.retriable
    assert partition.log.log_end_offset == 0
    partition.append(batch([b"first"], producer_id=9, sequence=0))  # what it must send
    assert [r.value for r in all_records(partition.log)] == [b"first"]


def test_a_refused_batch_spends_its_sequence_and_its_retry_is_refused_again(partition):
    too_large = batch([os.urandom(10_000)], sequence=0)  # incompressible
    with pytest.raises(RecordTooLargeError) as first:
        partition.append(too_large)
    partition.append(batch([b"after"], sequence=1))  # does not wait for the refused one
    with pytest.raises(RecordTooLargeError) as again:  # not a duplicate "success" at -1
        partition.append(too_large)
    assert str(first.value) in str(again.value)
    assert [r.value for r in all_records(partition.log)] == [b"after"]


def test_a_sequence_before_what_is_remembered_is_refused_never_answered(tmp_path):
    """A follower that starts over mid-log (here at offset 5) holds producer 7 from sequence
    5 on: once it leads, a batch of sequence 0 can be neither appended (it may be in the
    log, below) nor answered (where it is, this replica cannot say). Sequence 5 itself is a
    retry it recognises, with its real offsets."""
    clock = FakeClock(NOW)
    leader = Leader("t", 0, PartitionLog(tmp_path / "a", LogConfig(), clock=clock), 0)
    sent = [batch([b"v%d" % s], sequence=s) for s in range(6)]
    answers = [leader.append(b) for b in sent]
    follower = Partition("t", 0, PartitionLog(tmp_path / "b", LogConfig(), clock=clock), 1)
    follower.apply(LeaderAndIsr(0, 0, 0, (0, 1), (0, 1)))
    follower.restart_at(5)
    follower.append_replicated(leader.read_for_follower(5, 1 << 20).data,
                               leader.high_watermark, 5)
    follower.apply(LeaderAndIsr(1, 1, 1, (0, 1), (1,)))  # it leads now
    with pytest.raises(OutOfOrderSequenceError):
        follower.append(sent[0], leader_epoch=1)
    assert follower.append(sent[5], leader_epoch=1) == answers[5]
    assert follower.log_end_offset == 6  # nothing appended for either
    leader.log.close()
    follower.log.close()


def test_state_is_rebuilt_from_the_log_after_a_restart(tmp_path):
    log = PartitionLog(tmp_path, LogConfig(), clock=FakeClock(NOW))
    first = Leader("t", 0, log, 0)
    sent = batch([b"a"], sequence=0)
    answer = first.append(sent)
    log.close()
    reopened = Leader("t", 0, PartitionLog(tmp_path, LogConfig(), clock=FakeClock(NOW)),
                         0)
    assert reopened.append(sent) == answer  # still recognised as a retry
    reopened.append(batch([b"b"], sequence=1))
    assert [r.value for r in all_records(reopened.log)] == [b"a", b"b"]


def test_only_recent_batches_are_remembered_and_old_producers_are_evicted():
    states = ProducerStates(max_producers=2)
    headers = [parse_header(batch([b"v"], producer_id=1, sequence=s)) for s in range(8)]
    for i, header in enumerate(headers):
        states.accept(header, AppendInfo(i, i, NOW, 1))
    assert states.check(headers[-1]) == AppendInfo(7, 7, NOW, 1)
    with pytest.raises(OutOfOrderSequenceError):  # not appended again, and not "answered"
        states.check(headers[8 - RECENT_BATCHES - 1])
    for producer in (2, 3):
        states.accept(parse_header(batch([b"v"], producer_id=producer)), AppendInfo(0, 0, NOW, 1))
    assert len(states) == 2
    with pytest.raises(SequenceGap) as gap:  # producer 1 was evicted: it is unknown again
        states.check(parse_header(batch([b"v"], producer_id=1, sequence=8)))
    assert isinstance(gap.value.error("t-0", 0.5), UnknownProducerIdError)


def test_a_new_epoch_starts_over_at_zero_and_fences_the_old_one(partition):
    partition.append(batch([b"a"], sequence=0))
    stale = batch([b"late"], sequence=2)  # given up on by its producer (sequence 1 lost)
    with pytest.raises(SequenceGap) as gap:
        partition.append(batch([b"x"], sequence=5, epoch=1))  # a new epoch starts at 0
    assert gap.value.known and type(gap.value.error("t-0", 0.5)) is OutOfOrderSequenceError
    partition.append(batch([b"b"], sequence=0, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        partition.append(stale)  # a late copy of the old epoch never lands after epoch 1
    assert partition.append(batch([b"b"], sequence=0, epoch=1)).base_offset == 1  # a retry
    partition.append(batch([b"c"], sequence=1, epoch=1))
    assert [r.value for r in all_records(partition.log)] == [b"a", b"b", b"c"]


def test_the_epoch_is_rebuilt_from_the_log(tmp_path):
    log = PartitionLog(tmp_path, LogConfig(), clock=FakeClock(NOW))
    Leader("t", 0, log, 0).append(batch([b"a"], sequence=0, epoch=3))
    log.close()
    reopened = Leader("t", 0, PartitionLog(tmp_path, LogConfig(), clock=FakeClock(NOW)),
                         0)
    with pytest.raises(InvalidProducerEpochError):
        reopened.append(batch([b"old"], sequence=1, epoch=2))


# -- snapshots: the stored shape -----------------------------------------------------------------


def test_a_snapshot_keeps_answers_and_refusals_apart(tmp_path):
    states = ProducerStates()
    appended, refused = (parse_header(batch([b"v"], sequence=s)) for s in (0, 1))
    states.accept(appended, AppendInfo(4, 4, NOW, 1))
    states.refuse(refused, RecordTooLargeError("1 MB over max_message_bytes"))
    ProducerSnapshots(tmp_path).write(10, states)
    _, loaded = ProducerSnapshots(tmp_path).load(10)
    assert loaded.check(appended) == AppendInfo(4, 4, NOW, 1)
    with pytest.raises(RecordTooLargeError, match="1 MB over max_message_bytes"):
        loaded.check(refused)


def test_a_snapshot_of_the_first_format_is_read_without_taking_a_refusal_for_an_answer():
    """Version 1 was a bare list and stored a refusal as an answer at offset -1."""
    old = [[7, 0, 2, [[0, 0, 4, 4, NOW, 1], [0, 1, -1, -1, NOW, 0]]]]
    states = ProducerStates.from_json(json.loads(json.dumps(old)))
    assert states.check(parse_header(batch([b"v"], sequence=0))) == AppendInfo(4, 4, NOW, 1)
    with pytest.raises(InvalidRecordError):
        states.check(parse_header(batch([b"v"], sequence=1)))
    assert states.check(parse_header(batch([b"v"], sequence=2))) is None  # the next one


def test_a_snapshot_this_version_cannot_read_is_skipped_and_the_log_replayed(tmp_path):
    """A snapshot of an unknown shape (say, from a newer version) is never misread: the
    replica rebuilds its state from the log instead."""
    log = PartitionLog(tmp_path, LogConfig(), clock=FakeClock(NOW))
    first = Leader("t", 0, log, 0)
    sent = batch([b"a"], sequence=0)
    answer = first.append(sent)
    first.close()
    (path,) = tmp_path.glob("*.snapshot")
    body = b'{"version":3}'
    path.write_bytes(b"%08x\n" % crc32c.crc32c(body) + body)
    reopened = Leader("t", 0, PartitionLog(tmp_path, LogConfig(), clock=FakeClock(NOW)), 0)
    try:
        assert reopened.append(sent) == answer  # rebuilt from the log: still a retry
    finally:
        reopened.log.close()


def test_a_refusal_of_an_unknown_kind_is_still_a_refusal():
    assert isinstance(Refusal("SomeNewError", "no").again(), InvalidRecordError)


# -- the leader's wait for a gap (HostedReplica.produce) ---------------------------------------


def hosted_leader(tmp_path) -> HostedReplica:
    log = PartitionLog(tmp_path, LogConfig(), clock=FakeClock(NOW))
    return HostedReplica(Leader("t", 0, log, 0), "topic-id", {})


def test_an_unknown_producer_mid_sequence_fails_after_the_wait_and_is_not_appended(tmp_path):
    hosted = hosted_leader(tmp_path)

    async def produce() -> None:
        await hosted.produce(batch([b"v"], producer_id=9, sequence=5), 1, 0, 30)

    with pytest.raises(UnknownProducerIdError):
        asyncio.run(produce())
    assert hosted.partition.log_end_offset == 0
    hosted.partition.log.close()


def test_a_newer_epoch_that_does_not_start_at_zero_fails_after_the_wait(tmp_path):
    hosted = hosted_leader(tmp_path)

    async def produce() -> None:
        await hosted.produce(batch([b"a"], sequence=0), 1, 0, 30)
        await hosted.produce(batch([b"b"], sequence=3, epoch=1), 1, 0, 30)

    with pytest.raises(OutOfOrderSequenceError) as refused:
        asyncio.run(produce())
    assert type(refused.value) is OutOfOrderSequenceError  # the producer is known here
    assert [r.value for r in all_records(hosted.partition.log)] == [b"a"]
    hosted.partition.log.close()


def test_a_gap_that_fills_while_the_batch_waits_is_appended_in_order(tmp_path):
    """Ray started the later call first: it waits, the earlier one comes, both land."""
    hosted = hosted_leader(tmp_path)

    async def produce() -> list[AppendInfo]:
        later = asyncio.ensure_future(
            hosted.produce(batch([b"second"], sequence=1, epoch=0), 1, 0, 30))
        await asyncio.sleep(0.05)
        assert not later.done()
        earlier = await hosted.produce(batch([b"first"], sequence=0), 1, 0, 30)
        return [earlier, await later]

    answers = asyncio.run(produce())
    assert [a.base_offset for a in answers] == [0, 1]
    assert [r.value for r in all_records(hosted.partition.log)] == [b"first", b"second"]
    hosted.partition.log.close()
