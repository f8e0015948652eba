"""Metadata (key 3, versions 0-12) and DescribeCluster (key 60, versions 0-1): the brokers
and where each partition is led.

Each raylog broker is answered as the Kafka broker whose listener speaks for it
(``Backend.brokers``): with a listener per broker node, the Kafka broker with the same id
at that node's listener; with one listener for the cluster, that one. Leaders are the
Kafka broker speaking for raylog's leader; replicas, ISR and leader epochs are raylog's
own, read from the controller no older than ``METADATA_MAX_AGE_S``: a client asks for
metadata after a NOT_LEADER_OR_FOLLOWER, and must then learn the new leader, not the
gateway's stale view. A partition whose leader has no listener (its broker is down) is
answered with LEADER_NOT_AVAILABLE and leader -1, as Kafka does.

Topics are created on first use only with ``auto_create_topics_enable`` (default off) and a
client that allows it (AllowAutoTopicCreation, v4+); a topic being created is answered with
LEADER_NOT_AVAILABLE until it has leaders, as Kafka does.

With an authorizer (raylog/kafka/gateway/access.py): the list of every topic holds those the
principal may DESCRIBE; a topic named without DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED,
as is one to auto-create without CREATE on it or on the cluster (nothing created).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from raylog.client.connection import TopicMetadata
from raylog.errors import RaylogError, UnknownTopicError
from raylog.kafka.auth.acls import CLUSTER, Operation, ResourceType
from raylog.kafka.gateway.backend import Broker
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code, code_of
from raylog.kafka.gateway.protocol import response_class

METADATA_KEY = 3
DESCRIBE_CLUSTER_KEY = 60
METADATA_MAX_AGE_S = 1.0  # a Metadata request sees the controller's state this fresh
UNKNOWN_TOPIC_ID = 100  # a topic named by id only, which this gateway does not look up


def topic_uuid(topic_id: str) -> uuid.UUID:
    """raylog's topic id (hex) as Kafka's UUID; the zero UUID if it is not one."""
    try:
        return uuid.UUID(hex=topic_id)
    except (ValueError, TypeError):
        return uuid.UUID(int=0)


async def handle_metadata(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(METADATA_KEY, version)
    brokers, controller = await asyncio.gather(ctx.backend.brokers(),
                                               ctx.backend.controller_id())
    listed = sorted(set(brokers.values()))
    wanted = request.topics
    if wanted is None or (version == 0 and not wanted):  # only what the principal may see
        names = [name for name in await ctx.backend.list_topics()
                 if ctx.allows(Operation.DESCRIBE, ResourceType.TOPIC, name, audit=False)]
    else:
        names = [t.name for t in wanted]
    allow_create = version < 4 or request.allow_auto_topic_creation
    answers = await asyncio.gather(*(_topic(ctx, cls, name, brokers, allow_create)
                                     for name in names))
    return cls(throttle_time_ms=0, brokers=[
        cls.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in listed], cluster_id=ctx.backend.cluster_id, controller_id=controller,
        topics=list(answers), authorized_operations=None)


async def _topic(ctx: Context, cls: Any, name: str | None, brokers: dict[int, Broker],
                 allow_create: bool) -> Any:
    topic_cls = cls.MetadataResponseTopic
    if name is None:
        return topic_cls(error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=uuid.UUID(int=0),
                         is_internal=False, partitions=[],
                         authorized_operations=None)
    if not ctx.allows(Operation.DESCRIBE, ResourceType.TOPIC, name):
        return topic_cls(error_code=Code.TOPIC_AUTHORIZATION_FAILED, name=name,
                         topic_id=uuid.UUID(int=0), is_internal=False, partitions=[],
                         authorized_operations=None)
    try:
        meta = await ctx.backend.topic(name, METADATA_MAX_AGE_S)
    except UnknownTopicError as e:
        code = code_of(e)
        if allow_create and ctx.settings.auto_create_topics_enable:
            code = (await _create(ctx, name) if may_create(ctx, name)
                    else Code.TOPIC_AUTHORIZATION_FAILED)
        return topic_cls(error_code=code, name=name, topic_id=uuid.UUID(int=0),
                         is_internal=False, partitions=[],
                         authorized_operations=None)
    except RaylogError as e:
        return topic_cls(error_code=code_of(e), name=name, topic_id=uuid.UUID(int=0),
                         is_internal=False, partitions=[],
                         authorized_operations=None)
    return topic_cls(error_code=Code.NONE, name=name, topic_id=topic_uuid(meta.topic_id),
                     is_internal=name.startswith("__"),
                     partitions=partitions(topic_cls.MetadataResponsePartition, meta, brokers),
                     authorized_operations=None)


def may_create(ctx: Context, name: str) -> bool:
    """CREATE on the cluster or on topic ``name`` (auto-creation, CreateTopics); audited
    once, on the topic, when neither."""
    return (ctx.allows(Operation.CREATE, ResourceType.CLUSTER, CLUSTER.name, audit=False)
            or ctx.allows(Operation.CREATE, ResourceType.TOPIC, name))


def partitions(cls: Any, meta: TopicMetadata, brokers: dict[int, Broker]) -> list[Any]:
    """Each partition of ``meta`` as Kafka's metadata says it; ``brokers``: the Kafka broker
    speaking for each reachable raylog broker (a leader without one cannot be reached)."""
    out = []
    for p in meta.partitions:
        leader = brokers.get(p.leader) if p.leader is not None else None
        out.append(cls(error_code=Code.NONE if leader else Code.LEADER_NOT_AVAILABLE,
                       partition_index=p.partition,
                       leader_id=leader.node_id if leader else -1,
                       leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
                       isr_nodes=list(p.isr),
                       offline_replicas=[b for b in p.replicas if b not in brokers]))
    return out


async def _create(ctx: Context, name: str) -> int:
    """Create topic ``name`` with the settings' partitions and replication factor: the code
    to answer with meanwhile (LEADER_NOT_AVAILABLE, or why it was refused)."""
    try:
        await ctx.backend.blocking(
            ctx.backend.controller.create_topic, name, ctx.settings.auto_create_partitions,
            ctx.settings.auto_create_replication_factor, {}, uuid.uuid4().hex)
    except RaylogError as e:
        code = code_of(e)
        return Code.LEADER_NOT_AVAILABLE if code == Code.TOPIC_ALREADY_EXISTS else code
    ctx.backend.forget(name)
    return Code.LEADER_NOT_AVAILABLE


async def handle_describe_cluster(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(DESCRIBE_CLUSTER_KEY, version)
    brokers, controller = await asyncio.gather(ctx.backend.brokers(),
                                               ctx.backend.controller_id())
    return cls(throttle_time_ms=0, error_code=Code.NONE, error_message=None, endpoint_type=1,
               cluster_id=ctx.backend.cluster_id, controller_id=controller,
               brokers=[_described(cls, b) for b in sorted(set(brokers.values()))],
               authorized_operations=None)  # a kafka-python bit field: None is -2**31, not asked


def _described(cls: Any, broker: Broker) -> Any:
    return cls.DescribeClusterBroker(broker_id=broker.node_id, host=broker.host,
                                     port=broker.port, rack=broker.rack, is_fenced=False)


def register(dispatch: Dispatch) -> None:
    dispatch.add(METADATA_KEY, 0, 12, handle_metadata)
    dispatch.add(DESCRIBE_CLUSTER_KEY, 0, 1, handle_describe_cluster)
