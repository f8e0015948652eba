"""Produce (key 0; served 3-11, advertised from 0) and InitProducerId (key 22, 0-4).

Each Kafka batch of a partition's records becomes one raylog batch (``to_raylog``: same
records, timestamps, producer id, epoch and base sequence), appended on the partition's
leader with the request's acks (0, 1 or -1, raylog's own). A partition's batches are all
appended or the partition answers the first error; message formats v0/v1 (Produce v0-v2
carry nothing else) are refused with UNSUPPORTED_FOR_MESSAGE_FORMAT, which is why v0-2 are
advertised at all: librdkafka before 2.11.1 turns compression off when a broker's Produce
starts at v3.

Order: a connection's Produce requests send their appends in request order (they hold the
connection's FIFO lock while sending), and appends sent in order reach a leader in order,
so an idempotent producer's pipelined batches arrive in sequence. Its retries carry the
same producer id, epoch and sequence, and the leader answers a duplicate with the first
append's offsets (raylog/replica/producer_state.py).

Idempotent producers get their id and epoch from InitProducerId: a new random producer id
(raylog's writers pick theirs the same way) at epoch 0, or, when the producer names its
current id and epoch (KIP-360, after UNKNOWN_PRODUCER_ID or a sequence error), the same id
at the next epoch. A producer with a transactional id gets its id and epoch from raylog's
transaction coordinator instead (transactions.py); its Produce requests carry the
transactional id, and their batches their transactional bit (the partition opens the
producer's transaction at its first one, and refuses those of a fenced epoch).

With an authorizer (raylog/kafka/gateway/access.py): Produce needs WRITE on each topic (its
partitions answer TOPIC_AUTHORIZATION_FAILED otherwise, nothing of them written);
InitProducerId with a transactional id WRITE on that id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED
otherwise), without one IDEMPOTENT_WRITE on the cluster or WRITE on some topic
(CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from raylog.errors import RaylogError, UnknownPartitionError
from raylog.kafka.auth.acls import Operation, ResourceType
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.protocol import response_class
from raylog.kafka.gateway.transactions import init_transactional_producer
from raylog.kafka.records import kafka_batches, to_raylog
from raylog.records.header import MAX_PRODUCER_EPOCH, random_producer_id
from raylog.storage.log import AppendInfo

PRODUCE_KEY = 0
INIT_PRODUCER_ID_KEY = 22
ACKS = (0, 1, -1)


class _Refused(Exception):
    """A partition's answer decided before anything was sent: its code and message."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message = code, message


async def handle_produce(ctx: Context, version: int, request: Any) -> Any:
    refused: int | None = None
    if request.acks not in ACKS:
        refused = Code.INVALID_REQUIRED_ACKS
    sent: list[tuple[str, list[tuple[int, Awaitable[list[AppendInfo]] | _Refused]]]] = []
    async with ctx.connection.order:  # appends leave in request order (module docstring)
        for topic in request.topic_data:
            partitions = []
            denied = (refused is None
                      and not ctx.allows(Operation.WRITE, ResourceType.TOPIC, topic.name))
            for data in topic.partition_data:
                if refused is not None or denied:
                    partitions.append((data.index, _Refused(
                        Code.TOPIC_AUTHORIZATION_FAILED if denied else refused)))
                    continue
                try:
                    partitions.append((data.index, await _send(ctx, request, topic.name,
                                                               data)))
                except _Refused as e:
                    partitions.append((data.index, e))
            sent.append((topic.name, partitions))
    if request.acks == 0:
        return None
    cls = response_class(PRODUCE_KEY, version)
    topics = []
    for name, partitions in sent:
        answers = await asyncio.gather(*(_answer(ctx, cls, name, index, pending)
                                         for index, pending in partitions))
        topics.append(cls.TopicProduceResponse(name=name, partition_responses=list(answers)))
    return cls(responses=topics, throttle_time_ms=0)


async def _send(ctx: Context, request: Any, name: str,
                data: Any) -> Awaitable[list[AppendInfo]]:
    """Translate a partition's records and send them to its leader; the answers to await.
    Raises _Refused when nothing was sent."""
    try:
        meta = await ctx.backend.topic(name)
        if not 0 <= data.index < meta.num_partitions:
            raise UnknownPartitionError(f"{name} has no partition {data.index}")
        batches = [to_raylog(b) for b in kafka_batches(data.records or b"")]
        if request.acks == 0:
            for batch in batches:
                ctx.backend.append_unacknowledged(meta, data.index, batch)
            return _nothing()
        return asyncio.gather(*(ctx.backend.append(meta, data.index, batch, request.acks,
                                                   request.timeout_ms) for batch in batches))
    except RaylogError as e:
        raise _Refused(ctx.error_code(name, e), str(e)) from e


async def _nothing() -> list[AppendInfo]:
    return []


async def _answer(ctx: Context, cls: Any, name: str, index: int,
                  pending: Awaitable[list[AppendInfo]] | _Refused) -> Any:
    answer = cls.TopicProduceResponse.PartitionProduceResponse
    if isinstance(pending, _Refused):
        return answer(index=index, error_code=pending.code, base_offset=-1,
                      log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                      error_message=pending.message)
    try:
        infos = await pending
    except RaylogError as e:
        return answer(index=index, error_code=ctx.error_code(name, e), base_offset=-1,
                      log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                      error_message=str(e))
    base = infos[0].base_offset if infos else -1
    return answer(index=index, error_code=Code.NONE, base_offset=base, log_append_time_ms=-1,
                  log_start_offset=-1, record_errors=[], error_message=None)


async def handle_init_producer_id(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(INIT_PRODUCER_ID_KEY, version)
    if request.transactional_id is not None:
        if not ctx.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                          request.transactional_id):
            return cls(throttle_time_ms=0,
                       error_code=Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                       producer_id=-1, producer_epoch=-1)
        return await init_transactional_producer(ctx, version, request)
    if not (ctx.access is None or ctx.access.allows_idempotent_write(ctx.connection)):
        return cls(throttle_time_ms=0, error_code=Code.CLUSTER_AUTHORIZATION_FAILED,
                   producer_id=-1, producer_epoch=-1)
    producer_id, epoch = next_producer(request.producer_id, request.producer_epoch)
    return cls(throttle_time_ms=0, error_code=Code.NONE, producer_id=producer_id,
               producer_epoch=epoch)


def next_producer(producer_id: int, epoch: int) -> tuple[int, int]:
    """The id and epoch to give a producer that has ``producer_id`` at ``epoch`` (-1: none):
    the next epoch of the same id, or a new id at epoch 0 when it has none or its epochs
    ran out."""
    if producer_id >= 0 and 0 <= epoch < MAX_PRODUCER_EPOCH:
        return producer_id, epoch + 1
    return random_producer_id(), 0


def register(dispatch: Dispatch) -> None:
    dispatch.add(PRODUCE_KEY, 0, 11, handle_produce)
    dispatch.add(INIT_PRODUCER_ID_KEY, 0, 4, handle_init_producer_id)
