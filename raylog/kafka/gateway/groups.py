"""Consumer groups for Kafka clients: FindCoordinator (key 10, v0-3), JoinGroup (11, v0-6),
Heartbeat (12, v0-4), LeaveGroup (13, v0-4), SyncGroup (14, v0-4), DescribeGroups (15,
v0-5), ListGroups (16, v0-4), OffsetCommit (8, v2-8) and OffsetFetch (9, v1-7).

Kafka members live in raylog's group coordinator, in the controller (actors/kafka_groups.py
over raylog/groups/classic.py: rounds, generations, sessions); these handlers decode and
encode, and forward. So:

- FindCoordinator answers with a broker this gateway speaks for (every listener reaches the
  coordinator): the client sends its group requests back here; the same for a transactional
  id (key type 1), whose requests transactions.py forwards.
- JoinGroup decodes each offered protocol's ConsumerProtocolSubscription (its topics, and
  the partitions a cooperative member says it owns) and waits, with no thread held, until
  the round ends. The leader answered is empty, so no
  member assigns: every member sends SyncGroup and is answered its assignment, a
  ConsumerProtocolAssignment (version 0) of the partitions the coordinator granted it.
- OffsetCommit and OffsetFetch are raylog's own commits (``commit_offsets``,
  ``committed_offsets``): the same records of ``__consumer_offsets``, fenced by generation
  the same way, so a raylog Consumer of the group reads a Kafka member's commit and the
  other way round. An offset never committed is answered -1.

Errors are Kafka's codes (raylog/kafka/gateway/errors.py); an error that means "the
coordinator cannot answer now" (a controller restarting, a write timing out) is answered
COORDINATOR_NOT_AVAILABLE, on which clients find the coordinator again and retry.

With an authorizer (raylog/kafka/gateway/access.py), as Kafka's: JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch need READ on the group
(GROUP_AUTHORIZATION_FAILED, nothing forwarded), OffsetCommit and OffsetFetch READ on each
topic too (TOPIC_AUTHORIZATION_FAILED for its partitions; a fetch of every committed offset
leaves such topics out); DescribeGroups DESCRIBE on each group; ListGroups lists the groups
the principal may DESCRIBE (all of them with DESCRIBE on the cluster).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from raylog.errors import MemberIdRequiredError, RaylogError, UnknownTopicError
from raylog.kafka.auth.acls import CLUSTER, Operation, ResourceType
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code, code_of
from raylog.kafka.gateway.protocol import response_class

logger = logging.getLogger(__name__)

OFFSET_COMMIT_KEY, OFFSET_FETCH_KEY, FIND_COORDINATOR_KEY = 8, 9, 10
JOIN_GROUP_KEY, HEARTBEAT_KEY, LEAVE_GROUP_KEY, SYNC_GROUP_KEY = 11, 12, 13, 14
DESCRIBE_GROUPS_KEY, LIST_GROUPS_KEY = 15, 16

CALL_TIMEOUT_S = 30.0    # a group call to the controller that does not wait for a round
COMMIT_TIMEOUT_S = 45.0  # a commit: the controller's own write deadline (30 s) and slack
JOIN_SLACK_S = 15.0      # a JoinGroup waits its rebalance timeout and this long
GROUP_KEY_TYPE = 0  # FindCoordinator: a consumer group's
TRANSACTION_KEY_TYPE = 1  # a transactional id's (transactions.py: served here as well)
# Codes that mean the coordinator cannot answer now: clients then retry after finding it
# again (a JoinGroup answered REQUEST_TIMED_OUT would fail for good in Java's client).
_UNAVAILABLE = (Code.REQUEST_TIMED_OUT, Code.NOT_LEADER_OR_FOLLOWER, Code.LEADER_NOT_AVAILABLE,
                Code.UNKNOWN_TOPIC_OR_PARTITION)


def group_code(error: RaylogError) -> int:
    """The code to answer a group request's ``error`` with."""
    code = code_of(error)
    if code in _UNAVAILABLE or (code == Code.UNKNOWN_SERVER_ERROR and error.retriable):
        return Code.COORDINATOR_NOT_AVAILABLE
    return code


# -- the consumer protocol's embedded data --------------------------------------------------------

def subscription(metadata: bytes) -> tuple[list[str], list[tuple[str, int]]]:
    """The topics of a ConsumerProtocolSubscription and the partitions it says its member
    owns (v1+; a cooperative member names them), of any version (a newer one is read as the
    newest known, as Kafka's clients do). ValueError if it does not decode."""
    try:
        decoded = ConsumerProtocolSubscription.decode(bytes(metadata))
    except Exception as e:  # kafka-python raises what its codecs hit (struct, index, ...)
        raise ValueError(f"not a consumer subscription: {type(e).__name__}: {e}") from e
    owned = [(tp.topic, p) for tp in getattr(decoded, "owned_partitions", None) or ()
             for p in tp.partitions]
    return list(decoded.topics), owned


def assignment(partitions: list[tuple[str, int]]) -> bytes:
    """A ConsumerProtocolAssignment v0 of ``partitions`` (every client reads v0)."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(partitions):
        by_topic[topic].append(partition)
    return bytes(ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
                             for t, ps in by_topic.items()],
        user_data=None, version=0).encode(version=0))


# -- FindCoordinator ------------------------------------------------------------------------------

async def handle_find_coordinator(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(FIND_COORDINATOR_KEY, version)
    key_type = request.key_type if version >= 1 else GROUP_KEY_TYPE
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return cls(throttle_time_ms=0, error_code=Code.INVALID_REQUEST,
                   error_message=f"unknown coordinator key type {key_type}",
                   node_id=-1, host="", port=-1)
    brokers = await ctx.backend.brokers()
    node = await ctx.backend.controller_id()
    found = [b for b in brokers.values() if b.node_id == node]
    if not found:
        return cls(throttle_time_ms=0, error_code=Code.COORDINATOR_NOT_AVAILABLE,
                   error_message="no broker with a listener is up", node_id=-1, host="",
                   port=-1)
    return cls(throttle_time_ms=0, error_code=Code.NONE, error_message=None,
               node_id=found[0].node_id, host=found[0].host, port=found[0].port)


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------

def _may_read_group(ctx: Context, group_id: str) -> bool:
    return ctx.allows(Operation.READ, ResourceType.GROUP, group_id)


async def handle_join_group(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(JOIN_GROUP_KEY, version)
    if not _may_read_group(ctx, request.group_id):
        return cls(throttle_time_ms=0, error_code=Code.GROUP_AUTHORIZATION_FAILED,
                   generation_id=-1, protocol_name="", leader="",
                   member_id=request.member_id, members=[])
    rebalance_timeout_ms = request.rebalance_timeout_ms if version >= 1 else \
        request.session_timeout_ms
    protocols = []
    for offer in request.protocols:
        try:
            topics, owned = subscription(offer.metadata)
            protocols.append((offer.name, topics, bytes(offer.metadata), owned))
        except ValueError as e:
            logger.info("group %s: protocol %s of member %r: %s", request.group_id, offer.name,
                        request.member_id, e)
    member_id = request.member_id
    try:
        answer = await ctx.backend.controller_call(
            "kafka_join_group", request.group_id, request.member_id, ctx.client_id or "",
            ctx.connection.peer, request.protocol_type, protocols,
            request.session_timeout_ms, rebalance_timeout_ms, version >= 4,
            request.group_instance_id if version >= 5 else None,
            timeout_s=max(rebalance_timeout_ms, 0) / 1000 + JOIN_SLACK_S)
    except RaylogError as e:
        if isinstance(e, MemberIdRequiredError):
            member_id = e.member_id
        else:
            logger.info("group %s: JoinGroup of %r refused: %s", request.group_id,
                        request.member_id, e)
        return cls(throttle_time_ms=0, error_code=group_code(e), generation_id=-1,
                   protocol_name="", leader="", member_id=member_id, members=[])
    return cls(throttle_time_ms=0, error_code=Code.NONE, generation_id=answer["generation"],
               protocol_name=answer["protocol"], leader=answer["leader"],
               member_id=answer["member_id"], members=[])


async def handle_sync_group(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(SYNC_GROUP_KEY, version)
    if not _may_read_group(ctx, request.group_id):
        return cls(throttle_time_ms=0, error_code=Code.GROUP_AUTHORIZATION_FAILED,
                   assignment=b"")
    try:
        owned = await ctx.backend.controller_call(
            "kafka_sync_group", request.group_id, request.member_id, request.generation_id,
            request.group_instance_id if version >= 3 else None, timeout_s=COMMIT_TIMEOUT_S)
    except RaylogError as e:
        return cls(throttle_time_ms=0, error_code=group_code(e), assignment=b"")
    return cls(throttle_time_ms=0, error_code=Code.NONE, assignment=assignment(owned))


async def handle_heartbeat(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(HEARTBEAT_KEY, version)
    if not _may_read_group(ctx, request.group_id):
        return cls(throttle_time_ms=0, error_code=Code.GROUP_AUTHORIZATION_FAILED)
    try:
        await ctx.backend.controller_call("kafka_heartbeat", request.group_id,
                                          request.member_id, request.generation_id,
                                          request.group_instance_id if version >= 3 else None,
                                          timeout_s=CALL_TIMEOUT_S)
    except RaylogError as e:
        return cls(throttle_time_ms=0, error_code=group_code(e))
    return cls(throttle_time_ms=0, error_code=Code.NONE)


async def handle_leave_group(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(LEAVE_GROUP_KEY, version)
    if not _may_read_group(ctx, request.group_id):
        return cls(throttle_time_ms=0, error_code=Code.GROUP_AUTHORIZATION_FAILED, members=[])
    # v3+ names members by id, by static instance id, or both (an admin removing static
    # members names their instance ids alone).
    members = [(m.member_id, m.group_instance_id) for m in request.members] \
        if version >= 3 else [(request.member_id, None)]
    try:
        outcomes = await ctx.backend.controller_call(
            "kafka_leave_group", request.group_id, members, timeout_s=COMMIT_TIMEOUT_S)
    except RaylogError as e:
        return cls(throttle_time_ms=0, error_code=group_code(e), members=[])
    codes = [Code.NONE if error is None else group_code(error) for error in outcomes]
    if version < 3:
        return cls(throttle_time_ms=0, error_code=codes[0])
    return cls(throttle_time_ms=0, error_code=Code.NONE, members=[
        cls.MemberResponse(member_id=m, group_instance_id=i, error_code=code)
        for (m, i), code in zip(members, codes, strict=True)])


# -- offsets --------------------------------------------------------------------------------------

async def known_partition(ctx: Context, topic: str, partition: int) -> bool:
    """Whether ``topic`` exists and has ``partition``."""
    try:
        meta = await ctx.backend.topic(topic)
    except UnknownTopicError:
        return False
    return 0 <= partition < meta.num_partitions


async def offsets_to_commit(ctx: Context, topics: Any, refused: int | None
                            ) -> tuple[dict[tuple[str, int], int], list[tuple]]:
    """An offset commit's ``topics`` (OffsetCommit's or TxnOffsetCommit's) sorted: the codes
    of the partitions not to commit (``refused`` for every one when given, else
    TOPIC_AUTHORIZATION_FAILED for a topic the principal may not read,
    UNKNOWN_TOPIC_OR_PARTITION for an unknown partition) and the (topic, partition, offset,
    metadata) entries of the others."""
    codes: dict[tuple[str, int], int] = {}
    entries = []
    for topic in topics:
        denied = refused
        if denied is None and not ctx.allows(Operation.READ, ResourceType.TOPIC, topic.name):
            denied = Code.TOPIC_AUTHORIZATION_FAILED
        for p in topic.partitions:
            if denied is not None:
                codes[topic.name, p.partition_index] = denied
            elif await known_partition(ctx, topic.name, p.partition_index):
                entries.append((topic.name, p.partition_index, p.committed_offset,
                                p.committed_metadata or ""))
            else:
                codes[topic.name, p.partition_index] = Code.UNKNOWN_TOPIC_OR_PARTITION
    return codes, entries


async def handle_offset_commit(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(OFFSET_COMMIT_KEY, version)
    codes, entries = await offsets_to_commit(
        ctx, request.topics,
        None if _may_read_group(ctx, request.group_id) else Code.GROUP_AUTHORIZATION_FAILED)
    # A commit outside the group's membership (a consumer that assigns itself) carries no
    # member id and generation -1: raylog's commit outside any membership.
    member_id = request.member_id or None
    generation = request.generation_id_or_member_epoch if member_id is not None else -1
    code: int = Code.NONE
    if entries:
        try:
            await ctx.backend.controller_call(
                "commit_offsets", request.group_id, member_id, generation, entries,
                request.group_instance_id if version >= 7 else None,
                timeout_s=COMMIT_TIMEOUT_S)
        except RaylogError as e:
            code = group_code(e)
    for topic, partition, _, _ in entries:
        codes[topic, partition] = code
    return cls(throttle_time_ms=0, topics=[
        cls.OffsetCommitResponseTopic(name=topic.name, partitions=[
            cls.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=codes[topic.name, p.partition_index])
            for p in topic.partitions])
        for topic in request.topics])


async def handle_offset_fetch(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(OFFSET_FETCH_KEY, version)
    if not _may_read_group(ctx, request.group_id):
        return cls(throttle_time_ms=0, error_code=Code.GROUP_AUTHORIZATION_FAILED, topics=[
            cls.OffsetFetchResponseTopic(name=t.name, partitions=[
                cls.OffsetFetchResponseTopic.OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                    metadata="", error_code=Code.GROUP_AUTHORIZATION_FAILED)
                for p in t.partition_indexes]) for t in request.topics or ()])
    readable = {}  # topic -> READ allowed?; asked once per topic
    wanted = None if request.topics is None else \
        [(t.name, p) for t in request.topics for p in t.partition_indexes]
    try:
        found = await ctx.backend.controller_call("kafka_committed", request.group_id,
                                                  wanted, timeout_s=CALL_TIMEOUT_S)
    except RaylogError as e:
        code = group_code(e)
        found = {tp: None for tp in wanted or ()}
    else:
        code = Code.NONE
    by_topic: dict[str, list[Any]] = defaultdict(list)
    part = cls.OffsetFetchResponseTopic.OffsetFetchResponsePartition
    for (topic, partition), committed in sorted(found.items()):
        if topic not in readable:
            readable[topic] = ctx.allows(Operation.READ, ResourceType.TOPIC, topic,
                                         audit=wanted is not None)
        if not readable[topic]:
            if wanted is not None:  # named: answered refused; else left out, as Kafka does
                by_topic[topic].append(part(
                    partition_index=partition, committed_offset=-1,
                    committed_leader_epoch=-1, metadata="",
                    error_code=Code.TOPIC_AUTHORIZATION_FAILED))
            continue
        offset, metadata = committed if committed is not None else (-1, "")
        by_topic[topic].append(part(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
            metadata=metadata, error_code=code if version < 2 else Code.NONE))
    return cls(throttle_time_ms=0, error_code=code, topics=[
        cls.OffsetFetchResponseTopic(name=topic, partitions=parts)
        for topic, parts in by_topic.items()])


# -- DescribeGroups, ListGroups -----------------------------------------------------------------

async def handle_describe_groups(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(DESCRIBE_GROUPS_KEY, version)
    group_cls = cls.DescribedGroup
    allowed = [g for g in request.groups
               if ctx.allows(Operation.DESCRIBE, ResourceType.GROUP, g)]
    refused = [group_cls(error_code=Code.GROUP_AUTHORIZATION_FAILED, group_id=g,
                         group_state="", protocol_type="", protocol_data="", members=[],
                         authorized_operations=None)
               for g in request.groups if g not in allowed]
    if not allowed:
        return cls(throttle_time_ms=0, groups=refused)
    try:
        described = await ctx.backend.controller_call(
            "kafka_describe_groups", allowed, timeout_s=CALL_TIMEOUT_S)
    except RaylogError as e:
        return cls(throttle_time_ms=0, groups=[
            group_cls(error_code=group_code(e), group_id=g, group_state="", protocol_type="",
                      protocol_data="", members=[], authorized_operations=None)
            for g in allowed] + refused)
    return cls(throttle_time_ms=0, groups=refused + [
        group_cls(error_code=Code.NONE, group_id=d["group_id"], group_state=d["state"],
                  protocol_type=d["protocol_type"], protocol_data=d["protocol"],
                  authorized_operations=None, members=[
                      group_cls.DescribedGroupMember(
                          member_id=m["member_id"], group_instance_id=m["instance_id"],
                          client_id=m["client_id"], client_host=m["client_host"],
                          member_metadata=m["metadata"],
                          member_assignment=assignment(m["owned"]))
                      for m in d["members"]])
        for d in described])


async def handle_list_groups(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(LIST_GROUPS_KEY, version)
    try:
        groups = await ctx.backend.controller_call("kafka_list_groups",
                                                   timeout_s=CALL_TIMEOUT_S)
    except RaylogError as e:
        return cls(throttle_time_ms=0, error_code=group_code(e), groups=[])
    states = {s.lower() for s in request.states_filter} if version >= 4 and \
        request.states_filter else None
    every = ctx.allows(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER.name, audit=False)
    return cls(throttle_time_ms=0, error_code=Code.NONE, groups=[
        cls.ListedGroup(group_id=g, protocol_type="consumer", group_state=state)
        for g, state in groups if (states is None or state.lower() in states)
        and (every or ctx.allows(Operation.DESCRIBE, ResourceType.GROUP, g, audit=False))])


def register(dispatch: Dispatch) -> None:
    dispatch.add(OFFSET_COMMIT_KEY, 2, 8, handle_offset_commit)
    dispatch.add(OFFSET_FETCH_KEY, 1, 7, handle_offset_fetch)
    dispatch.add(FIND_COORDINATOR_KEY, 0, 3, handle_find_coordinator)
    dispatch.add(JOIN_GROUP_KEY, 0, 6, handle_join_group)
    dispatch.add(HEARTBEAT_KEY, 0, 4, handle_heartbeat)
    dispatch.add(LEAVE_GROUP_KEY, 0, 4, handle_leave_group)
    dispatch.add(SYNC_GROUP_KEY, 0, 4, handle_sync_group)
    dispatch.add(DESCRIBE_GROUPS_KEY, 0, 5, handle_describe_groups)
    dispatch.add(LIST_GROUPS_KEY, 0, 4, handle_list_groups)
