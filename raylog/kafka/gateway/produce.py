"""Produce (key 0; served 3-11, advertised from 0) and InitProducerId (key 22, 0-4).

Each Kafka batch of a partition's records becomes one raylog batch (``to_raylog``: same
records, timestamps, producer id, epoch and base sequence), appended on the partition's
leader with the request's acks (0, 1 or -1, raylog's own). A partition's batches are all
appended or the partition answers the first error; message formats v0/v1 (Produce v0-v2
carry nothing else) are refused with UNSUPPORTED_FOR_MESSAGE_FORMAT, which is why v0-2 are
advertised at all: librdkafka before 2.11.1 turns compression off when a broker's Produce
starts at v3.

Where the work happens: the event loop decodes the request (produce_frame.py) and looks up
the topics; each partition's records are then translated (``to_raylog``: decompressing,
parsing, an Arrow payload, LZ4) and sent to the leader (the Ray call, which puts a batch of
more than 100 KB into the object store: two round trips to the raylet) on one sending
thread (``raylog-kafka-produce``; LZ4 runs there without the GIL); the event loop
meanwhile reads, decodes and answers other requests. The leader's answers are awaited
on the event loop.

Order: a connection's Produce requests hand their partitions to the sending thread in
request order (they hold the connection's FIFO lock until their records were sent), the
one thread sends in the order handed, and appends sent in order reach a leader in order,
so an idempotent producer's pipelined batches arrive in sequence. Its retries carry the
same producer id, epoch and sequence, and the leader answers a duplicate with the first
append's offsets (raylog/replica/producer_state.py). Fetch, ListOffsets and DeleteRecords
wait for that lock before they read (``dispatch.after_earlier_appends``), so a read sees
the records of the Produce requests before it on its connection, as on a Kafka broker.

Idempotent producers get their id and epoch from InitProducerId: a new random producer id
(raylog's writers pick theirs the same way) at epoch 0, or, when the producer names its
current id and epoch (KIP-360, after UNKNOWN_PRODUCER_ID or a sequence error), the same id
at the next epoch. Transactional ids are refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
raylog has no transactions here), in InitProducerId and in Produce.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable
from typing import Any

from raylog.client.connection import TopicMetadata
from raylog.errors import RaylogError, UnknownPartitionError
from raylog.kafka.gateway.backend import Backend
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.protocol import response_class
from raylog.kafka.records import kafka_batches, to_raylog
from raylog.records.header import MAX_PRODUCER_EPOCH, random_producer_id
from raylog.storage.log import AppendInfo

PRODUCE_KEY = 0
INIT_PRODUCER_ID_KEY = 22
ACKS = (0, 1, -1)

# A partition's records handed to the sending thread: done once they were sent, with the
# leader's answers to await (or the error that kept them from being sent).
Sent = asyncio.Future  # [list[Awaitable[AppendInfo]]]
_sending_thread: concurrent.futures.ThreadPoolExecutor | None = None


class _Refused(Exception):
    """A partition's answer decided before anything was sent: its code and message."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message = code, message


async def handle_produce(ctx: Context, version: int, request: Any) -> Any:
    refused: int | None = None
    if request.transactional_id is not None:
        refused = Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif request.acks not in ACKS:
        refused = Code.INVALID_REQUIRED_ACKS
    sent: list[tuple[str, list[tuple[int, Sent | _Refused]]]] = []
    async with ctx.connection.order:  # appends leave in request order (module docstring)
        for topic in request.topic_data:
            partitions = []
            for data in topic.partition_data:
                if refused is not None:
                    partitions.append((data.index, _Refused(refused)))
                    continue
                try:
                    partitions.append((data.index, await _send(ctx, request, topic.name,
                                                               data)))
                except _Refused as e:
                    partitions.append((data.index, e))
            sent.append((topic.name, partitions))
        # held until the sending thread sent them: the connection's next requests send
        # (and read: dispatch.after_earlier_appends) after these
        await asyncio.gather(*(p for _, parts in sent for _, p in parts
                               if not isinstance(p, _Refused)), return_exceptions=True)
    if request.acks == 0:  # no answer; what did not translate was not sent
        return None
    cls = response_class(PRODUCE_KEY, version)
    topics = []
    for name, partitions in sent:
        answers = await asyncio.gather(*(_answer(ctx, cls, name, index, pending)
                                         for index, pending in partitions))
        topics.append(cls.TopicProduceResponse(name=name, partition_responses=list(answers)))
    return cls(responses=topics, throttle_time_ms=0)


async def _send(ctx: Context, request: Any, name: str, data: Any) -> Sent:
    """Hand a partition's records to the sending thread. Raises _Refused when the topic or
    partition is unknown (nothing is sent)."""
    try:
        meta = await ctx.backend.topic(name)
        if not 0 <= data.index < meta.num_partitions:
            raise UnknownPartitionError(f"{name} has no partition {data.index}")
    except RaylogError as e:
        raise _Refused(ctx.error_code(name, e), str(e)) from e
    return asyncio.get_running_loop().run_in_executor(
        _sender(), _translate_and_send, ctx.backend, meta, data.index, data.records or b"",
        request.acks, request.timeout_ms)


def _translate_and_send(backend: Backend, meta: TopicMetadata, index: int, records: Any,
                        acks: int, timeout_ms: int) -> list[Awaitable[AppendInfo]]:
    """On the sending thread: a partition's Kafka batches as raylog batches, sent to its
    leader (all of them, or none when one does not translate: raises as to_raylog does);
    the answers to await on the event loop."""
    batches = [to_raylog(b) for b in kafka_batches(records)]
    if acks == 0:
        for batch in batches:
            backend.append_unacknowledged(meta, index, batch)
        return []
    return [backend.append(meta, index, batch, acks, timeout_ms) for batch in batches]


def _sender() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread that translates and sends every Produce's records (module docstring):
    created at the first Produce, shared by every listener of the process."""
    global _sending_thread
    if _sending_thread is None:
        _sending_thread = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="raylog-kafka-produce")
    return _sending_thread


async def _answer(ctx: Context, cls: Any, name: str, index: int,
                  pending: Sent | _Refused) -> Any:
    answer = cls.TopicProduceResponse.PartitionProduceResponse
    if isinstance(pending, _Refused):
        return answer(index=index, error_code=pending.code, base_offset=-1,
                      log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                      error_message=pending.message)
    try:
        infos = await asyncio.gather(*await pending)
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
        return cls(throttle_time_ms=0, error_code=Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
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
