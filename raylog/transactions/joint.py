"""Joint commits: several transactional ids' ongoing transactions committed all or none, by
one decision record in ``__transaction_state`` (raylog's own, in the spirit of KIP-939's
prepared state; docs/transactions.md, "Joint commits").

:meth:`JointCommits.commit_jointly` checks every member (ONGOING at its producer id and
epoch, else the whole is refused and nothing changes), writes the decision
(:class:`JointCommit`) naming them all, which is the commit point, then moves each member to
PREPARE_COMMIT; the host writes their markers and completes each as for an end. Its members
are held meanwhile (no abort, timeout, new transaction or new incarnation): from the moment
its write begins until its record is removed once all committed, or retracted (a tombstone)
when its write failed and it may or may not be in the log. :meth:`finish_decisions`, the
host's periodic step, finishes what is left, also what a replayed log holds.

A part of :class:`raylog.transactions.coordinator.TransactionCoordinator` (its base class),
over the coordinator's state and steps; one event loop, as the coordinator.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from raylog.errors import (
    ConcurrentTransactionsError,
    InvalidArgumentError,
    InvalidTxnStateError,
    RaylogError,
)
from raylog.transactions.log import (
    Record,
    decision_tombstone,
    encode_decision,
    partition_for,
)
from raylog.transactions.state import (
    JointCommit,
    MarkerWork,
    Member,
    MemberStatus,
    TransactionMetadata,
    TransactionState,
)
from raylog.util import faults
from raylog.util.arguments import check_id, short_repr

logger = logging.getLogger(__name__)

S = TransactionState


class JointCommits:
    """The joint commits of a coordinator: ``decisions`` (durable, until every member
    committed), ``in_doubt`` (their write failed: their record may be in the log, until
    retracted), ``deciding`` (write ids whose record is being written) and ``held`` (each
    member's transactional id, with the write id holding it)."""

    # The coordinator's, which these steps use.
    transactions: dict[str, TransactionMetadata]
    writing: dict[str, TransactionState]
    coordinator_epoch: int
    state_partitions: int
    clock: Callable[[], int]
    _write: Callable[[int, Record], Awaitable[None]]
    _apply: Callable[[TransactionMetadata], Awaitable[TransactionMetadata]]
    _producers: Callable[[str, int, int], TransactionMetadata]

    def _start_joint_commits(self, decisions: Mapping[str, JointCommit] | None) -> None:
        """Empty, or holding the members of the ``decisions`` a load found."""
        self.decisions: dict[str, JointCommit] = {}
        self.in_doubt: dict[str, JointCommit] = {}
        self.deciding: set[str] = set()
        self.held: dict[str, str] = {}
        for decision in (decisions or {}).values():
            self._decided(decision)

    def _not_held(self, tid: str) -> None:
        """Refuses every step of an id a joint commit holds, but that commit's own."""
        if tid in self.held:
            raise ConcurrentTransactionsError(
                f"transactional id {tid!r} is in the joint commit {self.held[tid]!r}, which "
                f"is being decided or completed; retry shortly")

    async def commit_jointly(self, write_id: str, members: Iterable[Member]
                             ) -> list[MarkerWork]:
        """Commit the ongoing transactions of ``members`` (transactional id, producer id,
        epoch) all, or none. Every member must be ONGOING at that producer id and epoch,
        else the whole is refused with the member's error (ProducerFencedError,
        InvalidProducerIdMappingError, InvalidTxnStateError, ConcurrentTransactionsError)
        and nothing changes. Then one record, the decision naming them all, is written to
        ``__transaction_state``: that write is the commit point. Then each member's
        PREPARE_COMMIT is written; returns the markers to write (the host writes them and
        calls :meth:`markers_done`, as for an end). A member whose PREPARE_COMMIT fails is
        left to :meth:`finish_decisions`: the answer is still the commit.

        A write of the decision that raised leaves it in doubt (its record may land): its
        members stay held until it is retracted by :meth:`finish_decisions`, or decided by a
        retry of this call with the same ``write_id`` and members, which is also how a
        retry of a call that did decide is answered. A retry once every member committed
        answers [] (the members' producers must begin no other transaction meanwhile).
        """
        write_id = check_id("write_id", write_id, InvalidArgumentError)
        members = _members(members)
        if write_id in self.deciding:
            raise ConcurrentTransactionsError(
                f"joint commit {write_id!r} is being written; retry shortly")
        known = self.decisions.get(write_id) or self.in_doubt.get(write_id)
        if known is not None and set(known.members) != set(members):
            raise InvalidArgumentError(
                f"joint commit {write_id!r} was asked for members "
                f"{sorted(known.members)}, not {sorted(members)}")
        if write_id in self.decisions:
            if MemberStatus.LOST in known.statuses(self.transactions):
                raise InvalidTxnStateError(
                    f"joint commit {write_id!r} commits nothing: a member is not the "
                    f"transaction decided any more (it is being retracted)")
            return await self._finish(known)
        current = [self._producers(*m) for m in members]
        if known is None and all(m.state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
                                 for m in current):
            return []  # a retry of a joint commit done (or of ends that committed each)
        for metadata in current:
            tid = metadata.transactional_id
            if self.held.get(tid, write_id) != write_id:
                self._not_held(tid)
            if metadata.state is not S.ONGOING:
                raise InvalidTxnStateError(
                    f"joint commit {write_id!r}: transactional id {tid!r} is "
                    f"{metadata.state.name}, not ONGOING: nothing was committed")
        decision = JointCommit(write_id, members, self.clock())
        await self._write_decision(decision)
        # (a fault test kills the coordinator's host here: decided, no member prepared)
        faults.point("transactions.joint_commit_decided")
        logger.info("joint commit %s decided: %s", write_id,
                    [m.transactional_id for m in members])
        return await self._finish(decision)

    async def _write_decision(self, decision: JointCommit) -> None:
        """The commit point. Its members are held from now on: if the write raised, its
        record may still land, so they stay held (in doubt) until it is retracted."""
        write_id = decision.write_id
        tids = [m.transactional_id for m in decision.members]
        self.deciding.add(write_id)
        for tid in tids:
            self.held[tid] = write_id
            self.writing[tid] = S.PREPARE_COMMIT
        try:
            await self._write(partition_for(write_id, self.state_partitions),
                              encode_decision(decision))
        except BaseException:
            self.in_doubt[write_id] = decision
            raise
        finally:
            self.deciding.discard(write_id)
            for tid in tids:
                del self.writing[tid]
        self.in_doubt.pop(write_id, None)
        self._decided(decision)

    def _decided(self, decision: JointCommit) -> None:
        self.decisions[decision.write_id] = decision
        for m in decision.members:
            self.held[m.transactional_id] = decision.write_id

    async def _finish(self, decision: JointCommit) -> list[MarkerWork]:
        """Each member of a decided joint commit still ONGOING is moved to PREPARE_COMMIT
        (one that fails is tried again at the next call); returns the markers of every
        member whose commit is prepared. Nothing for a decision with a LOST member."""
        if MemberStatus.LOST in decision.statuses(self.transactions):
            return []
        out = []
        for member in decision.members:
            tid = member.transactional_id
            metadata = self.transactions.get(tid)
            status = decision.status(member, metadata)
            if status is MemberStatus.PREPARE and tid not in self.writing:
                try:
                    metadata = await self._apply(metadata.prepare_end(True, self.clock()))
                except RaylogError as e:
                    logger.warning("joint commit %s: the commit of %s is decided, its "
                                   "PREPARE_COMMIT failed (tried again): %r",
                                   decision.write_id, tid, e)
                    continue
                status = MemberStatus.MARKERS
            if status is MemberStatus.MARKERS:
                out.append(metadata.marker_work(self.coordinator_epoch))
        return out

    async def finish_decisions(self) -> list[MarkerWork]:
        """The coordinator's periodic step for joint commits: retract those in doubt (their
        members are free again), move the members of decided ones to PREPARE_COMMIT, and
        remove the record of those whose members all committed. Returns the markers to
        write. After a load this finishes every decision the log holds."""
        out = []
        for write_id in sorted(self.in_doubt):
            if write_id not in self.deciding:
                await self._remove(self.in_doubt[write_id], "retracted")
        for write_id in sorted(self.decisions):
            decision = self.decisions.get(write_id)
            if decision is None or write_id in self.deciding:
                continue
            statuses = decision.statuses(self.transactions)
            if statuses == {MemberStatus.DONE}:
                await self._remove(decision, "complete")
            elif MemberStatus.LOST in statuses:
                logger.error("joint commit %s: a member is not the transaction decided any "
                             "more (%s); the decision is retracted, its ongoing members "
                             "abort at their timeout", write_id,
                             {m.transactional_id: self.transactions.get(m.transactional_id)
                              for m in decision.members})
                await self._remove(decision, "retracted")
            else:
                out.extend(await self._finish(decision))
        return out

    async def _remove(self, decision: JointCommit, why: str) -> None:
        """The decision's tombstone; once durable, its members are free. A failure is
        logged and tried again at the next call."""
        write_id = decision.write_id
        self.deciding.add(write_id)
        try:
            await self._write(partition_for(write_id, self.state_partitions),
                              decision_tombstone(write_id))
        except RaylogError as e:
            logger.warning("joint commit %s: its tombstone (%s) failed: %r", write_id, why, e)
            return
        finally:
            self.deciding.discard(write_id)
        self.decisions.pop(write_id, None)
        self.in_doubt.pop(write_id, None)
        for m in decision.members:
            if self.held.get(m.transactional_id) == write_id:
                del self.held[m.transactional_id]
        logger.info("joint commit %s %s", write_id, why)


def _members(members: Iterable[Member]) -> tuple[Member, ...]:
    out = []
    for m in members:
        if (not isinstance(m, tuple) or len(m) != 3 or type(m[1]) is not int
                or type(m[2]) is not int):
            raise InvalidArgumentError(f"not a (transactional id, producer id, epoch): "
                                       f"{short_repr(m)}")
        out.append(Member(check_id("transactional_id", m[0], InvalidArgumentError), m[1], m[2]))
    if not out:
        raise InvalidArgumentError("a joint commit needs at least one transaction")
    if len({m.transactional_id for m in out}) != len(out):
        raise InvalidArgumentError(f"a joint commit names a transactional id twice: "
                                   f"{short_repr([m.transactional_id for m in out])}")
    return tuple(out)
