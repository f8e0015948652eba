"""The producer: batches records per partition and sends them to partition leaders."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import ray

from raylog.arguments import (
    INT64_MAX,
    build_config,
    check_int_fields,
    check_timeout,
    refuses_unknown_options,
    short_repr,
)
from raylog.client.connection import RaylogCluster, TopicMetadata, cluster_or_default
from raylog.client.futures import BatchResult, RecordFuture, TableFuture
from raylog.client.remote import resolve
from raylog.client.tables import assign_sticky, partition_rows
from raylog.errors import (
    ClientClosedError,
    InvalidConfigError,
    InvalidRecordError,
    RaylogError,
    RecordTooLargeError,
    RequestTimeoutError,
    UnknownPartitionError,
)
from raylog.partitioner import Partitioner, StickyPartitioner, key_partition
from raylog.records import BatchBuilder, Codec, encode
from raylog.records.builder import BATCH_OVERHEAD, check_headers, record_size
from raylog.topics import check_partition, validate_topic_name

logger = logging.getLogger(__name__)

_CODECS = {"lz4": Codec.LZ4, "none": Codec.NONE}
MAX_SEQUENCE = 2**31 - 1


@refuses_unknown_options
@dataclasses.dataclass(frozen=True)
class ProducerConfig:
    """Producer settings, checked when built; names as Kafka's with ``_`` for ``.``."""

    acks: int | str = 1                  # 0: don't wait; 1: leader wrote it; "all": ISR has it
    batch_size: int = 4 << 20            # bytes per batch (one actor call per batch)
    linger_ms: int = 5                   # wait this long for a batch to fill before sending
    compression_type: str = "lz4"        # "lz4" or "none"
    buffer_memory: int = 64 << 20        # bytes of sealed, unacknowledged batches; send blocks
    max_block_ms: int = 60_000           # ... at most this long
    max_request_size: int = 8 << 20      # largest record a send accepts
    delivery_timeout_ms: int = 120_000   # give up on a batch (with retries) after this long
    retry_backoff_ms: int = 100          # wait between retries of a batch
    max_in_flight_requests_per_partition: int = 5

    def __post_init__(self) -> None:
        if type(self.acks) not in (int, str) or self.acks not in (0, 1, -1, "all", "0", "1",
                                                                   "-1"):
            raise InvalidConfigError(f"acks must be 0, 1 or 'all', got {self.acks!r}")
        acks = {"0": 0, "1": 1, "-1": "all", -1: "all"}.get(self.acks, self.acks)
        object.__setattr__(self, "acks", acks)
        if not isinstance(self.compression_type, str) or self.compression_type not in _CODECS:
            raise InvalidConfigError(
                f"compression_type must be 'lz4' or 'none', got {self.compression_type!r}")
        check_int_fields(self, skip=("acks", "compression_type"),
                         zero_ok=("linger_ms", "retry_backoff_ms"),
                         maximums={"buffer_memory": INT64_MAX})
        if self.batch_size <= BATCH_OVERHEAD:
            raise InvalidConfigError(f"batch_size must be > {BATCH_OVERHEAD}, "
                                     f"got {self.batch_size}")


def _check_record(key: object, value: object, headers: object) -> None:
    """What BatchBuilder.append checks of a record, for one that opens a new batch."""
    for what, data in (("key", key), ("value", value)):
        if data is not None and type(data) is not bytes:
            raise InvalidRecordError(f"record {what} must be bytes or None, got "
                                     f"{type(data).__name__}")
    if headers:
        check_headers(headers)


def producer_config(settings: Mapping[str, Any]) -> ProducerConfig:
    """The config of a Producer made with keyword ``settings`` (a ``partitioner`` among
    them, not part of the config); InvalidConfigError for unknown or bad ones."""
    if not isinstance(settings, Mapping):
        raise InvalidConfigError(f"producer settings must be a dict, got "
                                 f"{short_repr(settings)}")
    settings = dict(settings)
    partitioner = settings.pop("partitioner", None)
    if partitioner is not None and not callable(partitioner):
        raise InvalidConfigError(f"partitioner must be a callable (key, partitions) -> "
                                 f"partition, got {short_repr(partitioner)}")
    return build_config(ProducerConfig, "Producer", settings, ("cluster", "partitioner"))


class _Batch:
    """A batch for one partition, open (accumulating), then sealed, in flight, and done."""

    __slots__ = ("buffered", "builder", "created", "data", "deadline", "not_before",
                 "partition", "result", "sent_at", "topic")

    def __init__(self, topic: str, partition: int, builder: BatchBuilder | None,
                 result: BatchResult, delivery_timeout_s: float) -> None:
        self.topic = topic
        self.partition = partition
        self.builder = builder
        self.result = result
        self.created = time.monotonic()
        self.deadline = self.created + delivery_timeout_s
        self.not_before = 0.0  # retry backoff
        self.buffered = 0  # bytes counted against buffer_memory
        self.data: bytes | None = None
        self.sent_at = 0.0  # when the last attempt was sent (monotonic)


class Producer:
    """Sends records to topics, batching per partition, compressing each batch with LZ4.

    ``send`` appends a record to its partition's open batch and returns a future at once; a
    background sender thread seals batches that are full or ``linger_ms`` old, encodes them
    and sends each to its partition leader as one actor call, retrying retriable errors with
    refreshed metadata until ``delivery_timeout_ms``. Keys go to ``murmur2(key) % partitions``
    (the partition Kafka's clients choose); keyless records stick to one partition per batch.
    Safe to use from several threads.

    Batches carry a producer id and per-partition sequence numbers (Kafka's idempotent
    producer): the partition appends them in the order they were sealed, even when retries
    or Ray deliver them out of order, and answers a retry of a batch it already holds
    without a second copy, so records of one producer land once and in send order.

    >>> producer = Producer(linger_ms=10)
    >>> future = producer.send("pageviews", b'{"page": "/"}', key=b"user-1")
    >>> future.result().offset
    0
    >>> producer.close()
    """

    def __init__(self, *, cluster: RaylogCluster | None = None,
                 partitioner: Partitioner | None = None, **settings: Any) -> None:
        self.config = producer_config({**settings, "partitioner": partitioner})
        self._cluster = cluster_or_default(cluster)
        self._partitioner = partitioner
        self._codec = _CODECS[self.config.compression_type]
        self._max_record = self.config.max_request_size - BATCH_OVERHEAD
        self._delivery_timeout_s = self.config.delivery_timeout_ms / 1000
        self._topics: dict[str, TopicMetadata] = {}
        self._sticky = StickyPartitioner()
        self._sticky_open: dict[str, _Batch] = {}  # topic -> open batch of its sticky partition
        self._sequences: dict[tuple[str, int], list[int]] = {}  # -> [producer id, next seq]
        self._open: dict[tuple[str, int], _Batch] = {}
        self._ready: collections.deque[_Batch] = collections.deque()
        self._in_flight: dict[ray.ObjectRef, _Batch] = {}
        self._in_flight_per_partition: collections.Counter = collections.Counter()
        self._buffered_bytes = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._stopping = False
        self._encode_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._submitting = threading.Lock()  # held by the one thread submitting batches
        self._caller_busy = False  # a send() sealed and submitted a batch since last look
        self._sender = threading.Thread(target=self._run, name="raylog-producer-sender",
                                        daemon=True)
        self._sender.start()

    # -- the caller's side -----------------------------------------------------------------------

    def _topic(self, topic: str, refresh: bool = False) -> TopicMetadata:
        meta = self._cluster.topic(topic, refresh=refresh)
        self._topics[topic] = meta
        return meta

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] | None = None, partition: int | None = None,
             timestamp: int | None = None) -> RecordFuture:
        """Queue one record; return a future of its RecordMetadata.

        Raises ClientClosedError after close, UnknownTopicError, UnknownPartitionError,
        RecordTooLargeError and InvalidRecordError (bad key, value, headers or timestamp) at
        once; errors of delivery come through the future.
        """
        if self._closed:
            raise ClientClosedError("send() on a closed producer")
        if type(topic) is not str:
            validate_topic_name(topic)
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        elif type(timestamp) is not int or not 0 <= timestamp <= INT64_MAX:
            raise InvalidRecordError(f"record timestamp must be an int >= 0 ms, got "
                                     f"{short_repr(timestamp)}")
        if partition is None and key is None and self._partitioner is None:
            # Fast path: a keyless record joins its topic's open sticky batch, if it fits.
            with self._lock:
                batch = self._sticky_open.get(topic)
                if batch is not None:
                    count = batch.builder.append_value(timestamp, value) if headers is None \
                        else batch.builder.append(timestamp, None, value, headers)
                    if count:
                        return RecordFuture(batch.result, count - 1, timestamp)
        meta = self._topics.get(topic) or self._topic(topic)
        partitions = len(meta.partitions)
        if partition is None:
            if self._partitioner is not None:
                partition = self._partitioner(key, partitions)
                if type(partition) is not int or not 0 <= partition < partitions:
                    raise UnknownPartitionError(
                        f"partitioner chose {partition!r} for topic {topic!r} with "
                        f"{partitions} partitions")
            elif key is not None:
                partition = key_partition(key, partitions)
        else:
            check_partition(topic, partition, partitions)
        with self._lock:
            sticky = partition is None
            if sticky:
                partition = self._sticky.partition(topic, partitions)
            batch = self._open.get((topic, partition))
            count = batch.builder.append(timestamp, key, value, headers) if batch else 0
            sealed = False
            if not count and batch is not None:
                self._seal(batch)
                sealed = True
                if sticky:  # sealing moved the sticky partition on: follow it
                    partition = self._sticky.partition(topic, partitions)
                    batch = self._open.get((topic, partition))
                    count = batch.builder.append(timestamp, key, value, headers) if batch else 0
            if not count:
                _check_record(key, value, headers)  # before sizing it
                size = record_size(key, value, headers)
                if size > self._max_record:
                    raise RecordTooLargeError(
                        f"record of {size} bytes exceeds max_request_size="
                        f"{self.config.max_request_size}")
                batch = self._new_batch(topic, partition)
                count = batch.builder.append(timestamp, key, value, headers)
            if sticky:
                self._sticky_open[topic] = batch
        if sealed:
            self._caller_busy = True
            self._submit_ready()
            self._collect(0)
        return RecordFuture(batch.result, count - 1, timestamp)

    def send_batch(self, topic: str, table: pa.Table | pa.RecordBatch, *,
                   partition: int | None = None) -> TableFuture:
        """Produce the rows of an Arrow table without per-record Python.

        ``table`` has a ``value`` column (binary or string) and optionally ``key``,
        ``timestamp`` (ms or a timestamp type), ``headers`` and ``partition`` columns. Rows
        are partitioned like ``send`` would (by key, else spread batch by batch), encoded
        into batches of at most ``batch_size`` bytes and sent; the future resolves to the
        (partition, base offset, row count) of every batch.
        """
        if self._closed:
            raise ClientClosedError("send_batch() on a closed producer")
        if type(topic) is not str:
            validate_topic_name(topic)
        meta = self._topics.get(topic) or self._topic(topic)
        if partition is not None:
            check_partition(topic, partition, meta.num_partitions)
        rows = partition_rows(table, meta.num_partitions, self.config.batch_size,
                              partition=partition, topic=topic)
        with self._lock:  # only the sticky partitions and the sequences need it
            pieces = assign_sticky(rows, self._sticky, topic, meta.num_partitions)
            producers = [self._sequence(topic, part, columns.num_rows)
                         for part, columns in pieces]
        # LZ4 and Arrow's IPC writer release the GIL: encode the batches in parallel.
        encoded = self._encoder().map(
            lambda piece, producer: encode(piece[1], codec=self._codec, producer_id=producer[0],
                                           producer_epoch=producer[1],
                                           base_sequence=producer[2]),
            pieces, producers)
        results = []
        for (part, columns), data in zip(pieces, encoded, strict=True):
            result = BatchResult(topic, part, columns.num_rows)
            batch = _Batch(topic, part, None, result, self._delivery_timeout_s)
            batch.data = data
            results.append(result)
            with self._lock:
                self._enqueue(batch)
            self._submit_ready()
        return TableFuture(results)

    def _encoder(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._encode_pool is None:
            self._encode_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="raylog-encode")
        return self._encode_pool

    def _new_batch(self, topic: str, partition: int) -> _Batch:
        batch = _Batch(topic, partition, BatchBuilder(self.config.batch_size, self._codec),
                       BatchResult(topic, partition), self._delivery_timeout_s)
        self._open[(topic, partition)] = batch
        return batch

    def _seal(self, batch: _Batch, block: bool = True) -> None:
        """Move an open batch to the ready queue (lock held). With ``block``, wait while
        buffer_memory is full (a caller's send); the sender thread never waits, since only
        it may be there to free the memory."""
        del self._open[(batch.topic, batch.partition)]
        if self._sticky_open.get(batch.topic) is batch:
            del self._sticky_open[batch.topic]
        batch.result.count = len(batch.builder)
        batch.builder.set_producer(*self._sequence(batch.topic, batch.partition,
                                                   batch.result.count))
        self._sticky.next_batch(batch.topic, len(self._topics[batch.topic].partitions),
                                batch.partition)
        self._enqueue(batch, block)

    def _sequence(self, topic: str, partition: int, records: int) -> tuple[int, int, int]:
        """(producer id, epoch, first sequence) for the next batch of a partition (lock held).

        Batches of a partition get consecutive sequences in the order they are sealed; the
        replica appends them in that order and recognises a retry of one it already has. A
        partition whose sequences would overflow int32 moves to a new producer id.
        """
        entry = self._sequences.get((topic, partition))
        if entry is None or entry[1] + records > MAX_SEQUENCE:
            entry = self._sequences[(topic, partition)] = [random.getrandbits(63), 0]
        first = entry[1]
        entry[1] += records
        return entry[0], 0, first

    def _enqueue(self, batch: _Batch, block: bool = True) -> None:
        size = batch.builder.estimated_size if batch.data is None else len(batch.data)
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while block and self._buffered_bytes + size > self.config.buffer_memory and \
                self._buffered_bytes:
            if not self._wake.wait(deadline - time.monotonic()):
                error = RequestTimeoutError(
                    f"buffer_memory={self.config.buffer_memory} stayed full for "
                    f"max_block_ms={self.config.max_block_ms}")
                batch.result.complete(-1, error)  # its records fail with the send
                raise error
        batch.buffered = size
        self._buffered_bytes += size
        self._ready.append(batch)  # whoever sealed it submits it (or the sender, by linger)

    def flush(self, timeout: float | None = None) -> None:
        """Send every queued record and wait until all are acknowledged (or failed)."""
        check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            for key, batch in list(self._open.items()):
                if self._open.get(key) is batch:  # sealing may wait, letting others seal
                    self._seal(batch)
        while True:
            with self._lock:
                # Counted from sealing until acknowledged: covers batches another thread is
                # encoding or submitting, which are neither ready nor in flight.
                if not self._buffered_bytes:
                    return
            remaining = 0.01 if deadline is None else min(deadline - time.monotonic(), 0.01)
            if remaining <= 0:
                raise RequestTimeoutError(f"flush did not finish within {timeout} s")
            self._submit_ready()
            self._collect(remaining)

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender thread and refuse further sends. Idempotent."""
        check_timeout("timeout", timeout)
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            with self._lock:
                self._stopping = True
                self._wake.notify_all()
            self._sender.join(timeout=10)
            if self._encode_pool is not None:
                self._encode_pool.shutdown(wait=False)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending -----------------------------------------------------------------------------
    #
    # Sealed batches are submitted by whichever thread gets there first: the caller's thread
    # right after send() sealed a batch (so a busy producer encodes and submits without
    # handing the GIL to another thread for every batch), or the sender thread, which wakes
    # every linger_ms to seal lingering batches and collect acknowledgements while the
    # caller is idle. One thread submits at a time, so a partition's batches go in order.

    def _run(self) -> None:
        try:
            self._send_until_stopped()
        except BaseException as e:  # the sender must never die silently: fail what it holds
            logger.exception("the producer's sender thread failed")
            self._abandon(e)

    def _send_until_stopped(self) -> None:
        linger_s = self.config.linger_ms / 1000
        while True:
            with self._lock:
                if self._stopping and not self._ready and not self._in_flight:
                    return
                now = time.monotonic()
                for batch in [b for b in self._open.values() if now - b.created >= linger_s]:
                    self._seal(batch, block=False)
                if not self._ready and not self._in_flight:
                    self._wake.wait(linger_s if self._open else 0.05)
                    continue
                if self._caller_busy:
                    # The caller's thread is sealing and submitting batches itself: stay out
                    # of its way (and off the GIL) for a linger period.
                    self._caller_busy = False
                    self._wake.wait(max(linger_s, 0.005))
                    continue
            self._submit_ready()
            self._collect(min(linger_s, 0.005) if self._open or self._ready else 0.05)

    def _abandon(self, error: BaseException) -> None:
        """Fail every batch the producer holds and refuse further sends."""
        with self._lock:
            self._closed = True
            batches = [*self._open.values(), *self._ready, *self._in_flight.values()]
            self._open.clear()
            self._ready.clear()
            self._in_flight.clear()
            self._buffered_bytes = 0
            self._wake.notify_all()
        for batch in batches:
            batch.result.complete(-1, error)

    def _take_sendable(self, now: float) -> list[_Batch]:
        """Ready batches whose partition has room in flight and whose backoff is over."""
        limit = self.config.max_in_flight_requests_per_partition
        out, kept = [], collections.deque()
        while self._ready:
            batch = self._ready.popleft()
            key = (batch.topic, batch.partition)
            if self._in_flight_per_partition[key] >= limit or now < batch.not_before:
                kept.append(batch)
            else:
                self._in_flight_per_partition[key] += 1
                out.append(batch)
        self._ready = kept
        return out

    def _submit_ready(self) -> None:
        """Encode and submit the sendable batches, unless another thread is doing it."""
        if not self._submitting.acquire(blocking=False):
            return
        try:
            with self._lock:
                sendable = self._take_sendable(time.monotonic())
            for batch in sendable:
                self._submit(batch)
        finally:
            self._submitting.release()

    def _submit(self, batch: _Batch) -> None:
        """Encode (once) and send one batch to its leader."""
        try:
            if batch.data is None:
                batch.data = batch.builder.build()
                batch.builder = None
            batch.sent_at = time.monotonic()
            meta = self._topics.get(batch.topic) or self._topic(batch.topic)
            target = meta.partitions[batch.partition]
            ref = target.leader_client().append(batch.data, self.config.acks,
                                                target.leader_epoch)
        except Exception as e:  # every failure ends in the batch's future
            self._failed(batch, e)
            return
        if self.config.acks == 0:
            self._finish(batch, -1, None)
            return
        with self._lock:
            self._in_flight[ref] = batch

    def _collect(self, timeout: float) -> None:
        """Complete the batches whose appends finished (waiting up to ``timeout`` s)."""
        refs = list(self._in_flight)
        if not refs:
            return
        done, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if done and len(refs) > 1:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in done:
            with self._lock:
                batch = self._in_flight.pop(ref, None)
            if batch is None:
                continue  # the other thread collected it
            try:
                info = resolve(ref)
            except Exception as e:  # every failure ends in the batch's future
                self._failed(batch, e)
                continue
            self._finish(batch, info.base_offset, None)

    def _failed(self, batch: _Batch, error: Exception) -> None:
        now = time.monotonic()
        retriable = isinstance(error, RaylogError) and error.retriable
        if retriable and now < batch.deadline and not self._closed:
            logger.debug("retrying batch for %s-%d after %r", batch.topic, batch.partition, error)
            if self._topics[batch.topic].fetched_at < batch.sent_at:
                # Not already refreshed since this attempt (say, for another failed batch).
                try:
                    self._topic(batch.topic, refresh=True)
                except RaylogError as refresh_error:
                    logger.debug("metadata refresh failed: %r", refresh_error)
            with self._lock:
                self._in_flight_per_partition[(batch.topic, batch.partition)] -= 1
                batch.not_before = now + self.config.retry_backoff_ms / 1000
                self._ready.appendleft(batch)
                self._wake.notify_all()
            return
        self._finish(batch, -1, error)

    def _finish(self, batch: _Batch, base_offset: int, error: BaseException | None) -> None:
        with self._lock:
            self._in_flight_per_partition[(batch.topic, batch.partition)] -= 1
            self._buffered_bytes -= batch.buffered
            self._wake.notify_all()
        batch.result.complete(base_offset, error)
