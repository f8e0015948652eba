"""The marker writer: the transaction markers of every decided end, written to every
partition of the transaction, then the transaction completed.

A :class:`MarkerWork` (from an end, a timeout, an operator's abort, or
``pending_markers()`` after a load or a fenced init) names a transaction whose outcome is
durable in ``__transaction_state``. The writer appends its marker to each partition through
``write_marker`` (one call to the partition's leader, which returns once the marker is in the
log with acks=all and raises otherwise), retrying each partition on its own, with backoff,
until it has its marker: leaders move and brokers pause, and the outcome can no longer
change, so there is nothing to give up for. A marker sent again is harmless (the log takes a
second marker of a transaction it already ended without change). When every partition has
it, ``markers_done`` writes COMPLETE_* (retried while the id is busy or the write times out).

A partition counts as done without its marker when its topic is gone (nothing to end there)
or when it has seen a newer epoch of the producer (ProducerFencedError: its transaction
there was ended already, by a marker at a later fence). The work stops without completing
when a partition says a coordinator with a newer epoch wrote there
(TransactionCoordinatorFencedError: this one was replaced, its successor owns the work; it
is not taken again). A work whose run ended otherwise (a bug) is simply handed over again:
the host submits ``pending_markers()`` periodically, and work already running is not
started twice.

Plain asyncio over the two seams; one event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from raylog.errors import (
    ProducerFencedError,
    RaylogError,
    TransactionCoordinatorFencedError,
    UnknownPartitionError,
    UnknownTopicError,
)
from raylog.transactions.state import MarkerWork
from raylog.types import TopicPartition
from raylog.util.backoff import Backoff

logger = logging.getLogger(__name__)

# One try of one marker at the partition's leader: returns once it is in the log (acks=all).
WriteMarker = Callable[[TopicPartition, MarkerWork], Awaitable[object]]
# The coordinator's markers_done: COMPLETE_* written.
MarkersDone = Callable[[MarkerWork], Awaitable[object]]

BACKOFF_S = (0.05, 2.0)  # first and longest pause between two tries of one marker


class MarkerWriter:
    """The marker work in progress, one task per transaction (keyed by its id, producer,
    epoch and outcome: the same work submitted again while it runs is not started twice).
    ``written`` counts the markers the leaders took (for tests and logs)."""

    def __init__(self, write_marker: WriteMarker, markers_done: MarkersDone, *,
                 backoff_s: tuple[float, float] = BACKOFF_S) -> None:
        self._write_marker = write_marker
        self._markers_done = markers_done
        self._backoff_s = backoff_s
        self.running: dict[tuple, asyncio.Task] = {}
        self.superseded: set[tuple] = set()  # work a newer coordinator owns: never again
        self.written = 0
        self.completed = 0

    @staticmethod
    def _key(work: MarkerWork) -> tuple:
        return (work.transactional_id, work.producer_id, work.producer_epoch, work.commit,
                work.coordinator_epoch)

    def submit(self, work: MarkerWork) -> asyncio.Task | None:
        """Start writing ``work``'s markers, unless it is being written; its task (None for
        work a newer coordinator took over)."""
        key = self._key(work)
        if key in self.superseded:
            return None
        task = self.running.get(key)
        if task is None:
            task = self.running[key] = asyncio.get_running_loop().create_task(self._run(work))
            task.add_done_callback(lambda t, k=key: self._ended(k, t))
        return task

    def _ended(self, key: tuple, task: asyncio.Task) -> None:
        if self.running.get(key) is task:
            del self.running[key]
        if not task.cancelled() and task.exception() is not None:
            logger.error("transactional id %s: writing its markers failed; the next round "
                         "takes the work again", key[0], exc_info=task.exception())

    def idle(self) -> bool:
        return not self.running

    def close(self) -> None:
        """Stop every work (the coordinator is replaced; its successor loads the work)."""
        for task in list(self.running.values()):
            task.cancel()
        self.running.clear()

    async def _run(self, work: MarkerWork) -> None:
        superseded = None
        try:
            async with asyncio.TaskGroup() as group:
                for tp in work.partitions:
                    group.create_task(self._mark(tp, work))
        except* TransactionCoordinatorFencedError as fenced:
            superseded = fenced.exceptions[0]
        if superseded is not None:
            self.superseded.add(self._key(work))
            logger.warning("transactional id %s: a newer transaction coordinator wrote markers "
                           "(%r); this one leaves the work to it", work.transactional_id,
                           superseded)
            return
        await self._complete(work)

    async def _mark(self, tp: TopicPartition, work: MarkerWork) -> None:
        """Write ``work``'s marker to ``tp``, as often as it takes."""
        backoff = Backoff(*self._backoff_s)
        kind = "commit" if work.commit else "abort"
        while True:
            try:
                await self._write_marker(tp, work)
            except (UnknownTopicError, UnknownPartitionError) as e:
                logger.info("transactional id %s: no %s marker for %s:%d, which is gone (%s)",
                            work.transactional_id, kind, tp.topic, tp.partition, e)
                return
            except ProducerFencedError as e:
                logger.warning("transactional id %s: %s:%d has a newer epoch of producer %d "
                               "than the %s marker's (%s); nothing left to end there",
                               work.transactional_id, tp.topic, tp.partition,
                               work.producer_id, kind, e)
                return
            except TransactionCoordinatorFencedError:
                raise
            except RaylogError as e:
                level = logging.INFO if e.retriable else logging.WARNING
                logger.log(level, "transactional id %s: the %s marker for %s:%d failed (%r); "
                           "trying again", work.transactional_id, kind, tp.topic,
                           tp.partition, e)
            else:
                self.written += 1
                return
            await asyncio.sleep(backoff.next())

    async def _complete(self, work: MarkerWork) -> None:
        """COMPLETE_* written, retried while that is worth it."""
        backoff = Backoff(*self._backoff_s)
        while True:
            try:
                await self._markers_done(work)
            except RaylogError as e:
                if not e.retriable:  # the state moved on, or another coordinator took over
                    logger.warning("transactional id %s: its markers are written but it was "
                                   "not completed: %r", work.transactional_id, e)
                    return
                logger.info("transactional id %s: completing it failed (%r); trying again",
                            work.transactional_id, e)
            else:
                self.completed += 1
                logger.info("transactional id %s: %s complete (producer %d epoch %d, %d "
                            "partitions)", work.transactional_id,
                            "commit" if work.commit else "abort", work.producer_id,
                            work.producer_epoch, len(work.partitions))
                return
            await asyncio.sleep(backoff.next())
