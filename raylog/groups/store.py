"""What the group coordinator writes to ``__consumer_offsets``, and when it becomes true.

The coordinator's memory follows the log: a commit is applied, a group record counts as
durable, a group is forgotten, when the batch holding its record is in the log, in the order
of the log (one :class:`OffsetsWriter` per partition, one batch in flight). A group's
records all go to one partition, so for one group the order of the log is the order in
which the coordinator decided.

A commit is checked when it arrives (:meth:`GroupCoordinator.check_commit`) and checked
again when its record is in the log (:meth:`GroupCoordinator.fenced`): one whose member left,
or one of whose partitions changed owner meanwhile, is *not* applied, and the caller gets
the error saying why. If it was still queued, its record is never written. If its batch was
already on its way, the record may be in the log, where a coordinator replaying after a
restart would find it; so the store writes each such partition's offset again, as memory
has it (a tombstone if it has none), right behind, and while that is on its way the
partition is held: granted to nobody (a new owner would read an offset the log is about to
contradict). Until that record is durable a restart would find the fenced commit, as if it
had been applied before the fence; nobody read the partition meanwhile, so nothing goes
backwards for anyone.

Waiting is bounded: an RPC waits up to its deadline for its record; a commit not yet taken
into a batch by then is withdrawn (never written); one on its way is answered with
RequestTimeoutError and applied or not when its batch is done, by the same rules.

Offsets committed inside a transaction (:meth:`GroupStore.txn_commit`) go another way:
as a transactional batch of the producer's own (its id, epoch and a sequence of its own in
the partition, so that a batch sent again is not appended twice), one at a time per
producer and partition, sent until it is in the log or refused; they pend until the
transaction's marker (txn_offsets.py).

Plain asyncio over an injected ``append`` (see offsets_writer.py); the controller's event loop
is the only user.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from raylog import errors
from raylog.errors import RaylogError, RequestTimeoutError
from raylog.groups.coordinator import (
    CommitTicket,
    GroupCoordinator,
    OffsetAndMetadata,
    Record,
)
from raylog.groups.offsets_writer import (
    BACKOFF_S,
    NUMBERING_REFUSED,
    Append,
    OffsetsWriter,
    PartitionWriters,
    Write,
)
from raylog.groups.txn_offsets import transactional_batch
from raylog.types import TopicPartition
from raylog.util.backoff import Backoff
from raylog.util.clocks import wall_clock_ms

logger = logging.getLogger(__name__)


class SettledWrite(Write):
    """A write with a future its waiters await: its result or error, once."""

    def __init__(self) -> None:
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        # A waiter that timed out reads the outcome no more: no "never retrieved" warning.
        self.done.add_done_callback(lambda f: f.cancelled() or f.exception())

    def settle(self, outcome: BaseException | Any = None) -> None:
        if self.done.done():
            return
        if isinstance(outcome, BaseException):
            self.done.set_exception(outcome)
        else:
            self.done.set_result(outcome)


    async def submitted(self, writer: OffsetsWriter, timeout_s: float, unsent: str,
                        on_its_way: str) -> Any:
        """Queue this write on ``writer`` and await its outcome for ``timeout_s``; then
        RequestTimeoutError: ``unsent`` (it is withdrawn, never written) if no batch took it
        yet, else ``on_its_way`` (its batch may still land)."""
        writer.submit(self)
        try:
            return await asyncio.wait_for(asyncio.shield(self.done), timeout_s)
        except TimeoutError:
            if writer.withdraw(self):
                self.settle(None)
                raise RequestTimeoutError(unsent) from None
            raise RequestTimeoutError(on_its_way) from None

class CommitWrite(SettledWrite):
    """A checked commit: applied when durable, unless fenced meanwhile."""

    def __init__(self, store: GroupStore, ticket: CommitTicket) -> None:
        super().__init__()
        self.store = store
        self.ticket = ticket

    @property
    def partitions(self) -> list[TopicPartition]:
        return sorted(self.ticket.offsets)

    def records(self) -> list[Record]:
        coordinator = self.store.coordinator
        error = coordinator.fenced(self.ticket)
        if error is not None:  # fenced before it was sent: never written
            self.settle(error)
            return []
        return [coordinator.offset_record(self.ticket.group_id, tp, om)
                for tp, om in sorted(self.ticket.offsets.items())]

    def sent(self) -> None:
        self.store.coordinator.hold(self.ticket.group_id, self.partitions)

    def durable(self) -> None:
        coordinator, group_id = self.store.coordinator, self.ticket.group_id
        error = coordinator.fenced(self.ticket)
        if error is None:
            coordinator.apply_commit(group_id, self.ticket.offsets)
        else:
            logger.info("group %s: %s", group_id, error)
            self.store.restore(group_id, self.partitions)  # holds them before we let go
        coordinator.unhold(group_id, self.partitions)
        self.settle(error)

    def failed(self, error: BaseException) -> None:
        self.store.coordinator.unhold(self.ticket.group_id, self.partitions)
        self.settle(error)


class RestoreWrite(Write):
    """The offsets memory has for partitions whose fenced commit may be in the log: written
    behind it, so that the log agrees with memory again. Holds the partitions till then."""

    def __init__(self, store: GroupStore, group_id: str, partitions: list[TopicPartition]
                 ) -> None:
        self.store = store
        self.group_id = group_id
        self.partitions = partitions
        store.coordinator.hold(group_id, partitions)

    def records(self) -> list[Record]:
        coordinator = self.store.coordinator
        mine = coordinator.offsets.get(self.group_id, {})
        return [coordinator.offset_record(self.group_id, tp, mine.get(tp))
                for tp in self.partitions]

    def durable(self) -> None:
        self.store.coordinator.unhold(self.group_id, self.partitions)

    def failed(self, error: BaseException) -> None:
        logger.error("group %s: restoring the offsets of %s failed (%r): a restarted "
                     "coordinator may find a commit that was fenced", self.group_id,
                     self.partitions, error)
        self.store.coordinator.unhold(self.group_id, self.partitions)


class MembershipWrite(SettledWrite):
    """The group record (generation and members) as the group is when its batch is built;
    settles with whether it became durable."""

    def __init__(self, store: GroupStore, group_id: str) -> None:
        super().__init__()
        self.store = store
        self.group_id = group_id
        self.generation = -1

    def records(self) -> list[Record]:
        store, coordinator = self.store, self.store.coordinator
        if store.queued_membership.get(self.group_id) is self:
            del store.queued_membership[self.group_id]  # later changes need a new write
        group = coordinator.groups.get(self.group_id)
        if group is None or coordinator.generations.get(self.group_id, -1) >= group.generation:
            self.settle(True)  # nothing newer to say
            return []
        self.generation = group.generation
        return [coordinator.group_record(self.group_id)]

    def durable(self) -> None:
        self.store.coordinator.membership_durable(self.group_id, self.generation)
        self.settle(True)

    def failed(self, error: BaseException) -> None:
        logger.error("group %s: its record of generation %d was refused: %r", self.group_id,
                     self.generation, error)
        self.settle(False)


class DeleteWrite(SettledWrite):
    """Tombstones for a group's offsets and record, written when every earlier write of its
    partition is done (so they cover every offset applied before)."""

    alone = True

    def __init__(self, store: GroupStore, group_id: str) -> None:
        super().__init__()
        self.store = store
        self.group_id = group_id

    def records(self) -> list[Record]:
        coordinator = self.store.coordinator
        return [*(coordinator.offset_record(self.group_id, tp, None)
                  for tp in sorted(coordinator.offsets.get(self.group_id, {}))),
                coordinator.generation_record(self.group_id, None)]

    def durable(self) -> None:
        coordinator = self.store.coordinator
        group = coordinator.groups.get(self.group_id)
        if group is None or not (group.members or group.pending):
            coordinator.forget(self.group_id)
        else:  # members joined since: their group record follows the tombstone
            coordinator.offsets.pop(self.group_id, None)
        self.settle(None)

    def failed(self, error: BaseException) -> None:
        self.settle(error)


class GroupStore:
    """The coordinator's writers, one per partition of __consumer_offsets, started on first
    use with ``start`` (the controller's ``background``)."""

    def __init__(self, coordinator: GroupCoordinator, partitions: int, append: Append,
                 new_producer_id: Callable[[], int],
                 start: Callable[[Coroutine[Any, Any, None]], object],
                 backoff_s: tuple[float, float] = BACKOFF_S) -> None:
        self.coordinator = coordinator
        self.partitions = partitions
        self.writers = PartitionWriters(append, new_producer_id, start, backoff_s=backoff_s)
        self.queued_membership: dict[str, MembershipWrite] = {}
        self._append = append
        self._start = start
        self._backoff_s = backoff_s
        # One transactional batch at a time per (partition, producer id): sequences in order.
        self._txn_locks: dict[tuple[int, int], asyncio.Lock] = {}

    def writer(self, group_id: str) -> OffsetsWriter:
        return self.writers(self.coordinator.partition_for(group_id, self.partitions))

    def idle(self) -> bool:
        return self.writers.idle()

    async def commit(self, ticket: CommitTicket, timeout_s: float) -> None:
        """Write an accepted commit and apply it, unless it was fenced meanwhile (raises
        why); RequestTimeoutError after ``timeout_s``."""
        await CommitWrite(self, ticket).submitted(
            self.writer(ticket.group_id), timeout_s,
            f"group {ticket.group_id}: the commit was not written within {timeout_s:.0f} s; "
            f"nothing was stored",
            f"group {ticket.group_id}: the commit is still being written after "
            f"{timeout_s:.0f} s; it is applied if it gets into the log before its member "
            f"loses the partitions")

    def persist_membership(self, group_id: str) -> MembershipWrite:
        """Have the group's record written as it will be when the write goes out."""
        writer = self.writer(group_id)
        write = self.queued_membership.get(group_id)
        if write is not None and writer.withdraw(write):
            writer.submit(write)  # to the end: nothing written before says more
        else:
            write = self.queued_membership[group_id] = MembershipWrite(self, group_id)
            writer.submit(write)
        return write

    async def wait(self, write: SettledWrite, timeout_s: float) -> Any:
        """The write's outcome, or raise RequestTimeoutError after ``timeout_s`` (the write
        goes on)."""
        try:
            return await asyncio.wait_for(asyncio.shield(write.done), timeout_s)
        except TimeoutError:
            raise RequestTimeoutError(
                f"__consumer_offsets did not take a record within {timeout_s:.0f} s") from None

    async def delete(self, group_id: str, timeout_s: float) -> None:
        """Tombstone the group's offsets and record, then forget them."""
        write = DeleteWrite(self, group_id)
        self.writer(group_id).submit(write)
        await self.wait(write, timeout_s)

    def restore(self, group_id: str, partitions: list[TopicPartition]) -> None:
        self.writer(group_id).submit(RestoreWrite(self, group_id, partitions), first=True)

    async def txn_commit(self, producer_id: int, producer_epoch: int, group_id: str,
                         offsets: Mapping[TopicPartition, OffsetAndMetadata],
                         timeout_s: float) -> None:
        """Write a group's offsets as a transactional batch of the producer to the group's
        partition; pending (``coordinator.txn``) once it is in the log. The batch is sent
        again until the leader takes it or refuses it for good (the error, raised);
        RequestTimeoutError after ``timeout_s`` while it is still being sent."""
        partition = self.coordinator.partition_for(group_id, self.partitions)
        done = SettledWrite()
        self._start(self._txn_write(partition, producer_id, producer_epoch, group_id,
                                    dict(offsets), done))
        try:
            await asyncio.wait_for(asyncio.shield(done.done), timeout_s)
        except TimeoutError:
            raise RequestTimeoutError(
                f"group {group_id}: the transactional offsets were not written within "
                f"{timeout_s:.0f} s; they may still be (abort the transaction)") from None

    async def _txn_write(self, partition: int, producer_id: int, producer_epoch: int,
                         group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata],
                         done: SettledWrite) -> None:
        lock = self._txn_locks.setdefault((partition, producer_id), asyncio.Lock())
        async with lock:
            txn = self.coordinator.txn
            records = [self.coordinator.offset_record(group_id, tp, om)
                       for tp, om in sorted(offsets.items())]
            sequence = txn.next_sequence(partition, producer_id, producer_epoch)
            batch = transactional_batch(records, producer_id, producer_epoch, sequence,
                                        wall_clock_ms())
            backoff = Backoff(*self._backoff_s, jitter=0)
            while True:
                try:
                    info = await self._append(partition, batch)
                    if info.base_offset < 0:
                        raise errors.OutOfOrderSequenceError(
                            f"the leader answered at offset {info.base_offset}")
                except NUMBERING_REFUSED as e:  # its sequence is not the leader's: for good
                    done.settle(e)
                    return
                except RaylogError as e:
                    if not e.retriable:
                        done.settle(e)
                        return
                    logger.info("group %s: a transactional offset batch: %r; sending it "
                                "again", group_id, e)
                except Exception as e:  # no answer: it may be in the log; the same again
                    logger.info("group %s: no answer to a transactional offset batch (%r); "
                                "sending it again", group_id, e)
                else:
                    txn.appended(partition, producer_id, producer_epoch, sequence,
                                 len(records), {group_id: offsets})
                    done.settle(None)
                    return
                await asyncio.sleep(backoff.next())
