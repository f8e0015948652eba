"""The controller's transaction service: the Ray side of the transaction coordinator
(raylog/transactions/, docs/transactions.md).

An object the controller holds (``controller.transactions``), serving its ``txn_*`` RPCs,
given the metadata, the leaders and topic creation it needs, not the controller. When the
controller starts (at its first transactional request, or at the first round of its loop if
``__transaction_state`` exists), it replays ``__transaction_state`` into a
:class:`TransactionCoordinator` whose coordinator epoch is a new one, recorded in the
controller's metadata log (``coordinator_started``), so it grows with every controller
process that takes over. Every step of the coordinator is written to the partition's leader
(acks=all) before it counts (raylog/transactions/writer.py), and the markers of every
decided end are written by a :class:`MarkerWriter` to every partition of the transaction
through its leader's ``write_txn_marker`` (actors/serving.py), then completed. A joint
commit (:meth:`TransactionService.txn_commit_jointly`: several ids' transactions by one
decision record) hands its members' markers to the same writer. The controller's loop calls
:meth:`TransactionService.expire_transactions`: transactions past their timeout are aborted,
long-unused ids forgotten, joint commits finished (or retracted), and decided ends whose
markers are not being written (after a load, a fenced init, or a failure) are handed to the
writer again.

Every RPC answers within a deadline: at most LOAD_WAIT_S for the load and WRITE_WAIT_S for
its record. Its event loop is the only user.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ray.exceptions import ActorUnschedulableError, RayActorError

from actors.groups import OFFSETS_TOPIC_CONFIGS, EnsureTopic
from actors.hosting import background
from actors.leader_calls import APPEND_TIMEOUT_MS, Leader, LeaderCalls, Loading
from raylog.errors import ConcurrentTransactionsError, LeaderNotAvailableError
from raylog.metadata import state as events
from raylog.metadata.access import MetadataAccess
from raylog.metadata.topics import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from raylog.records.header import NO_PRODUCER_ID, random_producer_id
from raylog.storage import AppendInfo
from raylog.transactions.coordinator import ProducerIdAndEpoch, TransactionCoordinator
from raylog.transactions.log import TRANSACTION_STATE_PARTITIONS, load
from raylog.transactions.markers import MarkerWriter
from raylog.transactions.state import MarkerWork
from raylog.transactions.writer import StateWriter
from raylog.types import TopicPartition
from raylog.util import faults

logger = logging.getLogger(__name__)

LOAD_WAIT_S = 60.0  # an RPC waits this long for the coordinator to load, then answers retriably
ID_EXPIRY_EVERY_S = 60.0  # how often unused transactional ids are looked for


class TransactionService:
    """Transaction RPCs of the controller over a TransactionCoordinator, its StateWriter and
    its MarkerWriter (replaced together at each load). It reads the topics in ``access``
    (and records its coordinator epoch there), finds leaders with ``leader`` and has
    ``__transaction_state`` created with ``ensure_topic``."""

    def __init__(self, access: MetadataAccess, leader: Leader, ensure_topic: EnsureTopic
                 ) -> None:
        self.access = access
        self.leaders = LeaderCalls(leader)
        self._ensure_topic = ensure_topic
        self.coordinator: TransactionCoordinator | None = None
        self.state: StateWriter | None = None
        self.markers: MarkerWriter | None = None
        self._loading = Loading(
            self._load, f"the transaction coordinator is still loading "
            f"{TRANSACTION_STATE_TOPIC}", LOAD_WAIT_S)
        self._ids_checked = time.monotonic()
        # Told (partition, producer id, producer epoch, commit) of each marker written to a
        # partition of __consumer_offsets: the group service settles the offsets pending
        # there (the controller sets its GroupService's txn_marker_written).
        self.offsets_marker_written: Callable[[int, int, int, bool], None] = \
            lambda partition, producer_id, producer_epoch, commit: None

    @property
    def loaded(self) -> bool:
        return self._loading.done

    async def _ready(self) -> TransactionCoordinator:
        """The coordinator, once loaded; RequestTimeoutError (retriable) if that takes
        longer than LOAD_WAIT_S."""
        await self._loading.wait()
        return self.coordinator

    async def _load(self) -> None:
        """Create __transaction_state if missing, replay it, take a new coordinator epoch,
        and start writing the markers of the ends it finds decided."""
        self._close()
        await self._ensure_topic(TRANSACTION_STATE_TOPIC, TRANSACTION_STATE_PARTITIONS,
                                 OFFSETS_TOPIC_CONFIGS)
        topic = self.access.state.topic(TRANSACTION_STATE_TOPIC)
        records = []
        for p in topic.partitions:  # an id's records are all in one partition, in order
            records.extend((r.key, r.value)
                           for r in await self.leaders.replay(topic.name, p.partition))
        async with self.access.lock:
            self.access.commit(events.coordinator_started())
        epoch = self.access.state.coordinator_epoch
        loaded = load(records)
        self.state = StateWriter(self._append, random_producer_id, background)
        self.coordinator = TransactionCoordinator(
            self.state.write, coordinator_epoch=epoch, transactions=loaded.transactions,
            decisions=loaded.decisions, state_partitions=len(topic.partitions))
        self.markers = MarkerWriter(self._write_marker, self.coordinator.markers_done)
        pending = self.coordinator.pending_markers()
        for work in pending:
            self.markers.submit(work)
        logger.info("loaded %d records of %s: %d transactional ids, %d decided ends to "
                    "complete, %d joint commits to finish; coordinator epoch %d",
                    len(records), TRANSACTION_STATE_TOPIC, len(self.coordinator.transactions),
                    len(pending), len(loaded.decisions), epoch)

    def _close(self) -> None:
        """The previous coordinator's writers stop: the new one replays what they wrote."""
        for part in (self.markers, self.state):
            if part is not None:
                part.close()
        self.coordinator = self.state = self.markers = None

    async def _append(self, partition: int, batch: bytes) -> AppendInfo:
        return await self.leaders.append(TRANSACTION_STATE_TOPIC, partition, batch)

    async def _write_marker(self, tp: TopicPartition, work: MarkerWork) -> None:
        """One try of ``work``'s marker at the leader of ``tp`` (the marker writer tries
        again); a broker Ray cannot reach is a leader not available."""
        def call(handle: Any, leader_epoch: int) -> Any:
            return handle.write_txn_marker.remote(
                tp.topic, tp.partition, work.producer_id, work.producer_epoch, work.commit,
                work.coordinator_epoch, leader_epoch, APPEND_TIMEOUT_MS)
        try:
            await self.leaders.call(tp.topic, tp.partition, call, retry_s=0)
        except (RayActorError, ActorUnschedulableError) as e:  # dead, or its node is gone
            raise LeaderNotAvailableError(f"{tp.topic}-{tp.partition}: its leader is "
                                          f"unreachable: {e}") from e
        if tp.topic == CONSUMER_OFFSETS_TOPIC:
            self.offsets_marker_written(tp.partition, work.producer_id, work.producer_epoch,
                                        work.commit)

    def _hand_over(self, coordinator: TransactionCoordinator) -> None:
        """Every decided end not being written goes to the marker writer."""
        if coordinator is self.coordinator:
            for work in coordinator.pending_markers():
                self.markers.submit(work)

    # -- the producer's steps ----------------------------------------------------------------
    # The controller serves these as its RPCs (``served_by``: their arguments' types are
    # checked first); the coordinator checks their values before it changes anything.

    async def txn_init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                                   producer_id: int = NO_PRODUCER_ID,
                                   producer_epoch: int = -1) -> tuple[int, int]:
        """The (producer id, epoch) of a transactional producer starting; a recovering one
        names its current ``producer_id`` and ``producer_epoch`` (KIP-360). An open
        transaction of an older producer is fenced and aborted first:
        ConcurrentTransactionsError (retriable) until it is."""
        coordinator = await self._ready()
        expected = None if producer_id == NO_PRODUCER_ID else \
            ProducerIdAndEpoch(producer_id, producer_epoch)
        try:
            return tuple(await coordinator.init_producer_id(
                transactional_id, transaction_timeout_ms, expected))
        except ConcurrentTransactionsError:
            self._hand_over(coordinator)  # an older producer's transaction was fenced
            raise

    async def txn_add_partitions(self, transactional_id: str, producer_id: int,
                                 producer_epoch: int, partitions: list[tuple[str, int]]
                                 ) -> None:
        """Partitions join the producer's transaction, before it writes to them
        (UnknownTopicError, UnknownPartitionError for ones that do not exist)."""
        for topic, partition in partitions:
            self.access.state.topic(topic).partition(partition)
        coordinator = await self._ready()
        await coordinator.add_partitions(transactional_id, producer_id, producer_epoch,
                                         [TopicPartition(t, p) for t, p in partitions])

    async def txn_add_offsets(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, group_id: str) -> tuple[str, int]:
        """A group's offsets join the transaction: returns its __consumer_offsets
        partition, where the offsets are then committed."""
        coordinator = await self._ready()
        return tuple(await coordinator.add_offsets(transactional_id, producer_id,
                                                   producer_epoch, group_id))

    async def txn_end(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> None:
        """Commit or abort the producer's transaction: answered once the outcome is durable
        (PREPARE_*); the markers are written after, and until they are, the id's next
        steps get ConcurrentTransactionsError (retriable)."""
        coordinator = await self._ready()
        work = await coordinator.end_transaction(transactional_id, producer_id,
                                                 producer_epoch, commit)
        if work is not None:
            # (a fault test kills the controller here: decided, and no marker written yet)
            faults.point("controller.txn_prepared")
            self.markers.submit(work)

    async def txn_commit_jointly(self, write_id: str,
                                 members: list[tuple[str, int, int]]) -> None:
        """Commit the ongoing transactions of ``members`` (transactional id, producer id,
        producer epoch) all or none: answered once the decision naming them all is durable
        (the commit point), or refused whole with nothing changed; the members' commits and
        markers follow. A retry with the same ``write_id`` is answered alike."""
        coordinator = await self._ready()
        works = await coordinator.commit_jointly(write_id, members)
        if coordinator is self.coordinator:
            for work in works:
                self.markers.submit(work)

    # -- operators ---------------------------------------------------------------------------

    async def txn_list(self, states: list[str] | None = None, min_age_ms: int = 0
                       ) -> list[dict[str, Any]]:
        """The transactional ids, those in ``states`` (``ONGOING``, ...), and with
        ``min_age_ms`` > 0 only open transactions at least that old."""
        coordinator = await self._ready()
        return coordinator.list_transactions(states, min_age_ms)

    async def txn_describe(self, transactional_id: str) -> dict[str, Any]:
        coordinator = await self._ready()
        return coordinator.describe(transactional_id)

    async def txn_abort(self, transactional_id: str) -> dict[str, Any]:
        """An operator's abort of a hanging transaction: its producer fenced, PREPARE_ABORT
        written, its markers being written; returns the id as described then."""
        coordinator = await self._ready()
        self.markers.submit(await coordinator.abort(transactional_id))
        return coordinator.describe(transactional_id)

    # -- the controller's loop ---------------------------------------------------------------

    async def expire_transactions(self) -> None:
        """Abort transactions past their timeout, forget long-unused ids (every
        ID_EXPIRY_EVERY_S), and hand every decided end not being written to the marker
        writer. Loads the coordinator if __transaction_state exists and it is not loaded
        (a restarted controller finishes what its predecessor decided); never creates it."""
        if not self.loaded:
            if TRANSACTION_STATE_TOPIC not in self.access.state.topics:
                return
            await self._ready()
        coordinator = self.coordinator
        for work in [*await coordinator.expire(), *await coordinator.finish_decisions()]:
            if coordinator is self.coordinator:
                self.markers.submit(work)
        if time.monotonic() - self._ids_checked >= ID_EXPIRY_EVERY_S:
            self._ids_checked = time.monotonic()
            expired = await coordinator.expire_transactional_ids()
            if expired:
                logger.info("transactional ids expired: %s", expired)
        self._hand_over(coordinator)
