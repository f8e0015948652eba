"""One consumer group: members, the target assignment, and who owns what right now.

The coordinator computes the assignment itself (as in Kafka's KIP-848 protocol): each change
of membership or subscribed topics bumps the generation and recomputes every member's
*target*. A member is *granted* a target partition only once no other member owns it; a
member told to give a partition up (``revoke``) keeps owning it until a heartbeat reports it
released, after the member's rebalance listener ran (and committed). So a partition never has
two owners, in any generation, and a dead member's partitions are free at once.

Ownership is soft state, and a restarted coordinator has lost it. What it has is the group's
persisted membership (member ids and session timeouts, written with every generation): those
members come back *pending*. A pending member is told to join again (RejoinRequiredError on
heartbeats and commits) and rejoins naming the partitions it owns, which it keeps: owners
are rebuilt from their own claims, as in the cooperative protocol. Until every pending member
has rejoined or its session has run out (counted from the restart, so later than the member
itself notices), nothing is granted to anyone: a partition whose owner has not spoken yet
is never handed to another member.

Two more things hold a grant back, both decided by the coordinator that hosts the group
(coordinator.py) and passed in with the heartbeat: a member is granted nothing before the
group record naming it is durable (``durable_generation``), so a restarted coordinator knows
every member that may own something; and a partition whose committed offset is on its way
to the log (``held``: a commit of its last owner, or the record restoring its offset after a
commit the coordinator fenced) is granted to nobody.

Every change of a partition's owner is stamped with a number from one counter that only
grows (:func:`ownership_mark`), in ``changed_at``: a commit checked at mark ``m`` is still
good when it is applied if none of its partitions changed owner after ``m``.

Plain Python with injected time (``now`` in ms); not safe for concurrent use.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import re
from collections.abc import Container, Iterable, Mapping

from raylog.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    NotPartitionOwnerError,
    RejoinRequiredError,
    UnknownMemberError,
)
from raylog.groups.assignors import ASSIGNORS
from raylog.types import TopicPartition

_marks = itertools.count(1)
MAX_FENCED = 1000  # replaced static member ids remembered per group (then: unknown)


def ownership_mark() -> int:
    """A number above every ownership change so far (of every group of this process)."""
    return next(_marks)


class GroupState(enum.Enum):
    EMPTY = "empty"              # no members
    RECOVERING = "recovering"    # after a restart: members it knew have not rejoined yet
    RECONCILING = "reconciling"  # some member does not own its target yet
    STABLE = "stable"            # every member owns exactly its target


@dataclasses.dataclass(frozen=True)
class PendingMember:
    """A member known from the persisted membership, not yet rejoined since a restart."""

    member_id: str
    client_id: str
    session_timeout_ms: int
    expires_ms: int  # then its session is over, and whatever it owned is free
    kafka: bool = False  # a Kafka client's, through the gateway (classic.py)
    instance_id: str | None = None  # a Kafka static member's group.instance.id


@dataclasses.dataclass
class Member:
    member_id: str
    client_id: str
    topics: frozenset[str]           # the subscription resolved against existing topics
    pattern: str | None              # a regex subscription, re-resolved when topics change
    requested: frozenset[str]        # the topic names asked for (when not a pattern)
    session_timeout_ms: int
    last_seen_ms: int
    actor_id: str | None = None      # set when the member lives in a Ray actor
    kafka: bool = False              # a Kafka client's, through the gateway (classic.py)
    instance_id: str | None = None   # a Kafka static member's group.instance.id (KIP-345)
    generation: int = 0              # the generation this member was last told
    durable_from: int = 0            # the group record naming it from this generation on
    owned: set[TopicPartition] = dataclasses.field(default_factory=set)
    target: set[TopicPartition] = dataclasses.field(default_factory=set)

    def describe(self) -> dict:
        return {"member_id": self.member_id, "client_id": self.client_id,
                "actor_id": self.actor_id, "kafka": self.kafka,
                **({"instance_id": self.instance_id} if self.instance_id else {}),
                "generation": self.generation,
                "topics": sorted(self.topics), "owned": sorted(self.owned),
                "target": sorted(self.target)}


@dataclasses.dataclass(frozen=True)
class Heartbeat:
    """What a member learns from a heartbeat."""

    generation: int
    owned: frozenset[TopicPartition]   # what it owns now, new grants included
    revoke: frozenset[TopicPartition]  # what it must release (after committing)
    pending: bool                      # part of its target is still owned by others


class Group:
    """A consumer group's membership, assignment and ownership (see the module doc)."""

    def __init__(self, group_id: str, assignor: str = "cooperative_sticky",
                 generation: int = 0, pending: Iterable[PendingMember] = ()) -> None:
        if assignor not in ASSIGNORS:
            raise ValueError(f"unknown assignor {assignor!r}; known: {sorted(ASSIGNORS)}")
        self.group_id = group_id
        self.assignor = assignor
        self.generation = generation
        self.members: dict[str, Member] = {}
        self.pending: dict[str, PendingMember] = {p.member_id: p for p in pending}
        self.owner: dict[TopicPartition, str] = {}
        self.changed_at: dict[TopicPartition, int] = {}  # ownership_mark() of the last change
        # Member ids a newer incarnation of their static instance replaced (replace()):
        # old id -> instance id, so the old incarnation is told it is fenced.
        self.fenced: dict[str, str] = {}
        # (generation, member -> owned partitions) after every change of ownership
        self.history: list[tuple[int, dict[str, frozenset[TopicPartition]]]] = []

    @property
    def state(self) -> GroupState:
        if self.pending:
            return GroupState.RECOVERING
        if not self.members:
            return GroupState.EMPTY
        if all(m.owned == m.target for m in self.members.values()):
            return GroupState.STABLE
        return GroupState.RECONCILING

    # -- membership ------------------------------------------------------------------------------

    def join(self, member_id: str, client_id: str, topics: Iterable[str] | None,
             pattern: str | None, session_timeout_ms: int, now: int,
             existing_topics: Mapping[str, int], actor_id: str | None = None,
             claims: Iterable[TopicPartition] = (),
             held: Container[TopicPartition] = frozenset(), kafka: bool = False,
             instance_id: str | None = None) -> Member:
        """Add (or re-subscribe) a member; the assignment is recomputed.

        A pending member (known before a restart) keeps the ``claims`` it names that nobody
        else owns and that are not ``held``; any other joiner's claims are ignored: it owns
        nothing yet, and nothing until a group record naming it is durable.

        ``kafka``: the member is a Kafka client's (the gateway's classic protocol, see
        classic.py). A group is served one way: a member of the other kind is refused with
        InconsistentGroupProtocolError while the group has members (pending ones included).
        ``instance_id``: a Kafka static member's (see :meth:`replace`).
        """
        self.check_kind(member_id, kafka)
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"bad subscription pattern {pattern!r}: {e}") from e
        requested = frozenset(topics or ())
        member = self.members.get(member_id)
        new = member is None
        if new:
            member = Member(member_id, client_id, frozenset(), pattern, requested,
                            session_timeout_ms, now, actor_id, kafka, instance_id)
            self.members[member_id] = member
            pending = self.pending.pop(member_id, None)
            if pending is not None:
                new = False  # named by the durable record it came back from
                member.instance_id = member.instance_id or pending.instance_id
                for tp in sorted(TopicPartition(*tp) for tp in claims):
                    if tp not in self.owner and tp not in held:
                        self._take(tp, member)
        else:
            member.pattern, member.requested = pattern, requested
            member.session_timeout_ms, member.last_seen_ms = session_timeout_ms, now
            if actor_id is not None:
                member.actor_id = actor_id
        member.topics = _resolve(member, existing_topics)
        self._reassign(existing_topics)
        if new:
            member.durable_from = self.generation
        return member

    def instance(self, instance_id: str) -> str | None:
        """The member id the static member ``instance_id`` has now (pending ones too)."""
        return next((m.member_id for m in [*self.members.values(), *self.pending.values()]
                     if m.instance_id == instance_id), None)

    def check_instance(self, instance_id: str, member_id: str) -> str | None:
        """The member id static member ``instance_id`` has now (None: the group has no such
        member); FencedInstanceIdError if ``member_id`` is given and is another one."""
        known = self.instance(instance_id)
        if known is not None and member_id and member_id != known:
            raise FencedInstanceIdError(
                f"group {self.group_id!r}: static member {instance_id!r} has member id "
                f"{known!r}, not {member_id!r}")
        return known

    def replace(self, old_id: str, new_id: str) -> Member | PendingMember:
        """A static member's new incarnation takes its place under ``new_id``: the same
        member (what it owns, its target, its generation), so nothing moves; ``old_id`` is
        fenced from now on (:meth:`member` raises FencedInstanceIdError for it), and any
        commit of it on its way is not applied (the coordinator's ``fenced``)."""
        old = self.members.get(old_id) or self.pending.get(old_id)
        if old is None or old.instance_id is None:
            raise ValueError(f"{old_id!r} is no static member of group {self.group_id!r}")
        if isinstance(old, PendingMember):
            del self.pending[old_id]
            replaced: Member | PendingMember = dataclasses.replace(old, member_id=new_id)
            self.pending[new_id] = replaced
        else:
            del self.members[old_id]
            replaced = self.members[new_id] = dataclasses.replace(
                old, member_id=new_id, owned=set(old.owned), target=set(old.target))
            for tp in sorted(old.owned):
                self.owner[tp] = new_id
                self.changed_at[tp] = ownership_mark()
            self._record()
        self.fenced[old_id] = old.instance_id
        while len(self.fenced) > MAX_FENCED:  # the oldest first
            del self.fenced[next(iter(self.fenced))]
        return replaced

    def check_kind(self, member_id: str, kafka: bool) -> None:
        """Refuse a member of the other kind than the group's other members."""
        others = [m.kafka for m in self.members.values() if m.member_id != member_id] + \
            [p.kafka for p in self.pending.values() if p.member_id != member_id]
        if others and others[0] != kafka:
            theirs, mine = ("Kafka clients", "raylog consumer") if others[0] else \
                ("raylog consumers", "Kafka client")
            raise InconsistentGroupProtocolError(
                f"group {self.group_id!r} has members that are {theirs}; a {mine} cannot "
                f"join it (a group is served either to Kafka clients or to raylog's own "
                f"consumers): use another group id")

    def release(self, member_id: str, partitions: Iterable[TopicPartition]) -> None:
        """The member gave these partitions up (a Kafka member does so before it joins
        again): they are free at once."""
        member = self.member(member_id)
        released = sorted(member.owned & {TopicPartition(*tp) for tp in partitions})
        for tp in released:
            self._free(tp, member)
        if released:
            self._record()

    def reassign(self, existing_topics: Mapping[str, int], assignor: str | None = None
                 ) -> None:
        """A new generation, its targets computed again (with ``assignor`` from now on)."""
        if assignor is not None:
            if assignor not in ASSIGNORS:
                raise ValueError(f"unknown assignor {assignor!r}; known: {sorted(ASSIGNORS)}")
            self.assignor = assignor
        self._reassign(existing_topics)

    def remove(self, member_id: str, existing_topics: Mapping[str, int]) -> bool:
        """A member left, died or timed out: its partitions are free at once."""
        member = self.members.pop(member_id, None) or self.pending.pop(member_id, None)
        if member is None:
            return False
        self._forget_instance(member)
        if isinstance(member, PendingMember):
            self._reassign(existing_topics)
            return True
        for tp in sorted(member.owned):
            self._free(tp, member)
        self._reassign(existing_topics)
        return True

    def _forget_instance(self, member: Member | PendingMember) -> None:
        """A static member is gone: its earlier ids are simply unknown from now on."""
        if member.instance_id is not None:
            self.fenced = {old: i for old, i in self.fenced.items() if i != member.instance_id}

    def credit(self, ms: int, now: int) -> None:
        """Add ``ms`` to every member's session (never past ``now``): the coordinator's host
        did not run for that long, and heartbeats sent meanwhile could not be heard."""
        for member in self.members.values():
            member.last_seen_ms = min(member.last_seen_ms + ms, now)
        for pending in self.pending.values():
            pending.expires_ms += ms

    def expire(self, now: int, existing_topics: Mapping[str, int]) -> list[str]:
        """Remove members whose session timed out, pending ones included; return their ids."""
        expired = [m.member_id for m in self.members.values()
                   if now - m.last_seen_ms > m.session_timeout_ms]
        for member_id in expired:
            self.remove(member_id, existing_topics)
        gone = [p.member_id for p in self.pending.values() if now > p.expires_ms]
        for member_id in gone:
            self._forget_instance(self.pending.pop(member_id))
        if gone:
            self._reassign(existing_topics)  # a new generation, persisted without them
        return expired + gone

    def membership(self) -> dict[str, dict]:
        """What a restarted coordinator needs to know of the members: id -> client id,
        session timeout, and for pending members when their session runs out."""
        out = {m.member_id: {"client_id": m.client_id, "session_timeout_ms":
                             m.session_timeout_ms} for m in self.members.values()}
        out.update({p.member_id: {"client_id": p.client_id, "session_timeout_ms":
                                  p.session_timeout_ms, "expires_ms": p.expires_ms}
                    for p in self.pending.values()})
        for member in [*self.members.values(), *self.pending.values()]:
            if member.kafka:  # (said only when true: records of before read the same)
                out[member.member_id]["kafka"] = True
            if member.instance_id is not None:
                out[member.member_id]["instance_id"] = member.instance_id
        return out

    def topics_changed(self, existing_topics: Mapping[str, int]) -> None:
        """Topics were created, deleted or grew: re-resolve subscriptions and reassign."""
        for member in self.members.values():
            member.topics = _resolve(member, existing_topics)
        gone = [tp for tp in self.owner if tp.partition >= existing_topics.get(tp.topic, 0)]
        for tp in gone:
            self._free(tp, self.members[self.owner[tp]])
        self._reassign(existing_topics)

    def _take(self, tp: TopicPartition, member: Member) -> None:
        self.owner[tp] = member.member_id
        member.owned.add(tp)
        self.changed_at[tp] = ownership_mark()

    def _free(self, tp: TopicPartition, member: Member) -> None:
        member.owned.discard(tp)
        if self.owner.get(tp) == member.member_id:
            del self.owner[tp]
        self.changed_at[tp] = ownership_mark()

    def _reassign(self, existing_topics: Mapping[str, int]) -> None:
        self.generation += 1
        assign = ASSIGNORS[self.assignor]
        subscriptions = {m.member_id: m.topics for m in self.members.values()}
        current = {m.member_id: sorted(m.owned) for m in self.members.values()}
        targets = assign(subscriptions, existing_topics, current) if subscriptions else {}
        for member in self.members.values():
            member.target = set(targets.get(member.member_id, ()))
        self._record()

    def _record(self) -> None:
        snapshot = {m.member_id: frozenset(m.owned) for m in self.members.values()}
        if not self.history or self.history[-1] != (self.generation, snapshot):
            self.history.append((self.generation, snapshot))
        del self.history[:-1000]  # bounded: tests and operators look at recent changes

    # -- heartbeats ------------------------------------------------------------------------------

    def member(self, member_id: str) -> Member:
        try:
            return self.members[member_id]
        except KeyError:
            if member_id in self.fenced:
                raise self.fenced_error(member_id) from None
            if member_id in self.pending:
                raise RejoinRequiredError(
                    f"the coordinator of group {self.group_id!r} restarted: member "
                    f"{member_id!r} must join again with the partitions it owns") from None
            raise UnknownMemberError(
                f"member {member_id!r} is not in group {self.group_id!r} (it left, timed out "
                f"or died); join again") from None

    def fenced_error(self, member_id: str) -> FencedInstanceIdError:
        """What a replaced static member's old id is told (see :meth:`replace`)."""
        return FencedInstanceIdError(
            f"member {member_id!r} of group {self.group_id!r} was replaced by a newer "
            f"incarnation of static member {self.fenced[member_id]!r}")

    def heartbeat(self, member_id: str, owned: Iterable[TopicPartition], now: int,
                  held: Container[TopicPartition] = frozenset(),
                  durable_generation: int | None = None) -> Heartbeat:
        """Record that the member is alive and what it still owns; grant what is free.

        Nothing is granted from ``held``, nor to a member whose joining is not durable yet
        (``durable_from`` above ``durable_generation``; None: everything is durable).
        """
        member = self.member(member_id)
        member.last_seen_ms = now
        reported = {TopicPartition(*tp) for tp in owned}
        changed = False
        for tp in sorted(member.owned - reported):  # released after its listener ran
            self._free(tp, member)
            changed = True
        # While members known before a restart are silent, what they own is unknown: grant
        # nothing until each has rejoined with its claims or its session has run out.
        durable = durable_generation is None or member.durable_from <= durable_generation
        for tp in sorted(member.target - member.owned) if durable and not self.pending else ():
            if tp not in self.owner and tp not in held:
                self._take(tp, member)
                changed = True
        member.generation = self.generation
        if changed:  # every other change of ownership or generation records itself
            self._record()
        return Heartbeat(self.generation, frozenset(member.owned),
                         frozenset(member.owned - member.target),
                         bool(member.target - member.owned) or bool(self.pending))

    # -- commits ---------------------------------------------------------------------------------

    def check_commit(self, member_id: str | None, generation: int,
                     partitions: Iterable[TopicPartition]) -> None:
        """Refuse a commit from a stale generation or for partitions the member does not own.

        ``member_id`` None with generation -1 is a consumer outside group management
        (manual assignment): allowed only while the group has no members.
        """
        if member_id is None:
            if self.members or self.pending:
                raise UnknownMemberError(
                    f"group {self.group_id!r} has active members; a consumer outside it "
                    f"cannot commit its offsets")
            return
        member = self.member(member_id)
        if generation != member.generation:
            raise IllegalGenerationError(
                f"commit for group {self.group_id!r} at generation {generation}; member "
                f"{member_id!r} is at generation {member.generation}")
        foreign = sorted(TopicPartition(*tp) for tp in partitions
                         if TopicPartition(*tp) not in member.owned)
        if foreign:
            raise NotPartitionOwnerError(
                f"member {member_id!r} of group {self.group_id!r} does not own {foreign}")

    def describe(self) -> dict:
        return {"group_id": self.group_id, "state": self.state.value,
                "generation": self.generation, "assignor": self.assignor,
                "members": [m.describe() for m in self.members.values()],
                "pending": sorted(self.pending)}


def _resolve(member: Member, existing_topics: Mapping[str, int]) -> frozenset[str]:
    if member.pattern is not None:
        regex = re.compile(member.pattern)
        return frozenset(t for t in existing_topics
                         if regex.fullmatch(t) and not t.startswith("__"))
    return frozenset(t for t in member.requested if t in existing_topics)
