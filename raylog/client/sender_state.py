"""What the producer's sender knows of each partition: its sealed batches, in sequence order.

Kafka's idempotent producer, reduced to its rules. Every batch of a partition carries the
producer id, the producer epoch and the sequence number of its first record; the leader
appends a producer's batches only in sequence order and answers a retry of one it already
holds with its first answer. For that to work the producer must keep its side in order:

- A partition's batches go out in sequence order, at most ``max_in_flight`` at a time. A
  batch that failed with a retriable error goes back into the queue *at its place in the
  sequence*, and nothing behind it is sent before it (head-of-line), so a retry after a
  backoff never finds its slots taken by later batches that the leader must hold back.
- A batch that ends in failure (a final error, or its ``delivery_timeout_ms`` passed, queued
  or in flight) leaves a hole in the sequence, or an unknown outcome. The partition then
  stops sending until nothing is in flight, bumps the producer epoch and renumbers its
  queued batches from sequence 0 (Kafka's epoch bump). The leader refuses a batch of an
  older epoch once it has seen a newer one, so a late copy of an expired batch can no
  longer land after the batches that followed it.
- A batch the leader refused as ahead of the sequence it expects (OutOfOrderSequenceError,
  UnknownProducerIdError: not appended) waits behind an earlier batch of the same producer
  id and epoch that is still unresolved, in flight or queued for a retry: that batch is the
  gap, and the refused one is retried in place (so too if an earlier batch was acknowledged
  after the refused attempt went out: it may have filled the gap just after the leader
  looked). With no such batch the gap can never fill:
  the leader lost this producer's state (a failover that lost an acks=1 tail, retention,
  eviction from its table of producers). The partition bumps its epoch at once, as after a
  hole, and the batch goes out again under its new number without a backoff (KIP-360);
  waiting for its delivery timeout would only fail everything queued behind it.
- Renumbering is only safe for a batch that cannot have been appended: never sent, or
  refused by the leader each time it was. A queued retry whose earlier attempt ended
  without an answer (the replica died, the call was lost) may already be in the log; under
  a new number it could land twice, so at a reset it fails instead, with that attempt's
  error, like a batch whose delivery timed out.

So every batch ends, acknowledged or failed, by its deadline; a producer's records land at
most once and in send order per partition.

Plain Python with time passed in (``now``, monotonic seconds); not safe for concurrent use:
the producer calls it with its lock held.
"""

from __future__ import annotations

import collections
import heapq
import itertools
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Any

from raylog.records import BatchBuilder
from raylog.records.header import (
    MAX_PRODUCER_EPOCH,
    MAX_SEQUENCE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    random_producer_id,
    with_producer,
)

if TYPE_CHECKING:
    import pyarrow as pa


class OutgoingBatch:
    """A batch for one partition: open (accumulating in ``builder``), sealed, in flight, done.

    ``result`` is completed exactly once, by whoever ends the batch.
    """

    __slots__ = ("acks_before", "attempts", "base_sequence", "buffered", "builder", "call",
                 "created", "data", "deadline", "last_error", "not_before", "partition",
                 "producer_epoch", "producer_id", "ref", "result", "sent_at", "sent_to",
                 "stamped", "topic", "transactional")

    def __init__(self, topic: str, partition: int, builder: BatchBuilder | None, result: Any,
                 created: float, delivery_timeout_s: float) -> None:
        self.topic = topic
        self.partition = partition
        self.builder = builder
        self.result = result
        self.created = created
        self.deadline = created + delivery_timeout_s
        self.not_before = 0.0       # retry backoff ends (monotonic s)
        self.attempts = 0           # sends so far
        self.acks_before = 0        # its partition's acknowledgements when it last went out
        self.buffered = 0           # bytes counted against buffer_memory
        self.data: bytes | pa.Buffer | None = None  # pa.Buffer: send_batch's
        self.stamped: tuple[int, int, int] | None = None  # producer fields inside ``data``
        self.sent_at = 0.0          # when the last attempt went out (monotonic s)
        self.sent_to = (-1, -1)     # ... to which leader: (broker id, leader epoch)
        self.call: ProduceCall | None = None  # the produce call of its latest attempt
        self.ref: Any = None        # that call's outstanding request, while in flight
        # The error of an attempt that ended without an answer: it may have been appended.
        self.last_error: BaseException | None = None
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.transactional = False  # written inside a transaction (the attribute bit)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def producer_fields(self) -> tuple[int, int, int]:
        return self.producer_id, self.producer_epoch, self.base_sequence

    def encoded(self) -> bytes | pa.Buffer:
        """The batch's bytes, carrying its current producer fields: built once from the
        builder, re-stamped (payload CRC recomputed) only after a renumbering."""
        fields = self.producer_fields
        if self.data is None:
            self.builder.set_producer(*fields, transactional=self.transactional)
            self.data = self.builder.build()
            self.builder = None
        elif self.stamped != fields:
            self.data = with_producer(self.data, *fields)
        self.stamped = fields
        return self.data


class ProduceCall:
    """One produce request to a replica host (Kafka's produce request): the batches of the
    partitions it serves, led by ``broker``, in the order they go, at most one call's worth
    of bytes (``size``: what the batches count against buffer_memory). ``replica`` is the
    client of its first batch's partition, which makes the call; ``replicas`` each batch's.

    A batch given up while the call is out (expired, abandoned, closed) leaves its place
    empty (None), so the answers still match the places; the call counts against its
    broker's requests in flight while any of its batches is in flight."""

    __slots__ = ("batches", "broker", "live", "ref", "replica", "replicas", "sent_at", "size")

    def __init__(self, broker: int | None, replica: Any) -> None:
        self.broker = broker
        self.replica = replica
        self.batches: list[OutgoingBatch | None] = []
        self.replicas: list[Any] = []
        self.live = 0
        self.size = 0
        self.ref: Any = None
        self.sent_at = 0.0

    def add(self, batch: OutgoingBatch, replica: Any) -> None:
        batch.call = self
        self.batches.append(batch)
        self.replicas.append(replica)
        self.live += 1
        self.size += batch.buffered

    def drop(self, batch: OutgoingBatch) -> bool:
        """Leave ``batch``'s place empty; whether the call still carries any batch."""
        for place, carried in enumerate(self.batches):
            if carried is batch:
                self.batches[place] = None
                self.live -= 1
        return self.live > 0

    def carried(self) -> list[OutgoingBatch]:
        return [batch for batch in self.batches if batch is not None]


class PartitionSender:
    """The sealed batches of one partition: ``queue`` (not in flight, ascending sequence) and
    ``in_flight``; the producer id, epoch and next sequence it numbers them with.

    Invariants: every batch in ``queue`` and ``in_flight`` carries the current epoch; the
    batches of ``queue`` have consecutive sequences in queue order, above those in flight
    except for retries, which go back in sequence order; while ``reset_pending``, nothing is
    sent until ``in_flight`` is empty.
    """

    def __init__(self, idempotent: bool,
                 new_producer_id: Callable[[], int] = random_producer_id,
                 transactional: bool = False) -> None:
        self.idempotent = idempotent
        # A transactional producer's id and epoch are the coordinator's: a hole stalls the
        # partition (its transaction must abort) instead of bumping the epoch here.
        self.transactional = transactional
        self.stalled = False
        self._new_producer_id = new_producer_id
        self.producer_id = new_producer_id() if idempotent else NO_PRODUCER_ID
        self.epoch = 0 if idempotent else NO_PRODUCER_EPOCH
        self.next_sequence = 0
        self.queue: collections.deque[OutgoingBatch] = collections.deque()
        self.in_flight: list[OutgoingBatch] = []
        self.reset_pending = False
        self.acknowledgements = 0  # batches acknowledged so far

    def __bool__(self) -> bool:
        return bool(self.queue or self.in_flight)

    def number(self, batch: OutgoingBatch, records: int) -> None:
        """Give a newly sealed batch the partition's next sequences."""
        if not self.idempotent:
            return
        if self.next_sequence + records > MAX_SEQUENCE:
            self.reset_pending = True  # the reset numbers the queue from 0 again
        batch.producer_id, batch.producer_epoch = self.producer_id, self.epoch
        batch.base_sequence = self.next_sequence
        self.next_sequence += records

    def push(self, batch: OutgoingBatch) -> None:
        """Queue a newly sealed (and numbered) batch behind the others."""
        self.queue.append(batch)

    def take(self, now: float, limit: int) -> tuple[list[OutgoingBatch], list[OutgoingBatch]]:
        """(the batches to send now, moved to ``in_flight`` in sequence order; the queued
        batches a reset just removed because they may be in the log already)."""
        unsafe = []
        if self.stalled:
            return [], []
        if self.reset_pending:
            if self.in_flight:
                return [], []
            unsafe = self._reset()
        out = []
        queue = self.queue
        while queue and len(self.in_flight) < limit and queue[0].not_before <= now:
            batch = queue.popleft()
            batch.acks_before = self.acknowledgements
            self.in_flight.append(batch)
            out.append(batch)
        return out, unsafe

    def retry(self, batch: OutgoingBatch, not_before: float,
              unanswered: BaseException | None = None) -> None:
        """An in-flight batch failed retriably: back into the queue at its sequence.
        ``unanswered`` is the error of an attempt that may have been appended."""
        self.in_flight.remove(batch)
        batch.not_before = not_before
        if unanswered is not None:
            batch.last_error = unanswered
        place = next((i for i, queued in enumerate(self.queue)
                      if queued.base_sequence > batch.base_sequence), len(self.queue))
        self.queue.insert(place, batch)

    def refused_ahead(self, batch: OutgoingBatch, now: float, retry_at: float) -> bool:
        """The leader refused an in-flight ``batch`` as ahead of the sequence it expects:
        not appended. Retry it in place at ``retry_at`` while the gap may still fill: an
        earlier batch of its producer id and epoch is unresolved (in flight, or queued for a
        retry), or one was acknowledged after this attempt went out (Ray may have started
        this call before that one's). Else bump the epoch and send it again at once
        (``now``), renumbered. Whether it bumped."""
        producer = batch.producer_id, batch.producer_epoch
        may_fill = self.acknowledgements > batch.acks_before or any(
            b is not batch and (b.producer_id, b.producer_epoch) == producer
            and b.base_sequence < batch.base_sequence
            for b in itertools.chain(self.in_flight, self.queue))
        self.retry(batch, retry_at if may_fill else now)
        if not may_fill:
            self._hole()
        return not may_fill

    def acknowledged(self, batch: OutgoingBatch) -> None:
        self.in_flight.remove(batch)
        self.acknowledgements += 1

    def failed(self, batch: OutgoingBatch) -> None:
        """An in-flight batch ended in failure: its sequences are a hole (or unknown)."""
        self.in_flight.remove(batch)
        self._hole()

    def expire(self, now: float) -> list[OutgoingBatch]:
        """Remove and return the batches whose delivery deadline has passed."""
        gone = [b for b in self.in_flight if b.deadline <= now]
        for batch in gone:
            self.in_flight.remove(batch)
        while self.queue and self.queue[0].deadline <= now:  # deadlines ascend in a queue
            gone.append(self.queue.popleft())
        if gone:
            self._hole()
        return gone

    def drain(self) -> Iterator[OutgoingBatch]:
        """Remove and yield every batch (the producer is giving up on all of them)."""
        yield from self.in_flight
        yield from self.queue
        self.in_flight = []
        self.queue.clear()

    def drop_queued(self) -> list[OutgoingBatch]:
        """Remove and return the queued batches (a transaction aborts: they never leave)."""
        dropped = list(self.queue)
        self.queue.clear()
        return dropped

    def restart(self, producer_id: int, epoch: int) -> None:
        """A transactional producer's new id and epoch (its init, or the bump after an
        abort): numbering starts again at 0. Only with nothing queued or in flight."""
        if self:
            raise ValueError("restart() of a partition with batches queued or in flight")
        self.producer_id, self.epoch = producer_id, epoch
        self.next_sequence = 0
        self.stalled = self.reset_pending = False

    def _hole(self) -> None:
        if self.transactional:
            self.stalled = True
        elif self.idempotent:
            self.reset_pending = True

    def _reset(self) -> list[OutgoingBatch]:
        """Bump the epoch and renumber the queued batches from sequence 0; remove and return
        those that may have been appended already."""
        self.reset_pending = False
        if not self.idempotent:
            return []
        unsafe = [b for b in self.queue if b.last_error is not None]
        if unsafe:
            self.queue = collections.deque(b for b in self.queue if b.last_error is None)
        self.epoch += 1
        if self.epoch > MAX_PRODUCER_EPOCH:
            self.producer_id, self.epoch = self._new_producer_id(), 0
        self.next_sequence = 0
        for batch in self.queue:
            self.number(batch, batch.result.count)
        return unsafe


class Alarms:
    """The moments the sender must act at, one per alarm (a hashable name such as
    ``("linger", (topic, partition))``): a heap, earliest first.

    ``set`` keeps the earlier of an alarm's two moments; ``clear`` forgets an alarm. An entry
    whose alarm was cleared or moved earlier stays in the heap until it reaches the top and
    is dropped there, so every operation costs O(log n) and a wake costs what is due. Not
    safe for concurrent use: the producer calls it with its lock held.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._at: dict[Hashable, float] = {}
        self._order = itertools.count()  # ties: first set, first due (alarms don't compare)

    def __len__(self) -> int:
        return len(self._at)

    def set(self, alarm: Hashable, when: float) -> bool:
        """Ring ``alarm`` at ``when`` (or earlier, if already set earlier); whether that
        moved it."""
        at = self._at.get(alarm)
        if at is not None and at <= when:
            return False
        self._at[alarm] = when
        heapq.heappush(self._heap, (when, next(self._order), alarm))
        return True

    def clear(self, alarm: Hashable) -> None:
        self._at.pop(alarm, None)

    def next(self) -> float | None:
        """When the earliest alarm rings; None with none set."""
        heap = self._heap
        while heap and self._at.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)  # cleared or moved since
        return heap[0][0] if heap else None

    def due(self, now: float) -> list[Hashable]:
        """Remove and return the alarms due at ``now``, earliest first."""
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _, alarm = heapq.heappop(heap)
            if self._at.get(alarm) == when:
                del self._at[alarm]
                out.append(alarm)
        return out
