"""One transactional id's state: the states, the legal transitions, and the metadata.

A :class:`TransactionMetadata` is immutable. Each step of a transaction (a producer's init,
a partition added, the end asked for, the markers written) is a method that returns the
metadata as it will be after the step, or raises :class:`InvalidTxnStateError` when the
transition is not in :data:`TRANSITIONS`; the metadata it was called on never changes. The
coordinator writes the new metadata to ``__transaction_state`` and only then keeps it, so
memory never holds a state the log does not.

The model is Kafka's (its ``TransactionMetadata`` and ``TransactionState``), with its first
transaction protocol: the producer's epoch changes only when it initialises, or when the
coordinator fences it (at the transaction's timeout, or for a new incarnation, or by an
operator), never at each commit. docs/transactions.md draws the transitions.

A :class:`JointCommit` is the coordinator's decision to commit several ids' ongoing
transactions together (all or none): raylog's own, in the spirit of KIP-939's prepared
state; its record in ``__transaction_state`` is the commit point of them all.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from typing import Any, NamedTuple

from raylog.errors import InvalidTxnStateError, ProducerFencedError
from raylog.records.header import MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from raylog.types import TopicPartition


class TransactionState(enum.Enum):
    EMPTY = "Empty"                # initialised, no transaction open
    ONGOING = "Ongoing"            # partitions (or a group's offsets) were added
    PREPARE_COMMIT = "PrepareCommit"  # commit decided: markers being written
    PREPARE_ABORT = "PrepareAbort"    # abort decided: markers being written
    COMPLETE_COMMIT = "CompleteCommit"  # every partition has its commit marker
    COMPLETE_ABORT = "CompleteAbort"    # every partition has its abort marker
    # The coordinator bumped the epoch to fence the producer of an ongoing transaction and is
    # about to abort it: never written, a step on the way to PREPARE_ABORT.
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    DEAD = "Dead"                  # the id expired; its tombstone is being written

    @property
    def preparing(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def open(self) -> bool:
        """A transaction was begun and is not complete yet."""
        return self in (TransactionState.ONGOING, TransactionState.PREPARE_COMMIT,
                        TransactionState.PREPARE_ABORT, TransactionState.PREPARE_EPOCH_FENCE)


S = TransactionState

# The legal transitions: from each state, the states it may go to (Kafka's rules).
TRANSITIONS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.ONGOING: frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE}),
    S.PREPARE_COMMIT: frozenset({S.COMPLETE_COMMIT}),
    S.PREPARE_ABORT: frozenset({S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.COMPLETE_ABORT: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset(),
}

# The states a record of __transaction_state holds (the other two are never written).
PERSISTED = frozenset(TransactionState) - {S.PREPARE_EPOCH_FENCE, S.DEAD}


def epoch_exhausted(epoch: int) -> bool:
    """No epoch after this one may be handed to a producer: the coordinator keeps the last
    one (MAX_PRODUCER_EPOCH) for itself, so it can always fence the producer once more."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


class MarkerWork(NamedTuple):
    """What the host must write for a transaction whose end is decided: a commit (or abort)
    marker of ``producer_id`` at ``producer_epoch`` to each of ``partitions``, stamped with
    ``coordinator_epoch`` so that a partition refuses markers from an older coordinator.
    Handed back to :meth:`TransactionCoordinator.markers_done` when all are written."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    coordinator_epoch: int


class Member(NamedTuple):
    """One transaction of a joint commit: the id, and the producer whose ongoing
    transaction commits (its id and epoch, as the producer got them at init)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class MemberStatus(enum.Enum):
    PREPARE = "prepare"   # still ONGOING: its PREPARE_COMMIT is to be written
    MARKERS = "markers"   # PREPARE_COMMIT: its markers are being written
    DONE = "done"         # COMPLETE_COMMIT
    # Not the decided transaction any more (another producer or epoch, aborted, or gone):
    # impossible while the decision holds its members, unless the decision's record reached
    # the log after a coordinator that never knew of it moved a member on. Such a decision
    # governs nothing: it is retracted, and commits none of its members.
    LOST = "lost"


@dataclasses.dataclass(frozen=True)
class JointCommit:
    """The decision to commit the ongoing transactions of ``members`` together, named by
    ``write_id`` (the key of its record). Once its record is durable every member commits,
    whatever fails after: the coordinator writes each member's PREPARE_COMMIT, then its
    markers, then COMPLETE_COMMIT, and a coordinator that replays the record finishes what
    is left. Its record is removed (a tombstone) only once every member is DONE.

    While the decision exists, its members take no other step (no abort, no timeout, no new
    transaction, no new incarnation): so a member ONGOING at the member's producer id and
    epoch is always the transaction that was decided."""

    write_id: str
    members: tuple[Member, ...]
    decided_ms: int

    def status(self, member: Member, metadata: TransactionMetadata | None) -> MemberStatus:
        """Where ``member`` is, given its id's current ``metadata``."""
        if (metadata is None or metadata.producer_id != member.producer_id
                or metadata.producer_epoch != member.producer_epoch):
            return MemberStatus.LOST
        return _MEMBER_STATUS.get(metadata.state, MemberStatus.LOST)

    def statuses(self, transactions: dict[str, TransactionMetadata]) -> set[MemberStatus]:
        """The statuses its members are in (all DONE: the decision's record may go)."""
        return {self.status(m, transactions.get(m.transactional_id)) for m in self.members}


_MEMBER_STATUS = {S.ONGOING: MemberStatus.PREPARE, S.PREPARE_COMMIT: MemberStatus.MARKERS,
                  S.COMPLETE_COMMIT: MemberStatus.DONE}


@dataclasses.dataclass(frozen=True)
class TransactionMetadata:
    """A transactional id's producer and its current transaction.

    Invariants: ``partitions`` and ``groups`` are empty unless the state is open;
    ``start_ms`` is the time the transaction's first partition was added (-1 before), kept
    through PREPARE_* and COMPLETE_*; ``producer_epoch`` is -1 only before the first init.
    ``groups`` are the consumer groups whose offsets are in the transaction (their
    ``__consumer_offsets`` partitions are among ``partitions``). ``previous_producer_id``
    is the producer id before the last init (another one after the epochs ran out), and
    ``last_producer_epoch`` the epoch before it when a recovering producer asked for it
    (-1 otherwise): a retry of that init is answered the same (KIP-360).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition] = frozenset()
    groups: frozenset[str] = frozenset()
    start_ms: int = -1
    update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int
            ) -> TransactionMetadata:
        """A transactional id never seen: EMPTY with no epoch yet (never written as such:
        the first record written for it is after :meth:`bump_epoch`)."""
        return cls(transactional_id, producer_id, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH,
                   timeout_ms, S.EMPTY, update_ms=now_ms)

    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    def _to(self, state: TransactionState, now_ms: int, **changes: Any) -> TransactionMetadata:
        if state not in TRANSITIONS[self.state]:
            raise InvalidTxnStateError(
                f"transactional id {self.transactional_id!r} (producer {self.producer_id} "
                f"epoch {self.producer_epoch}) cannot go from {self.state.name} to "
                f"{state.name}")
        return dataclasses.replace(self, state=state, update_ms=now_ms, **changes)

    # -- the steps -----------------------------------------------------------------------------

    def bump_epoch(self, timeout_ms: int, now_ms: int, expected_epoch: int | None = None
                   ) -> TransactionMetadata:
        """A producer initialised: the next epoch, which fences every older incarnation.
        Only without an open transaction (an open one is fenced and aborted first).

        ``expected_epoch`` is the epoch of a producer that initialises again to recover
        (KIP-360): it must be the current epoch (the id's last epoch is then kept as
        ``last_producer_epoch``), or the last one (a retry of that init, whose answer was
        lost: the epoch stays); any other is a fenced producer's (ProducerFencedError).
        Without it, ``last_producer_epoch`` is cleared: no older producer may recover.
        """
        epoch, last = self.producer_epoch + 1, NO_PRODUCER_EPOCH
        if expected_epoch is not None:
            if self.producer_epoch in (NO_PRODUCER_EPOCH, expected_epoch):
                last = self.producer_epoch
            elif expected_epoch == self.last_producer_epoch:
                epoch, last = self.producer_epoch, self.last_producer_epoch
            else:
                raise ProducerFencedError(
                    f"transactional id {self.transactional_id!r}: producer "
                    f"{self.producer_id} epoch {expected_epoch} was fenced; the id is at "
                    f"epoch {self.producer_epoch}")
        if epoch != self.producer_epoch and self.epoch_exhausted:
            raise InvalidTxnStateError(
                f"transactional id {self.transactional_id!r}: producer {self.producer_id} "
                f"has used its last epoch ({self.producer_epoch}); it takes a new producer id")
        return self._to(S.EMPTY, now_ms, producer_epoch=epoch, last_producer_epoch=last,
                        previous_producer_id=self.producer_id, timeout_ms=timeout_ms,
                        partitions=frozenset(), groups=frozenset(), start_ms=-1)

    def rotate(self, producer_id: int, timeout_ms: int, now_ms: int,
               keep_last_epoch: bool = False) -> TransactionMetadata:
        """A producer initialised after the epochs ran out: a new producer id, epoch 0. The
        old id becomes ``previous_producer_id``; with ``keep_last_epoch`` (a recovering
        producer's init) its epoch is kept as ``last_producer_epoch``, so that a retry of
        this init gets the same answer."""
        if producer_id == self.producer_id:
            raise InvalidTxnStateError(
                f"transactional id {self.transactional_id!r}: a new producer id must differ "
                f"from {self.producer_id}")
        return self._to(S.EMPTY, now_ms, producer_id=producer_id, producer_epoch=0,
                        last_producer_epoch=self.producer_epoch if keep_last_epoch
                        else NO_PRODUCER_EPOCH,
                        previous_producer_id=self.producer_id, timeout_ms=timeout_ms,
                        partitions=frozenset(), groups=frozenset(), start_ms=-1)

    def add(self, partitions: Iterable[TopicPartition], groups: Iterable[str], now_ms: int
            ) -> TransactionMetadata:
        """Partitions (and groups' offsets) join the transaction; the first begins it."""
        begins = not self.state.open
        return self._to(S.ONGOING, now_ms,
                        partitions=self.partitions | frozenset(partitions),
                        groups=self.groups | frozenset(groups),
                        start_ms=now_ms if begins else self.start_ms)

    def prepare_end(self, commit: bool, now_ms: int) -> TransactionMetadata:
        """The end is decided: PREPARE_COMMIT or PREPARE_ABORT (from ONGOING, or an abort
        from PREPARE_EPOCH_FENCE)."""
        return self._to(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms)

    def fence(self, now_ms: int) -> TransactionMetadata:
        """The coordinator takes an ongoing transaction from its producer (a new
        incarnation, the timeout, an operator): the next epoch, which the producer was never
        given, so whatever it sends now is refused. An abort follows (:meth:`prepare_end`)."""
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise InvalidTxnStateError(
                f"transactional id {self.transactional_id!r}: producer {self.producer_id} is "
                f"at epoch {self.producer_epoch}, which cannot be bumped")
        return self._to(S.PREPARE_EPOCH_FENCE, now_ms, producer_epoch=self.producer_epoch + 1,
                        last_producer_epoch=NO_PRODUCER_EPOCH)

    def complete(self, now_ms: int) -> TransactionMetadata:
        """Every marker is written: COMPLETE_COMMIT or COMPLETE_ABORT, nothing open."""
        done = {S.PREPARE_COMMIT: S.COMPLETE_COMMIT, S.PREPARE_ABORT: S.COMPLETE_ABORT}
        if self.state not in done:
            raise InvalidTxnStateError(
                f"transactional id {self.transactional_id!r} is {self.state.name}: no markers "
                f"are being written, so none can be done")
        return self._to(done[self.state], now_ms, partitions=frozenset(), groups=frozenset())

    def dead(self, now_ms: int) -> TransactionMetadata:
        """The id expired (no transaction open, unused for the expiration time)."""
        return self._to(S.DEAD, now_ms)

    # -- what others read ----------------------------------------------------------------------

    def marker_work(self, coordinator_epoch: int) -> MarkerWork:
        """The markers still to write, once the end is decided (PREPARE_*)."""
        if not self.state.preparing:
            raise InvalidTxnStateError(
                f"transactional id {self.transactional_id!r} is {self.state.name}: no "
                f"markers are to be written")
        return MarkerWork(self.transactional_id, self.producer_id, self.producer_epoch,
                          self.state is S.PREPARE_COMMIT, tuple(sorted(self.partitions)),
                          coordinator_epoch)

    def describe(self, now_ms: int) -> dict[str, Any]:
        """What ``raylog transactions describe`` shows."""
        return {
            "transactional_id": self.transactional_id,
            "state": self.state.name,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "previous_producer_id": self.previous_producer_id,
            "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms,
            "partitions": [f"{tp.topic}:{tp.partition}" for tp in sorted(self.partitions)],
            "groups": sorted(self.groups),
            "start_ms": self.start_ms,
            "age_ms": now_ms - self.start_ms if self.state.open else None,
            "update_ms": self.update_ms,
        }
