"""The controller's consumer-group service: the Ray side of the group coordinator.

An object the controller holds (``controller.groups``), serving its group RPCs (given the
metadata, leaders and topic creation it needs, not the controller).
It replays ``__consumer_offsets`` when the controller starts, persists commits and group
records there through the topic's partition leaders before they count (raylog/groups/store.py
decides what and when; :meth:`GroupService._append` is its one Ray call), watches group
members that live in Ray actors (:class:`MemberWatch`: an actor Ray says is dead loses its
partitions at once, on Ray's notice of the death) and expires members whose session ran
out.

Every group RPC answers within a deadline: at most LOAD_WAIT_S for the groups to load and
WRITE_WAIT_S for its record to be written; membership changes never wait for a write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnschedulableError, RayActorError

from actors.actor_notices import actor_notices
from actors.hosting import background
from actors.leader_calls import LEADER_RETRY_S, Leader, LeaderCalls, Loading
from raylog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    RaylogError,
    RequestTimeoutError,
    TransactionalIdNotFoundError,
    UnknownTopicError,
)
from raylog.groups.assignors import ASSIGNORS
from raylog.groups.classic import ClassicGroups, JoinAnswer
from raylog.groups.coordinator import OFFSETS_TOPIC_PARTITIONS, GroupCoordinator, OffsetAndMetadata
from raylog.groups.store import GroupStore
from raylog.groups.txn_offsets import check_transaction
from raylog.metadata.access import MetadataAccess
from raylog.metadata.sessions import CONTROLLER_STALL_S, OwnStalls
from raylog.metadata.topics import (
    CONSUMER_OFFSETS_TOPIC,
    check_offset_entries,
    check_reset_spec,
    reset_partitions,
    topic_names,
    topic_partitions,
    topic_pattern,
)
from raylog.records.control import Marker, MarkerType
from raylog.records.header import random_producer_id
from raylog.storage import AppendInfo
from raylog.types import TopicPartition
from raylog.util.arguments import INT32_MAX, check_id, check_int, unknown_name
from raylog.util.clocks import wall_clock_ms

logger = logging.getLogger(__name__)

OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": 64 << 20,
                         "retention.ms": None}
LOAD_WAIT_S = 60.0     # an RPC waits this long for the groups to load, then answers retriably
WRITE_WAIT_S = 30.0    # an RPC waits this long for its record to be in __consumer_offsets


class MemberActor:
    """What the coordinator asks Ray of a group member's actor (the seam a unit test
    replaces with a fake)."""

    def __init__(self, handle: ray.actor.ActorHandle) -> None:
        self.handle = handle

    async def check(self) -> None:
        """Return once the actor is there to answer; raise ActorDiedError when Ray says it
        is dead, another RayActorError when Ray cannot reach it now. A call an actor
        running a method cannot take yet waits in its queue, and fails as it dies."""
        await self.handle.__ray_ready__.remote()

    def listen(self) -> asyncio.Queue:
        """A queue of the states Ray announces for the actor from now on ("ALIVE",
        "RESTARTING", "DEAD", ...), with None where a notice may have been missed (ask
        :meth:`check`)."""
        return actor_notices().listen(self.handle._actor_id.hex())

    def stop_listening(self, queue: asyncio.Queue) -> None:
        actor_notices().stop_listening(self.handle._actor_id.hex(), queue)


class MemberWatch:
    """Watches one member actor for as long as ``watched()``; calls ``on_died()`` when Ray
    says the actor died, and only then.

    Ray tells "dead" (ActorDiedError, or the DEAD notice: the process exited or was killed,
    its node is gone, it will not be restarted) apart from "unavailable"
    (ActorUnavailableError, the RESTARTING notice: Ray cannot reach a live actor for now, or
    it is being restarted). An unreachable member is not removed: it may be reading what it
    owns, and its partitions stay its own until its session runs out (the coordinator's
    ``expire``, which the member itself notices earlier) or Ray says it died.

    The watch asks the actor once (``check``), then waits for Ray's notices of its state
    changes (one subscription for the whole controller: actors/actor_notices.py): no call
    and no timer per member while nothing happens. It asks again only when a notice may
    have been missed (the subscription was renewed). ``poke()`` makes it look at
    ``watched()`` again (the coordinator calls it when members leave). One task; not
    thread-safe.
    """

    POKED = "POKED"  # (not a state of Ray's)

    def __init__(self, actor: MemberActor, actor_id: str, watched: Callable[[], bool],
                 on_died: Callable[[], Awaitable[None]]) -> None:
        self.actor = actor
        self.actor_id = actor_id
        self._watched = watched
        self._on_died = on_died
        self._notices: asyncio.Queue | None = None
        self.unreachable = False

    def poke(self) -> None:
        if self._notices is not None:
            self._notices.put_nowait(self.POKED)

    async def run(self) -> None:
        notices = self._notices = self.actor.listen()  # before asking: none is missed
        ask = True  # ask the actor: at first, and when a notice may have been missed
        try:
            while self._watched():
                state = await self._ask() if ask else await notices.get()
                ask = state is None
                if state == "DEAD":
                    await self._on_died()
                    return
                if state == "RESTARTING" and not self.unreachable:
                    logger.warning("member actor %s is unreachable; its members keep their "
                                   "partitions until Ray says it died or their sessions run "
                                   "out", self.actor_id)
                    self.unreachable = True
                elif state == "ALIVE" and self.unreachable:
                    logger.info("member actor %s is reachable again", self.actor_id)
                    self.unreachable = False
        finally:
            self._notices = None
            self.actor.stop_listening(notices)

    async def _ask(self) -> str:
        """The actor's state as Ray tells a call to it."""
        try:
            await self.actor.check()
        except ActorDiedError as e:  # before its base class, RayActorError
            logger.info("member actor %s died: %s", self.actor_id, e)
            return "DEAD"
        except (RayActorError, ActorUnschedulableError) as e:  # not a death notice
            logger.info("member actor %s: %s", self.actor_id, e)
            return "RESTARTING"
        return "ALIVE"


# Create an internal topic (name, partitions, configs) if missing, once the brokers are known
EnsureTopic = Callable[[str, int, dict[str, Any]], Awaitable[None]]


class GroupService:
    """Group RPCs of the controller, over a GroupCoordinator and its GroupStore. It reads
    the topics in ``access``, finds ``__consumer_offsets``' leaders with ``leader`` and has
    the topic created with ``ensure_topic``. Its event loop is the only user.
    ``member_actor`` wraps a member's actor handle (a seam for tests)."""

    def __init__(self, access: MetadataAccess, leader: Leader, ensure_topic: EnsureTopic,
                 member_actor: Callable[[ray.actor.ActorHandle], MemberActor] = MemberActor,
                 expiry_every_s: float = 1.0) -> None:
        self.access = access
        self.leaders = LeaderCalls(leader)
        self._ensure_topic = ensure_topic
        # expire_members runs every expiry_every_s: a longer gap is the controller's own.
        self._own_stalls = OwnStalls(expiry_every_s, expiry_every_s + CONTROLLER_STALL_S)
        self.coordinator = GroupCoordinator(wall_clock_ms)
        self.classic = ClassicGroups(self.coordinator)  # Kafka members' protocol over it
        # Told the answers of Kafka members' rounds that ended by time or by members
        # leaving (actors/kafka_groups.py answers their parked JoinGroups).
        self.rounds_ended: Callable[[str, dict[str, JoinAnswer]], None] = \
            lambda group_id, answers: None
        # Told when a group's grants may change (a Kafka member's SyncGroup waits on it).
        self.grants_may_change: Callable[[str], None] = lambda group_id: None
        # The transaction coordinator's description of a transactional id (the controller
        # sets its TransactionService's txn_describe): txn_offset_commit checks with it.
        self.describe_transaction: Callable[[str], Awaitable[dict[str, Any]]] = \
            _no_transactions
        self._markers_while_loading: list[tuple[int, int, int, bool]] = []
        self.store: GroupStore | None = None
        self._loading = Loading(
            self._load, f"the group coordinator is still loading {CONSUMER_OFFSETS_TOPIC}",
            LOAD_WAIT_S)
        self.generations_at_load: dict[str, int] = {}  # for metrics: what was there before
        self._member_actor = member_actor
        # actor id -> (the coordinator, the watch of its members there)
        self._watches: dict[str, tuple[GroupCoordinator, MemberWatch]] = {}

    @property
    def loaded(self) -> bool:
        return self._loading.done

    async def _ready(self) -> GroupStore:
        """The store, once the groups are loaded; RequestTimeoutError (retriable) if that
        takes longer than LOAD_WAIT_S."""
        await self._loading.wait()
        return self.store

    def _topics(self) -> dict[str, int]:
        return self.access.user_topics()

    async def _load(self) -> None:
        """Create __consumer_offsets if missing (which waits until the brokers serving it
        are known), then replay it into a new coordinator."""
        self.coordinator = GroupCoordinator(wall_clock_ms)  # nothing of a failed attempt
        self.coordinator.grants_may_change.append(lambda g: self.grants_may_change(g))
        self.classic = ClassicGroups(self.coordinator)
        self.store = None
        self._poke_watches()  # the old coordinator's watches end
        await self._ensure_topic(CONSUMER_OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS,
                                 OFFSETS_TOPIC_CONFIGS)
        topic = self.access.state.topic(CONSUMER_OFFSETS_TOPIC)
        loaded = 0
        for p in topic.partitions:
            batches = await self.leaders.replay_batches(topic.name, p.partition)
            if batches:
                self.coordinator.txn.log_ends[p.partition] = batches[-1][0].next_offset
            for header, content in batches:
                marker = content.type is MarkerType.COMMIT if isinstance(content, Marker) \
                    else None
                self.coordinator.load_batch(
                    p.partition, header.producer_id, header.producer_epoch,
                    header.base_sequence, header.transactional, marker,
                    [] if marker is not None else [(r.key, r.value) for r in content],
                    header.base_offset)
                loaded += 1
        self.coordinator.finish_load()
        # Markers written while the replay ran may be past what it read: applied again
        # (a marker's second telling finds nothing left to apply, and no later transaction
        # of its producer can have offsets here before this load is done).
        for marker in self._markers_while_loading:
            self.coordinator.txn_marker(*marker)
        self._markers_while_loading.clear()
        self.store = GroupStore(self.coordinator, len(topic.partitions), self._append,
                                random_producer_id, background)
        self.generations_at_load = self._generations()
        logger.info("loaded %d batches of %s: %d groups, %d producers with offsets pending "
                    "in a transaction", loaded, CONSUMER_OFFSETS_TOPIC,
                    len(self.coordinator.group_ids()), len(self.coordinator.txn.pending))

    async def _list_offset(self, topic: str, partition: int, spec: str | int,
                           retry_s: float = LEADER_RETRY_S) -> tuple[int, int] | None:
        return await self.leaders.list_offset(topic, partition, spec, retry_s)

    async def _append(self, partition: int, batch: bytes) -> AppendInfo:
        """One send of a store's batch to the leader of its __consumer_offsets partition
        (acks=all); the store sends again after an error."""
        return await self.leaders.append(CONSUMER_OFFSETS_TOPIC, partition, batch)

    async def _membership_changed(self, group_id: str, wait: bool) -> None:
        """Have the group record written; with ``wait``, up to WRITE_WAIT_S for it. Nothing
        is granted to a member before a record naming it is durable, so answering earlier
        is safe (the member owns nothing yet)."""
        write = self.store.persist_membership(group_id)
        if wait:
            try:
                await self.store.wait(write, WRITE_WAIT_S)
            except RequestTimeoutError as e:
                logger.warning("group %s: %s; answering anyway", group_id, e)

    # -- membership ------------------------------------------------------------------------------
    # The controller serves these as its RPCs (``served_by``: their arguments' types are
    # checked first); each checks their values before it changes anything.

    async def join_group(self, group_id: str, member_id: str | None, client_id: str,
                         topics: list[str] | None, pattern: str | None,
                         session_timeout_ms: int, assignor: str,
                         actor: ray.actor.ActorHandle | None = None,
                         claims: list[tuple[str, int]] | None = None) -> dict[str, Any]:
        """Join (or re-subscribe); returns the member id, the group's generation and what
        the member owns: after a coordinator restart, a member it knew keeps the ``claims``
        nobody else owns; any other joiner owns nothing yet."""
        _check_join(group_id, member_id, client_id, topics, pattern, session_timeout_ms,
                    assignor)
        claimed = topic_partitions(claims, "claims") if claims is not None else []
        await self._ready()
        existing = self._topics()
        unknown = sorted(set(topics or ()) - set(existing))
        if unknown:
            raise UnknownTopicError(f"cannot subscribe to unknown topics {unknown}")
        actor_id = actor._actor_id.hex() if actor is not None else None
        member = self.coordinator.join(group_id, member_id, client_id, topics, pattern,
                                       session_timeout_ms, assignor, existing, actor_id,
                                       claimed)
        if actor is not None:
            self._watch(actor, actor_id)
        await self._membership_changed(group_id, wait=True)
        return {"member_id": member.member_id,
                "generation": self.coordinator.groups[group_id].generation,
                "owned": sorted(member.owned)}

    async def heartbeat(self, group_id: str, member_id: str,
                        owned: list[tuple[str, int]]) -> dict[str, Any]:
        await self._ready()
        beat = self.coordinator.heartbeat(group_id, member_id, owned)
        return {"generation": beat.generation, "owned": sorted(beat.owned),
                "revoke": sorted(beat.revoke), "pending": beat.pending}

    async def leave_group(self, group_id: str, member_id: str) -> None:
        await self._ready()
        if self.coordinator.leave(group_id, member_id, self._topics()):
            self._poke_watches()
            await self._membership_changed(group_id, wait=True)

    def _poke_watches(self) -> None:
        """Members left: the watches of actors with none left end."""
        for _, watch in self._watches.values():
            watch.poke()

    def _watch(self, actor: ray.actor.ActorHandle, actor_id: str) -> None:
        """Have the actor's group members removed when Ray says it died (no session
        timeout), unless a watch of the current coordinator's does it already."""
        coordinator = self.coordinator  # a reload makes a new one, with new watches
        if actor_id in self._watches and self._watches[actor_id][0] is coordinator:
            return

        async def died() -> None:
            dead = coordinator.members_of_actor(actor_id)
            logger.info("actor %s died: removing group members %s", actor_id, dead)
            for group_id, member_id in dead:
                if coordinator.leave(group_id, member_id, self._topics()):
                    await self._membership_changed(group_id, wait=False)

        watch = MemberWatch(self._member_actor(actor), actor_id,
                            lambda: coordinator is self.coordinator and
                            bool(coordinator.members_of_actor(actor_id)), died)
        self._watches[actor_id] = coordinator, watch

        async def run() -> None:
            try:
                await watch.run()
            finally:
                if self._watches.get(actor_id, (None, None))[1] is watch:
                    del self._watches[actor_id]

        background(run())

    async def expire_members(self) -> None:
        """Remove the members whose session ran out (the controller's loop calls this every
        ``expiry_every_s``). Time the controller itself did not run (stopped, paused) is not
        counted against the members: their heartbeats waited to be read."""
        stalled = self._own_stalls.since_last()
        if not self.loaded:
            return
        if stalled:
            logger.warning("the controller did not run for %.1f s: not counted against the "
                           "group members' sessions", stalled)
            self.coordinator.credit(int(stalled * 1000))
        # Sessions, and Kafka members' rounds: past their rebalance timeout, or ended.
        expired, ended = self.classic.expire(self._topics())
        if expired:
            self._poke_watches()
        for group_id, member_id in expired:
            logger.info("member %s of group %s timed out", member_id, group_id)
            await self._membership_changed(group_id, wait=False)
        for group_id, answers in ended.items():
            self.rounds_ended(group_id, answers)
            await self._membership_changed(group_id, wait=False)

    # -- offsets ---------------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, member_id: str | None, generation: int,
                             offsets: list[tuple[str, int, int, str]],
                             instance_id: str | None = None) -> None:
        """Commit (topic, partition, offset, metadata) entries for a member of a group
        (a Kafka static member names its ``instance_id``: FencedInstanceIdError if the
        instance has another member id).

        Refused (nothing stored) for a stale generation or partitions the member does not
        own, and not applied (UnknownMemberError, NotPartitionOwnerError) if the member left
        or one of the partitions changed owner while the record was being written; durable
        in __consumer_offsets and applied when this returns. RequestTimeoutError after
        WRITE_WAIT_S: applied later or not, by the same rules.
        """
        check_id("group_id", group_id, InvalidArgumentError)
        check_offset_entries(offsets, self._topics())
        store = await self._ready()
        entries = {TopicPartition(t, p): OffsetAndMetadata(o, m, wall_clock_ms())
                   for t, p, o, m in offsets}
        ticket = self.coordinator.check_commit(group_id, member_id, generation, entries,
                                               instance_id or None)
        await store.commit(ticket, WRITE_WAIT_S)

    async def committed_offsets(self, group_id: str, partitions: list[tuple[str, int]],
                                require_stable: bool = True
                                ) -> dict[tuple[str, int], tuple | None]:
        """The group's committed (offset, metadata, commit timestamp) of each partition
        (None: none). With ``require_stable`` (a consumer about to start reading),
        UnstableOffsetCommitError (retriable) while offsets of one of them are pending in
        a transaction (Kafka's OffsetFetch with require_stable)."""
        await self._ready()
        return {tuple(tp): (tuple(om) if om else None)
                for tp, om in self.coordinator.committed(group_id, partitions,
                                                         require_stable).items()}

    async def txn_offset_commit(self, transactional_id: str, producer_id: int,
                                producer_epoch: int, group_id: str, member_id: str | None,
                                generation: int, entries: list[tuple[str, int, int, str]]
                                ) -> None:
        """Commit (topic, partition, offset, metadata) entries of a group inside the
        producer's transaction (Kafka's TxnOffsetCommit; raylog/groups/txn_offsets.py).

        Checked as :meth:`commit_offsets` checks a commit (``member_id`` None or "" with
        ``generation`` -1 for a group without membership), and the transaction must hold the
        group's offsets (``txn_add_offsets``): else InvalidTxnStateError, and
        ProducerFencedError or InvalidProducerIdMappingError for a stale producer. Durable
        in the group's __consumer_offsets partition as a transactional batch of the producer
        when this returns, and pending: committed when the transaction's commit marker is
        written there, dropped at its abort. RequestTimeoutError after WRITE_WAIT_S (the
        batch is still being sent; the transaction should abort)."""
        check_id("transactional_id", transactional_id, InvalidArgumentError)
        check_id("group_id", group_id, InvalidArgumentError)
        check_offset_entries(entries, self._topics())
        store = await self._ready()
        try:
            described = await self.describe_transaction(transactional_id)
        except TransactionalIdNotFoundError:
            described = None
        check_transaction(described, transactional_id, producer_id, producer_epoch, group_id)
        offsets = {TopicPartition(t, p): OffsetAndMetadata(o, m, wall_clock_ms())
                   for t, p, o, m in entries}
        self.coordinator.check_commit(group_id, member_id or None, generation, offsets)
        await store.txn_commit(producer_id, producer_epoch, group_id, offsets, WRITE_WAIT_S)

    def txn_marker_written(self, partition: int, producer_id: int, producer_epoch: int,
                           commit: bool) -> None:
        """The transaction coordinator's marker writer wrote a marker of ``producer_id``
        to ``partition`` of __consumer_offsets: the offsets pending there are committed or
        dropped. (Before the groups are loaded, the load finds the marker in the log.)"""
        self.coordinator.txn_marker(partition, producer_id, producer_epoch, commit)
        if not self.loaded:
            self._markers_while_loading.append((partition, producer_id, producer_epoch,
                                                commit))

    # -- administration --------------------------------------------------------------------------

    async def list_groups(self) -> list[dict[str, Any]]:
        await self._ready()
        out = []
        for group_id in self.coordinator.group_ids():
            group = self.coordinator.group(group_id)
            out.append({"group_id": group_id, "state": group.state.value,
                        "members": len(group.members), "generation": group.generation})
        return out

    async def lag_and_generations(self) -> tuple[dict[tuple[str, TopicPartition], int],
                                                 dict[str, int] | None]:
        """For metrics: each group's lag per partition it committed, and each group's
        generation. Nothing (None) before the groups were loaded by a first use: metrics
        never create __consumer_offsets."""
        if not self.loaded:
            return {}, None
        committed = [(group, tp, om.offset) for group, offsets in self.coordinator.offsets.items()
                     for tp, om in offsets.items()]
        partitions = sorted({tp for _, tp, _ in committed})
        ends = dict(zip(partitions, await asyncio.gather(
            *(self._end_offset(tp) for tp in partitions)), strict=True))
        lags = {(group, tp): max(ends[tp] - offset, 0) for group, tp, offset in committed
                if ends[tp] is not None}
        return lags, self._generations()

    def _generations(self) -> dict[str, int]:
        return {group: self.coordinator.group(group).generation
                for group in self.coordinator.group_ids()}

    async def describe_group(self, group_id: str) -> dict[str, Any]:
        """Members, assignment and, per partition, committed offset, end offset and lag."""
        await self._ready()
        out = self.coordinator.describe(group_id)
        committed = self.coordinator.offsets.get(group_id, {})
        owned = {tp: m.member_id for m in self.coordinator.group(group_id).members.values()
                 for tp in m.owned}
        partitions = sorted(set(committed) | set(owned))
        ends = await asyncio.gather(*(self._end_offset(tp) for tp in partitions))
        out["partitions"] = [
            {"topic": tp.topic, "partition": tp.partition,
             "committed": committed[tp].offset if tp in committed else None,
             "end_offset": end, "owner": owned.get(tp),
             "lag": (end - committed[tp].offset) if tp in committed and end is not None
             else None}
            for tp, end in zip(partitions, ends, strict=True)]
        out["lag"] = sum(p["lag"] or 0 for p in out["partitions"])
        return out

    async def _end_offset(self, tp: TopicPartition) -> int | None:
        topic = self.access.state.topics.get(tp.topic)
        if topic is None or tp.partition >= len(topic.partitions):
            return None
        try:
            # One try: the lag of a partition whose leader is away is unknown, not waited for.
            return (await self._list_offset(tp.topic, tp.partition, "latest", retry_s=0))[0]
        except (RaylogError, RayActorError):
            return None  # no leader right now: the lag is unknown

    async def delete_group(self, group_id: str) -> None:
        """Forget a group without members and its committed offsets."""
        store = await self._ready()
        self.coordinator.check_empty(group_id)
        await store.delete(group_id, WRITE_WAIT_S)

    async def reset_offsets(self, group_id: str, topic: str, spec: str | int | list[Any],
                            partitions: list[int] | None = None, dry_run: bool = False
                            ) -> dict[int, int]:
        """Set a group's committed offsets of ``topic`` to ``"earliest"``, ``"latest"``, a
        timestamp (ms) or, with spec ``("offset", n)``, an offset; the group must be empty.
        With ``dry_run``, only say what they would be set to."""
        check_id("group_id", group_id, InvalidArgumentError)
        check_reset_spec(spec)
        if partitions is not None:
            reset_partitions(partitions)
        store = await self._ready()
        state = self.access.state.topic(topic)
        group = self.coordinator.groups.get(group_id)
        if group is not None and group.members:
            self.coordinator.check_empty(group_id)
        chosen = partitions if partitions is not None else range(len(state.partitions))
        targets = {}
        for partition in chosen:
            state.partition(partition)
            earliest = (await self._list_offset(topic, partition, "earliest"))[0]
            latest = (await self._list_offset(topic, partition, "latest"))[0]
            if isinstance(spec, list | tuple) and spec[0] == "offset":
                if not earliest <= int(spec[1]) <= latest:
                    raise OffsetOutOfRangeError(
                        f"offset {spec[1]} is outside [{earliest}, {latest}] of "
                        f"{topic}-{partition}")
                targets[partition] = int(spec[1])
            elif spec in ("earliest", "latest"):
                targets[partition] = earliest if spec == "earliest" else latest
            else:
                found = await self._list_offset(topic, partition, spec)
                targets[partition] = found[0] if found else latest
        if dry_run:
            return targets
        entries = {TopicPartition(topic, p): OffsetAndMetadata(o, "reset", wall_clock_ms())
                   for p, o in targets.items()}
        # Checked again now: members may have joined while the offsets were looked up.
        group = self.coordinator.groups.get(group_id)
        if group is not None and (group.members or group.pending):
            self.coordinator.check_empty(group_id)
        await store.commit(self.coordinator.check_commit(group_id, None, -1, entries),
                           WRITE_WAIT_S)
        return targets

    async def group_history(self, group_id: str) -> list:
        """(generation, member -> owned partitions) after each change of ownership."""
        await self._ready()
        return [(gen, {m: sorted(tps) for m, tps in owners.items()})
                for gen, owners in self.coordinator.group(group_id).history]


async def _no_transactions(transactional_id: str) -> dict[str, Any]:
    raise TransactionalIdNotFoundError(f"no transaction coordinator to ask about "
                                       f"{transactional_id!r}")


def _check_join(group_id: str, member_id: str | None, client_id: str,
                topics: list[str] | None, pattern: str | None, session_timeout_ms: int,
                assignor: str) -> None:
    check_id("group_id", group_id, InvalidArgumentError)
    if member_id is not None:
        check_id("member_id", member_id, InvalidArgumentError)
    check_id("client_id", client_id, InvalidArgumentError)
    if (topics is None) == (pattern is None):
        raise InvalidArgumentError("join_group takes topics or a pattern, not both or neither")
    if topics is not None:
        topic_names(topics)
    if pattern is not None:
        topic_pattern(pattern)
    check_int("session_timeout_ms", session_timeout_ms, 1, INT32_MAX)
    if assignor not in ASSIGNORS:
        raise InvalidConfigError(unknown_name("assignor", assignor, ASSIGNORS))
