"""Kafka's transactional APIs: InitProducerId with a transactional id (key 22, v0-4; the
idempotent case is in produce.py), AddPartitionsToTxn (24, v0-3), AddOffsetsToTxn (25,
v0-3), EndTxn (26, v0-3) and TxnOffsetCommit (28, v0-3), forwarded to raylog's
transaction coordinator in the controller (actors/transactions.py, docs/transactions.md).

The listener is each client's transaction coordinator as it is its group coordinator
(FindCoordinator with key type 1 names a broker it speaks for, groups.py): these handlers
decode, call the controller's ``txn_*`` RPC without a thread held, and encode. A Kafka
producer's batches carry its transactional bit to the log (raylog/kafka/records.py), the
coordinator's markers reach Fetch as Kafka control batches, and a read_committed Fetch
answers the last stable offset and the aborted transactions (fetch.py).

Errors are Kafka's codes (raylog's transaction errors carry them); a coordinator that cannot
answer now (a controller restarting, ``__transaction_state`` without a leader, a write
timing out) is COORDINATOR_NOT_AVAILABLE, on which clients find the coordinator again and
retry. PRODUCER_FENCED (90) is answered to the versions that know it (KIP-588); older ones
get INVALID_PRODUCER_EPOCH (47), as Kafka's brokers do.

TxnOffsetCommit (28, v0-3) forwards to the controller's ``txn_offset_commit``: the offsets
become the group's when the transaction commits (docs/groups.md).

With an authorizer (raylog/kafka/gateway/access.py), as Kafka's brokers: AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit need WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole request); then AddPartitionsToTxn WRITE
on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions, the others
OPERATION_NOT_ATTEMPTED, nothing added), AddOffsetsToTxn READ on the group
(GROUP_AUTHORIZATION_FAILED), TxnOffsetCommit READ on the group (GROUP_AUTHORIZATION_FAILED
for every partition) and READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions,
the others committed). A refused request never reaches the coordinator.
"""

from __future__ import annotations

import logging
from typing import Any

from raylog.errors import ProducerFencedError, RaylogError
from raylog.kafka.auth.acls import Operation, ResourceType
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.groups import group_code, known_partition, offsets_to_commit
from raylog.kafka.gateway.protocol import response_class

logger = logging.getLogger(__name__)

INIT_PRODUCER_ID_KEY, ADD_PARTITIONS_KEY, ADD_OFFSETS_KEY, END_TXN_KEY = 22, 24, 25, 26
TXN_OFFSET_COMMIT_KEY = 28
# A coordinator call waits at most for the coordinator's load (60 s) and its write (30 s).
CALL_TIMEOUT_S = 100.0
# The first version of each API whose clients know PRODUCER_FENCED (KIP-588).
_KNOWS_FENCED = {INIT_PRODUCER_ID_KEY: 4, ADD_PARTITIONS_KEY: 2, ADD_OFFSETS_KEY: 2,
                 END_TXN_KEY: 2, TXN_OFFSET_COMMIT_KEY: 3}


def txn_code(error: RaylogError, api_key: int, version: int) -> int:
    """The code to answer a transactional request's ``error`` with (module docstring)."""
    if isinstance(error, ProducerFencedError) and version < _KNOWS_FENCED[api_key]:
        return Code.INVALID_PRODUCER_EPOCH
    return group_code(error)


def _may_write_id(ctx: Context, transactional_id: str) -> bool:
    return ctx.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


async def _coordinator(ctx: Context, method: str, *args: Any) -> Any:
    return await ctx.backend.controller_call(method, *args, timeout_s=CALL_TIMEOUT_S)


async def init_transactional_producer(ctx: Context, version: int, request: Any) -> Any:
    """InitProducerId of a producer with a transactional id (produce.py sends it here)."""
    cls = response_class(INIT_PRODUCER_ID_KEY, version)
    producer_id, epoch = (request.producer_id, request.producer_epoch) if version >= 3 \
        else (-1, -1)
    try:
        producer_id, epoch = await _coordinator(
            ctx, "txn_init_producer_id", request.transactional_id,
            request.transaction_timeout_ms, producer_id, epoch)
    except RaylogError as e:
        logger.info("InitProducerId of %r refused: %s", request.transactional_id, e)
        return cls(throttle_time_ms=0, error_code=txn_code(e, INIT_PRODUCER_ID_KEY, version),
                   producer_id=-1, producer_epoch=-1)
    return cls(throttle_time_ms=0, error_code=Code.NONE, producer_id=producer_id,
               producer_epoch=epoch)


async def handle_add_partitions(ctx: Context, version: int, request: Any) -> Any:
    """Partitions of topics the principal may not write answer TOPIC_AUTHORIZATION_FAILED,
    those of unknown topics or out of range UNKNOWN_TOPIC_OR_PARTITION and the others
    OPERATION_NOT_ATTEMPTED, nothing added (Kafka's rule); otherwise all are added or all
    answer the coordinator's code."""
    cls = response_class(ADD_PARTITIONS_KEY, version)
    asked = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    refused: dict[tuple[str, int], int] = {}
    if not _may_write_id(ctx, request.v3_and_below_transactional_id):
        refused = dict.fromkeys(asked, Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        writable = {t: ctx.allows(Operation.WRITE, ResourceType.TOPIC, t)
                    for t in {t for t, _ in asked}}
        for tp in asked:
            if not writable[tp[0]]:
                refused[tp] = Code.TOPIC_AUTHORIZATION_FAILED
            elif not await known_partition(ctx, *tp):
                refused[tp] = Code.UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        codes = {tp: refused.get(tp, Code.OPERATION_NOT_ATTEMPTED) for tp in asked}
    else:
        code = Code.NONE
        try:
            await _coordinator(ctx, "txn_add_partitions", request.v3_and_below_transactional_id,
                               request.v3_and_below_producer_id,
                               request.v3_and_below_producer_epoch, asked)
        except RaylogError as e:
            logger.info("AddPartitionsToTxn of %r refused: %s",
                        request.v3_and_below_transactional_id, e)
            code = txn_code(e, ADD_PARTITIONS_KEY, version)
        codes = dict.fromkeys(asked, code)
    topic_result = cls.AddPartitionsToTxnTopicResult
    partition_result = topic_result.AddPartitionsToTxnPartitionResult
    return cls(throttle_time_ms=0, results_by_topic_v3_and_below=[
        topic_result(name=t.name, results_by_partition=[
            partition_result(partition_index=p, partition_error_code=codes[(t.name, p)])
            for p in t.partitions])
        for t in request.v3_and_below_topics])


async def handle_add_offsets(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(ADD_OFFSETS_KEY, version)
    if not _may_write_id(ctx, request.transactional_id):
        return cls(throttle_time_ms=0, error_code=Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.allows(Operation.READ, ResourceType.GROUP, request.group_id):
        return cls(throttle_time_ms=0, error_code=Code.GROUP_AUTHORIZATION_FAILED)
    try:
        await _coordinator(ctx, "txn_add_offsets", request.transactional_id,
                           request.producer_id, request.producer_epoch, request.group_id)
    except RaylogError as e:
        logger.info("AddOffsetsToTxn of %r refused: %s", request.transactional_id, e)
        return cls(throttle_time_ms=0, error_code=txn_code(e, ADD_OFFSETS_KEY, version))
    return cls(throttle_time_ms=0, error_code=Code.NONE)


async def handle_end_txn(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(END_TXN_KEY, version)
    if not _may_write_id(ctx, request.transactional_id):
        return cls(throttle_time_ms=0, error_code=Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        await _coordinator(ctx, "txn_end", request.transactional_id, request.producer_id,
                           request.producer_epoch, bool(request.committed))
    except RaylogError as e:
        logger.info("EndTxn of %r refused: %s", request.transactional_id, e)
        return cls(throttle_time_ms=0, error_code=txn_code(e, END_TXN_KEY, version))
    return cls(throttle_time_ms=0, error_code=Code.NONE)


async def handle_txn_offset_commit(ctx: Context, version: int, request: Any) -> Any:
    """A group's offsets committed inside the producer's transaction (after
    AddOffsetsToTxn): checked as a group commit is (v3+ name the member and generation;
    before, a commit outside the group's membership), pending until the transaction ends.
    Unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION; the rest all answer the
    coordinator's code."""
    cls = response_class(TXN_OFFSET_COMMIT_KEY, version)
    whole = None
    if not _may_write_id(ctx, request.transactional_id):
        whole = Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.allows(Operation.READ, ResourceType.GROUP, request.group_id):
        whole = Code.GROUP_AUTHORIZATION_FAILED
    codes, entries = await offsets_to_commit(ctx, request.topics, whole)
    member_id = (request.member_id or None) if version >= 3 else None
    generation = request.generation_id if member_id is not None else -1
    code = Code.NONE
    if entries:
        try:
            await _coordinator(ctx, "txn_offset_commit", request.transactional_id,
                               request.producer_id, request.producer_epoch, request.group_id,
                               member_id, generation, entries)
        except RaylogError as e:
            logger.info("TxnOffsetCommit of %r refused: %s", request.transactional_id, e)
            code = txn_code(e, TXN_OFFSET_COMMIT_KEY, version)
    for topic, partition, _, _ in entries:
        codes[topic, partition] = code
    topic_cls = cls.TxnOffsetCommitResponseTopic
    return cls(throttle_time_ms=0, topics=[
        topic_cls(name=topic.name, partitions=[
            topic_cls.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=codes[topic.name, p.partition_index])
            for p in topic.partitions])
        for topic in request.topics])


def register(dispatch: Dispatch) -> None:
    dispatch.add(ADD_PARTITIONS_KEY, 0, 3, handle_add_partitions)
    dispatch.add(ADD_OFFSETS_KEY, 0, 3, handle_add_offsets)
    dispatch.add(END_TXN_KEY, 0, 3, handle_end_txn)
    dispatch.add(TXN_OFFSET_COMMIT_KEY, 0, 3, handle_txn_offset_commit)
