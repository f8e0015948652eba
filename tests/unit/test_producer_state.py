"""Sequence order and retries per producer: raylog.producer_state and Partition.append."""

from __future__ import annotations

import os

import pytest

from raylog.errors import InvalidProducerEpochError, RecordTooLargeError
from raylog.partition import LeaderAndIsr, Partition
from raylog.producer_state import RECENT_BATCHES, ProducerStates, SequenceGap
from raylog.records import BatchBuilder, parse_header
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

    def append(self, batch, acks=1, leader_epoch=0, accept_unknown=False):
        return super().append(batch, acks, leader_epoch, accept_unknown)


@pytest.fixture
def partition(tmp_path) -> Partition:
    log = PartitionLog(tmp_path, LogConfig(max_message_bytes=4096), clock=FakeClock(NOW))
    return Leader("t", 0, log, 0)


def test_batches_append_in_sequence_order_and_gaps_wait(partition):
    first, second, third = batch([b"a", b"b"], sequence=0), batch([b"c"], sequence=2), \
        batch([b"d"], sequence=3)
    with pytest.raises(SequenceGap) as gap:
        partition.append(second)
    assert gap.value.expected == 0
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
    assert again == first
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


def test_an_unknown_producer_can_be_accepted_mid_sequence(partition):
    late = batch([b"late"], producer_id=9, sequence=500)
    with pytest.raises(SequenceGap):
        partition.append(late)
    partition.append(late, accept_unknown=True)
    partition.append(batch([b"next"], producer_id=9, sequence=501))
    assert [r.value for r in all_records(partition.log)] == [b"late", b"next"]


def test_a_refused_batch_spends_its_sequence(partition):
    with pytest.raises(RecordTooLargeError):
        partition.append(batch([os.urandom(10_000)], sequence=0))  # incompressible
    partition.append(batch([b"after"], sequence=1))  # does not wait for the refused one
    assert [r.value for r in all_records(partition.log)] == [b"after"]


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
    forgotten = states.check(headers[8 - RECENT_BATCHES - 1])
    assert forgotten is not None and forgotten.base_offset == -1  # not appended again
    for producer in (2, 3):
        states.accept(parse_header(batch([b"v"], producer_id=producer)), AppendInfo(0, 0, NOW, 1))
    assert len(states) == 2
    with pytest.raises(SequenceGap):  # producer 1 was evicted: it is unknown again
        states.check(parse_header(batch([b"v"], producer_id=1, sequence=8)))


def test_a_new_epoch_starts_over_at_zero_and_fences_the_old_one(partition):
    partition.append(batch([b"a"], sequence=0))
    stale = batch([b"late"], sequence=2)  # given up on by its producer (sequence 1 lost)
    with pytest.raises(SequenceGap):
        partition.append(batch([b"x"], sequence=5, epoch=1))  # a new epoch starts at 0
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
