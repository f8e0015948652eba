"""The transaction coordinator: every transactional id's producer and transaction.

Plain Python over two seams: ``write``, which appends one record to a partition of
``__transaction_state`` and returns when it is durable (raising when that is not known),
and a clock. Every state change is written first and kept only once written: a step
computes the new :class:`TransactionMetadata`, writes it, and then replaces the old one. A
write that raised changes nothing in memory; its record may still be in the log, and the
next record written for the id supersedes it (the last record of a key wins).

While a transactional id's record is being written, every other step on that id is refused
with ConcurrentTransactionsError (retriable), as Kafka's pending state does: the steps of
one id never interleave, and a step's checks still hold when its write is done.

The end of a transaction is two writes around the markers: PREPARE_COMMIT (or
PREPARE_ABORT) before any marker, then the host writes a marker to every partition
(:class:`MarkerWork`, stamped with this coordinator's epoch) and calls
:meth:`markers_done`, which writes COMPLETE_*. A transaction whose producer is replaced
(:meth:`init_producer_id`), whose timeout passed (:meth:`expire`) or that an operator aborts
(:meth:`abort`) is fenced first: the coordinator bumps the epoch, so the old producer's
requests and batches are refused from then on, and aborts it at that epoch.

Joint commits (:meth:`commit_jointly`: several ids' transactions, all or none, by one
decision record) are in raylog/transactions/joint.py, a base class of the coordinator; the
ids they hold refuse the coordinator's other steps (``_not_held``).

The host (an actor) calls it from one event loop; it is not safe for use from threads.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from raylog.errors import (
    ConcurrentTransactionsError,
    InvalidArgumentError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    RaylogError,
    TransactionalIdNotFoundError,
    TransactionCoordinatorFencedError,
)
from raylog.groups.coordinator import OFFSETS_TOPIC_PARTITIONS, GroupCoordinator
from raylog.metadata.topics import CONSUMER_OFFSETS_TOPIC
from raylog.records.header import MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, random_producer_id
from raylog.transactions.joint import JointCommits
from raylog.transactions.log import (
    TRANSACTION_STATE_PARTITIONS,
    Record,
    encode,
    partition_for,
    tombstone,
)
from raylog.transactions.state import (
    JointCommit,
    MarkerWork,
    TransactionMetadata,
    TransactionState,
    epoch_exhausted,
)
from raylog.types import TopicPartition
from raylog.util.arguments import INT32_MAX, check_id, check_int, short_repr
from raylog.util.clocks import wall_clock_ms

logger = logging.getLogger(__name__)

S = TransactionState
MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms: 15 minutes
ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms: 7 days

# Appends one record to the given partition of __transaction_state; returns once it is
# durable (acks=all), raises when that is not known.
WriteRecord = Callable[[int, Record], Awaitable[None]]


class ProducerIdAndEpoch(NamedTuple):
    producer_id: int
    producer_epoch: int


class TransactionCoordinator(JointCommits):
    """Transactional ids and their transactions. ``transactions`` is what
    :func:`raylog.transactions.log.load` replayed, and ``decisions`` the joint commits it
    found (finished by :meth:`finish_decisions`); ``coordinator_epoch`` must grow with
    every coordinator that takes over (the host's choice: e.g. its own incarnation in the
    controller's metadata log), so that partitions refuse markers of an older one."""

    def __init__(self, write: WriteRecord, *, coordinator_epoch: int,
                 clock: Callable[[], int] = wall_clock_ms,
                 transactions: Mapping[str, TransactionMetadata] | None = None,
                 decisions: Mapping[str, JointCommit] | None = None,
                 state_partitions: int = TRANSACTION_STATE_PARTITIONS,
                 offsets_partitions: int = OFFSETS_TOPIC_PARTITIONS,
                 max_timeout_ms: int = MAX_TIMEOUT_MS,
                 id_expiration_ms: int = ID_EXPIRATION_MS,
                 new_producer_id: Callable[[], int] = random_producer_id) -> None:
        self._write = write
        self.coordinator_epoch = check_int("coordinator_epoch", coordinator_epoch)
        self.clock = clock
        self.transactions: dict[str, TransactionMetadata] = dict(transactions or {})
        self.state_partitions = state_partitions
        self.offsets_partitions = offsets_partitions
        self.max_timeout_ms = check_int("max_timeout_ms", max_timeout_ms, 1, INT32_MAX)
        self.id_expiration_ms = check_int("id_expiration_ms", id_expiration_ms, 1)
        self._new_producer_id = new_producer_id
        # Transactional ids whose record is being written, and the state it takes them to.
        self.writing: dict[str, TransactionState] = {}
        self._start_joint_commits(decisions)

    # -- writing -------------------------------------------------------------------------------

    async def _apply(self, metadata: TransactionMetadata, pending: TransactionState | None = None
                     ) -> TransactionMetadata:
        """Write ``metadata`` (a tombstone for DEAD), then keep it (forget the id for DEAD)."""
        tid = metadata.transactional_id
        record = tombstone(tid) if metadata.state is S.DEAD else encode(metadata)
        self.writing[tid] = pending or metadata.state
        try:
            await self._write(partition_for(tid, self.state_partitions), record)
        finally:
            del self.writing[tid]
        if metadata.state is S.DEAD:
            del self.transactions[tid]
        else:
            self.transactions[tid] = metadata
        return metadata

    def _not_writing(self, tid: str) -> None:
        if tid in self.writing:
            raise ConcurrentTransactionsError(
                f"transactional id {tid!r} is being moved to {self.writing[tid].name}; "
                f"retry shortly")

    def _producers(self, tid: str, producer_id: int, producer_epoch: int
                   ) -> TransactionMetadata:
        """The id's metadata, if the request comes from its current producer."""
        metadata = self.transactions.get(tid)
        if metadata is None:
            raise InvalidProducerIdMappingError(
                f"transactional id {tid!r} is not known to the coordinator: the producer "
                f"must initialise (init_producer_id) first")
        if producer_id != metadata.producer_id:
            raise InvalidProducerIdMappingError(
                f"transactional id {tid!r} belongs to producer {metadata.producer_id}, not "
                f"{producer_id}")
        if producer_epoch != metadata.producer_epoch:
            raise ProducerFencedError(
                f"transactional id {tid!r}: producer {producer_id} epoch {producer_epoch} was "
                f"fenced; the id is at epoch {metadata.producer_epoch} ({metadata.state.name}: "
                f"a newer producer initialised, or the coordinator aborted the transaction at "
                f"its timeout or for an operator)")
        self._not_writing(tid)
        return metadata

    def _check_timeout(self, timeout_ms: object) -> int:
        return check_int("transaction_timeout_ms", timeout_ms, 1, self.max_timeout_ms,
                         InvalidTransactionTimeoutError)

    # -- the producer's steps ------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: ProducerIdAndEpoch | None = None
                               ) -> ProducerIdAndEpoch:
        """The producer id and epoch of a transactional producer starting (again).

        A new id gets a new producer id at epoch 0; a known one the next epoch, which
        fences every older producer with the id, or a new producer id at epoch 0 when the
        epochs are used up. If the previous producer left a transaction ongoing, it is
        fenced and aborted, and the caller gets ConcurrentTransactionsError (retriable)
        until its markers are written; likewise while a decided end is being completed.

        ``expected`` is the producer id and epoch of a producer initialising again to
        recover from an error (KIP-360; Kafka's clients send it): it is bumped only if it
        is still the id's producer, and a retry of that init gets the same answer; a
        fenced producer gets ProducerFencedError instead of fencing the newer one.
        """
        tid = check_id("transactional_id", transactional_id, InvalidArgumentError)
        timeout_ms = self._check_timeout(timeout_ms)
        self._not_writing(tid)
        self._not_held(tid)
        now = self.clock()
        metadata = self.transactions.get(tid)
        if metadata is None:
            metadata = TransactionMetadata.new(tid, self._new_producer_id(), timeout_ms, now)
        if expected is not None:
            self._check_expected(metadata, ProducerIdAndEpoch(*expected))
        if metadata.state.preparing:
            raise ConcurrentTransactionsError(
                f"transactional id {tid!r}: the previous transaction is "
                f"{metadata.state.name}, its markers are being written; retry shortly")
        if metadata.state is S.ONGOING:
            await self._apply(metadata.fence(now).prepare_end(False, now),
                              pending=S.PREPARE_EPOCH_FENCE)
            raise ConcurrentTransactionsError(
                f"transactional id {tid!r}: the previous producer's transaction was open; it "
                f"is fenced and being aborted; retry shortly")
        if metadata.epoch_exhausted and (expected is None or
                                         expected.producer_epoch == metadata.producer_epoch):
            new = metadata.rotate(self._new_producer_id(), timeout_ms, now,
                                  keep_last_epoch=expected is not None)
        else:
            new = metadata.bump_epoch(timeout_ms, now, None if expected is None
                                      else expected.producer_epoch)
        await self._apply(new)
        logger.info("transactional id %s: producer %d epoch %d", tid, new.producer_id,
                    new.producer_epoch)
        return ProducerIdAndEpoch(new.producer_id, new.producer_epoch)

    @staticmethod
    def _check_expected(metadata: TransactionMetadata, expected: ProducerIdAndEpoch) -> None:
        """A recovering producer's id must be the transactional id's (any, for an id just
        created: its producer may have lost the coordinator's state), or the one before a
        rotation its init caused (a retry: its epoch was the last one)."""
        check_int("expected producer_id", expected.producer_id)
        check_int("expected producer_epoch", expected.producer_epoch, 0, MAX_PRODUCER_EPOCH)
        if (metadata.producer_epoch != NO_PRODUCER_EPOCH
                and expected.producer_id != metadata.producer_id
                and not (expected.producer_id == metadata.previous_producer_id
                         and epoch_exhausted(expected.producer_epoch))):
            raise ProducerFencedError(
                f"transactional id {metadata.transactional_id!r} belongs to producer "
                f"{metadata.producer_id} now, not to producer {expected.producer_id}: that "
                f"one was fenced")

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions: Iterable[TopicPartition]) -> None:
        """Partitions join the producer's transaction (the first begins it), before it
        writes to them."""
        partitions = _partitions(partitions)
        metadata = self._producers(transactional_id, producer_id, producer_epoch)
        self._check_addable(metadata)
        if metadata.state is S.ONGOING and partitions <= metadata.partitions:
            return  # already in: nothing to write
        await self._apply(metadata.add(partitions, (), self.clock()))

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> TopicPartition:
        """A group's offsets join the transaction: its partition of __consumer_offsets, the
        one the group coordinator writes the group's records to. Returns that partition."""
        group_id = check_id("group_id", group_id, InvalidArgumentError)
        metadata = self._producers(transactional_id, producer_id, producer_epoch)
        self._check_addable(metadata)
        tp = TopicPartition(CONSUMER_OFFSETS_TOPIC,
                            GroupCoordinator.partition_for(group_id, self.offsets_partitions))
        if metadata.state is not S.ONGOING or group_id not in metadata.groups:
            await self._apply(metadata.add([tp], [group_id], self.clock()))
        return tp

    def _check_addable(self, metadata: TransactionMetadata) -> None:
        self._not_held(metadata.transactional_id)
        if metadata.state.preparing:
            raise ConcurrentTransactionsError(
                f"transactional id {metadata.transactional_id!r}: its transaction is "
                f"{metadata.state.name}; nothing joins it; retry once it is complete")

    async def end_transaction(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, commit: bool) -> MarkerWork | None:
        """Commit or abort the producer's ongoing transaction: PREPARE_* is written, and the
        markers to write are returned (the host writes them, then calls
        :meth:`markers_done`). A retry of an end already complete returns None; one still
        writing its markers gets ConcurrentTransactionsError."""
        metadata = self._producers(transactional_id, producer_id, producer_epoch)
        self._not_held(transactional_id)
        wanted = "commit" if commit else "abort"
        if metadata.state is S.ONGOING:
            new = await self._apply(metadata.prepare_end(commit, self.clock()))
            return new.marker_work(self.coordinator_epoch)
        done, preparing = ((S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if commit
                           else (S.COMPLETE_ABORT, S.PREPARE_ABORT))
        if metadata.state is done:
            return None
        if metadata.state is preparing:
            raise ConcurrentTransactionsError(
                f"transactional id {transactional_id!r}: the {wanted} is being completed "
                f"(its markers are being written); retry shortly")
        raise InvalidTxnStateError(
            f"transactional id {transactional_id!r}: cannot {wanted}: the transaction is "
            f"{metadata.state.name}" + (" (none was begun)" if metadata.state is S.EMPTY
                                        else ""))

    async def markers_done(self, work: MarkerWork) -> TransactionMetadata:
        """Every marker of ``work`` is written: COMPLETE_* is written."""
        if work.coordinator_epoch != self.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker work of coordinator epoch {work.coordinator_epoch} handed to the "
                f"coordinator of epoch {self.coordinator_epoch}")
        metadata = self._producers(work.transactional_id, work.producer_id,
                                   work.producer_epoch)
        if metadata.state is not (S.PREPARE_COMMIT if work.commit else S.PREPARE_ABORT):
            raise InvalidTxnStateError(
                f"transactional id {work.transactional_id!r} is {metadata.state.name}: the "
                f"{'commit' if work.commit else 'abort'} markers were not awaited")
        return await self._apply(metadata.complete(self.clock()))

    # -- the coordinator's own steps -----------------------------------------------------------

    async def expire(self) -> list[MarkerWork]:
        """Abort every ongoing transaction past its timeout (counted from its start), after
        fencing its producer; returns the markers to write. A write that fails is logged
        and tried again at the next call."""
        now = self.clock()
        out = []
        for metadata in self._current(lambda m: m.state is S.ONGOING
                                      and now > m.start_ms + m.timeout_ms
                                      and m.transactional_id not in self.held):
            tid = metadata.transactional_id
            try:
                out.append(await self._fence_and_abort(metadata, now))
            except RaylogError as e:
                logger.warning("transactional id %s: aborting it at its timeout failed: %r",
                               tid, e)
                continue
            logger.info("transactional id %s: aborted at its timeout of %d ms (producer %d "
                        "fenced at epoch %d)", tid, metadata.timeout_ms, metadata.producer_id,
                        metadata.producer_epoch + 1)
        return out

    def _current(self, wanted: Callable[[TransactionMetadata], bool]
                 ) -> Iterator[TransactionMetadata]:
        """The ids' metadata that is ``wanted`` and not being written, in id order, each
        looked at as it is reached: the caller's writes for earlier ones await, and
        meanwhile an id may move on (its producer ends or restarts it)."""
        for tid in sorted(tid for tid, m in self.transactions.items() if wanted(m)):
            metadata = self.transactions.get(tid)
            if metadata is not None and tid not in self.writing and wanted(metadata):
                yield metadata

    async def _fence_and_abort(self, metadata: TransactionMetadata, now: int) -> MarkerWork:
        new = await self._apply(metadata.fence(now).prepare_end(False, now),
                                pending=S.PREPARE_EPOCH_FENCE)
        return new.marker_work(self.coordinator_epoch)

    async def expire_transactional_ids(self) -> list[str]:
        """Forget the ids with no open transaction unused for ``id_expiration_ms`` (a
        tombstone each); returns them."""
        now = self.clock()
        out = []
        for metadata in self._current(lambda m: not m.state.open
                                      and now - m.update_ms > self.id_expiration_ms
                                      and m.transactional_id not in self.held):
            tid = metadata.transactional_id
            try:
                await self._apply(metadata.dead(now))
            except RaylogError as e:
                logger.warning("transactional id %s: its tombstone failed: %r", tid, e)
                continue
            out.append(tid)
        return out

    async def abort(self, transactional_id: str) -> MarkerWork:
        """An operator's abort of a hanging transaction: its producer is fenced and the
        transaction aborted. One already aborting returns its markers again; one whose
        commit is decided, or no open transaction, is refused with InvalidTxnStateError."""
        metadata = self._known(transactional_id)
        self._not_writing(transactional_id)
        if self.held.get(transactional_id) in self.decisions:
            raise InvalidTxnStateError(
                f"transactional id {transactional_id!r}: its commit is decided (joint commit "
                f"{self.held[transactional_id]!r}) and is being completed; it cannot be "
                f"aborted")
        self._not_held(transactional_id)
        if metadata.state is S.PREPARE_ABORT:
            return metadata.marker_work(self.coordinator_epoch)
        if metadata.state is not S.ONGOING:
            raise InvalidTxnStateError(
                f"transactional id {transactional_id!r} is {metadata.state.name}: "
                + ("its commit is decided and is being completed; it cannot be aborted"
                   if metadata.state is S.PREPARE_COMMIT else "no transaction is open"))
        return await self._fence_and_abort(metadata, self.clock())

    # -- what others read ----------------------------------------------------------------------

    def pending_markers(self) -> list[MarkerWork]:
        """The markers of every transaction whose end is decided and not complete (after a
        load, or a fence by :meth:`init_producer_id`): the host's marker writer's work."""
        return [self.transactions[tid].marker_work(self.coordinator_epoch)
                for tid in sorted(tid for tid, m in self.transactions.items()
                                  if m.state.preparing and tid not in self.writing)]

    def _known(self, transactional_id: str) -> TransactionMetadata:
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            raise TransactionalIdNotFoundError(
                f"no transactional id {short_repr(transactional_id)} at this coordinator")
        return metadata

    def describe(self, transactional_id: str) -> dict[str, Any]:
        """A transactional id's state, producer, partitions and age (``raylog transactions
        describe``); TransactionalIdNotFoundError when unknown."""
        out = self._known(transactional_id).describe(self.clock())
        out["writing"] = self.writing[transactional_id].name \
            if transactional_id in self.writing else None
        out["joint_commit"] = self.held.get(transactional_id)
        out["coordinator_epoch"] = self.coordinator_epoch
        return out

    def list_transactions(self, states: Iterable[str] | None = None,
                          min_age_ms: int = 0) -> list[dict[str, Any]]:
        """The transactional ids (``raylog transactions list``), those in ``states``
        (names such as ``ONGOING``) and, when ``min_age_ms`` > 0, only open transactions at
        least that old (a hanging one)."""
        wanted = _states(states)
        now = self.clock()
        return [m.describe(now) for _, m in sorted(self.transactions.items())
                if m.state in wanted
                and (min_age_ms <= 0 or (m.state.open and now - m.start_ms >= min_age_ms))]


def _partitions(partitions: Iterable[TopicPartition]) -> frozenset[TopicPartition]:
    out = []
    for tp in partitions:
        if (not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str)
                or not tp[0] or type(tp[1]) is not int or tp[1] < 0):
            raise InvalidArgumentError(f"not a topic partition: {short_repr(tp)}")
        out.append(TopicPartition(*tp))
    if not out:
        raise InvalidArgumentError("add_partitions needs at least one partition")
    return frozenset(out)


def _states(names: Iterable[str] | None) -> frozenset[TransactionState]:
    if names is None:
        return frozenset(TransactionState)
    try:
        return frozenset(TransactionState[n.upper()] for n in names)
    except (KeyError, AttributeError) as e:
        raise InvalidArgumentError(
            f"unknown transaction state in {short_repr(names)}; the states are "
            f"{[s.name for s in TransactionState]}") from e
