"""The producer's per-partition sending rules: raylog.client.sender_state, against a replica's
ProducerStates, with failures, retries and expiry driven by hand."""

from __future__ import annotations

import itertools
import random

import pytest

from raylog.client.futures import BatchResult
from raylog.client.sender_state import MAX_SEQUENCE, Alarms, OutgoingBatch, PartitionSender
from raylog.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from raylog.records import BatchBuilder, parse_header, read_records
from raylog.records.header import BatchHeader
from raylog.replica.producer_state import ProducerStates, SequenceGap
from raylog.storage import AppendInfo

TIMEOUT_S = 10.0


def sealed(sender: PartitionSender, values: list[bytes], now: float = 0.0) -> OutgoingBatch:
    builder = BatchBuilder()
    for v in values:
        builder.append(1, None, v)
    batch = OutgoingBatch("t", 0, builder, BatchResult("t", 0, len(values)), now, TIMEOUT_S)
    sender.number(batch, len(values))
    sender.push(batch)
    return batch


class Replica:
    """The leader's side: ProducerStates deciding, the appended batches in order."""

    def __init__(self) -> None:
        self.states = ProducerStates()
        self.batches: list[tuple[BatchHeader, list[bytes]]] = []

    @property
    def values(self) -> list[bytes]:
        return [v for _, values in self.batches for v in values]

    def append(self, data: bytes) -> str:
        header = parse_header(data)
        try:
            duplicate = self.states.check(header)
        except SequenceGap:
            return "ahead"  # after the leader's wait: OutOfOrderSequence or UnknownProducerId
        except OutOfOrderSequenceError:
            return "before what it remembers"
        except InvalidProducerEpochError:
            return "fenced"
        if duplicate is not None:
            return "duplicate"
        base = len(self.values)
        self.batches.append((header._replace(base_offset=base),
                             [r.value for r in read_records(data)]))
        self.states.accept(header, AppendInfo(base, len(self.values) - 1, 1,
                                              header.record_count))
        return "appended"

    def lose_tail(self, count: int) -> None:
        """A failover to a replica that lacks the last ``count`` batches (an acks=1 tail):
        its producer state is what its own log says."""
        self.batches = self.batches[:max(len(self.batches) - count, 0)]
        self.states = ProducerStates()
        self.states.rebuild(header for header, _ in self.batches)


def test_batches_go_out_in_order_within_the_in_flight_limit():
    sender = PartitionSender(idempotent=True, new_producer_id=lambda: 42)
    batches = [sealed(sender, [b"%d" % i, b"x"]) for i in range(7)]
    assert [b.base_sequence for b in batches] == [0, 2, 4, 6, 8, 10, 12]
    assert sender.take(0.0, limit=5)[0] == batches[:5]
    assert sender.take(0.0, limit=5)[0] == []
    sender.acknowledged(batches[0])
    assert sender.take(0.0, limit=5)[0] == [batches[5]]


def test_a_retry_goes_back_at_its_place_and_holds_back_later_batches():
    """The stall of issue 10: a failed batch in backoff must not let later batches take the
    in-flight slots, where the leader holds them back waiting for it."""
    sender = PartitionSender(idempotent=True)
    batches = [sealed(sender, [b"v"]) for i in range(8)]
    first, _ = sender.take(0.0, limit=5)
    assert first == batches[:5]
    sender.retry(batches[1], not_before=1.0)  # failed: back off until t=1
    sender.retry(batches[3], not_before=1.0)
    assert [b.base_sequence for b in sender.queue] == [1, 3, 5, 6, 7]
    assert sender.take(0.5, limit=5)[0] == []  # batch 1 is backing off: nothing overtakes it
    assert sender.take(1.0, limit=5)[0] == [batches[1], batches[3]]  # in sequence order


def test_a_final_failure_renumbers_the_queue_under_a_new_epoch():
    sender = PartitionSender(idempotent=True, new_producer_id=lambda: 9)
    batches = [sealed(sender, [b"a", b"b"]) for _ in range(4)]
    assert sender.take(0.0, limit=2)[0] == batches[:2]
    sender.failed(batches[0])
    assert sender.take(0.0, limit=5)[0] == []  # batch 1 still in flight: wait for it
    sender.acknowledged(batches[1])
    assert sender.take(0.0, limit=5)[0] == batches[2:]
    assert [b.producer_fields for b in batches[2:]] == [(9, 1, 0), (9, 1, 2)]
    assert sender.next_sequence == 4


def test_a_reset_fails_queued_retries_that_may_be_in_the_log_instead_of_renumbering():
    sender = PartitionSender(idempotent=True)
    batches = [sealed(sender, [b"v"]) for _ in range(3)]
    sender.take(0.0, limit=3)
    lost = ConnectionError("the replica died")
    sender.retry(batches[1], 0.0, unanswered=lost)  # may be appended: no answer came
    sender.retry(batches[2], 0.0)                   # refused by the leader: not appended
    sender.failed(batches[0])
    sendable, unsafe = sender.take(0.0, limit=3)
    assert unsafe == [batches[1]] and batches[1].last_error is lost
    assert sendable == [batches[2]]
    assert (batches[2].producer_epoch, batches[2].base_sequence) == (1, 0)


def test_refused_as_ahead_with_an_earlier_batch_unresolved_it_is_retried_in_place():
    """The earlier batch in flight (or queued for its retry) is the gap: no bump."""
    sender = PartitionSender(idempotent=True)
    batches = [sealed(sender, [b"v"]) for _ in range(3)]
    sender.take(0.0, limit=3)
    assert not sender.refused_ahead(batches[1], now=0.0, retry_at=1.0)  # 0 is in flight
    sender.retry(batches[0], not_before=1.0)  # 0 failed too: queued for its retry
    assert not sender.refused_ahead(batches[2], now=0.0, retry_at=1.0)
    assert not sender.reset_pending
    assert [b.base_sequence for b in sender.queue] == [0, 1, 2]
    assert sender.take(0.5, limit=3)[0] == []  # backing off, in order
    assert sender.take(1.0, limit=3)[0] == batches
    assert [b.producer_fields for b in batches] == [(sender.producer_id, 0, s)
                                                     for s in range(3)]


def test_refused_as_ahead_just_before_the_earlier_batch_landed_it_is_retried_in_place():
    """Ray started batch 1's call first: refused, while batch 0 was still on its way; batch 0
    is acknowledged before that refusal is read. The gap is filled: no bump. Refused again
    with nothing landed since, it is a real gap."""
    sender = PartitionSender(idempotent=True)
    batches = [sealed(sender, [b"v"]) for _ in range(2)]
    sender.take(0.0, limit=2)
    sender.acknowledged(batches[0])
    assert not sender.refused_ahead(batches[1], now=0.0, retry_at=1.0)
    assert sender.take(1.0, limit=2)[0] == [batches[1]]
    assert sender.refused_ahead(batches[1], now=1.5, retry_at=2.5)
    assert sender.take(1.5, limit=2)[0] == [batches[1]]
    assert batches[1].producer_fields[1:] == (1, 0)


def test_refused_as_ahead_with_nothing_earlier_pending_bumps_the_epoch_at_once():
    """The leader lost this producer's state (a failover that lost an acks=1 tail): the gap
    can never fill, so the partition bumps its epoch and sends again now, not after a
    backoff and never at its delivery timeout."""
    sender = PartitionSender(idempotent=True, new_producer_id=lambda: 3)
    acked = sealed(sender, [b"a"])
    sender.take(0.0, limit=5)
    sender.acknowledged(acked)  # the failover lost it
    head, behind = sealed(sender, [b"b", b"c"]), sealed(sender, [b"d"])
    assert sender.take(0.0, limit=5)[0] == [head, behind]
    assert sender.refused_ahead(head, now=0.0, retry_at=5.0)
    assert sender.take(0.0, limit=5)[0] == []  # ``behind`` is still out: wait for it
    assert not sender.refused_ahead(behind, now=0.0, retry_at=0.1)  # head is its gap
    sendable, unsafe = sender.take(0.1, limit=5)
    assert sendable == [head, behind] and unsafe == []
    assert [b.producer_fields for b in (head, behind)] == [(3, 1, 0), (3, 1, 2)]


def test_a_bump_after_a_lost_state_fails_a_batch_whose_earlier_attempt_went_unanswered():
    """That attempt may be in some replica's log: renumbered, it could land twice."""
    sender = PartitionSender(idempotent=True)
    batch = sealed(sender, [b"v"])
    sender.take(0.0, limit=5)
    lost = ConnectionError("the leader died")
    sender.retry(batch, 0.0, unanswered=lost)
    sender.take(0.0, limit=5)
    assert sender.refused_ahead(batch, now=0.0, retry_at=1.0)  # the new leader lacks it
    assert sender.take(0.0, limit=5) == ([], [batch]) and batch.last_error is lost


def test_expiry_takes_queued_and_in_flight_batches_and_forces_a_reset():
    sender = PartitionSender(idempotent=True)
    early = [sealed(sender, [b"e"], now=0.0) for _ in range(3)]
    late = sealed(sender, [b"l"], now=5.0)
    assert sender.take(0.0, limit=1)[0] == early[:1]
    assert sender.expire(TIMEOUT_S - 0.1) == []
    assert sender.expire(TIMEOUT_S) == early
    assert list(sender.queue) == [late] and not sender.in_flight
    assert sender.take(TIMEOUT_S, limit=5)[0] == [late]
    assert (late.producer_epoch, late.base_sequence) == (1, 0)


def test_an_overflowing_sequence_starts_a_new_epoch_at_zero():
    sender = PartitionSender(idempotent=True)
    sender.next_sequence = MAX_SEQUENCE - 1
    batch = sealed(sender, [b"a", b"b", b"c"])
    assert sender.take(0.0, limit=5)[0] == [batch]
    assert (batch.producer_epoch, batch.base_sequence) == (1, 0)


def test_without_idempotence_nothing_is_numbered_or_reset():
    sender = PartitionSender(idempotent=False)
    batch = sealed(sender, [b"a"])
    assert batch.producer_fields == (-1, -1, -1)
    assert sender.take(0.0, limit=5)[0] == [batch]
    sender.failed(batch)
    assert not sender.reset_pending


def test_a_renumbered_batch_is_stamped_again_with_a_valid_crc():
    sender = PartitionSender(idempotent=True, new_producer_id=lambda: 5)
    batches = [sealed(sender, [b"one"]), sealed(sender, [b"two"])]
    before = batches[1].encoded()
    sender.take(0.0, limit=1)
    sender.failed(batches[0])
    sender.take(0.0, limit=1)
    after = batches[1].encoded()
    header = parse_header(after)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 0)
    assert after[65:] == before[65:]  # the payload itself is not re-encoded
    assert [r.value for r in read_records(after)] == [b"two"]  # read_records checks the CRC


@pytest.mark.parametrize("seed", range(40))
def test_random_failures_never_duplicate_reorder_or_stall(seed):
    """Drive a sender and a replica through random answers (appended, answer lost after the
    append, lost before it, refused for good, expiry) and failovers that lose the replica's
    last batches with its producer state (acks=1): the replica holds each batch at most
    once, whole, in sealing order; only a retry of a batch that may be in the log already can
    fall before what the replica remembers; once answers come back again, every batch ends,
    and batches sent then are acknowledged (a lost producer state costs an epoch bump, not a
    wait for the delivery timeout)."""
    rng = random.Random(seed)
    sender, replica = PartitionSender(idempotent=True), Replica()
    names = (b"%d" % i for i in itertools.count())
    now, ended, acknowledged, batches = 0.0, set(), set(), []
    flight: list[tuple[OutgoingBatch, bytes]] = []

    def step(chaos: bool) -> None:
        nonlocal flight
        for batch in sender.expire(now):
            ended.add(id(batch))
            flight = [(b, d) for b, d in flight if b is not batch]
        sendable, unsafe = sender.take(now, limit=3)
        ended.update(id(b) for b in unsafe)
        for batch in sendable:
            flight.append((batch, batch.encoded()))
        if chaos and replica.batches and rng.random() < 0.02:
            replica.lose_tail(rng.randint(1, 3))
        if not flight:
            return
        pick = rng.randrange(len(flight)) if chaos and rng.random() < 0.2 else 0
        batch, data = flight.pop(pick)  # Ray may start an actor's calls out of order
        fate = rng.random() if chaos else 0.0
        if fate < 0.85:
            answer = replica.append(data)
            if fate > 0.7:
                answer = "no answer"  # appended (or not): the producer cannot know
        else:
            answer = "no answer"  # lost before the append: the producer cannot know either
        if answer == "before what it remembers":
            # A retry in flight that later batches overtook beyond the leader's memory: only
            # a batch whose earlier attempt went unanswered (appended, then) can be there.
            assert batch.last_error is not None, "an unanswered batch fell before the window"
            answer = "ahead"  # the same OutOfOrderSequenceError to the producer
        backoff = rng.uniform(0, 1) if chaos else 0
        if answer in ("appended", "duplicate"):
            sender.acknowledged(batch)
            ended.add(id(batch))
            acknowledged.add(id(batch))
        elif answer == "fenced" or (chaos and rng.random() < 0.2):
            sender.failed(batch)
            ended.add(id(batch))
        elif answer == "ahead":
            sender.refused_ahead(batch, now, now + backoff)
        else:  # no answer leaves the outcome open
            sender.retry(batch, now + backoff, TimeoutError())

    def settle() -> None:
        nonlocal now
        for _ in range(10_000):  # the cluster is healthy again
            if not sender:
                return
            now += 0.01
            step(chaos=False)

    for _ in range(300):
        now += rng.uniform(0, 0.5)
        if rng.random() < 0.3:
            values = [next(names) for _ in range(rng.randint(1, 3))]
            batches.append((sealed(sender, values, now), values))
        step(chaos=True)
    settle()
    assert not sender, "batches still pending long after the cluster recovered"
    replica.lose_tail(1)  # one more failover, losing what the producer sent last
    later = [[next(names)] for _ in range(5)]
    batches.extend((sealed(sender, values, now), values) for values in later)
    settle()
    assert all(id(b) in acknowledged for b, _ in batches[-len(later):]), \
        "a healthy cluster did not take a batch"
    assert all(id(b) in ended for b, _ in batches), "a batch never ended"
    order = {v: i for i, (_, values) in enumerate(batches) for v in values}
    assert len(replica.values) == len(set(replica.values)), "a record was appended twice"
    positions = [order[v] for v in replica.values]
    assert positions == sorted(positions), "records landed out of sealing order"
    landed = set(replica.values)
    for _, values in batches:  # a batch lands whole or not at all
        assert all(v in landed for v in values) or not any(v in landed for v in values)


def test_alarms_ring_earliest_first_keep_the_earlier_moment_and_forget_cleared_ones():
    alarms = Alarms()
    assert alarms.next() is None and alarms.due(100.0) == []
    assert alarms.set(("linger", "a"), 5.0)
    assert alarms.set(("expire", "a"), 9.0)
    assert not alarms.set(("linger", "a"), 7.0)  # already set earlier: kept at 5
    assert alarms.set(("expire", "a"), 3.0)      # moved earlier
    alarms.set(("retry", "b"), 4.0)
    alarms.clear(("retry", "b"))
    assert alarms.next() == 3.0
    assert alarms.due(4.5) == [("expire", "a")]  # the stale 9.0 and the cleared one: gone
    assert alarms.next() == 5.0 and len(alarms) == 1
    assert alarms.due(10.0) == [("linger", "a")]
    assert alarms.next() is None and len(alarms) == 0
