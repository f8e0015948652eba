"""The group coordinator's appends to one partition of ``__consumer_offsets``: in the order
they were decided, each once.

The coordinator decides on its event loop (a commit accepted, a membership changed) and what
it decided holds once its record is in the log; memory follows the log. So that the log's
order is the order of decision, a writer has one batch in flight at a time: it sends the
next only when the last is known to be in the log (then every write in it is told
:meth:`Write.durable`, in order, with nothing in between) or known not to be (refused by the
leader: :meth:`Write.failed`). What was queued meanwhile goes out together in the next batch.

Every batch carries the writer's producer id, epoch and sequence, as an idempotent
Producer's do, so that the leader answers a batch sent again after a lost answer (a timeout,
a broker that paused or died, a leader that moved) with its first answer instead of
appending it twice. A batch is sent again unchanged for as long as it may be in the log.
When the leader refuses its numbering (OutOfOrderSequenceError, InvalidProducerEpochError,
UnknownProducerIdError, or an answer at offset -1, which is no acknowledgement), the writer
starts a new epoch and sends the same records from sequence 0; were they in the log after
all, the copy lands right behind them with nothing of this writer's in between, and a batch
replayed twice in a row leaves memory as once. A late copy of an older epoch's batch is
refused by a leader that has seen the newer epoch. A new controller process takes a new
producer id: it replays the log before it writes.

Plain asyncio: ``append`` is the seam (the controller's call to the partition's leader; a
fake leader in tests). The controller's event loop is the only user; not thread-safe.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from raylog import errors
from raylog.metadata.topics import CONSUMER_OFFSETS_TOPIC
from raylog.records import BatchBuilder, Codec
from raylog.records.builder import batch_capacity, record_size
from raylog.records.header import MAX_PRODUCER_EPOCH, MAX_SEQUENCE, with_producer
from raylog.storage import AppendInfo
from raylog.util.backoff import Backoff
from raylog.util.clocks import wall_clock_ms

logger = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]
# (partition, batch) -> the leader's answer; raises what the leader (or the way there) raised.
Append = Callable[[int, bytes], Awaitable[AppendInfo]]

MAX_BATCH_BYTES = 1 << 20
BACKOFF_S = (0.05, 1.0)  # first and longest pause between two sends of a batch
# Answers that refuse a batch's numbering: the leader does not take that sequence of that
# epoch (the producer-state rules' UnknownProducerIdError is an OutOfOrderSequenceError).
NUMBERING_REFUSED = (errors.OutOfOrderSequenceError, errors.InvalidProducerEpochError)
# A leader answering a batch with the same retriable refusal this often in a row gets it
# under a new epoch: should a refusal of its numbering come under another name, the writer
# still goes on.
RENUMBER_AFTER = 20


class Write:
    """Something to persist. The writer asks for its :meth:`records` when it builds the
    batch that takes it, then tells it :meth:`durable` or :meth:`failed`. A write that has
    nothing (left) to write returns no records, settles itself and hears nothing more."""

    alone = False  # sent in a batch of its own, after every write queued before it is done
    log_offset = -1  # where its batch landed in the log, once durable


    def records(self) -> list[Record]:
        raise NotImplementedError

    def sent(self) -> None:
        """Its batch is about to go out (it may be in the log from now on)."""

    def durable(self) -> None:
        """Its batch is in the log (at ``log_offset``)."""

    def failed(self, error: BaseException) -> None:
        """The leader refused its batch for good: not in the log."""


class OffsetsWriter:
    """The queue and the producer state (id, epoch, next sequence) of one partition (of
    ``topic``: __consumer_offsets, or another internal topic written the same way, such as
    __transaction_state)."""

    def __init__(self, partition: int, append: Append, new_producer_id: Callable[[], int],
                 *, max_batch_bytes: int = MAX_BATCH_BYTES,
                 backoff_s: tuple[float, float] = BACKOFF_S,
                 topic: str = CONSUMER_OFFSETS_TOPIC) -> None:
        self.partition = partition
        self.name = f"{topic}-{partition}"  # for logs
        self._append = append
        self._new_producer_id = new_producer_id
        self.producer_id = new_producer_id()
        self.epoch = 0
        self.next_sequence = 0
        self._capacity = batch_capacity(max_batch_bytes)
        self._backoff_s = backoff_s
        self._queue: collections.deque[Write] = collections.deque()
        self._wake = asyncio.Event()
        self.in_flight: list[Write] = []
        self.sends = 0  # batches sent, retries included (for tests and logs)

    def submit(self, write: Write, first: bool = False) -> None:
        """Queue a write behind the others (``first``: ahead of them)."""
        if first:
            self._queue.appendleft(write)
        else:
            self._queue.append(write)
        self._wake.set()

    def withdraw(self, write: Write) -> bool:
        """Take a write back if no batch took it yet; whether it was."""
        try:
            self._queue.remove(write)
        except ValueError:
            return False
        return True

    def idle(self) -> bool:
        return not self._queue and not self.in_flight

    async def run(self) -> None:
        """Write what is queued, batch after batch, forever."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                try:
                    await self._write_next()
                except Exception:  # a bug in a write's callbacks must not end the writer
                    logger.exception("%s: writing a batch failed", self.name)

    def _take(self) -> tuple[list[Write], list[Record]]:
        """The writes of the next batch and their records."""
        writes: list[Write] = []
        records: list[Record] = []
        size = 0
        while self._queue:
            write = self._queue[0]
            if write.alone and writes:
                break
            self._queue.popleft()
            mine = write.records()
            if not mine:
                continue
            grows = sum(record_size(k, v) for k, v in mine)
            if writes and size + grows > self._capacity:
                self._queue.appendleft(write)  # asked again for its records next time
                break
            writes.append(write)
            records.extend(mine)
            size += grows
            if write.alone:
                break
        return writes, records

    async def _write_next(self) -> None:
        writes, records = self._take()
        if not writes:
            return
        if self.next_sequence + len(records) > MAX_SEQUENCE:
            self._renumber()
        builder = BatchBuilder(codec=Codec.LZ4)
        builder.set_producer(self.producer_id, self.epoch, self.next_sequence)
        now_ms = wall_clock_ms()
        for key, value in records:
            builder.append(now_ms, key, value)
        data = builder.build()
        self.in_flight = writes
        for write in writes:
            write.sent()
        try:
            outcome = await self._send(data, len(records))
        finally:
            self.in_flight = []
        if isinstance(outcome, AppendInfo):
            for write in writes:
                write.log_offset = outcome.base_offset
                write.durable()
        else:
            for write in writes:
                write.failed(outcome)

    async def _send(self, data: bytes, count: int) -> AppendInfo | BaseException:
        """Send the batch until it is in the log (where) or refused for good (the error)."""
        backoff = Backoff(*self._backoff_s, jitter=0)
        refusals = 0
        while True:
            self.sends += 1
            try:
                info = await self._append(self.partition, data)
                if info.base_offset < 0:
                    raise errors.OutOfOrderSequenceError(
                        f"the leader answered at offset {info.base_offset}")
            except NUMBERING_REFUSED as e:
                logger.info("%s: %r; a new epoch", self.name, e)
                self._renumber()
                data = with_producer(data, self.producer_id, self.epoch, 0)
                refusals = 0
            except errors.RaylogError as e:
                if not e.retriable:
                    logger.error("%s refused a batch: %r", self.name, e)
                    # Not appended; a late copy must not land after the next batch either.
                    self._renumber()
                    return e
                refusals += 1
                if refusals >= RENUMBER_AFTER:
                    logger.warning("%s: %r %d times; a new epoch", self.name, e, refusals)
                    self._renumber()
                    data = with_producer(data, self.producer_id, self.epoch, 0)
                    refusals = 0
            except Exception as e:  # no answer (timeout, broker gone): may be in the log
                logger.info("%s: no answer (%r); sending the batch again", self.name, e)
            else:
                self.next_sequence += count
                return info
            await asyncio.sleep(backoff.next())

    def _renumber(self) -> None:
        """A new epoch: the next batch starts at sequence 0."""
        self.epoch += 1
        if self.epoch > MAX_PRODUCER_EPOCH:
            self.producer_id, self.epoch = self._new_producer_id(), 0
        self.next_sequence = 0


class PartitionWriters:
    """The writers of one topic's partitions, each made and started (``start`` runs its loop
    in the background and returns the task) on first use; :meth:`close` stops them."""

    def __init__(self, append: Append, new_producer_id: Callable[[], int],
                 start: Callable[[Coroutine[Any, Any, None]], object], *,
                 backoff_s: tuple[float, float] = BACKOFF_S,
                 topic: str = CONSUMER_OFFSETS_TOPIC) -> None:
        self._append = append
        self._new_producer_id = new_producer_id
        self._start = start
        self._backoff_s = backoff_s
        self._topic = topic
        self.by_partition: dict[int, OffsetsWriter] = {}
        self._tasks: list[object] = []

    def __call__(self, partition: int) -> OffsetsWriter:
        writer = self.by_partition.get(partition)
        if writer is None:
            writer = self.by_partition[partition] = OffsetsWriter(
                partition, self._append, self._new_producer_id, backoff_s=self._backoff_s,
                topic=self._topic)
            self._tasks.append(self._start(writer.run()))
        return writer

    def idle(self) -> bool:
        return all(w.idle() for w in self.by_partition.values())

    def close(self) -> None:
        """Stop every writer's loop (what they hold is never written)."""
        for task in self._tasks:
            cancel = getattr(task, "cancel", None)
            if cancel is not None:
                cancel()
        self._tasks.clear()
        self.by_partition.clear()
