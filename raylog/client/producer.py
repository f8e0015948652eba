"""The producer: batches records per partition and sends them to partition leaders."""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import itertools
import logging
import math
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
from raylog.client.host_socket import SocketCall
from raylog.client.remote import Answer, appended, discard, when_done
from raylog.client.sender_state import Alarms, OutgoingBatch, PartitionSender, ProduceCall
from raylog.client.tables import assign_sticky, partition_rows
from raylog.client.transactions import TransactionManager, fenced
from raylog.errors import (
    ActorUnavailableError,
    BrokerStalledError,
    ClientClosedError,
    IllegalStateError,
    InternalError,
    InvalidConfigError,
    InvalidRecordError,
    LeadershipLostAfterAppendError,
    NotEnoughReplicasAfterAppendError,
    OutOfOrderSequenceError,
    ProduceFailedError,
    RaylogError,
    RecordTooLargeError,
    RequestTimeoutError,
    TransactionAbortedError,
    UnknownPartitionError,
)
from raylog.metadata.topics import check_partition, validate_topic_name
from raylog.quotas.enforcer import unwrap as unwrap_throttled
from raylog.records import BatchBuilder, Codec
from raylog.records.append import PlainSend
from raylog.records.builder import BATCH_OVERHEAD, RECORD_OVERHEAD, check_headers, record_size
from raylog.records.partitioner import Partitioner, StickyPartitioner, key_partition
from raylog.records.payload import encode_buffer
from raylog.replica.producer_state import RECENT_BATCHES
from raylog.types import ConsumerGroupMetadata, PreparedTransaction, TopicPartition
from raylog.util.arguments import (
    INT64_MAX,
    build_config,
    check_functions,
    check_id,
    check_int_fields,
    check_timeout,
    refuses_unknown_options,
    short_repr,
)
from raylog.util.backoff import backoff_s

logger = logging.getLogger(__name__)

_CODECS = {"lz4": Codec.LZ4, "none": Codec.NONE}
# The sender thread stays out of the way of a caller's thread that submits its own batches
# for a linger period, at most this long (s): nothing wakes that wait, and the answers of the
# batches the caller submitted last are collected by the sender once it ends (a caller that
# stopped sending, to flush or to wait on a future, collects none itself).
CALLER_BUSY_MAX_S = 0.05
# Over the produce socket, a second call goes to a broker while one is out only with a
# batch of at least this many bytes (or half batch_size, if less): see _call_may_go.
PIPELINED_BATCH_BYTES = 256 << 10


@refuses_unknown_options
@dataclasses.dataclass(frozen=True)
class ProducerConfig:
    """Producer settings, checked when built; names as Kafka's with ``_`` for ``.``."""

    acks: int | str = 1                  # 0: don't wait; 1: leader wrote it; "all": ISR has it
    batch_size: int = 4 << 20            # bytes per batch (of one partition)
    linger_ms: int = 5                   # wait this long for a batch to fill before sending
    compression_type: str = "lz4"        # "lz4" or "none"
    buffer_memory: int = 64 << 20        # bytes of sealed, unacknowledged batches; send blocks
    max_block_ms: int = 60_000           # ... at most this long
    # The largest record a send accepts, and the bytes of batches one produce call carries
    # (one batch at least), as Kafka's max.request.size.
    max_request_size: int = 8 << 20
    delivery_timeout_ms: int = 120_000   # give up on a batch (with retries) after this long
    request_timeout_ms: int = 30_000     # acks="all": the leader answers a timeout after this
    retry_backoff_ms: int = 100          # wait before the first retry of a batch, then ...
    retry_backoff_max_ms: int = 1000     # ... twice as long each time, up to this (KIP-580)
    max_in_flight_requests_per_partition: int = 5
    # Produce calls one broker has in flight from this producer (as Kafka's
    # max.in.flight.requests.per.connection); each call carries the ready batches of the
    # partitions one of its hosts serves. A host serves its calls one at a time, so more only
    # wait in its queue, and while they wait new records gather into fewer, larger batches.
    max_in_flight_requests_per_broker: int = 2
    # A transactional producer (docs/transactions.md): idempotent with acks="all"; the
    # coordinator aborts a transaction left open longer than transaction_timeout_ms.
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    # Who the brokers charge this producer's bytes and request time to (client quotas:
    # docs/quotas.md); as Kafka's client.id.
    client_id: str = "raylog-producer"
    # Produce calls go over the hosts' data sockets once this process has connected to
    # them (raylog/client/host_socket.py), by Ray's actor call until then; false: always
    # by Ray (docs/producer.md, "How batches reach the broker").
    produce_socket: bool = True

    def __post_init__(self) -> None:
        if type(self.acks) not in (int, str) or self.acks not in (0, 1, -1, "all", "0", "1",
                                                                   "-1"):
            raise InvalidConfigError(f"acks must be 0, 1 or 'all', got {self.acks!r}")
        acks = {"0": 0, "1": 1, "-1": "all", -1: "all"}.get(self.acks, self.acks)
        object.__setattr__(self, "acks", acks)
        if not isinstance(self.compression_type, str) or self.compression_type not in _CODECS:
            raise InvalidConfigError(
                f"compression_type must be 'lz4' or 'none', got {self.compression_type!r}")
        if self.transactional_id is not None and (
                not isinstance(self.transactional_id, str) or not self.transactional_id):
            raise InvalidConfigError(f"transactional_id must be a non-empty str or None, got "
                                     f"{short_repr(self.transactional_id)}")
        if self.transactional_id is not None and acks != "all":
            raise InvalidConfigError(f"a transactional producer needs acks='all' (its "
                                     f"default), got acks={self.acks!r}")
        check_id("client_id", self.client_id)
        if type(self.produce_socket) is not bool:
            raise InvalidConfigError(f"produce_socket must be true or false, got "
                                     f"{short_repr(self.produce_socket)}")
        check_int_fields(self, skip=("acks", "compression_type", "transactional_id",
                                     "client_id", "produce_socket"),
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
    if settings.get("transactional_id") is not None:
        settings.setdefault("acks", "all")  # a transactional producer implies it (as Kafka)
    return build_config(ProducerConfig, "Producer", settings, ("cluster", "partitioner"))


class Producer:
    """Sends records to topics, batching per partition, compressing each batch with LZ4.

    ``send`` appends a record to its partition's open batch and returns a future at once; a
    background sender thread seals batches that are full or ``linger_ms`` old, encodes them
    and sends them to their partitions' leaders, one actor call to a leader's host carrying
    the ready batches of every partition it serves (each answered on its own), retrying
    retriable errors with
    refreshed metadata and a growing backoff. Every future resolves: acknowledged, or failed
    at the latest when ``delivery_timeout_ms`` has passed since its batch was opened, also
    while the controller or a leader hangs: the sender thread never waits on the controller
    (metadata is refreshed by the connection's background thread), and an attempt whose
    leader was replaced meanwhile, or that outlived ``request_timeout_ms``, is given up and
    sent again (see ``_watch_attempts``). Keys go
    to ``murmur2(key) % partitions`` (the partition Kafka's clients choose); keyless records
    stick to one partition per batch. Safe to use from several threads. Where
    raylog/records/_append.c is built, a producer without a partitioner or serializers has
    ``send`` as one C call for a keyless bytes value (docs/producer.md, "How a record reaches
    its batch"); every other call runs the method below.

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
        self._txn: TransactionManager | None = None
        if self.config.transactional_id is not None:
            self._txn = TransactionManager(self._cluster.controller,
                                           self.config.transactional_id,
                                           self.config.transaction_timeout_ms,
                                           on_added=self._partitions_added)
        # A transactional producer takes it too: a sticky batch is open only inside a
        # transaction that has not failed (opened by the general path, which checks the
        # state; sealed or dropped at its end; dropped from the sticky table once the
        # transaction fails: _txn_failed), so a record the fast path appends is in one.
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
        self._in_flight: dict[ray.ObjectRef | SocketCall, ProduceCall] = {}
        # A batch this large goes beside a call in flight over the socket (_call_may_go).
        self._pipelined = min(PIPELINED_BATCH_BYTES, self.config.batch_size // 2)
        self._buffered_bytes = 0
        self._failures = _Failures()
        self._lock = threading.Lock()
        # The sender thread waits on _wake, idle until an event: a batch opened (its linger
        # starts), an answer, a retry's backoff or a deadline in _alarms. Callers waiting for
        # batches to end (buffer_memory full) wait on _progress.
        self._wake = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        self._alarms = Alarms()  # ("linger" | "expire" | "retry", key), ("watch", None)
        self._sleeping_until: float | None = None  # the sender's idle wait ends (or None)
        # Requests finished, with their answers (read once, by Ray, for the callback).
        self._answered: collections.deque[tuple[ray.ObjectRef | SocketCall, Answer]] = \
            collections.deque()
        self._lingered: dict[tuple[str, int], None] = {}  # past linger_ms, waiting for room
        self._send_pending = False  # something in _sendable may be sendable now
        self._closed = False
        self._stopping = False
        # How long, in all, the brokers held this producer's answers back for its quota
        # (docs/quotas.md): as Kafka's produce-throttle-time metrics, one running total.
        self.throttle_time_ms = 0
        self._encode_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._submitting = threading.Lock()  # held by the one thread submitting batches
        self._caller_busy = False  # a send() sealed and submitted a batch since last look
        if PlainSend is not None and self._plain and type(self).send is Producer.send:
            # send() as one C call for the commonest record (see _append.c): it appends a
            # keyless bytes value to its topic's open sticky batch without a Python frame or
            # the lock, and calls the method below for everything else. (Not for a subclass
            # with a send of its own, which this instance attribute would hide.)
            # Its fallback is the general path, never send()'s Python shortcut below: that
            # one writes a batch's columns field by field under the lock, which the C call
            # does not take.
            self.send = PlainSend(self._sticky_open, self._send_general,  # type: ignore[method-assign]
                                  RecordFuture, RECORD_OVERHEAD)
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
        return self._send_general(topic, value, key, headers, partition, timestamp)

    def _send_general(self, topic: str, value: Any = None, key: Any = None,
                      headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None]
                      | None = None, partition: int | None = None,
                      timestamp: int | None = None) -> RecordFuture:
        """send() for every record its shortcut (or the C call) did not take."""
        if self._closed:
            raise ClientClosedError("send() on a closed producer")
        if self._txn is not None:
            self._txn.check_send()
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
            self._collect_answered()
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
        if self._txn is not None:
            self._txn.check_send()
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
            lambda piece, fields: encode_buffer(
                piece[1], codec=self._codec, producer_id=fields[0], producer_epoch=fields[1],
                base_sequence=fields[2], transactional=self._txn is not None),
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
            if self._txn is None:
                sender = self._senders[key] = PartitionSender(self._idempotent)
            else:
                txn = self._txn
                sender = self._senders[key] = PartitionSender(
                    True, lambda: txn.producer_id, transactional=True)
                sender.restart(txn.producer_id, txn.epoch)
        return sender

    def _new_batch(self, topic: str, partition: int) -> OutgoingBatch:
        batch = OutgoingBatch(topic, partition, BatchBuilder(self.config.batch_size, self._codec),
                              BatchResult(topic, partition), time.monotonic(),
                              self._delivery_timeout_s)
        batch.transactional = self._txn is not None
        key = topic, partition
        self._open[key] = batch
        linger_at = batch.created + self.config.linger_ms / 1000
        self._alarms.set(("linger", key), linger_at)
        self._alarms.set(("expire", key), batch.deadline)
        self._nudge(linger_at)  # a sender waiting with nothing open starts its linger now
        return batch

    def _nudge(self, at: float | None = None) -> None:
        """Wake the idle sender, if it sleeps past ``at`` (None: now) (lock held). Once per
        idle wait: a second event before it runs needs no second notify."""
        until = self._sleeping_until
        if until is not None and (at is None or at < until):
            self._sleeping_until = None
            self._wake.notify()

    def _seal(self, batch: OutgoingBatch, block: bool = True) -> None:
        """Move an open batch to its partition's queue (lock held). With ``block``, wait while
        buffer_memory is full (a caller's send); the sender thread never waits, since only
        it may be there to free the memory."""
        del self._open[batch.key]
        self._alarms.clear(("linger", batch.key))
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
            if not self._progress.wait(deadline - time.monotonic()):
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
        self._alarms.set(("expire", batch.key), batch.deadline)
        self._sendable[batch.key] = None  # whoever sealed it submits it (or the sender)
        self._send_pending = True

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
            # Every batch sealed so far: queued, or in flight (which includes those another
            # thread took to encode and submit). Batches sealed later are not waited for.
            covered = [batch.result for sender in self._senders.values()
                       for batch in itertools.chain(sender.in_flight, sender.queue)]
        self._submit_ready()
        for result in covered:  # each completes once, by its delivery deadline
            if not result.ready(None if deadline is None
                                else max(0.0, deadline - time.monotonic())):
                raise RequestTimeoutError(f"flush did not finish within {timeout} s")
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
            if self._txn is not None:
                self._txn.close()
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

    # -- transactions (docs/transactions.md, "The producer") ------------------------------------

    def _transaction(self, step: str) -> TransactionManager:
        if self._txn is None:
            raise IllegalStateError(f"{step} needs a producer made with a transactional_id")
        if self._closed:
            raise ClientClosedError(f"{step} on a closed producer")
        return self._txn

    def _deadline(self, timeout: float | None) -> float:
        check_timeout("timeout", timeout)
        return time.monotonic() + (self.config.max_block_ms / 1000 if timeout is None
                                   else timeout)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with the coordinator, first and once: fences every
        older producer of the id (their sends and steps fail with ProducerFencedError) and
        waits while the transaction an older one left open is aborted. Its producer id and
        epoch are the ones this producer's batches carry. Retried until ``timeout`` s
        (default max_block_ms) pass, then RequestTimeoutError (call it again)."""
        self._transaction("init_transactions()").init(self._deadline(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction: the sends that follow, and the offsets given to
        send_offsets_to_transaction, commit or abort together."""
        self._transaction("begin_transaction()").begin()

    def send_offsets_to_transaction(
            self, offsets: Mapping[TopicPartition | tuple[str, int], int | tuple[int, str]],
            group_metadata: ConsumerGroupMetadata | str, timeout: float | None = None) -> None:
        """Commit a consumer group's offsets (the next offset to read, per partition, or an
        (offset, metadata) pair) in the transaction: they become the group's committed
        offsets when it commits, and never if it aborts. ``group_metadata`` is the
        consumer's ``group_metadata()`` (a group id alone skips the generation check)."""
        txn = self._transaction("send_offsets_to_transaction()")
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata, None, -1)
        entries = []
        for tp, spec in offsets.items():
            offset, metadata = (spec, "") if isinstance(spec, int) else spec
            entries.append((tp[0], tp[1], offset, metadata))
        if entries:
            try:
                txn.add_offsets(group_metadata.group_id, group_metadata.member_id,
                                group_metadata.generation, entries, self._deadline(timeout))
            except RaylogError:
                with self._lock:
                    self._txn_failed()
                raise

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send every record of the transaction, then commit it: once this returns, all of
        it is decided (read_committed consumers see it when the markers are written). If a
        send of the transaction failed it cannot commit: IllegalStateError (its cause the
        failure), and only abort_transaction() is allowed. A RequestTimeoutError may be
        followed by another commit_transaction()."""
        txn = self._transaction("commit_transaction()")
        deadline = self._deadline(timeout)
        txn.begin_end(commit=True)
        self._flush_transaction(deadline)
        txn.end(True, deadline)

    def _flush_transaction(self, deadline: float) -> None:
        """Send every record of the transaction; a failure is the transaction's error,
        which its end (or prepare) raises."""
        with contextlib.suppress(ProduceFailedError):
            self.flush(max(deadline - time.monotonic(), 0.0))

    def prepare_transaction(self, timeout: float | None = None
                            ) -> PreparedTransaction | None:
        """Send every record of the transaction and stop sending, leaving it open for
        another party to commit jointly with others (the controller's
        ``txn_commit_jointly``, docs/transactions.md "Joint commits"): returns its
        transactional id, producer id and epoch, or None if the coordinator holds nothing
        of it (nothing was sent). Only commit_transaction() and abort_transaction() may
        follow; the producer may also be closed, which leaves the transaction open (it is
        aborted at its timeout unless committed). A failed send makes it IllegalStateError
        and the transaction ABORTABLE, as for a commit."""
        txn = self._transaction("prepare_transaction()")
        deadline = self._deadline(timeout)
        txn.begin_prepare()
        self._flush_transaction(deadline)
        prepared = txn.prepared()
        return None if prepared is None else PreparedTransaction(txn.transactional_id,
                                                                 *prepared)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent fail with TransactionAbortedError,
        those sent are never shown to read_committed consumers. Waits for the requests in
        flight, then tells the coordinator."""
        txn = self._transaction("abort_transaction()")
        deadline = self._deadline(timeout)
        txn.begin_end(commit=False)
        dropped: list[OutgoingBatch] = []
        with self._lock:
            for batch in list(self._open.values()):
                del self._open[batch.key]
                self._alarms.clear(("linger", batch.key))
                batch.result.count = len(batch.builder)
                dropped.append(batch)
            self._sticky_open.clear()
            self._lingered.clear()
            for sender in self._senders.values():
                queued = sender.drop_queued()
                if queued:
                    txn.batch_dropped()  # numbered: a hole in the sequence
                dropped.extend(queued)
            self._sendable.clear()
            for batch in dropped:
                self._forget(batch)
            in_flight = [batch.result for sender in self._senders.values()
                         for batch in sender.in_flight]
        error = TransactionAbortedError("the transaction was aborted before the batch was sent")
        for batch in dropped:
            batch.result.complete(-1, error)
        for result in in_flight:
            if not result.ready(max(deadline - time.monotonic(), 0.0)):
                raise RequestTimeoutError("abort_transaction() did not finish in time: call "
                                          "it again")
        txn.end(False, deadline)
        if txn.bump_needed:
            producer_id, epoch = txn.bump(deadline)
            with self._lock:
                for sender in self._senders.values():
                    for batch in sender.drop_queued():  # retries of failed sends, if any
                        self._forget(batch)
                        batch.result.complete(-1, error)
                    sender.restart(producer_id, epoch)
        with self._lock:
            self._failures = _Failures()  # the aborted transaction's: its futures hold them

    # -- sending -----------------------------------------------------------------------------
    #
    # Sealed batches are submitted by whichever thread gets there first: the caller's thread
    # right after send() sealed a batch (so a busy producer encodes and submits without
    # handing the GIL to another thread for every batch), or the sender thread. The sender
    # sleeps until something happens: an answer arrives (Ray calls _answer), a batch opens
    # (its linger starts) or is sealed, the producer closes, or the earliest of its alarms
    # rings (a batch's linger, a retry's backoff, a partition's next delivery deadline, a
    # request to look at again). A wake handles what rang and what is ready; nothing scans
    # every batch. One thread submits at a time, so a partition's batches go in order.

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
                if self._stopping and not self._buffered_bytes and not self._open:
                    return
                now = time.monotonic()
                expired, watch = self._ring(now)
                self._seal_lingered(now)
                busy, self._caller_busy = self._caller_busy, False
                # (Sendable batches another thread is submitting are that thread's to take.)
                sendable = self._send_pending and not self._submitting.locked()
                if not (busy or expired or watch or self._answered or sendable):
                    wake_at = self._alarms.next()
                    self._sleeping_until = math.inf if wake_at is None else wake_at
                    self._wake.wait(None if wake_at is None else wake_at - now)
                    self._sleeping_until = None
                    continue
            for batch, error in expired:
                batch.result.complete(-1, error)
            if watch:
                self._watch_attempts(now)
            if busy:
                # The caller's thread is sealing and submitting batches itself, and collects
                # answers as it goes: stay out of its way (and off the GIL) for a linger
                # period. (Not idle: nothing nudges this wait but close.)
                with self._lock:
                    self._wake.wait(min(max(linger_s, 0.005), CALLER_BUSY_MAX_S))
                continue
            self._collect_answered()
            self._submit_ready()

    def _ring(self, now: float) -> tuple[list[tuple[OutgoingBatch, BaseException]], bool]:
        """Act on the alarms due at ``now`` (lock held): the batches whose delivery deadline
        passed, to fail, and whether attempts are to be looked at (_watch_attempts)."""
        expired: list[tuple[OutgoingBatch, BaseException]] = []
        watch = False
        for kind, key in self._alarms.due(now):
            if kind == "linger":
                self._lingered[key] = None
            elif kind == "expire":
                expired.extend(self._expire(key, now))
            elif kind == "retry":
                self._send_pending = True
            else:
                watch = True
        return expired, watch

    def _seal_lingered(self, now: float) -> None:
        """Seal the open batches past linger_ms whose partition has room to send (lock
        held); the others stay open, filling, until an answer makes room."""
        if not self._lingered:
            return
        linger_s = self.config.linger_ms / 1000
        loads = self._broker_loads()
        for key in list(self._lingered):
            batch = self._open.get(key)
            if batch is None or batch.created + linger_s > now:
                # Sealed (and maybe opened again: the new batch's own alarm rings later).
                del self._lingered[key]
            elif self._room_for(key, loads, batch.builder.estimated_size):
                del self._lingered[key]
                self._seal(batch, block=False)

    def _room_for(self, key: tuple[str, int], loads: collections.Counter[int | None],
                  size: int) -> bool:
        """Whether a batch of ``size`` bytes sealed now for this partition could go out at
        once (lock held), its leader's broker having ``loads`` requests in flight. While it
        could not, a lingering batch stays open and keeps filling up to batch_size, as
        Kafka's accumulator does: a busy partition gets fewer, larger batches instead of a
        growing queue of small ones."""
        if not self._call_may_go(loads[self._leader_of(key)], size):
            return False
        sender = self._senders.get(key)
        if sender is None or not sender.in_flight:
            return sender is None or not sender.queue
        return not sender.queue and not sender.reset_pending and \
            len(sender.in_flight) < self.config.max_in_flight_requests_per_partition

    def _call_may_go(self, in_flight: int, size: int) -> bool:
        """Whether a produce call whose first batch has ``size`` bytes may go to a broker
        with ``in_flight`` calls out: under max_in_flight_requests_per_broker; and, over
        the produce socket, beside a call in flight only with a large batch (Nagle's rule:
        small batches gather while a call is out, where each would be a call of its own:
        the socket's calls come back so soon that a second one carried a record or two, and
        every call and batch costs the broker and the consumer as much as a large one;
        docs/performance.md, "The produce socket")."""
        if in_flight >= self.config.max_in_flight_requests_per_broker:
            return False
        return in_flight == 0 or not self.config.produce_socket or size >= self._pipelined

    def _leader_of(self, key: tuple[str, int]) -> int | None:
        meta = self._topics.get(key[0])
        return None if meta is None else meta.partitions[key[1]].leader

    def _broker_loads(self) -> collections.Counter[int | None]:
        """Produce calls in flight (or being encoded to go) per leader broker (lock held):
        a call counts while any of its batches is in flight."""
        calls = {id(batch.call): batch.call for sender in self._senders.values()
                 for batch in sender.in_flight if batch.call is not None}
        return collections.Counter(call.broker for call in calls.values())

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
            self._answered.clear()
            self._lingered.clear()
            self._alarms = Alarms()
            self._buffered_bytes = 0
            for batch in batches:
                batch.ref = None
            self._wake.notify_all()
            self._progress.notify_all()
        for batch in batches:
            batch.result.complete(-1, error)

    def _expire(self, key: tuple[str, int], now: float
                ) -> list[tuple[OutgoingBatch, BaseException]]:
        """Remove the partition's batches whose delivery_timeout_ms has passed, open, queued
        or in flight, with the error each fails with; set the alarm of its next deadline
        (lock held)."""
        expired = []
        batch = self._open.get(key)
        if batch is not None and batch.deadline <= now:
            # Open too long: kept open while its partition was stuck.
            del self._open[key]
            self._alarms.clear(("linger", key))
            if self._sticky_open.get(batch.topic) is batch:
                del self._sticky_open[batch.topic]
            batch.result.count = len(batch.builder)
            expired.append(batch)
        sender = self._senders.get(key)
        if sender:
            expired.extend(sender.expire(now))
        out: list[tuple[OutgoingBatch, BaseException]] = []
        for batch in expired:
            logger.debug("expiring a batch of %s-%d: %d attempts, %s", batch.topic,
                         batch.partition, batch.attempts,
                         "in flight" if batch.ref is not None else "queued")
            self._forget(batch)
            error = RequestTimeoutError(
                f"{batch.result.count} records for {batch.topic}-{batch.partition} not "
                f"acknowledged within delivery_timeout_ms="
                f"{self.config.delivery_timeout_ms} ({batch.attempts} attempts)")
            out.append((batch, error))
            self._failed_batch(batch, error)
        if expired and key in self._sendable:
            self._send_pending = True  # in-flight slots freed, or an epoch bump is due
        deadlines = [b.deadline for b in sender.in_flight] if sender else []
        if sender and sender.queue:
            deadlines.append(sender.queue[0].deadline)  # deadlines ascend in a queue
        if key in self._open:
            deadlines.append(self._open[key].deadline)
        if deadlines:
            self._alarms.set(("expire", key), min(deadlines))
        return out

    def _watch_attempts(self, now: float) -> None:
        """Give up waiting on attempts that will not be answered soon, as unanswered (they
        may have been appended: retried under their own numbers, never renumbered).

        An attempt outstanding for SLOW_REQUEST_S has the topic's metadata refreshed in the
        background (at most every SLOW_REFRESH_S): a leader that hangs (stopped, stuck on a
        disk) answers nothing until the cluster fences it and elects another. Once the
        metadata shows a newer leader epoch than the attempt went to, the attempt is
        abandoned and retried at the new leader. Any attempt outstanding past
        request_timeout_ms plus REQUEST_SLACK_S is abandoned too (a live leader answers
        within request_timeout_ms): nothing waits on a request forever. Runs when its
        alarm rings: when the oldest attempt turns slow, then every SLOW_REFRESH_S while one
        is."""
        limit_s = self.config.request_timeout_ms / 1000 + REQUEST_SLACK_S
        abandoned = []
        slow = set()
        with self._lock:
            look_again = math.inf
            for call in list(self._in_flight.values()):
                waited = now - call.sent_at
                if waited < SLOW_REQUEST_S:
                    look_again = min(look_again, call.sent_at + SLOW_REQUEST_S)
                    continue
                for batch in call.carried():
                    slow.add(batch.topic)
                    broker, epoch = batch.sent_to
                    current = self._latest(batch.topic).partitions[batch.partition]
                    if current.leader_epoch > epoch:
                        why = (f"the partition has a new leader (broker {current.leader}, "
                               f"leader epoch {current.leader_epoch})")
                    elif waited >= limit_s:
                        why = (f"longer than request_timeout_ms="
                               f"{self.config.request_timeout_ms} and {REQUEST_SLACK_S:g} s")
                    else:
                        look_again = min(look_again, now + SLOW_REFRESH_S,
                                         call.sent_at + limit_s)
                        continue
                    self._release(batch)  # a late answer is read and dropped
                    abandoned.append((batch, RequestTimeoutError(
                        f"no answer from broker {broker} (leader epoch {epoch}) for "
                        f"{batch.topic}-{batch.partition} after {waited:.1f} s, and {why}: "
                        f"the batch may have been appended")))
            if look_again < math.inf:
                self._alarms.set(("watch", None), look_again)
        for topic in slow:
            self._cluster.refresh_soon(topic, newer_than=now - SLOW_REFRESH_S)
        for batch, error in abandoned:
            logger.info("%s", error)
            self._failed(batch, error)

    def _forget(self, batch: OutgoingBatch) -> None:
        """A batch has ended: release its memory and its request, and the alarms nothing
        needs any more (lock held)."""
        self._buffered_bytes -= batch.buffered
        batch.buffered = 0
        self._release(batch)
        key = batch.key
        if not self._senders.get(key) and key not in self._open:
            self._alarms.clear(("expire", key))
        if not self._in_flight:
            self._alarms.clear(("watch", None))
        self._progress.notify_all()

    def _release(self, batch: OutgoingBatch) -> None:
        """Take a batch out of the request it is in flight in, if any (lock held); the
        request's answer, once no batch is left in it, is read and dropped."""
        ref, batch.ref = batch.ref, None
        call = self._in_flight.get(ref) if ref is not None else None
        if call is not None and not call.drop(batch):
            del self._in_flight[ref]
            discard(ref)

    def _take_sendable(self, now: float
                       ) -> tuple[list[ProduceCall], list[tuple[OutgoingBatch, Exception]],
                                  list[OutgoingBatch]]:
        """The produce calls to make now (lock held); the batches that cannot go, each with
        its error (its partition has no leader now); and the batches an epoch bump cannot
        renumber safely, which fail. A call carries the batches of the
        partitions one replica host serves, per partition in sequence order, within the
        partition's in-flight limit and after any backoff of the batch at the head of its
        queue, up to max_request_size bytes (one batch at least); a broker has at most
        max_in_flight_requests_per_broker calls in flight."""
        limit = self.config.max_in_flight_requests_per_partition
        max_bytes = self.config.max_request_size
        self._send_pending = False
        loads = self._broker_loads()
        calls: list[ProduceCall] = []
        filling: dict[Any, ProduceCall] = {}  # by host: the call its batches join
        unsafe: list[OutgoingBatch] = []
        unsendable: list[tuple[OutgoingBatch, Exception]] = []
        for key in list(self._sendable):
            sender = self._senders[key]
            if self._txn is not None and not self._txn.ready(key):
                # Held until the coordinator has the partition in the transaction; failed
                # if it refused it.
                refused = self._txn.refused.get(key)
                if refused is not None:
                    for batch in sender.drop_queued():
                        self._forget(batch)
                        batch.last_error = refused
                        unsafe.append(batch)
                    del self._sendable[key]
                continue
            try:
                replica = self._latest(key[0]).partitions[key[1]].leader_client()
            except RaylogError as e:  # no leader now: each batch fails its attempt
                replica, error = None, e
            broker = replica.broker_id if replica is not None else self._leader_of(key)
            call = filling.get(replica.handle) if replica is not None else None
            while sender.queue and len(sender.in_flight) < limit:
                if replica is not None and (call is None or (
                        call.live and call.size + sender.queue[0].buffered > max_bytes)):
                    if not self._call_may_go(loads[broker], sender.queue[0].buffered):
                        break  # stays sendable until its broker answers one
                    loads[broker] += 1
                    call = filling[replica.handle] = ProduceCall(broker, replica)
                    calls.append(call)
                sendable, dropped = sender.take(now, len(sender.in_flight) + 1)
                unsafe.extend(dropped)
                if not sendable:
                    break  # stalled, a reset waiting for its in-flight batches, a backoff
                if replica is None:
                    sendable[0].call = None
                    unsendable.append((sendable[0], error))
                else:
                    call.add(sendable[0], replica)
            if sender.queue and sender.queue[0].not_before > now:  # a retry's backoff
                self._alarms.set(("retry", key), sender.queue[0].not_before)
            if not sender.queue:
                del self._sendable[key]
        for batch in unsafe:
            self._forget(batch)
            self._failed_batch(batch, batch.last_error)
        return [call for call in calls if call.live], unsendable, unsafe

    def _submit_ready(self) -> None:
        """Encode and submit the sendable batches, unless another thread is doing it: then
        that thread submits these too (it looks again for batches that became sendable
        while it held the submitting lock)."""
        while self._submitting.acquire(blocking=False):
            try:
                with self._lock:
                    calls, unsendable, unsafe = self._take_sendable(time.monotonic())
                for batch in unsafe:
                    batch.result.complete(-1, batch.last_error)
                for batch, error in unsendable:
                    self._failed(batch, error, sent=False)
                for call in calls:
                    self._submit(call)
            finally:
                self._submitting.release()
            with self._lock:
                if not self._send_pending:
                    return

    def _submit(self, call: ProduceCall) -> None:
        """Encode (once) each batch of a call and make it: one request to the host."""
        items, carried = [], []
        for batch, replica in zip(call.batches, call.replicas, strict=True):
            try:
                items.append((replica, batch.encoded()))
                carried.append(batch)
            except Exception as e:  # every failure ends in the batch's future
                self._failed(batch, e, sent=False)
        if not items:
            return
        call.batches, call.live = list(carried), len(carried)  # the answers' places
        call.sent_at = time.monotonic()
        for batch, (replica, _) in zip(carried, items, strict=True):
            batch.sent_at = call.sent_at
            batch.sent_to = replica.broker_id, replica.leader_epoch
            batch.attempts += 1
        try:
            ref = call.replica.append_batches(items, self.config.acks,
                                              self.config.request_timeout_ms,
                                              client_id=self.config.client_id,
                                              socket=self.config.produce_socket)
        except Exception as e:  # every failure ends in the batches' futures
            for batch in carried:
                self._failed(batch, e, sent=False)
            return
        if self.config.acks == 0:
            for batch in carried:
                self._finish(batch, -1, None)
            return
        with self._lock:
            for batch in carried:
                if batch not in self._senders[batch.key].in_flight:
                    call.drop(batch)  # expired meanwhile
                else:
                    batch.ref = ref
            if not call.live:
                discard(ref)
                return
            call.ref = ref
            self._in_flight[ref] = call
            slow_at = call.sent_at + SLOW_REQUEST_S
            if self._alarms.set(("watch", None), slow_at):
                self._nudge(slow_at)
        when_done(ref, self._answer)

    def _answer(self, ref: ray.ObjectRef | SocketCall, answer: Answer) -> None:
        """A request finished (called on a thread of Ray's): its batch is collected by the
        sender, or by a caller's thread that gets there first."""
        with self._lock:
            if ref in self._in_flight:  # not abandoned, expired or closed meanwhile
                self._answered.append((ref, answer))
                self._nudge()

    def _collect_answered(self) -> None:
        """Complete the batches whose requests finished: each with its own answer (a call
        that failed as a whole, its error for each)."""
        while True:
            with self._lock:
                if not self._answered:
                    return
                ref, answer = self._answered.popleft()
                call = self._in_flight.pop(ref, None)
                if call is None:
                    continue  # every batch of it abandoned or expired since it was answered
                batches = list(call.batches)
                for batch in call.carried():
                    batch.ref = None
            try:
                answers, throttled = unwrap_throttled(answer.get())
                if len(answers) != len(batches):
                    raise InternalError(f"a broker answered {len(answers)} of the "
                                        f"{len(batches)} batches of a produce call")
            except Exception as e:  # every failure ends in the batches' futures
                for batch in batches:
                    if batch is not None:
                        self._failed(batch, e)
                continue
            if throttled:
                with self._lock:
                    self.throttle_time_ms += throttled
            for batch, info in zip(batches, answers, strict=True):
                if batch is None:
                    continue
                try:
                    if isinstance(info, BaseException):
                        raise info
                    info = appended(info, batch.topic, batch.partition)
                except Exception as e:  # every failure ends in the batch's future
                    self._failed(batch, e)
                    continue
                self._finish(batch, info.base_offset, None)

    def _failed(self, batch: OutgoingBatch, error: Exception, sent: bool = True) -> None:
        """An attempt failed; ``sent`` says whether the request left (then an error that is
        not the leader's answer leaves the outcome unknown)."""
        now = time.monotonic()
        retriable = isinstance(error, RaylogError) and error.retriable
        # Whether the attempt may have been appended: no answer; a leader that answers a
        # call whose processing spanned a stall of its process (BrokerStalledError: it may
        # have appended before the stall, or refused before it); or one that appended it
        # and stopped leading, or lost in-sync replicas, before it was committed.
        unanswered = error if sent and isinstance(
            error, ActorUnavailableError | RequestTimeoutError | BrokerStalledError
            | LeadershipLostAfterAppendError | NotEnoughReplicasAfterAppendError) else None
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
                if self._alarms.set(("retry", batch.key), batch.not_before):
                    self._nudge(batch.not_before)
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
                self._failed_batch(batch, error)
                if sender.queue:
                    self._sendable[batch.key] = None
            self._forget(batch)
            if self._sendable or self._lingered:  # its slot may let another batch go
                self._send_pending = True
                self._nudge()
        if self._txn is not None and error is not None:
            error = fenced(error)  # an epoch the leader refuses: another producer took the id
        batch.result.complete(base_offset, error)


    def _failed_batch(self, batch: OutgoingBatch, error: BaseException | None) -> None:
        """A batch ended in failure: seen by the next flush, and the end of its
        transaction's hope to commit (lock held)."""
        self._failures.add(batch.result)
        if self._txn is not None and error is not None:
            self._txn.batch_failed(error)
            self._txn_failed()

    def _txn_failed(self) -> None:
        """The transaction can no longer commit (lock held): no send may join its open
        batches through the fast path, which does not check the state (the general path
        refuses them)."""
        self._sticky_open.clear()

    def _partitions_added(self) -> None:
        """The coordinator answered an add of partitions: send what waited for it (or, if
        it refused, fail it)."""
        with self._lock:
            if self._txn is not None and self._txn.refused:
                self._txn_failed()
            self._send_pending = True
            self._nudge()


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
