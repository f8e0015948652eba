"""The producer: batches records per partition and sends them to partition leaders."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import ray

from raylog.client.connection import (
    REQUEST_SLACK_S,
    SLOW_REFRESH_S,
    SLOW_REQUEST_S,
    RaylogCluster,
    TopicMetadata,
    cluster_or_default,
)
from raylog.client.futures import BatchResult, RecordFuture, TableFuture
from raylog.client.remote import appended, discard, resolve, wait_done
from raylog.client.sender_state import OutgoingBatch, PartitionSender
from raylog.client.tables import assign_sticky, partition_rows
from raylog.errors import (
    ActorUnavailableError,
    ClientClosedError,
    InvalidConfigError,
    InvalidRecordError,
    OutOfOrderSequenceError,
    ProduceFailedError,
    RaylogError,
    RecordTooLargeError,
    RequestTimeoutError,
    UnknownPartitionError,
)
from raylog.metadata.topics import check_partition, validate_topic_name
from raylog.records import BatchBuilder, Codec, encode
from raylog.records.builder import BATCH_OVERHEAD, RECORD_OVERHEAD, check_headers, record_size
from raylog.records.partitioner import Partitioner, StickyPartitioner, key_partition
from raylog.replica.producer_state import RECENT_BATCHES
from raylog.util.arguments import (
    INT64_MAX,
    build_config,
    check_functions,
    check_int_fields,
    check_timeout,
    refuses_unknown_options,
    short_repr,
)
from raylog.util.backoff import backoff_s

logger = logging.getLogger(__name__)

_CODECS = {"lz4": Codec.LZ4, "none": Codec.NONE}


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
    request_timeout_ms: int = 30_000     # acks="all": the leader answers a timeout after this
    retry_backoff_ms: int = 100          # wait before the first retry of a batch, then ...
    retry_backoff_max_ms: int = 1000     # ... twice as long each time, up to this (KIP-580)
    max_in_flight_requests_per_partition: int = 5
    # Requests one broker has in flight from this producer, all its partitions together (as
    # Kafka's max.in.flight.requests.per.connection): a broker serves its calls one at a
    # time, so more only wait in its queue, and while they wait new records gather into
    # fewer, larger batches instead.
    max_in_flight_requests_per_broker: int = 2

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
        if self.delivery_timeout_ms < self.linger_ms:
            raise InvalidConfigError(f"delivery_timeout_ms must be >= linger_ms="
                                     f"{self.linger_ms}, got {self.delivery_timeout_ms}")
        if acks != 0 and self.max_in_flight_requests_per_partition > RECENT_BATCHES:
            # A retry should find its first answer among those its leader remembers, or a
            # batch written once would fail (as Kafka's idempotent producer insists).
            raise InvalidConfigError(
                f"max_in_flight_requests_per_partition must be at most {RECENT_BATCHES} with "
                f"acks={acks!r} (idempotent), got {self.max_in_flight_requests_per_partition}")
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


class Producer:
    """Sends records to topics, batching per partition, compressing each batch with LZ4.

    ``send`` appends a record to its partition's open batch and returns a future at once; a
    background sender thread seals batches that are full or ``linger_ms`` old, encodes them
    and sends each to its partition leader as one actor call, retrying retriable errors with
    refreshed metadata and a growing backoff. Every future resolves: acknowledged, or failed
    at the latest when ``delivery_timeout_ms`` has passed since its batch was opened, also
    while the controller or a leader hangs: the sender thread never waits on the controller
    (metadata is refreshed by the connection's background thread), and an attempt whose
    leader was replaced meanwhile, or that outlived ``request_timeout_ms``, is given up and
    sent again (see ``_watch_attempts``). Keys go
    to ``murmur2(key) % partitions`` (the partition Kafka's clients choose); keyless records
    stick to one partition per batch. Safe to use from several threads.

    With ``acks`` 1 or ``"all"`` batches carry a producer id, epoch and per-partition
    sequence numbers (Kafka's idempotent producer; see ``sender_state``): a partition appends
    a producer's batches once each and in the order they were sealed, through retries,
    replica restarts and expired batches.

    >>> producer = Producer(linger_ms=10)
    >>> future = producer.send("pageviews", b'{"page": "/"}', key=b"user-1")
    >>> future.result().offset
    0
    >>> producer.close()
    """

    def __init__(self, *, cluster: RaylogCluster | None = None,
                 partitioner: Partitioner | None = None,
                 key_serializer: Callable[[Any], bytes] | None = None,
                 value_serializer: Callable[[Any], bytes] | None = None,
                 **settings: Any) -> None:
        self.config = producer_config({**settings, "partitioner": partitioner})
        check_functions("(object) -> bytes", key_serializer=key_serializer,
                        value_serializer=value_serializer)
        self._serializers = (key_serializer, value_serializer)
        self._cluster = cluster_or_default(cluster)
        self._partitioner = partitioner
        # send()'s fast path is for producers that only append bytes as they come.
        self._plain = partitioner is None and self._serializers == (None, None)
        self._codec = _CODECS[self.config.compression_type]
        self._max_record = self.config.max_request_size - BATCH_OVERHEAD
        self._delivery_timeout_s = self.config.delivery_timeout_ms / 1000
        self._idempotent = self.config.acks != 0  # nobody hears the answers with acks=0
        self._topics: dict[str, TopicMetadata] = {}
        self._sticky = StickyPartitioner()
        self._sticky_open: dict[str, OutgoingBatch] = {}  # topic -> its sticky open batch
        self._open: dict[tuple[str, int], OutgoingBatch] = {}
        self._senders: dict[tuple[str, int], PartitionSender] = {}
        self._sendable: dict[tuple[str, int], None] = {}  # partitions with queued batches
        self._in_flight: dict[ray.ObjectRef, OutgoingBatch] = {}
        self._buffered_bytes = 0
        self._failures = _Failures()
        self._last_expiry_check = 0.0
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

    def _topic(self, topic: str) -> TopicMetadata:
        """A topic's metadata, for a caller's send: asked of the controller (waiting at most
        max_block_ms, as Kafka's send waits for metadata) if the producer has none yet."""
        meta = self._cluster.topic(topic, timeout=self.config.max_block_ms / 1000)
        self._topics[topic] = meta
        return meta

    def _latest(self, topic: str) -> TopicMetadata:
        """The newest metadata of a topic this producer sends to, without waiting: what the
        connection's background refreshes brought, if newer than what the producer holds."""
        mine = self._topics[topic]
        cached = self._cluster.cached(topic)
        if cached is not None and cached.fetched_at > mine.fetched_at:
            self._topics[topic] = mine = cached
        return mine

    def send(self, topic: str, value: Any = None, key: Any = None,
             headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None
             = None, partition: int | None = None, timestamp: int | None = None
             ) -> RecordFuture:
        """Queue one record; return a future of its RecordMetadata.

        ``key`` and ``value`` are bytes, or what the ``key_serializer`` and
        ``value_serializer`` given to the producer turn into bytes (None stays None: a
        tombstone). ``headers`` is a list of (str, bytes or None) pairs or a dict.

        Raises ClientClosedError after close, UnknownTopicError, UnknownPartitionError,
        RecordTooLargeError and InvalidRecordError (bad key, value, headers or timestamp, or
        a serializer that failed) at once; errors of delivery come through the future.
        """
        if key is None and partition is None and headers is None and timestamp is None \
                and self._plain:
            # The commonest record (no key, no headers, stamped now) joins its topic's open
            # sticky batch: a clock read, a lock, a dict lookup and two list appends, inline
            # (a method call would cost as much again: see BatchBuilder). Anything else (a
            # first record, a full batch, a closed producer whose open batches are gone, a
            # value that is not bytes, a topic that is not a str) takes the general path.
            # (acquire/release costs half of what `with` costs here: 80 ns a record)
            timestamp = time.time_ns() // 1_000_000
            lock = self._lock
            lock.acquire()
            try:
                batch = self._sticky_open.get(topic) if type(topic) is str else None
                if batch is not None and type(value) is bytes:
                    builder = batch.builder
                    room = builder.room - RECORD_OVERHEAD - len(value)
                    if room >= 0 and builder.plain:
                        builder.room = room
                        builder.timestamps.append(timestamp)
                        values = builder.values
                        values.append(value)
                        return RecordFuture(batch.result, len(values) - 1, timestamp)
            finally:
                lock.release()
        if self._closed:
            raise ClientClosedError("send() on a closed producer")
        if self._serializers != (None, None):
            key, value = self._serialize(key, value)
        if headers is not None and isinstance(headers, Mapping):  # an ABC check: slow
            headers = list(headers.items())
        if type(topic) is not str:
            validate_topic_name(topic)
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        elif type(timestamp) is not int or not 0 <= timestamp <= INT64_MAX:
            raise InvalidRecordError(f"record timestamp must be an int >= 0 ms, got "
                                     f"{short_repr(timestamp)}")
        if partition is None and key is None and self._partitioner is None:
            # A keyless record the path above did not take (headers, its own timestamp, a
            # serializer) joins its topic's open sticky batch too, if it fits.
            with self._lock:
                batch = self._sticky_open.get(topic)
                if batch is not None:
                    count = batch.builder.append(timestamp, None, value, headers)
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

    def _serialize(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        out = []
        for what, function, data in (("key", self._serializers[0], key),
                                     ("value", self._serializers[1], value)):
            if function is not None and data is not None:
                try:
                    data = function(data)
                except Exception as e:  # a user's function: any failure refuses the record
                    raise InvalidRecordError(f"{what}_serializer failed: {e!r}") from e
                if isinstance(data, bytearray | memoryview):
                    data = bytes(data)
                elif not isinstance(data, bytes):
                    raise InvalidRecordError(f"{what}_serializer must return bytes, returned "
                                             f"{short_repr(data)}")
            out.append(data)
        return out[0], out[1]

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
        with self._lock:
            pieces = assign_sticky(rows, self._sticky, topic, meta.num_partitions)
            # The numbers the batches will most likely get when queued; if another thread
            # queues batches of the same partition first, they are stamped again then.
            planned = self._plan_numbers(topic, pieces)
        # LZ4 and Arrow's IPC writer release the GIL: encode the batches in parallel.
        encoded = self._encoder().map(
            lambda piece, fields: encode(piece[1], codec=self._codec, producer_id=fields[0],
                                         producer_epoch=fields[1], base_sequence=fields[2]),
            pieces, planned)
        results = []
        now = time.monotonic()
        for (part, columns), data, fields in zip(pieces, encoded, planned, strict=True):
            result = BatchResult(topic, part, columns.num_rows)
            batch = OutgoingBatch(topic, part, None, result, now, self._delivery_timeout_s)
            batch.data, batch.stamped = data, fields
            results.append(result)
            with self._lock:
                self._enqueue(batch)
            self._submit_ready()
        return TableFuture(results)

    def _plan_numbers(self, topic: str, pieces: list[tuple[int, pa.RecordBatch]]
                      ) -> list[tuple[int, int, int]]:
        """(producer id, epoch, first sequence) each piece gets if queued next (lock held)."""
        next_sequence: dict[int, int] = {}
        planned = []
        for part, columns in pieces:
            sender = self._sender_of((topic, part))
            first = next_sequence.get(part, sender.next_sequence)
            next_sequence[part] = first + columns.num_rows
            planned.append((sender.producer_id, sender.epoch, first if self._idempotent else -1))
        return planned

    def _encoder(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._encode_pool is None:
            self._encode_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="raylog-encode")
        return self._encode_pool

    def _sender_of(self, key: tuple[str, int]) -> PartitionSender:
        sender = self._senders.get(key)
        if sender is None:
            sender = self._senders[key] = PartitionSender(self._idempotent)
        return sender

    def _new_batch(self, topic: str, partition: int) -> OutgoingBatch:
        batch = OutgoingBatch(topic, partition, BatchBuilder(self.config.batch_size, self._codec),
                              BatchResult(topic, partition), time.monotonic(),
                              self._delivery_timeout_s)
        self._open[(topic, partition)] = batch
        self._wake.notify()  # a sender waiting with nothing open starts its linger now
        return batch

    def _seal(self, batch: OutgoingBatch, block: bool = True) -> None:
        """Move an open batch to its partition's queue (lock held). With ``block``, wait while
        buffer_memory is full (a caller's send); the sender thread never waits, since only
        it may be there to free the memory."""
        del self._open[(batch.topic, batch.partition)]
        if self._sticky_open.get(batch.topic) is batch:
            del self._sticky_open[batch.topic]
        batch.result.count = len(batch.builder)
        self._sticky.next_batch(batch.topic, len(self._topics[batch.topic].partitions),
                                batch.partition)
        self._enqueue(batch, block)

    def _enqueue(self, batch: OutgoingBatch, block: bool = True) -> None:
        """Count a sealed batch against buffer_memory (waiting for room with ``block``), then
        number it and queue it for its partition (lock held)."""
        size = batch.builder.estimated_size if batch.data is None else len(batch.data)
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while block and self._buffered_bytes + size > self.config.buffer_memory and \
                self._buffered_bytes and not self._closed:
            if not self._wake.wait(deadline - time.monotonic()):
                error = RequestTimeoutError(
                    f"buffer_memory={self.config.buffer_memory} stayed full for "
                    f"max_block_ms={self.config.max_block_ms}")
                batch.result.complete(-1, error)  # its records fail with the send
                raise error
        if self._closed:  # abandoned while this caller waited for room
            error = ClientClosedError("the producer was closed before the batch was queued")
            batch.result.complete(-1, error)
            raise error
        batch.buffered = size
        self._buffered_bytes += size
        # Numbered only now, with no wait between numbering and queueing: batches of a
        # partition enter its queue in sequence order whichever threads seal them.
        sender = self._sender_of(batch.key)
        sender.number(batch, batch.result.count)
        sender.push(batch)
        self._sendable[batch.key] = None  # whoever sealed it submits it (or the sender)

    def flush(self, timeout: float | None = None) -> None:
        """Send every queued record and wait until each is acknowledged or has failed.

        Raises ProduceFailedError if records sent since the last flush failed and nobody
        looked at their futures (each holds its own error), so that a program that only
        flushes never takes a failure for a success; RequestTimeoutError if ``timeout`` s
        pass first.
        """
        check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            for key, batch in list(self._open.items()):
                if self._open.get(key) is batch:  # sealing may wait, letting others seal
                    self._seal(batch)
        while True:
            with self._lock:
                # Counted from sealing until it ends: covers batches another thread is
                # encoding or submitting, which are neither queued nor in flight.
                if not self._buffered_bytes:
                    break
            remaining = 0.01 if deadline is None else min(deadline - time.monotonic(), 0.01)
            if remaining <= 0:
                raise RequestTimeoutError(f"flush did not finish within {timeout} s")
            self._submit_ready()
            self._collect(remaining)
        with self._lock:
            failures, self._failures = self._failures, _Failures()
        failures.raise_if_any()

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender thread and refuse further sends. Idempotent.

        Records still unacknowledged when ``timeout`` s have passed fail with
        ClientClosedError. Raises what :meth:`flush` raises.
        """
        check_timeout("timeout", timeout)
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._abandon(ClientClosedError("the producer was closed before the batch was "
                                            "acknowledged"))
            with self._lock:
                self._stopping = True
                self._wake.notify_all()
            self._sender.join(timeout=10)
            if self._encode_pool is not None:
                self._encode_pool.shutdown(wait=False)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            self.close()
        except ProduceFailedError:
            if exc_type is None:
                raise
            # The block's own exception is the one to see; the futures hold these errors.
            logger.exception("records failed while the producer's block raised")

    # -- sending -----------------------------------------------------------------------------
    #
    # Sealed batches are submitted by whichever thread gets there first: the caller's thread
    # right after send() sealed a batch (so a busy producer encodes and submits without
    # handing the GIL to another thread for every batch), or the sender thread, which wakes
    # every linger_ms to seal lingering batches, collect acknowledgements and expire batches
    # while the caller is idle. One thread submits at a time, so a partition's batches go in
    # order.

    def _run(self) -> None:
        try:
            self._send_until_stopped()
        except BaseException as e:  # the sender must never die silently: fail what it holds
            logger.exception("the producer's sender thread failed")
            self._abandon(e)

    def _send_until_stopped(self) -> None:
        linger_s = self.config.linger_ms / 1000
        while True:
            now = time.monotonic()
            if now - self._last_expiry_check >= EXPIRY_CHECK_INTERVAL_S:
                self._last_expiry_check = now
                self._expire(now)
                self._watch_attempts(now)
            with self._lock:
                if self._stopping and not self._buffered_bytes and not self._open:
                    return
                loads = self._broker_loads()
                for batch in [b for b in self._open.values()
                              if now - b.created >= linger_s and self._room_for(b.key, loads)]:
                    self._seal(batch, block=False)
                if not self._sendable and not self._in_flight:
                    self._wake.wait(linger_s if self._open else EXPIRY_CHECK_INTERVAL_S)
                    continue
                if self._caller_busy:
                    # The caller's thread is sealing and submitting batches itself: stay out
                    # of its way (and off the GIL) for a linger period.
                    self._caller_busy = False
                    self._wake.wait(max(linger_s, 0.005))
                    continue
            self._submit_ready()
            # Batches waiting: look again within a linger period (at least a millisecond:
            # with linger_ms=0 a zero wait would spin, and a batch opened meanwhile waits
            # no longer than that); else wait for answers.
            self._collect(max(min(linger_s, 0.005), 0.001) if self._open or self._sendable
                          else EXPIRY_CHECK_INTERVAL_S)

    def _room_for(self, key: tuple[str, int], loads: collections.Counter[int | None]) -> bool:
        """Whether a batch sealed now for this partition could go out at once (lock held),
        its leader's broker having ``loads`` requests in flight. While it could not, a
        lingering batch stays open and keeps filling up to batch_size, as Kafka's accumulator
        does: a busy partition gets fewer, larger batches instead of a growing queue of small
        ones."""
        if loads[self._leader_of(key)] >= self.config.max_in_flight_requests_per_broker:
            return False
        sender = self._senders.get(key)
        if sender is None or not sender.in_flight:
            return sender is None or not sender.queue
        return not sender.queue and not sender.reset_pending and \
            len(sender.in_flight) < self.config.max_in_flight_requests_per_partition

    def _leader_of(self, key: tuple[str, int]) -> int | None:
        meta = self._topics.get(key[0])
        return None if meta is None else meta.partitions[key[1]].leader

    def _broker_loads(self) -> collections.Counter[int | None]:
        """Requests in flight (or being encoded to go) per leader broker (lock held)."""
        loads: collections.Counter[int | None] = collections.Counter()
        for key, sender in self._senders.items():
            if sender.in_flight:
                loads[self._leader_of(key)] += len(sender.in_flight)
        return loads

    def _abandon(self, error: BaseException) -> None:
        """Fail every batch the producer holds and refuse further sends."""
        with self._lock:
            self._closed = True
            batches = list(self._open.values())
            self._open.clear()
            self._sticky_open.clear()
            for sender in self._senders.values():
                batches.extend(sender.drain())
            self._sendable.clear()
            self._in_flight.clear()
            self._buffered_bytes = 0
            for batch in batches:
                batch.ref = None
            self._wake.notify_all()
        for batch in batches:
            batch.result.complete(-1, error)

    def _expire(self, now: float) -> None:
        """Fail the batches whose delivery_timeout_ms has passed, queued or in flight."""
        with self._lock:
            if not self._buffered_bytes and not self._open:
                return
            expired = [b for b in self._open.values() if b.deadline <= now]
            for batch in expired:  # open too long: kept open while its partition was stuck
                del self._open[batch.key]
                if self._sticky_open.get(batch.topic) is batch:
                    del self._sticky_open[batch.topic]
                batch.result.count = len(batch.builder)
            for sender in self._senders.values():
                if sender:
                    expired.extend(sender.expire(now))
            errors = []
            for batch in expired:
                logger.debug("expiring a batch of %s-%d: %d attempts, %s", batch.topic,
                             batch.partition, batch.attempts,
                             "in flight" if batch.ref is not None else "queued")
                self._forget(batch)
                errors.append(RequestTimeoutError(
                    f"{batch.result.count} records for {batch.topic}-{batch.partition} not "
                    f"acknowledged within delivery_timeout_ms="
                    f"{self.config.delivery_timeout_ms} ({batch.attempts} attempts)"))
                self._failures.add(batch.result)
            if expired:
                self._wake.notify_all()
        for batch, error in zip(expired, errors, strict=True):
            batch.result.complete(-1, error)

    def _watch_attempts(self, now: float) -> None:
        """Give up waiting on attempts that will not be answered soon, as unanswered (they
        may have been appended: retried under their own numbers, never renumbered).

        An attempt outstanding for SLOW_REQUEST_S has the topic's metadata refreshed in the
        background (at most every SLOW_REFRESH_S): a leader that hangs (stopped, stuck on a
        disk) answers nothing until the cluster fences it and elects another. Once the
        metadata shows a newer leader epoch than the attempt went to, the attempt is
        abandoned and retried at the new leader. Any attempt outstanding past
        request_timeout_ms plus REQUEST_SLACK_S is abandoned too (a live leader answers
        within request_timeout_ms): nothing waits on a request forever."""
        limit_s = self.config.request_timeout_ms / 1000 + REQUEST_SLACK_S
        abandoned = []
        slow = set()
        with self._lock:
            for ref, batch in list(self._in_flight.items()):
                waited = now - batch.sent_at
                if waited < SLOW_REQUEST_S:
                    continue
                slow.add(batch.topic)
                broker, epoch = batch.sent_to
                current = self._latest(batch.topic).partitions[batch.partition]
                if current.leader_epoch > epoch:
                    why = (f"the partition has a new leader (broker {current.leader}, leader "
                           f"epoch {current.leader_epoch})")
                elif waited >= limit_s:
                    why = (f"longer than request_timeout_ms={self.config.request_timeout_ms} "
                           f"and {REQUEST_SLACK_S:g} s")
                else:
                    continue
                del self._in_flight[ref]
                discard(ref)  # a late answer is read and dropped
                batch.ref = None
                abandoned.append((batch, RequestTimeoutError(
                    f"no answer from broker {broker} (leader epoch {epoch}) for "
                    f"{batch.topic}-{batch.partition} after {waited:.1f} s, and {why}: the "
                    f"batch may have been appended")))
        for topic in slow:
            self._cluster.refresh_soon(topic, newer_than=now - SLOW_REFRESH_S)
        for batch, error in abandoned:
            logger.info("%s", error)
            self._failed(batch, error)

    def _forget(self, batch: OutgoingBatch) -> None:
        """A batch has ended: release its memory and its request (lock held)."""
        self._buffered_bytes -= batch.buffered
        batch.buffered = 0
        if batch.ref is not None:
            if self._in_flight.pop(batch.ref, None) is not None:
                discard(batch.ref)  # its late answer is read and dropped
            batch.ref = None

    def _take_sendable(self, now: float) -> tuple[list[OutgoingBatch], list[OutgoingBatch]]:
        """Batches to send now: per partition in sequence order, within the in-flight limit
        and after any backoff of the batch at the head of the queue; and the batches an
        epoch bump cannot renumber safely, which fail (lock held)."""
        limit = self.config.max_in_flight_requests_per_partition
        per_broker = self.config.max_in_flight_requests_per_broker
        loads = self._broker_loads()
        out, unsafe = [], []
        for key in list(self._sendable):
            sender = self._senders[key]
            leader = self._leader_of(key)
            free = per_broker - loads[leader]
            if free <= 0:
                continue  # stays sendable until its broker answers one
            sendable, dropped = sender.take(now, min(limit, len(sender.in_flight) + free))
            loads[leader] += len(sendable)
            out.extend(sendable)
            unsafe.extend(dropped)
            if not sender.queue:
                del self._sendable[key]
        for batch in unsafe:
            self._forget(batch)
            self._failures.add(batch.result)
        return out, unsafe

    def _submit_ready(self) -> None:
        """Encode and submit the sendable batches, unless another thread is doing it."""
        if not self._submitting.acquire(blocking=False):
            return
        try:
            with self._lock:
                sendable, unsafe = self._take_sendable(time.monotonic())
            for batch in unsafe:
                batch.result.complete(-1, batch.last_error)
            for batch in sendable:
                self._submit(batch)
        finally:
            self._submitting.release()

    def _submit(self, batch: OutgoingBatch) -> None:
        """Encode (once) and send one batch to its leader."""
        try:
            data = batch.encoded()
            leader = self._latest(batch.topic).partitions[batch.partition].leader_client()
            batch.sent_at = time.monotonic()
            batch.sent_to = leader.broker_id, leader.leader_epoch
            batch.attempts += 1
            ref = leader.append(data, self.config.acks, self.config.request_timeout_ms)
        except Exception as e:  # every failure ends in the batch's future
            self._failed(batch, e, sent=False)
            return
        if self.config.acks == 0:
            self._finish(batch, -1, None)
            return
        with self._lock:
            if batch in self._senders[batch.key].in_flight:  # not expired meanwhile
                batch.ref = ref
                self._in_flight[ref] = batch

    def _collect(self, timeout: float) -> None:
        """Complete the batches whose appends finished (waiting up to ``timeout`` s)."""
        refs = list(self._in_flight)
        if not refs:
            with self._lock:  # nothing to wait for but time (a backoff, a linger)
                self._wake.wait(timeout)
            return
        for ref in wait_done(refs, timeout):
            with self._lock:
                batch = self._in_flight.pop(ref, None)
            if batch is None:
                continue  # the other thread collected it, or it expired
            try:
                info = appended(resolve(ref), batch.topic, batch.partition)
            except Exception as e:  # every failure ends in the batch's future
                self._failed(batch, e)
                continue
            self._finish(batch, info.base_offset, None)

    def _failed(self, batch: OutgoingBatch, error: Exception, sent: bool = True) -> None:
        """An attempt failed; ``sent`` says whether the request left (then an error that is
        not the leader's answer leaves the outcome unknown)."""
        now = time.monotonic()
        retriable = isinstance(error, RaylogError) and error.retriable
        unanswered = error if sent and isinstance(
            error, ActorUnavailableError | RequestTimeoutError) else None
        if retriable and now < batch.deadline and not self._closed:
            logger.debug("retrying batch for %s-%d after %r", batch.topic, batch.partition, error)
            # Refused as ahead of its producer's sequence: the leader answered, and knowing
            # who leads changes nothing.
            ahead = self._idempotent and isinstance(error, OutOfOrderSequenceError)
            if not ahead:
                # In the background, never here: this may be the sender thread, which must
                # go on expiring batches and serving other partitions while the controller
                # hangs. The retry, after its backoff, goes where the newest metadata says.
                # Once per attempt: metadata asked for after it went out (or, for one that
                # could not go out, after now) knows at least what its error reflects.
                self._cluster.refresh_soon(batch.topic, newer_than=batch.sent_at if sent
                                           else now)
            with self._lock:
                sender = self._senders.get(batch.key)
                if sender is None or batch not in sender.in_flight:
                    return  # expired or abandoned meanwhile: already completed
                batch.ref = None
                retry_at = now + self._backoff_s(batch.attempts)
                if not ahead:
                    sender.retry(batch, retry_at, unanswered)
                elif sender.refused_ahead(batch, now, retry_at):
                    logger.info("%s-%d: the leader lacks what producer %d sent before "
                                "sequence %d, and nothing before it is pending (%s): bumping "
                                "its epoch", batch.topic, batch.partition, batch.producer_id,
                                batch.base_sequence, type(error).__name__)
                self._sendable[batch.key] = None
                self._wake.notify_all()
            return
        self._finish(batch, -1, error)

    def _backoff_s(self, attempts: int) -> float:
        """Exponential backoff with 20% jitter (KIP-580), from retry_backoff_ms up to
        retry_backoff_max_ms."""
        config = self.config
        return backoff_s(max(attempts - 1, 0), config.retry_backoff_ms / 1000,
                         max(config.retry_backoff_max_ms, config.retry_backoff_ms) / 1000, 0.2)

    def _finish(self, batch: OutgoingBatch, base_offset: int, error: BaseException | None
                ) -> None:
        with self._lock:
            sender = self._senders.get(batch.key)
            if sender is None or batch not in sender.in_flight:
                return  # expired or abandoned meanwhile: already completed
            if error is None:
                sender.acknowledged(batch)
            else:
                sender.failed(batch)
                self._failures.add(batch.result)
                if sender.queue:
                    self._sendable[batch.key] = None
            self._forget(batch)
            self._wake.notify_all()
        batch.result.complete(base_offset, error)


EXPIRY_CHECK_INTERVAL_S = 0.05


class _Failures:
    """The batches that failed since the last flush."""

    __slots__ = ("results",)

    def __init__(self) -> None:
        self.results: list[BatchResult] = []

    def add(self, result: BatchResult) -> None:
        self.results.append(result)

    def raise_if_any(self) -> None:
        """Raise ProduceFailedError for the failures whose futures nobody asked about (a
        caller who looked at a future, or gave it a callback, has seen its error)."""
        unseen = [r for r in self.results if not r.observed]
        if unseen:
            records = sum(r.count for r in unseen)
            first = unseen[0].peek(timeout=5)  # it may be completing on another thread
            raise ProduceFailedError(
                f"{records} records in {len(unseen)} batches failed, and their futures were "
                f"not looked at; the first error: {first!r}") from first
