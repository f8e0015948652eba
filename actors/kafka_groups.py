"""The controller's Kafka group RPCs: Kafka clients' consumer groups, for the gateway.

The gateway (raylog/kafka/gateway/groups.py) decodes JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, DescribeGroups and ListGroups and calls these; OffsetCommit and OffsetFetch use
the group service's own ``commit_offsets`` and ``committed_offsets``, as raylog's consumers
do. The protocol's rules are raylog/groups/classic.py's; this part does the waiting:

- A JoinGroup is *parked* until its round ends: a future per (group, member), answered by
  the join, leave or expiry that ends the round (the group service's periodic step tells
  :meth:`KafkaGroupService.answer`). A member parked twice (its client retried) has its
  older JoinGroup answered REBALANCE_IN_PROGRESS. A parked JoinGroup waits at most its
  rebalance timeout and JOIN_SLACK_S: by then its round has ended or removed the members
  that did not join.
- A SyncGroup waits until the member's whole target is granted (its group record durable,
  no partition held by a commit on its way), woken by the coordinator's
  ``grants_may_change``; after SYNC_WAIT_S it answers what it has and starts another round
  (:meth:`ClassicGroups.partial`), so every member rejoins for the rest.

Members live in the controller's coordinator, not in the gateway: a gateway that dies
leaves parked requests that nobody reads, and members that stop heartbeating and expire.
Its event loop is the only user.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from actors.groups import WRITE_WAIT_S, GroupService
from raylog.errors import InvalidArgumentError, RebalanceInProgressError, UnknownMemberError
from raylog.groups.classic import JoinAnswer, Protocol
from raylog.metadata.topics import topic_names, topic_partitions
from raylog.util.arguments import INT32_MAX, check_id, check_int

logger = logging.getLogger(__name__)

JOIN_SLACK_S = 5.0          # a parked JoinGroup waits its rebalance timeout and this long
SYNC_WAIT_S = WRITE_WAIT_S  # a SyncGroup waits this long for its whole assignment


class KafkaGroupService:
    """Kafka members' group RPCs over the controller's group service (module doc)."""

    def __init__(self, groups: GroupService) -> None:
        self.groups = groups
        self._parked: dict[tuple[str, str], asyncio.Future] = {}
        self._grants: dict[str, asyncio.Event] = {}  # group -> set when grants may change
        groups.rounds_ended = self.answer
        groups.grants_may_change = self._wake

    def answer(self, group_id: str, answers: dict[str, JoinAnswer]) -> None:
        """Answer the parked JoinGroups of a round that ended."""
        for member_id, answer in answers.items():
            future = self._parked.pop((group_id, member_id), None)
            if future is not None and not future.done():
                future.set_result(answer)

    def _wake(self, group_id: str) -> None:
        event = self._grants.pop(group_id, None)
        if event is not None:
            event.set()

    async def join_group(self, group_id: str, member_id: str, client_id: str,
                         client_host: str, protocol_type: str,
                         protocols: list[tuple[str, list[str], bytes, list[tuple[str, int]]]],
                         session_timeout_ms: int, rebalance_timeout_ms: int,
                         require_member_id: bool, instance_id: str | None = None
                         ) -> dict[str, Any]:
        """A Kafka JoinGroup: ``protocols`` are (name, subscribed topics, metadata, the
        partitions the member says it owns) in the member's order of preference;
        ``instance_id`` a static member's ``group.instance.id``. Returns member_id,
        generation, protocol and leader once the round ends (at once for a static member's
        new incarnation that changes nothing); raises MemberIdRequiredError (with the id to
        join with), UnknownMemberError, FencedInstanceIdError,
        InconsistentGroupProtocolError, RebalanceInProgressError."""
        check_id("group_id", group_id, InvalidArgumentError)
        if member_id:
            check_id("member_id", member_id, InvalidArgumentError)
        if instance_id:
            check_id("group_instance_id", instance_id, InvalidArgumentError)
        check_id("client_id", client_id or "-", InvalidArgumentError)
        offers = []
        for name, topics, metadata, owned in protocols:
            check_id("protocol name", name, InvalidArgumentError)
            offers.append(Protocol(name, tuple(topic_names(topics, "the subscription",
                                                           allow_empty=True)),
                                   bytes(metadata),
                                   tuple(topic_partitions(owned, "the owned partitions"))))
        check_int("session_timeout_ms", session_timeout_ms, 1, INT32_MAX)
        check_int("rebalance_timeout_ms", rebalance_timeout_ms, 0, INT32_MAX)
        await self.groups._ready()
        classic = self.groups.classic
        member_id, answers = classic.join(
            group_id, member_id, client_id or "-", client_host, protocol_type,
            offers, session_timeout_ms,
            rebalance_timeout_ms, self.groups._topics(), require_member_id, instance_id or None)
        self._fence_parked(group_id)
        key = (group_id, member_id)
        earlier = self._parked.pop(key, None)
        if earlier is not None and not earlier.done():
            earlier.set_exception(RebalanceInProgressError(
                f"group {group_id!r}: member {member_id!r} joined again"))
        future = self._parked[key] = asyncio.get_running_loop().create_future()
        self.answer(group_id, answers)
        await self.groups._membership_changed(group_id, wait=False)
        try:
            answer = await asyncio.wait_for(asyncio.shield(future),
                                            rebalance_timeout_ms / 1000 + JOIN_SLACK_S)
        except TimeoutError:
            raise RebalanceInProgressError(
                f"group {group_id!r}: the round did not end within the rebalance timeout; "
                f"join again") from None
        finally:
            if self._parked.get(key) is future:
                del self._parked[key]
        return {"member_id": answer.member_id, "generation": answer.generation,
                "protocol": answer.protocol, "leader": answer.leader}

    def _fence_parked(self, group_id: str) -> None:
        """Answer FENCED_INSTANCE_ID to the parked JoinGroups of member ids a static
        member's new incarnation replaced."""
        group = self.groups.coordinator.groups.get(group_id)
        if group is None:
            return
        for old in list(group.fenced):  # a few replaced ids, not every parked join
            future = self._parked.pop((group_id, old), None)
            if future is not None and not future.done():
                future.set_exception(group.fenced_error(old))

    async def sync_group(self, group_id: str, member_id: str, generation: int,
                         instance_id: str | None = None) -> list[tuple[str, int]]:
        """A Kafka SyncGroup: the partitions the member owns in ``generation`` (its whole
        target, unless SYNC_WAIT_S passed first: then a new round starts). A static member
        names its ``instance_id`` (FencedInstanceIdError if the instance has another id)."""
        await self.groups._ready()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SYNC_WAIT_S
        while True:
            event = self._grants.setdefault(group_id, asyncio.Event())
            owned, complete = self.groups.classic.sync(group_id, member_id, generation,
                                                       instance_id or None)
            left = deadline - loop.time()
            if complete or left <= 0:
                break
            with contextlib.suppress(TimeoutError):  # (then the loop answers what it has)
                await asyncio.wait_for(event.wait(), left)
        if not complete:
            logger.warning("group %s: member %s gets %d partitions of its target after %.0f s; "
                           "another round starts for the rest", group_id, member_id,
                           len(owned), SYNC_WAIT_S)
            self.groups.classic.partial(group_id, self.groups._topics())
            await self.groups._membership_changed(group_id, wait=False)
        return [tuple(tp) for tp in owned]

    async def heartbeat(self, group_id: str, member_id: str, generation: int,
                        instance_id: str | None = None) -> None:
        """A Kafka Heartbeat (of static member ``instance_id``); raises
        RebalanceInProgressError, IllegalGenerationError, UnknownMemberError or
        FencedInstanceIdError for the member to act on."""
        await self.groups._ready()
        self.groups.classic.heartbeat(group_id, member_id, generation, instance_id or None)

    async def leave_group(self, group_id: str, members: list[tuple[str, str | None]]
                          ) -> list[UnknownMemberError | None]:
        """A Kafka LeaveGroup of these members, each (member id, instance id or None; a
        static member may be named by its instance id alone); returns each one's outcome in
        order: None (it left), UnknownMemberError or FencedInstanceIdError."""
        check_id("group_id", group_id, InvalidArgumentError)
        await self.groups._ready()
        outcomes, answers = self.groups.classic.leave(
            group_id, [(m, i or None) for m, i in members], self.groups._topics())
        self.answer(group_id, answers)
        if any(error is None for error in outcomes):
            self.groups._poke_watches()
            await self.groups._membership_changed(group_id, wait=True)
        return outcomes

    async def committed(self, group_id: str, partitions: list[tuple[str, int]] | None
                        ) -> dict[tuple[str, int], tuple[int, str] | None]:
        """The group's committed (offset, metadata) of each partition (None: never
        committed); every partition it has committed when ``partitions`` is None."""
        check_id("group_id", group_id, InvalidArgumentError)
        await self.groups._ready()
        coordinator = self.groups.coordinator
        if partitions is None:
            partitions = list(coordinator.offsets.get(group_id, {}))
        return {(tp.topic, tp.partition): (om.offset, om.metadata) if om else None
                for tp, om in coordinator.committed(group_id, partitions).items()}

    async def describe_groups(self, group_ids: list[str]) -> list[dict[str, Any]]:
        """Kafka's view of each group (state Dead for a group nobody knows)."""
        await self.groups._ready()
        return [self.groups.classic.describe(g) for g in group_ids]

    async def list_groups(self) -> list[tuple[str, str]]:
        """(group id, Kafka's name of its state) of every group."""
        await self.groups._ready()
        classic = self.groups.classic
        return [(g, classic.state(g)) for g in classic.coordinator.group_ids()]
