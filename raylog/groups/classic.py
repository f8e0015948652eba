"""Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) over the
group coordinator: how a Kafka client, through the gateway, is a member of a raylog group.

A Kafka member is a :class:`~raylog.groups.group.Member` of the group like any other
(``kafka=True``): the coordinator computes its target, grants it only free partitions,
fences its commits by generation and expires it when its session runs out, in the
controller, so a gateway that dies leaves no member behind. What this module adds is the
shape of the protocol those clients speak:

- **Rounds.** A rebalance is a round: every change of the group (a member joins, leaves or
  times out, its topics change) moves ``group.generation`` past the generation the last
  round ended at, and from then on a heartbeat tells every member REBALANCE_IN_PROGRESS.
  Each member answers with a JoinGroup, which waits (is *parked*) until every member of
  the group has joined or the round's rebalance timeout (the largest of its members') has
  passed; members that did not join by then are removed. Then every parked JoinGroup is
  answered with the same generation.
- **Eager and cooperative.** The protocols served are ``range`` and ``roundrobin``
  (Kafka's eager ones) and ``cooperative-sticky``. The round's protocol is the one most
  members name first among those every member offers; a member offering none of them, or
  none every other member offers, is refused with InconsistentGroupProtocolError. A
  JoinGroup names the partitions its member still owns (``Protocol.owned``, from its
  subscription): a cooperative member keeps its partitions across a rebalance and names
  them, an eager one gives everything up before it joins and names none. What the
  coordinator counts as the member's and the member does not name is released; nothing is
  ever added. (Never releasing what a member says it still reads is what keeps one owner
  per partition; which kind of client it is does not matter.)
- **The coordinator assigns.** No member is the leader (the leader id answered is empty,
  which no member id is), so every member sends an empty SyncGroup and is answered its
  assignment: what it owns of its target, once the coordinator has *granted* it every
  free partition of it (after its group record is durable, and none is held by a commit on
  its way). A partition of its target that another member still owns is left out (only a
  cooperative round has such: that member is answered an assignment without it, gives it
  up and joins again, and the round that follows grants it). Until the free ones are
  granted :meth:`ClassicGroups.sync` says the answer is not complete (the caller waits for
  the coordinator's ``grants_may_change`` and asks again, up to a deadline, then answers
  what it has and calls :meth:`ClassicGroups.partial`, which starts another round).
- **Generations.** A commit, heartbeat or sync names the generation its member was told;
  one from another generation is refused (IllegalGenerationError); a member's generation
  moves only when a round ends, so a member that has not rejoined yet still commits what it
  owns under its old generation (as eager members do, before they rejoin), and a
  cooperative member commits a partition it is giving up under the new one.
- **Member ids.** A first JoinGroup without a member id is given one
  (MemberIdRequiredError, when the client speaks JoinGroup v4+) that it joins with next;
  a JoinGroup naming an id the group does not know is refused (UnknownMemberError).

- **Static members** (``group.instance.id``, KIP-345). A JoinGroup naming an instance the
  group knows, with no member id, is the instance's new incarnation: it takes the old
  member's place under a new id (:meth:`Group.replace`: same partitions, target and
  generation) and the old id is fenced (FencedInstanceIdError, wherever it is used). With
  no round on and its subscription unchanged it is answered at once, in the current
  generation, and nobody else rebalances; otherwise it joins the round. A static member
  first joins with no MemberIdRequiredError round trip, sends no LeaveGroup when it closes
  (it leaves when its session runs out) and can be removed by instance id.

Parked members are alive (their JoinGroup is open): their sessions do not run while they
wait; it starts again when their round ends.

Plain Python with the coordinator's clock; the caller's event loop is its only user (not
thread-safe). It returns the answers a step completes (:class:`JoinAnswer` by member id);
the caller holds the parked requests.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping

from raylog.errors import (
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    RejoinRequiredError,
    UnknownGroupError,
    UnknownMemberError,
)
from raylog.groups.coordinator import GroupCoordinator
from raylog.groups.group import Group, Member
from raylog.types import TopicPartition

PROTOCOL_TYPE = "consumer"
# The Kafka assignors served, in the order preferred on a tie: the raylog assignor each is.
ASSIGNORS = {"range": "range", "roundrobin": "round_robin",
             "cooperative-sticky": "cooperative_sticky"}


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One assignment strategy a member offers: its name, the topics of its subscription and
    its metadata as the client sent it (shown by DescribeGroups)."""

    name: str
    topics: tuple[str, ...]
    metadata: bytes = b""
    owned: tuple[TopicPartition, ...] = ()  # the partitions the member says it owns


@dataclasses.dataclass(frozen=True)
class JoinAnswer:
    """A parked JoinGroup's answer: the member's id, the round's generation and protocol.
    The leader is always "" (no member assigns)."""

    member_id: str
    generation: int
    protocol: str
    leader: str = ""


@dataclasses.dataclass
class _Joiner:
    """What the protocol keeps of a Kafka member besides its Member."""

    protocols: tuple[Protocol, ...]
    rebalance_timeout_ms: int
    client_host: str


@dataclasses.dataclass
class _Round:
    """One group's protocol state. ``group`` is the Group object it speaks of: a group that
    was emptied and made anew (or reloaded) starts a new round state."""

    group: Group
    completed: int = -1             # the generation the last round ended at
    protocol: str | None = None     # the last round's protocol
    started_ms: int | None = None   # when the current round was first seen
    parked: set[str] = dataclasses.field(default_factory=set)  # joined this round
    joiners: dict[str, _Joiner] = dataclasses.field(default_factory=dict)

    def rebalancing(self) -> bool:
        return self.group.generation != self.completed or bool(self.parked)


class ClassicGroups:
    """The classic protocol's rounds for every group Kafka members joined (module doc)."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        self.rounds: dict[str, _Round] = {}
        # member ids given to first JoinGroups (v4+), until their session runs out
        self.issued: dict[tuple[str, str], int] = {}

    def _round(self, group: Group) -> _Round:
        state = self.rounds.get(group.group_id)
        if state is None or state.group is not group:
            state = self.rounds[group.group_id] = _Round(group)
        return state

    def _member(self, group_id: str, member_id: str) -> tuple[Group, Member]:
        """The group and the Kafka member; UnknownMemberError if either is unknown, and
        RebalanceInProgressError for a member a restarted coordinator waits for."""
        try:
            group = self.coordinator.group(group_id)
            return group, group.member(member_id)
        except UnknownGroupError as e:
            raise UnknownMemberError(str(e)) from e
        except RejoinRequiredError as e:
            raise RebalanceInProgressError(str(e)) from e

    # -- JoinGroup ------------------------------------------------------------------------------

    def join(self, group_id: str, member_id: str, client_id: str, client_host: str,
             protocol_type: str, protocols: Iterable[Protocol], session_timeout_ms: int,
             rebalance_timeout_ms: int, existing_topics: Mapping[str, int],
             require_member_id: bool, instance_id: str | None = None
             ) -> tuple[str, dict[str, JoinAnswer]]:
        """A JoinGroup: the member is parked in the group's round; returns its member id
        and the answers of the parked members if this join ended the round (its own among
        them). ``instance_id``: the member's ``group.instance.id`` (static membership).
        Raises InconsistentGroupProtocolError, MemberIdRequiredError (first join of a
        dynamic member, with ``require_member_id``), UnknownMemberError (an id the group
        does not know) and FencedInstanceIdError (an id its instance no longer has)."""
        protocols = tuple(protocols)
        if protocol_type != PROTOCOL_TYPE:
            raise InconsistentGroupProtocolError(
                f"group {group_id!r}: protocol type {protocol_type!r} is not served; raylog's "
                f"coordinator assigns partitions to consumers (protocol type "
                f"{PROTOCOL_TYPE!r}) only")
        if not any(p.name in ASSIGNORS for p in protocols):
            raise InconsistentGroupProtocolError(
                f"group {group_id!r}: member offers {[p.name for p in protocols]}; raylog's "
                f"coordinator assigns with {list(ASSIGNORS)} only: set "
                f"partition.assignment.strategy to one of them")
        group = self.coordinator.groups.get(group_id)
        if group is not None:
            group.check_kind(member_id, kafka=True)
            self._check_common(group, member_id, protocols)
            if member_id in group.fenced:
                raise group.fenced_error(member_id)
        known = self._instance(group, instance_id, member_id)
        if known is not None and member_id != known:  # (so no member id: a new incarnation)
            return self._replace(group, known, f"{client_id}-{uuid.uuid4()}", client_id,
                                 client_host, protocols, session_timeout_ms,
                                 rebalance_timeout_ms, existing_topics)
        return self._join(group_id, member_id, client_id, client_host, protocols,
                          session_timeout_ms, rebalance_timeout_ms, existing_topics,
                          require_member_id and not instance_id, instance_id)

    @staticmethod
    def _instance(group: Group | None, instance_id: str | None, member_id: str
                  ) -> str | None:
        """The member id static member ``instance_id`` has now (None: the group has no such
        member, or no instance id is given); FencedInstanceIdError if ``member_id`` is given
        and is another one."""
        if group is None or not instance_id:
            return None
        return group.check_instance(instance_id, member_id)

    def _replace(self, group: Group, old_id: str, new_id: str, client_id: str,
                 client_host: str, protocols: tuple[Protocol, ...], session_timeout_ms: int,
                 rebalance_timeout_ms: int, existing_topics: Mapping[str, int]
                 ) -> tuple[str, dict[str, JoinAnswer]]:
        """A known static member joins with no member id (a new incarnation, e.g. its
        process restarted): it takes the old member's place under a new id (the old one is
        fenced) and keeps what it owns. If the group is not rebalancing and the member
        subscribes to the same topics with the round's protocol, it is answered at once with
        the current generation (nobody else rebalances); otherwise it joins the round as
        any member would."""
        state = self._round(group)
        replaced = group.replace(old_id, new_id)
        joiner = state.joiners.pop(old_id, None)
        if old_id in state.parked:
            state.parked.discard(old_id)
            state.parked.add(new_id)
        offer = next((p for p in protocols if p.name == state.protocol), None)
        if isinstance(replaced, Member) and joiner is not None and \
                not state.rebalancing() and offer is not None and \
                frozenset(offer.topics) == replaced.requested:
            replaced.client_id, replaced.session_timeout_ms = client_id, session_timeout_ms
            replaced.last_seen_ms = self.coordinator.clock()
            replaced.generation = group.generation
            state.joiners[new_id] = _Joiner(protocols, rebalance_timeout_ms, client_host)
            return new_id, {new_id: JoinAnswer(new_id, group.generation, state.protocol)}
        return self._join(group.group_id, new_id, client_id, client_host, protocols,
                          session_timeout_ms, rebalance_timeout_ms, existing_topics, False,
                          replaced.instance_id)

    def _join(self, group_id: str, member_id: str, client_id: str, client_host: str,
              protocols: tuple[Protocol, ...], session_timeout_ms: int,
              rebalance_timeout_ms: int, existing_topics: Mapping[str, int],
              require_member_id: bool, instance_id: str | None
              ) -> tuple[str, dict[str, JoinAnswer]]:
        """A join that parks the member in the group's round (join's doc)."""
        now = self.coordinator.clock()
        group = self.coordinator.groups.get(group_id)
        if not member_id:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if require_member_id:
                self.issued[group_id, member_id] = now + session_timeout_ms
                raise MemberIdRequiredError(
                    f"group {group_id!r}: join again with member id {member_id!r}", member_id)
        elif self.issued.pop((group_id, member_id), None) is None and (
                group is None or (member_id not in group.members and
                                  member_id not in group.pending)):
            raise UnknownMemberError(f"member {member_id!r} is not in group {group_id!r}; "
                                     f"join with no member id")
        chosen = next(p for p in protocols if p.name in ASSIGNORS)
        if group is not None and member_id in group.members:  # it keeps what it names
            owned = group.members[member_id].owned
            group.release(member_id, owned - {TopicPartition(*tp) for tp in chosen.owned})
        # Each member's own subscription (raylog's assignors are per member, so no union is
        # needed); topics that do not exist yet are assigned once they do.
        member = self.coordinator.join(
            group_id, member_id, client_id, list(chosen.topics), None, session_timeout_ms,
            ASSIGNORS[chosen.name], existing_topics, kafka=True, instance_id=instance_id)
        group = self.coordinator.groups[group_id]
        state = self._round(group)
        state.joiners[member.member_id] = _Joiner(protocols, rebalance_timeout_ms, client_host)
        state.parked.add(member.member_id)
        if state.started_ms is None:
            state.started_ms = now
        return member.member_id, self._try_complete(state, existing_topics)

    def _try_complete(self, state: _Round, existing_topics: Mapping[str, int]
                      ) -> dict[str, JoinAnswer]:
        """End the round if every member has joined (and none is pending after a restart)."""
        group = state.group
        if not state.parked or group.pending or not set(group.members) <= state.parked:
            return {}
        names = self._protocol(state)
        if ASSIGNORS[names] != group.assignor:
            group.reassign(existing_topics, ASSIGNORS[names])
        now = self.coordinator.clock()
        state.completed, state.protocol, state.started_ms = group.generation, names, None
        answers = {}
        for member_id in sorted(state.parked):
            member = group.members[member_id]
            member.generation, member.last_seen_ms = group.generation, now
            answers[member_id] = JoinAnswer(member_id, group.generation, names)
        state.parked.clear()
        for gone in set(state.joiners) - set(group.members):
            del state.joiners[gone]
        return answers

    def _check_common(self, group: Group, member_id: str, protocols: tuple[Protocol, ...]
                      ) -> None:
        """Refuse a joiner that offers no served protocol every other member offers."""
        state = self.rounds.get(group.group_id)
        others = [j for m, j in state.joiners.items() if m != member_id and m in group.members
                  ] if state is not None and state.group is group else []
        if others and not _common([protocols, *(j.protocols for j in others)]):
            raise InconsistentGroupProtocolError(
                f"group {group.group_id!r}: member offers {[p.name for p in protocols]}, "
                f"none of which every other member offers")

    def _protocol(self, state: _Round) -> str:
        """The protocol every parked member offers (joins ensure there is one) that most
        of them name first among those; a tie goes to the first in ASSIGNORS."""
        offers = [[p.name for p in state.joiners[m].protocols if p.name in ASSIGNORS]
                  for m in state.parked]
        common = _common([state.joiners[m].protocols for m in state.parked])
        votes = {name: sum(1 for offer in offers
                           if next(n for n in offer if n in common) == name) for name in common}
        return max(common, key=lambda name: (votes[name], -list(ASSIGNORS).index(name)))

    # -- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------------

    def sync(self, group_id: str, member_id: str, generation: int,
             instance_id: str | None = None) -> tuple[list[TopicPartition], bool]:
        """A SyncGroup: grant what can be granted of the member's target now; returns its
        assignment (what it owns of its target) and whether every free partition of the
        target is in it (else ask again when the coordinator's grants may change, or give
        up and call :meth:`partial`). Partitions another member owns are not waited for."""
        member = self._check(group_id, member_id, generation, instance_id)
        beat = self.coordinator.heartbeat(group_id, member_id, member.owned)
        group = self.coordinator.groups[group_id]
        free = [tp for tp in member.target - member.owned if tp not in group.owner]
        return sorted(beat.owned - beat.revoke), not free and not group.pending

    def partial(self, group_id: str, existing_topics: Mapping[str, int]) -> None:
        """A member was answered less than its target: a new round (everyone rejoins, and
        whatever kept the rest back has had its time)."""
        group = self.coordinator.groups.get(group_id)
        if group is not None and group.members:
            group.reassign(existing_topics)

    def heartbeat(self, group_id: str, member_id: str, generation: int,
                  instance_id: str | None = None) -> None:
        """A Heartbeat: the member is alive; raises what it must do otherwise (rejoin on
        RebalanceInProgressError, IllegalGenerationError, UnknownMemberError)."""
        self._check(group_id, member_id, generation, instance_id, touch=True)

    def _check(self, group_id: str, member_id: str, generation: int,
               instance_id: str | None = None, touch: bool = False) -> Member:
        # (a restarted coordinator forgot group.fenced; the instance's member id it knows)
        self._instance(self.coordinator.groups.get(group_id), instance_id, member_id)
        group, member = self._member(group_id, member_id)
        if touch:
            member.last_seen_ms = self.coordinator.clock()
        if generation != member.generation:
            raise IllegalGenerationError(
                f"group {group_id!r}: member {member_id!r} is at generation "
                f"{member.generation}, not {generation}")
        if self._round(group).rebalancing():
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing: join again")
        return member

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None]],
              existing_topics: Mapping[str, int]
              ) -> tuple[list[UnknownMemberError | None], dict[str, JoinAnswer]]:
        """A LeaveGroup of one member or several (v3+), each (member id, instance id or
        None): each one's outcome in order (None: it left), and the answers of a round its
        leaving ended. A static member is named by its instance id, with its member id or
        with none (an admin's removal); an id its instance no longer has is
        FencedInstanceIdError, an instance the group does not know UnknownMemberError."""
        outcomes: list[UnknownMemberError | None] = []
        for member_id, instance_id in members:
            try:
                left = self._leave(group_id, member_id, instance_id, existing_topics)
            except UnknownMemberError as e:
                outcomes.append(e)
            else:
                outcomes.append(None)
                state = self.rounds.get(group_id)
                if state is not None:
                    state.parked.discard(left)
                    state.joiners.pop(left, None)
        return outcomes, self._settle(group_id, existing_topics)

    def _leave(self, group_id: str, member_id: str, instance_id: str | None,
               existing_topics: Mapping[str, int]) -> str:
        """Remove one member; returns its id (raises UnknownMemberError if none left)."""
        group = self.coordinator.groups.get(group_id)
        if instance_id:
            known = self._instance(group, instance_id, member_id)
            if known is None:
                raise UnknownMemberError(
                    f"no static member {instance_id!r} in group {group_id!r}")
            member_id = known
        elif group is not None and member_id in group.fenced:
            raise group.fenced_error(member_id)
        if not self.coordinator.leave(group_id, member_id, existing_topics):
            raise UnknownMemberError(f"member {member_id!r} is not in group {group_id!r}")
        return member_id

    def _settle(self, group_id: str, existing_topics: Mapping[str, int]
                ) -> dict[str, JoinAnswer]:
        group = self.coordinator.groups.get(group_id)
        if group is None or group_id not in self.rounds:
            return {}
        state = self._round(group)
        if not group.members:
            state.completed, state.started_ms = group.generation, None
            return {}
        if state.rebalancing() and state.started_ms is None:
            state.started_ms = self.coordinator.clock()
        return self._try_complete(state, existing_topics)

    # -- time -----------------------------------------------------------------------------------

    def expire(self, existing_topics: Mapping[str, int]
               ) -> tuple[list[tuple[str, str]], dict[str, dict[str, JoinAnswer]]]:
        """The coordinator's periodic step: sessions that ran out (parked members excepted),
        rounds past their rebalance timeout (members that did not join are removed), and
        rounds that can end now. Returns the members removed (group, member) and the
        answers of the rounds that ended, by group."""
        now = self.coordinator.clock()
        self.issued = {key: end for key, end in self.issued.items() if end >= now}
        for state in self.rounds.values():
            for member_id in state.parked:  # waiting in JoinGroup: alive
                member = state.group.members.get(member_id)
                if member is not None:
                    member.last_seen_ms = now
        removed = self.coordinator.expire(existing_topics)
        for group_id, state in list(self.rounds.items()):
            if self.coordinator.groups.get(group_id) is not state.group:
                del self.rounds[group_id]
                continue
            if state.started_ms is None:
                continue
            timeout = max((j.rebalance_timeout_ms for m, j in state.joiners.items()
                           if m in state.group.members), default=0)
            if now - state.started_ms > timeout:
                for member_id in sorted(set(state.group.members) - state.parked):
                    if self.coordinator.leave(group_id, member_id, existing_topics):
                        removed.append((group_id, member_id))
        answers = {}
        for group_id in list(self.rounds):
            done = self._settle(group_id, existing_topics)
            if done:
                answers[group_id] = done
        return removed, answers

    # -- what DescribeGroups shows ------------------------------------------------------------

    def state(self, group_id: str) -> str:
        """Kafka's name of the group's state: Empty, PreparingRebalance,
        CompletingRebalance (a round ended; not every member owns its target yet), Stable,
        or Dead (unknown)."""
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return "Dead" if group_id not in self.coordinator.group_ids() else "Empty"
        if not group.members and not group.pending:
            return "Empty"
        state = self.rounds.get(group_id)
        if group.pending or state is None or state.group is not group or state.rebalancing():
            return "PreparingRebalance"
        if any(m.owned != m.target for m in group.members.values()):
            return "CompletingRebalance"
        return "Stable"

    def describe(self, group_id: str) -> dict:
        """Kafka's view of a group: state, protocol and, per member, its client id and host,
        the subscription it sent for the round's protocol, and what it owns. A group of
        raylog's own consumers shows its assignor as the protocol and no metadata."""
        group = self.coordinator.groups.get(group_id)
        state = self.rounds.get(group_id)
        protocol = ""
        if group is not None and group.members:
            protocol = state.protocol if state is not None and state.protocol else \
                next((k for k, v in ASSIGNORS.items() if v == group.assignor), group.assignor)
        members = []
        for member in (group.members.values() if group is not None else ()):
            joiner = state.joiners.get(member.member_id) if state is not None else None
            metadata = next((p.metadata for p in joiner.protocols if p.name == protocol),
                            b"") if joiner is not None else b""
            members.append({"member_id": member.member_id, "instance_id": member.instance_id,
                            "client_id": member.client_id,
                            "client_host": joiner.client_host if joiner else "",
                            "metadata": metadata, "owned": sorted(member.owned)})
        return {"group_id": group_id, "state": self.state(group_id),
                "protocol_type": PROTOCOL_TYPE, "protocol": protocol, "members": members}


def _common(offers: Iterable[Iterable[Protocol]]) -> list[str]:
    """The served protocol names every one of ``offers`` names, in ASSIGNORS' order."""
    names = [{p.name for p in offer} for offer in offers]
    return [name for name in ASSIGNORS if all(name in offer for offer in names)]
