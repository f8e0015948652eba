"""How the controller changes a partition's leader and ISR (Kafka's KRaft rules).

Each function takes a partition's current :class:`PartitionState` and what the controller
knows, and returns the :class:`Change` to persist (as a ``partition_changed`` event), or None
when nothing changes. Plain Python, no Ray; the controller persists, applies and tells the
replicas.

- **A broker goes** (its process died, its node is gone, or it restarted and lost its
  in-memory state): it leaves the ISR of every partition it replicates, unless it is the
  last member, which stays so that it can lead again cleanly when it is back (the ISR is
  never empty). If it led, the first ISR member in replica order that is alive leads, with a
  new leader epoch; with none, the partition has no leader (leader None, new epoch) until a
  member comes back, or, with ``unclean.leader.election.enable``, the first live replica
  leads and is the whole ISR (records only the old ISR had are lost: that is what unclean
  means).
- **A broker comes back**: a partition without a leader gets one if a member of its ISR is
  alive now (or any live replica, unclean). It does not rejoin any ISR here: its leader adds
  it once it has caught up (:func:`alter_isr`).
- **A leader changes its ISR** (:func:`alter_isr`, Kafka's AlterPartition): refused unless it
  is the current leader at the current leader epoch and partition epoch, the new ISR holds
  the leader and only replicas, and every member it adds is alive and caught up in the
  process its broker runs now (the broker epoch the leader saw it fetch at is the broker's
  current one, KIP-903). A request based on an older partition epoch whose ISR the
  partition already has is a repeat of one that was made (its answer was lost): it
  succeeds, changing nothing, so the leader learns the state it led to.
- **Preferred leader** (:func:`preferred_leader`): the first replica leads, if it is alive,
  in the ISR and not leading already.

The leader epoch grows at every change of leader (to None included), the partition epoch
at every change (the event's application bumps it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from raylog.errors import (
    FencedEpochError,
    IneligibleReplicaError,
    InvalidArgumentError,
    StaleIsrChangeError,
)
from raylog.metadata.state import PartitionState


@dataclasses.dataclass(frozen=True)
class Change:
    """The new leader, leader epoch and ISR of a partition (and replicas, if they change)."""

    leader: int | None
    leader_epoch: int
    isr: list[int]
    replicas: list[int] | None = None
    unclean: bool = False  # the leader was chosen outside the ISR


def choose_leader(replicas: Sequence[int], isr: Collection[int], live: Collection[int],
                  unclean: bool) -> tuple[int | None, bool]:
    """(the replica to lead, whether it is outside the ISR): the first ISR member in replica
    order that is alive; failing that, with ``unclean``, the first live replica."""
    for broker in replicas:
        if broker in isr and broker in live:
            return broker, False
    if unclean:
        for broker in replicas:
            if broker in live:
                return broker, True
    return None, False


def broker_down(p: PartitionState, broker: int, live: Collection[int],
                unclean: bool) -> Change | None:
    """``broker`` is gone (``live`` no longer holds it)."""
    if broker not in p.replicas:
        return None
    isr = [b for b in p.isr if b != broker] or list(p.isr)
    if p.leader != broker:
        return None if isr == p.isr else Change(p.leader, p.leader_epoch, isr)
    leader, outside = choose_leader(p.replicas, isr, set(live) - {broker}, unclean)
    if outside:
        isr = [leader]
    return Change(leader, p.leader_epoch + 1, isr, unclean=outside)


def broker_up(p: PartitionState, broker: int, live: Collection[int],
              unclean: bool) -> Change | None:
    """``broker`` is alive (``live`` holds it): a partition without a leader may get one."""
    if broker not in p.replicas:
        return None
    return leaderless(p, live, unclean)


def leaderless(p: PartitionState, live: Collection[int], unclean: bool) -> Change | None:
    """A leader for ``p`` if it has none and a candidate is alive."""
    if p.leader is not None:
        return None
    leader, outside = choose_leader(p.replicas, p.isr, live, unclean)
    if leader is None:
        return None
    return Change(leader, p.leader_epoch + 1, [leader] if outside else list(p.isr),
                  unclean=outside)


def alter_isr(p: PartitionState, leader: int, leader_epoch: int, partition_epoch: int,
              isr: Sequence[int], live: Collection[int], *, member_epochs: Mapping[int, int],
              broker_epochs: Mapping[int, int]) -> Change:
    """The leader ``leader`` at ``leader_epoch``, having seen ``partition_epoch``, asks for
    ``isr``, whose joining members it saw fetch at the broker epochs ``member_epochs``;
    ``broker_epochs`` are the current ones of the live brokers (a broker whose new process
    is not recorded yet has none).

    Returns the change to make (none if the ISR is already ``isr``: then the change equals
    the current state). Raises FencedEpochError (not the current leader),
    StaleIsrChangeError (the partition changed since: the leader learns the new state and
    may ask again), InvalidArgumentError (an ISR without the leader, with a non-replica or a
    dead replica added) or IneligibleReplicaError (a member added at a broker epoch that is
    not its broker's current one: it caught up in an earlier process, which may have had
    records this one lost)."""
    if p.leader != leader or p.leader_epoch != leader_epoch:
        raise FencedEpochError(
            f"broker {leader} at leader epoch {leader_epoch} asked for an ISR change, but "
            f"the leader is {p.leader} at epoch {p.leader_epoch}")
    wanted = list(dict.fromkeys(isr))
    if partition_epoch != p.partition_epoch:
        if partition_epoch < p.partition_epoch and set(wanted) == set(p.isr):
            return Change(p.leader, p.leader_epoch, list(p.isr))  # made already
        raise StaleIsrChangeError(
            f"ISR change based on partition epoch {partition_epoch}, which is now "
            f"{p.partition_epoch}")
    if leader not in wanted or not set(wanted) <= set(p.replicas):
        raise InvalidArgumentError(
            f"an ISR must hold the leader {leader} and only replicas {p.replicas}, got "
            f"{list(isr)}")
    joining = set(wanted) - set(p.isr)
    dead = sorted(joining - set(live))
    if dead:
        raise InvalidArgumentError(f"brokers {dead} cannot join the ISR: they are not alive")
    stale = {b: member_epochs.get(b) for b in sorted(joining)
             if member_epochs.get(b) is None or member_epochs.get(b) != broker_epochs.get(b)}
    if stale:
        raise IneligibleReplicaError("; ".join(
            f"broker {b} cannot join the ISR: it caught up at broker epoch {epoch}, and its "
            f"current one is {broker_epochs.get(b)}" for b, epoch in stale.items()))
    ordered = [b for b in p.replicas if b in wanted]  # stored in replica order
    return Change(leader, leader_epoch, ordered)


def preferred_leader(p: PartitionState, live: Collection[int]) -> Change | None:
    """Move leadership to the first replica if it is alive and in the ISR."""
    preferred = p.replicas[0]
    if p.leader == preferred or preferred not in p.isr or preferred not in live:
        return None
    return Change(preferred, p.leader_epoch + 1, list(p.isr))


def reassign(p: PartitionState, target: Sequence[int], live: Collection[int]
             ) -> Change | None:
    """One step of moving ``p`` to the replicas ``target`` (Kafka's reassignment):

    1. add the target replicas it lacks (they start as followers outside the ISR);
    2. once every target replica is in the ISR: if the leader is not a target, the first
       target in the ISR that is alive leads (new epoch);
    3. then drop the replicas that are not targets from the replicas and the ISR.

    None when nothing can happen yet (new replicas still catching up) or the partition is
    already on ``target``."""
    target = list(target)
    if p.replicas == target:
        return None
    missing = [b for b in target if b not in p.replicas]
    if missing:
        return Change(p.leader, p.leader_epoch, list(p.isr), replicas=[*p.replicas, *missing])
    if not set(target) <= set(p.isr):
        return None  # wait for the new replicas to catch up and join the ISR
    if p.leader not in target:
        leader, _ = choose_leader(target, p.isr, live, unclean=False)
        if leader is None:
            return None
        return Change(leader, p.leader_epoch + 1, list(p.isr))
    return Change(p.leader, p.leader_epoch, [b for b in target if b in p.isr],
                  replicas=target)
