"""Fetch (key 1, versions 4-12), ListOffsets (key 2, versions 1-7) and DeleteRecords
(key 21, versions 0-2).

Fetch reads each partition from its leader and answers its stored batches as Kafka v2
batches with the same offsets (``to_kafka_pieces``), encoded by hand (``fetch_frame``:
the records are not copied on the way out); a fetch from an offset inside a batch gets
the whole batch (raylog serves whole batches; Kafka's clients skip the records before
their offset). Fetch sessions are declined: every answer has session id 0, so clients
send full requests.

Isolation: a read_uncommitted Fetch (isolation_level 0) reads below the high watermark and
answers the high watermark as its last stable offset. A read_committed one (1) reads below
the partition's last stable offset and answers it with the aborted transactions (producer
id, first offset) overlapping what it returns: the client drops those producers' batches
from each first offset up to their abort marker (and every control batch), as Kafka's
clients do. ListOffsets for the latest offset with isolation_level 1 answers the last
stable offset.

min_bytes and max_wait_ms are the request's, as in Kafka: a first pass reads every
partition without waiting; if that is less than min_bytes, every partition is asked again
to wait up to max_wait_ms for data, and the answer goes out when the first has some (or at
max_wait_ms). ``max_bytes`` bounds the answer, except that the first partition with data
is always answered whole (as Kafka does, so a batch larger than the limit is not stuck).

Read-ahead: a Kafka consumer sends one Fetch at a time per connection and waits for its
answer, so each answer would cost it a round trip to the brokers. When a partition's answer
had records, the listener asks that partition's leader for what follows at once
(``_Prefetch``, one read per partition per connection); the client's next Fetch from that
offset takes it instead of asking again. Only a read-ahead that found records is used (an
empty one would carry an old high watermark): otherwise the partition is read afresh.
Records below the high watermark never change, so what was read ahead is what a fresh read
would return.

With an authorizer (raylog/kafka/gateway/access.py) a topic's partitions answer
TOPIC_AUTHORIZATION_FAILED, unread, without READ on it (Fetch), DESCRIBE (ListOffsets),
DELETE (DeleteRecords).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from raylog.errors import FencedEpochError, RaylogError, UnknownPartitionError
from raylog.kafka.auth.acls import Operation, ResourceType
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code, code_of
from raylog.kafka.gateway.fetch_frame import FetchAnswer, Partition
from raylog.kafka.gateway.protocol import response_class
from raylog.kafka.records import to_kafka_pieces
from raylog.records import iter_headers
from raylog.replica.partition import READ_COMMITTED, READ_UNCOMMITTED, FetchResult
from raylog.types import EARLIEST, LAST_STABLE, LATEST

FETCH_KEY = 1
LIST_OFFSETS_KEY = 2
DELETE_RECORDS_KEY = 21
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # ListOffsets v7: the record with the largest timestamp (not served)


class _Read:
    """One partition's part of a Fetch: what was asked and what was read."""

    __slots__ = ("aborted", "code", "data", "high_watermark", "index", "isolation",
                 "last_stable", "log_start", "max_bytes", "offset", "topic")

    def __init__(self, topic: str, index: int, offset: int, max_bytes: int,
                 isolation: str = READ_UNCOMMITTED) -> None:
        self.topic, self.index, self.offset, self.max_bytes = topic, index, offset, max_bytes
        self.isolation = isolation
        self.code = Code.NONE
        self.data = b""
        self.high_watermark = self.log_start = -1
        self.last_stable: int | None = None  # None: the high watermark
        self.aborted: list[tuple[int, int]] | None = None

    def took(self, result: FetchResult) -> None:
        """``result`` is what was read."""
        self.code = Code.NONE
        self.data = result.data
        self.high_watermark, self.log_start = result.high_watermark, result.log_start_offset
        if self.isolation == READ_COMMITTED:
            self.last_stable = result.last_stable_offset
            self.aborted = [(a.producer_id, a.first_offset) for a in result.aborted or ()]

    def took_from(self, other: _Read) -> None:
        """What ``other``, a read of the same partition, found."""
        self.code, self.data = other.code, other.data
        self.high_watermark, self.log_start = other.high_watermark, other.log_start
        self.last_stable, self.aborted = other.last_stable, other.aborted


async def _leader_topic(ctx: Context, name: str, index: int, client_epoch: int = -1) -> Any:
    """The topic's metadata for a request on partition ``index`` from a client that knows
    leader epoch ``client_epoch`` (-1: none): refreshed if the client knows a newer epoch;
    FencedEpochError if it knows an older one (it refreshes its metadata)."""
    meta = await ctx.backend.topic(name)
    if not 0 <= index < meta.num_partitions:
        raise UnknownPartitionError(f"{name} has no partition {index}")
    if client_epoch > meta.partitions[index].leader_epoch:
        meta = await ctx.backend.topic(name, 0.0)
    if 0 <= client_epoch < meta.partitions[index].leader_epoch:
        raise FencedEpochError(f"{name}-{index}: the client's leader epoch {client_epoch} is "
                               f"older than {meta.partitions[index].leader_epoch}")
    return meta


class _Prefetch:
    """A connection's reads ahead: (topic, partition) -> (offset, the read's task). Used
    from the listener's event loop only; kept in the connection's state."""

    KEY = "fetch.prefetch"

    def __init__(self) -> None:
        self.reads: dict[tuple[str, int, str], tuple[int, asyncio.Task]] = {}

    @classmethod
    def of(cls, ctx: Context) -> _Prefetch:
        found = ctx.connection.state.get(cls.KEY)
        if found is None:
            found = ctx.connection.state[cls.KEY] = cls()
        return found

    def take(self, topic: str, index: int, offset: int, isolation: str
             ) -> asyncio.Task | None:
        """The read ahead from exactly ``offset`` at ``isolation``, if one was made; any
        other is dropped."""
        entry = self.reads.pop((topic, index, isolation), None)
        if entry is None:
            return None
        if entry[0] != offset:
            entry[1].cancel()
            return None
        return entry[1]

    def start(self, ctx: Context, meta: Any, read: _Read) -> None:
        """Read what follows ``read``'s records, from its leader."""
        last = None
        for _, header in iter_headers(read.data, verify=False):
            last = header
        if last is None:
            return
        offset = last.base_offset + last.last_offset_delta + 1
        task = asyncio.ensure_future(ctx.backend.fetch(meta, read.index, offset,
                                                       read.max_bytes, 0, 0, read.isolation))
        task.add_done_callback(_drop_result_error)
        key = (read.topic, read.index, read.isolation)
        old = self.reads.pop(key, None)
        if old is not None:
            old[1].cancel()
        self.reads[key] = (offset, task)


def _drop_result_error(task: asyncio.Task) -> None:
    """A read ahead's error is not this connection's problem (the partition is read afresh
    when asked): retrieve it so that asyncio does not report it as never retrieved."""
    if not task.cancelled():
        task.exception()


async def _read(ctx: Context, read: _Read, epoch: int, max_wait_ms: int,
                min_bytes: int) -> None:
    try:
        meta = await _leader_topic(ctx, read.topic, read.index, epoch)
        result = await _read_ahead_of(ctx, read) if max_wait_ms == 0 else None
        if result is None:
            result = await ctx.backend.fetch(meta, read.index, read.offset, read.max_bytes,
                                             max_wait_ms, min_bytes, read.isolation)
    except RaylogError as e:
        read.code = ctx.error_code(read.topic, e)
        return
    read.took(result)
    if read.data:
        _Prefetch.of(ctx).start(ctx, meta, read)


async def _read_ahead_of(ctx: Context, read: _Read) -> FetchResult | None:
    """What was read ahead from ``read``'s offset, if it found records; else None."""
    task = _Prefetch.of(ctx).take(read.topic, read.index, read.offset, read.isolation)
    if task is None:
        return None
    try:
        result = await task
    except RaylogError:
        return None  # read afresh: the error, if it persists, is answered then
    return result if result.data else None


async def handle_fetch(ctx: Context, version: int, request: Any) -> Any:
    started = time.monotonic()
    isolation = READ_COMMITTED if request.isolation_level == 1 else READ_UNCOMMITTED
    reads = [(_Read(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, isolation),
              p.current_leader_epoch)
             for t in request.topics for p in t.partitions]
    denied = {t.topic for t in request.topics
              if not ctx.allows(Operation.READ, ResourceType.TOPIC, t.topic)}
    for read, _ in reads:
        if read.topic in denied:
            read.code = Code.TOPIC_AUTHORIZATION_FAILED
    await asyncio.gather(*(_read(ctx, r, epoch, 0, 0) for r, epoch in reads
                           if r.topic not in denied))
    got = sum(len(r.data) for r, _ in reads)
    remaining_ms = request.max_wait_ms - (time.monotonic() - started) * 1000
    if reads and got < request.min_bytes and remaining_ms > 0 and \
            all(r.code == Code.NONE for r, _ in reads):
        await _wait_for_data(ctx, reads, int(remaining_ms))
    return _fetch_answer(version, request, [r for r, _ in reads])


async def _wait_for_data(ctx: Context, reads: list[tuple[_Read, int]], wait_ms: int) -> None:
    """Ask every partition again to wait for data; keep what the first to answer with data
    brought (and whatever else came by then)."""
    waits = {}
    for read, epoch in reads:
        again = _Read(read.topic, read.index, read.offset, read.max_bytes, read.isolation)
        waits[asyncio.ensure_future(_read(ctx, again, epoch, wait_ms, 1))] = (read, again)
    pending = set(waits)
    deadline = time.monotonic() + wait_ms / 1000
    try:
        while pending:
            done, pending = await asyncio.wait(pending, timeout=deadline - time.monotonic(),
                                               return_when=asyncio.FIRST_COMPLETED)
            if not done:
                return
            arrived = False
            for task in done:
                read, again = waits[task]
                read.took_from(again)
                arrived = arrived or bool(again.data) or again.code != Code.NONE
            if arrived:
                return
    finally:
        for task in pending:
            task.cancel()


def _fetch_answer(version: int, request: Any, reads: list[_Read]) -> FetchAnswer:
    """The answer, encoded by hand (``fetch_frame``): its records go out as the translation
    made them, not copied into kafka-python's buffer."""
    budget = request.max_bytes
    topics: dict[str, list[Partition]] = {}
    for read in reads:
        records: list[bytes] = []
        if read.data and (budget > 0 or budget == request.max_bytes):
            try:
                records = to_kafka_pieces(read.data)
            except RaylogError as e:
                read.code = code_of(e)
            budget -= sum(len(piece) for piece in records)
        topics.setdefault(read.topic, []).append(Partition(
            index=read.index, error_code=read.code, high_watermark=read.high_watermark,
            log_start_offset=read.log_start, records=records,
            last_stable_offset=read.last_stable, aborted=read.aborted))
    return FetchAnswer(version, list(topics.items()))


# -- ListOffsets and DeleteRecords -----------------------------------------------------------


async def handle_list_offsets(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(LIST_OFFSETS_KEY, version)
    topic_cls = cls.ListOffsetsTopicResponse
    part_cls = topic_cls.ListOffsetsPartitionResponse
    # read_committed clients' "latest" is the last stable offset (isolation_level is v2+)
    latest = LAST_STABLE if version >= 2 and request.isolation_level == 1 else LATEST

    async def one(name: str, p: Any) -> Any:
        code, offset, timestamp, epoch = Code.NONE, -1, -1, -1
        try:
            meta = await _leader_topic(ctx, name, p.partition_index, p.current_leader_epoch)
            epoch = meta.partitions[p.partition_index].leader_epoch
            if p.timestamp == MAX_TIMESTAMP:
                code = Code.UNSUPPORTED_VERSION
            else:
                spec = {LATEST_TIMESTAMP: latest, EARLIEST_TIMESTAMP: EARLIEST}.get(
                    p.timestamp, p.timestamp)
                found = await ctx.backend.list_offset(meta, p.partition_index, spec)
                if found is not None:
                    offset, timestamp = found
        except RaylogError as e:
            code = ctx.error_code(name, e)
        return part_cls(partition_index=p.partition_index, error_code=code,
                        timestamp=timestamp, offset=offset, leader_epoch=epoch)

    topics = []
    for t in request.topics:
        if ctx.allows(Operation.DESCRIBE, ResourceType.TOPIC, t.name):
            parts = await asyncio.gather(*(one(t.name, p) for p in t.partitions))
        else:
            parts = [part_cls(partition_index=p.partition_index,
                              error_code=Code.TOPIC_AUTHORIZATION_FAILED, timestamp=-1,
                              offset=-1, leader_epoch=-1) for p in t.partitions]
        topics.append(topic_cls(name=t.name, partitions=list(parts)))
    return cls(throttle_time_ms=0, topics=topics)


async def handle_delete_records(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(DELETE_RECORDS_KEY, version)
    topic_cls = cls.DeleteRecordsTopicResult
    part_cls = topic_cls.DeleteRecordsPartitionResult

    async def one(name: str, p: Any) -> Any:
        try:
            meta = await _leader_topic(ctx, name, p.partition_index)
            low = await ctx.backend.delete_records(meta, p.partition_index, p.offset)
        except RaylogError as e:
            return part_cls(partition_index=p.partition_index, low_watermark=-1,
                            error_code=ctx.error_code(name, e))
        return part_cls(partition_index=p.partition_index, low_watermark=low,
                        error_code=Code.NONE)

    topics = []
    for t in request.topics:
        if ctx.allows(Operation.DELETE, ResourceType.TOPIC, t.name):
            parts = await asyncio.gather(*(one(t.name, p) for p in t.partitions))
        else:
            parts = [part_cls(partition_index=p.partition_index, low_watermark=-1,
                              error_code=Code.TOPIC_AUTHORIZATION_FAILED)
                     for p in t.partitions]
        topics.append(topic_cls(name=t.name, partitions=list(parts)))
    return cls(throttle_time_ms=0, topics=topics)


def register(dispatch: Dispatch) -> None:
    dispatch.add(FETCH_KEY, 4, 12, handle_fetch)
    dispatch.add(LIST_OFFSETS_KEY, 1, 7, handle_list_offsets)
    dispatch.add(DELETE_RECORDS_KEY, 0, 2, handle_delete_records)
