"""The consumer: pulls batches from partition leaders, tracks positions, yields records."""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import repeat
from typing import Any

import ray

from raylog.client.connection import (
    METADATA_MAX_AGE_S,
    REQUEST_SLACK_S,
    SLOW_REFRESH_S,
    SLOW_REQUEST_S,
    RaylogCluster,
    TopicMetadata,
    cluster_or_default,
)
from raylog.client.fetch_plan import BrokerFetch, BrokerStream, by_process, rotated
from raylog.client.group_member import GroupMixin
from raylog.client.host_socket import SocketStream
from raylog.client.remote import HostClient, cancel, discard, own_actor, resolve, wait_done
from raylog.errors import (
    ClientClosedError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidRecordError,
    LeaderNotAvailableError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RaylogError,
    UnknownPartitionError,
)
from raylog.groups.assignors import ASSIGNORS
from raylog.metadata.topics import check_partition, topic_partition, topic_partitions
from raylog.records import decode, iter_batches
from raylog.records.reader import row_columns, row_range
from raylog.replica.partition import (
    ISOLATION_LEVELS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    aborted_or_control,
)
from raylog.types import LAST_STABLE, LATEST, ConsumerRecord, OffsetAndTimestamp, TopicPartition
from raylog.util.arguments import (
    INT32_MAX,
    build_config,
    check_functions,
    check_id,
    check_int,
    check_int_fields,
    refuses_unknown_options,
    short_repr,
)
from raylog.util.backoff import retry_backoff
from raylog.util.gc_pause import gc_paused

logger = logging.getLogger(__name__)

_new = tuple.__new__
OFFSET_RESETS = ("earliest", "latest", "none")
METADATA_REFRESH_BACKOFF_S = 0.1  # refresh a topic at most this often after errors
WATCH_INTERVAL_S = 0.5  # poll looks this often for requests to give up (_watch_requests)
# With Ray's requests and socket streams out together, poll waits on Ray this long at a
# time, looking at the streams between (see Consumer._wait).
MIXED_WAIT_S = 0.005
LEADER_ONLY_S = 10.0  # read from the leader this long after a follower was out of range


@refuses_unknown_options
@dataclasses.dataclass(frozen=True)
class ConsumerConfig:
    """Consumer settings, checked when built; names as Kafka's with ``_`` for ``.``."""

    auto_offset_reset: str = "latest"      # where to start without a position: earliest,
                                           # latest, or none (raise OffsetOutOfRangeError)
    fetch_min_bytes: int = 1               # a fetch waits for this much data ...
    fetch_max_wait_ms: int = 500           # ... at most this long
    max_partition_fetch_bytes: int = 8 << 20  # per partition in a fetch (at least one
                                           # whole batch)
    fetch_max_bytes: int = 50 << 20        # per fetch, all its partitions (at least one
                                           # whole batch)
    max_poll_records: int = 500            # records one poll returns at most
    max_buffered_records: int = 200_000    # stop prefetching a partition past this
    consumer_timeout_ms: int | None = None  # iteration ends after this long without records
    group_id: str | None = None            # consumer group for subscribe() and commits
    client_id: str = "raylog-consumer"
    enable_auto_commit: bool = True        # commit positions every auto_commit_interval_ms
    auto_commit_interval_ms: int = 5000
    session_timeout_ms: int = 10_000       # a silent member leaves the group after this
    heartbeat_interval_ms: int = 250       # how often a member tells the coordinator
    partition_assignment_strategy: str = "cooperative_sticky"  # or "range", "round_robin"
    default_api_timeout_ms: int = 60_000   # how long commit() retries a retriable error ...
    retry_backoff_ms: int = 100            # ... waiting this long, doubled each time (to 1 s)
    fetch_from_nearest: bool = True        # read from an in-sync replica on this node if
                                           # there is one, else the leader (KIP-392)
    request_timeout_ms: int = 30_000       # a fetch unanswered this long past its
                                           # fetch_max_wait_ms is given up and made again
    isolation_level: str = READ_UNCOMMITTED  # or read_committed: only committed
                                           # transactions' records, up to the last stable offset
    stream_fetches: bool = True            # one streaming fetch per serving process, which
                                           # the broker answers again and again, instead of a
                                           # call per answer (raylog/replica/fetch_stream.py);
                                           # calls to the consumer's own process either way
    fetch_socket: bool = True              # the streams over the hosts' data sockets once
                                           # this process is connected to them, by Ray
                                           # until then (raylog/client/host_socket.py)

    def __post_init__(self) -> None:
        if self.auto_offset_reset not in OFFSET_RESETS:
            raise InvalidConfigError(f"auto_offset_reset must be one of {OFFSET_RESETS}, "
                                     f"got {self.auto_offset_reset!r}")
        if not isinstance(self.partition_assignment_strategy, str) or \
                self.partition_assignment_strategy not in ASSIGNORS:
            raise InvalidConfigError(
                f"partition_assignment_strategy must be one of {sorted(ASSIGNORS)}, "
                f"got {self.partition_assignment_strategy!r}")
        if self.isolation_level not in ISOLATION_LEVELS:
            raise InvalidConfigError(f"isolation_level must be one of {ISOLATION_LEVELS}, "
                                     f"got {short_repr(self.isolation_level)}")
        if self.group_id is not None:
            check_id("group_id", self.group_id)
        check_id("client_id", self.client_id)
        for flag in ("enable_auto_commit", "fetch_from_nearest", "stream_fetches",
                     "fetch_socket"):
            if type(getattr(self, flag)) is not bool:
                raise InvalidConfigError(f"{flag} must be true or false, got "
                                         f"{getattr(self, flag)!r}")
        check_int_fields(self, skip=_NON_NUMERIC,
                         zero_ok=("fetch_max_wait_ms", "consumer_timeout_ms"),
                         optional=("consumer_timeout_ms",))
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidConfigError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms})")


_NON_NUMERIC = {"auto_offset_reset", "group_id", "client_id", "enable_auto_commit",
                "partition_assignment_strategy", "fetch_from_nearest", "isolation_level",
                "stream_fetches", "fetch_socket"}


class _Fetching:
    """What the consumer knows of one assigned partition.

    ``position`` is the offset of the next record poll returns. ``chunks`` hold fetched,
    decoded batches not returned yet, as Arrow payloads with the range of rows still to
    return; records become Python objects only when poll returns them, so a deep prefetch
    costs compact Arrow memory and no garbage-collector work. ``fetch_offset`` is where the
    next (or outstanding) fetch starts, past the buffered batches.

    At most one request is outstanding: ``fetch``, the fetch to the process serving it
    that it is in (with the consumer's other partitions there: fetch_plan.py), or while
    the partition has no position, ``pending``: the leader's ``list_offset`` for
    ``auto_offset_reset``, made at ``pending_since`` to ``pending_to`` (broker id, leader
    epoch). After a retriable error nothing is asked before ``not_before``.
    """

    __slots__ = ("buffered", "chunks", "fetch", "fetch_offset", "leader_only_until",
                 "not_before", "pending", "pending_since", "pending_to", "position", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        # After a follower could not place the position (out of range there), fetch from the
        # leader for a while: only the leader may decide that a position is out of range.
        self.leader_only_until = 0.0
        self.tp = tp
        self.position: int | None = None
        self.fetch_offset: int | None = None
        self.chunks: collections.deque[list] = collections.deque()  # [header, payload, lo, hi]
        self.buffered = 0
        self.fetch: BrokerFetch | None = None
        self.pending: ray.ObjectRef | None = None
        self.pending_since = 0.0
        self.pending_to: tuple[int | None, int] = (None, -1)
        self.not_before = 0.0

    def reset(self, offset: int | None) -> None:
        """Start over at ``offset`` (None: at ``auto_offset_reset``, looked up by the next
        poll): drop buffered records and any outstanding request."""
        self.position = self.fetch_offset = offset
        self.chunks.clear()
        self.buffered = 0
        self.abandon()

    def sent(self, ref: ray.ObjectRef, replica: Any, now: float) -> None:
        self.pending, self.pending_since = ref, now
        self.pending_to = replica.broker_id, replica.leader_epoch

    def abandon(self) -> None:
        """Drop the outstanding request; its answer, if any, goes unread (a fetch of other
        partitions too goes on for them)."""
        discard(self.pending)
        self.pending = None
        self.fetch = None

    @property
    def idle(self) -> bool:
        """Nothing outstanding."""
        return self.pending is None and self.fetch is None

    def take(self, limit: int, out: list) -> None:
        """Append up to ``limit`` buffered records to ``out`` as ConsumerRecords."""
        topic, partition = self.tp
        before = len(out)
        chunks = self.chunks
        while limit and chunks:
            chunk = chunks[0]
            header, payload, lo, hi = chunk
            n = min(limit, hi - lo)
            out.extend(map(_new, repeat(ConsumerRecord), zip(
                repeat(topic), repeat(partition), *row_columns(header, payload, lo, lo + n),
                strict=False)))
            chunk[2] = lo + n
            if lo + n == hi:
                chunks.popleft()
            self.buffered -= n
            limit -= n
        if len(out) > before:
            self.position = out[-1].offset + 1
        if not chunks and self.fetch_offset is not None:
            # Everything fetched is returned: past skipped records (markers, aborted
            # transactions) too, as Kafka's position moves.
            self.position = self.fetch_offset


def _next_answer(stream: Any) -> Any:
    """A stream's next answer: a SocketStream's, or a Ray stream's next object, read;
    StopIteration at its end, its error raised."""
    if isinstance(stream, SocketStream):
        return stream.take()
    return resolve(next(stream))


def poll_timeout_ms(timeout_ms: object, timeout: object) -> int:
    """``poll``'s wait in milliseconds, from ``timeout_ms`` or ``timeout`` (seconds). A float
    ``timeout_ms`` is refused: ``poll(1.0)`` means a second to a confluent-kafka user and a
    millisecond to a kafka-python one."""
    if timeout is not None:
        if timeout_ms:
            raise InvalidArgumentError("poll() takes timeout_ms or timeout, not both")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or \
                not 0 <= timeout <= INT32_MAX / 1000:
            raise InvalidArgumentError(f"poll() timeout is in seconds, a number >= 0; got "
                                       f"{short_repr(timeout)}")
        return int(timeout * 1000)
    if isinstance(timeout_ms, float):
        raise InvalidArgumentError(
            f"poll() takes timeout_ms in milliseconds (an int, as kafka-python's poll); got "
            f"{timeout_ms!r}: for seconds, as confluent-kafka's poll({timeout_ms!r}), pass "
            f"timeout={timeout_ms!r}")
    return check_int("timeout_ms", timeout_ms, 0, INT32_MAX)


class Consumer(GroupMixin):
    """Reads records from assigned partitions, in offset order per partition.

    Positions start where ``seek`` put them, else at ``auto_offset_reset``. The consumer
    keeps one fetch in flight to each process serving partitions it reads, for all of
    them (Kafka's fetch: a long poll of up to ``fetch_max_wait_ms``, answered when any of
    them has data: fetch_plan.py), so decoding one response overlaps with the next fetch.
    Consumers see only records below the high watermark. Not safe for concurrent use.

    ``poll`` never waits on the controller: metadata is refreshed by the connection's
    background thread, and the group's calls run on threads of their own (group_member.py),
    so a hung controller stops no reading from leaders that answer. A fetch to a leader that
    the metadata shows replaced, or outstanding ``request_timeout_ms`` past its wait, is
    given up and made again.

    >>> consumer = Consumer(auto_offset_reset="earliest")
    >>> consumer.assign([TopicPartition("pageviews", 0)])
    >>> for record in consumer.poll(timeout_ms=1000):
    ...     print(record.offset, record.value)
    >>> consumer.close()
    """

    def __init__(self, *, cluster: RaylogCluster | None = None,
                 key_deserializer: Callable[[bytes], Any] | None = None,
                 value_deserializer: Callable[[bytes], Any] | None = None,
                 **settings: Any) -> None:
        self.config = build_config(ConsumerConfig, "Consumer", settings, ("cluster",))
        check_functions("(bytes) -> object", key_deserializer=key_deserializer,
                        value_deserializer=value_deserializer)
        self._deserializers = (key_deserializer, value_deserializer)
        self._cluster = cluster_or_default(cluster)
        self._topics: dict[str, TopicMetadata] = {}
        self._assigned: dict[TopicPartition, _Fetching] = {}
        self._paused: set[TopicPartition] = set()
        self._next = 0  # round-robin start among partitions in poll
        self._fetches: dict[Any, BrokerFetch] = {}  # outstanding, by serving process
        self._turn = 0  # rotates the partitions' order in fetches (fetch_max_bytes)
        self._closed = False
        self._init_group()
        self._node_id: str | None = None  # the Ray node this consumer runs on
        # Where "latest" is: the high watermark, or for read_committed the last stable offset.
        committed = self.config.isolation_level == READ_COMMITTED
        self._latest = LAST_STABLE if committed else LATEST
        self._isolation = (READ_COMMITTED,) if committed else ()  # fetch's last argument
        # How long, in all, the brokers held this consumer's fetches back for its quota
        # (docs/quotas.md): as Kafka's fetch-throttle-time metrics, one running total.
        self.throttle_time_ms = 0

    # -- assignment and positions ----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")

    def _topic(self, topic: str, refresh: bool = False,
               timeout: float | None = None) -> TopicMetadata:
        """A topic's metadata, asked of the controller if the consumer has none (or none
        young enough, or ``refresh``), waiting at most ``timeout`` s (default
        ``default_api_timeout_ms``). For calls that may wait; poll uses :meth:`_meta`."""
        meta = self._topics.get(topic)
        if meta is None or refresh or time.monotonic() - meta.fetched_at >= METADATA_MAX_AGE_S:
            if timeout is None:
                timeout = self.config.default_api_timeout_ms / 1000
            meta = self._topics[topic] = self._cluster.topic(
                topic, refresh=meta is not None, timeout=timeout)
        return meta

    def _meta(self, topic: str) -> TopicMetadata | None:
        """The newest metadata of a topic, without waiting (what the connection's background
        refreshes brought); None while there is none (one is asked for)."""
        mine = self._topics.get(topic)
        cached = self._cluster.cached(topic)
        if cached is not None and (mine is None or cached.fetched_at > mine.fetched_at):
            self._topics[topic] = mine = cached
        if mine is None:
            self._cluster.refresh_soon(topic)
        return mine

    def _refresh(self, topic: str) -> None:
        """Have a topic's metadata refreshed in the background after a retriable error,
        unless that was just done (several partitions of a topic fail together when a
        broker goes). Never waits: poll goes on with the other partitions."""
        self._cluster.refresh_soon(topic, newer_than=time.monotonic() -
                                   METADATA_REFRESH_BACKOFF_S)

    def _retry_later(self, state: _Fetching, now: float) -> None:
        """A retriable error: refresh the metadata, and ask again after a backoff."""
        self._refresh(state.tp.topic)
        state.not_before = now + self.config.retry_backoff_ms / 1000

    @staticmethod
    def _new_state(tp: TopicPartition) -> _Fetching:
        return _Fetching(tp)

    def _state(self, tp: TopicPartition) -> _Fetching:
        try:
            return self._assigned[tp]
        except KeyError:
            raise UnknownPartitionError(f"{tp} is not assigned to this consumer") from None

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions (replacing any earlier assignment)."""
        self._check_open()
        if self._membership is not None:
            raise IllegalStateError("assign() on a consumer subscribed to a group; "
                                    "unsubscribe() first")
        wanted = topic_partitions(partitions, "assign()")
        for tp in wanted:
            check_partition(tp.topic, tp.partition, self._topic(tp.topic).num_partitions)
        for tp, state in self._assigned.items():
            if tp not in wanted:
                state.abandon()  # its share of a fetch out now goes unread
        self._assigned = {tp: self._assigned.get(tp) or _Fetching(tp) for tp in wanted}

    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next offset poll returns for ``partition``."""
        self._check_open()
        state = self._state(topic_partition(partition))
        state.reset(check_int("offset", offset))

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_to("earliest", partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move to the end: the high watermark (read_committed: the last stable offset)."""
        self._seek_to(self._latest, partitions)

    def _seek_to(self, spec: str, partitions: tuple[TopicPartition, ...]) -> None:
        self._check_open()
        targets = topic_partitions(partitions, f"seek_to_{spec}()") or list(self._assigned)
        for tp in targets:
            self._state(tp)  # every one assigned, before anything moves
        for tp, found in self._list_offsets(targets, spec).items():
            self._state(tp).reset(found[0])

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record poll returns for ``partition``."""
        self._check_open()
        state = self._state(topic_partition(partition))
        if state.position is None:
            self._reset_position(state)
        return state.position

    def _reset_position(self, state: _Fetching) -> None:
        self._no_position(state)
        state.reset(self._list_offsets([state.tp], self._reset_spec())[state.tp][0])

    def _reset_spec(self) -> str:
        """What auto_offset_reset asks a leader for."""
        reset = self.config.auto_offset_reset
        return self._latest if reset == LATEST else reset

    def _list_offsets(self, partitions: list[TopicPartition], spec: str | int
                      ) -> dict[TopicPartition, tuple[int, int] | None]:
        """Ask each partition's leader; a retriable failure (a leader moving, its broker
        served by a new node, a leader that does not answer) refreshes the metadata and
        asks again, for up to ``default_api_timeout_ms`` in all."""
        deadline = time.monotonic() + self.config.default_api_timeout_ms / 1000
        for tp in partitions:
            check_partition(tp.topic, tp.partition, self._topic(tp.topic).num_partitions)
        backoff = retry_backoff(self.config.retry_backoff_ms)
        answers: dict[TopicPartition, tuple[int, int] | None] = {}
        while True:
            missing = [tp for tp in partitions if tp not in answers]
            failure: RaylogError | None = None
            refs = {}
            for tp in missing:
                try:
                    refs[tp] = self._leader(tp).list_offset(spec)
                except RaylogError as e:
                    failure = e
            for tp, ref in refs.items():
                try:
                    answers[tp] = resolve(ref, timeout=max(deadline - time.monotonic(), 0.0))
                except RaylogError as e:
                    discard(ref)  # unanswered in time: its late answer goes unread
                    failure = e
            if failure is None:
                return {tp: answers[tp] for tp in partitions}
            if not failure.retriable or time.monotonic() + backoff.peek() > deadline:
                raise failure
            time.sleep(backoff.next())
            for topic in {tp.topic for tp in missing}:
                self._topic(topic, refresh=True,
                            timeout=max(deadline - time.monotonic(), 0.001))

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        self._check_open()
        wanted = topic_partitions(partitions, "beginning_offsets()")
        return {tp: v[0] for tp, v in self._list_offsets(wanted, "earliest").items()}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition: the offset the next committed record gets
        (read_committed: the last stable offset, before the first open transaction)."""
        self._check_open()
        wanted = topic_partitions(partitions, "end_offsets()")
        return {tp: v[0] for tp, v in self._list_offsets(wanted, self._latest).items()}

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose timestamp is >= the given ms."""
        self._check_open()
        if not isinstance(timestamps, Mapping):
            raise InvalidArgumentError(f"offsets_for_times() takes a dict of TopicPartition "
                                       f"to timestamp (ms), got {type(timestamps).__name__}")
        wanted = {topic_partition(tp): check_int(f"the timestamp of {tp}", ts)
                  for tp, ts in timestamps.items()}
        out = {}
        for tp, ts in wanted.items():
            found = self._list_offsets([tp], ts)[tp]
            out[tp] = OffsetAndTimestamp(*found) if found else None
        return out

    def _leader(self, tp: TopicPartition, refresh: bool = False):
        meta = self._topic(tp.topic, refresh)
        return meta.partitions[tp.partition].leader_client()

    def _reader(self, tp: TopicPartition, leader_only: bool = False):
        """The replica to fetch ``tp`` from: an in-sync one on this node, else the leader,
        from the newest metadata at hand (LeaderNotAvailableError while there is none)."""
        meta = self._meta(tp.topic)
        if meta is None:
            raise LeaderNotAvailableError(f"no metadata of {tp.topic!r} yet")
        partition = meta.partitions[tp.partition]
        if leader_only or not self.config.fetch_from_nearest:
            return partition.leader_client()
        if self._node_id is None and ray.is_initialized():
            self._node_id = ray.get_runtime_context().get_node_id()
        return partition.nearest_client(self._node_id)

    # -- fetching --------------------------------------------------------------------------------

    def _send_fetches(self) -> None:
        """Ask for what each partition needs next: its position (from its leader, for
        ``auto_offset_reset``) or its next records, in one fetch per serving process
        (fetch_plan.py). Never waits."""
        now = time.monotonic()
        for key, fetch in list(self._fetches.items()):
            if isinstance(fetch, BrokerStream) and any(
                    state.fetch is not fetch or
                    (state.tp in self._paused and self._full(state))
                    for state in fetch.states):
                # A stream goes on reading a partition reset, sought or revoked since (made
                # again without it), and is not taken from while a partition is full, which
                # paused never drains (made again without it, so the others go on).
                self._give_up(key)
            elif isinstance(fetch, BrokerStream) and self.config.fetch_socket and \
                    not isinstance(fetch.ref, SocketStream) and \
                    HostClient(key).socket_connected():
                self._give_up(key)  # by Ray while the socket connected: made again over it
        wanted = self._wanted(now)
        # A partition with nothing buffered does not wait for the outstanding fetch that
        # it is not in (nor does any for one whose partitions were all reset or revoked):
        # that one is given up and made again with it.
        # A stream has no next call for a partition to join: it is made again with it.
        stale = [key for key, wants in wanted.items() if key in self._fetches
                 and (any(not state.buffered for state, _ in wants)
                      or isinstance(self._fetches[key], BrokerStream)
                      or not self._fetches[key].attached())]
        if stale:
            for key in stale:
                self._give_up(key)
            wanted = self._wanted(now)
        config = self.config
        for key, wants in wanted.items():
            if key in self._fetches:
                continue  # they go into the next one
            self._turn += 1
            wants = rotated(wants, self._turn)
            states = [state for state, _ in wants]
            reads = [(*state.tp, reader.leader_epoch, state.fetch_offset,
                      config.max_partition_fetch_bytes) for state, reader in wants]
            leaders = [reader.broker_id == self._meta(state.tp.topic).partitions[
                state.tp.partition].leader for state, reader in wants]
            # A stream parks each of its fetches: with no wait it would answer without end.
            # None from a broker's own process to itself: Ray loses such a stream's items.
            stream = config.stream_fetches and config.fetch_max_wait_ms > 0 and \
                not own_actor(key)
            if stream:
                # Over the host's data socket once connected (SocketStream): then each answer
                # comes with a wake of poll's wait.
                ref = HostClient(key).fetch_stream(
                    reads, config.fetch_max_bytes, config.fetch_max_wait_ms,
                    config.fetch_min_bytes, *self._isolation, client_id=config.client_id,
                    wake=self._news.set if config.fetch_socket else None)
            else:
                ref = HostClient(key).fetch_many(
                    reads, config.fetch_max_bytes, config.fetch_max_wait_ms,
                    config.fetch_min_bytes, *self._isolation, client_id=config.client_id)
            self._fetches[key] = (BrokerStream if stream else BrokerFetch)(
                key, ref, states, [(r.broker_id, r.leader_epoch) for _, r in wants], leaders,
                now)

    def _wanted(self, now: float) -> dict[Any, list[tuple[_Fetching, Any]]]:
        """The partitions to fetch now, with the replica to read each from, by the process
        serving it; partitions without a position get their leader's ``list_offset`` sent
        here instead."""
        wanted = []
        for state in self._assigned.values():
            if not state.idle or self._full(state) or now < state.not_before:
                continue
            try:
                if state.position is None:
                    self._no_position(state)  # raises for auto_offset_reset "none"
                    leader = self._reader(state.tp, leader_only=True)
                    state.sent(leader.list_offset(self._reset_spec()), leader, now)
                    continue
                reader = self._reader(state.tp, leader_only=now < state.leader_only_until)
                wanted.append((reader.handle, (state, reader)))
            except RaylogError as e:
                if not e.retriable:
                    raise
                self._retry_later(state, now)
        return by_process(wanted)

    def _full(self, state: _Fetching) -> bool:
        """Whether ``state`` has as many records buffered as it may: nothing more is fetched
        for it (a stream holding it is not taken from) until poll returns some."""
        return state.buffered >= self.config.max_buffered_records

    def _watch_requests(self, now: float) -> None:
        """Give up requests that will not be answered soon (reads: asking again is always
        safe). One outstanding SLOW_REQUEST_S past the wait it asked for has its topics'
        metadata refreshed in the background (at most every SLOW_REFRESH_S), and is given
        up once the replica to read one of its partitions from is another one (a hung
        leader fenced and replaced, a follower out of the ISR), or past request_timeout_ms
        and REQUEST_SLACK_S."""
        limit_s = self.config.request_timeout_ms / 1000 + REQUEST_SLACK_S
        max_wait_s = self.config.fetch_max_wait_ms / 1000
        for state in self._assigned.values():
            if state.pending is not None and \
                    self._overdue([state], [state.pending_to], state.pending_since, now,
                                  limit_s, leader_only=True):
                state.abandon()
        for key, fetch in list(self._fetches.items()):
            states = fetch.attached()
            if not states:  # all reset or revoked: its answer is nobody's
                self._give_up(key)
                continue
            sent_to = [to for s, to in zip(fetch.states, fetch.sent_to, strict=True)
                       if s.fetch is fetch]
            if self._overdue(states, sent_to, fetch.sent_at + max_wait_s, now, limit_s):
                self._give_up(key)

    def _give_up(self, key: Any) -> None:
        """Drop the fetch out to process ``key``: its partitions are free for the next one,
        its answer goes unread (a stream is cancelled)."""
        fetch = self._fetches.pop(key)
        fetch.detach()
        if isinstance(fetch, BrokerStream):
            cancel(fetch.ref)
        else:
            discard(fetch.ref)

    def _overdue(self, states: list[_Fetching], sent_to: list[tuple[int | None, int]],
                 since: float, now: float, limit_s: float, leader_only: bool = False) -> bool:
        """Whether a request for ``states``, asked of ``sent_to`` (broker id, leader epoch
        per partition) and due since ``since``, is to be given up (see _watch_requests)."""
        waited = now - since
        if waited < SLOW_REQUEST_S:
            return False
        for topic in {state.tp.topic for state in states}:
            self._cluster.refresh_soon(topic, newer_than=now - SLOW_REFRESH_S)
        moved = False
        for state, to in zip(states, sent_to, strict=True):
            try:
                replica = self._reader(state.tp, leader_only=leader_only or
                                       now < state.leader_only_until)
                moved = (replica.broker_id, replica.leader_epoch) != to
            except RaylogError:  # no leader now: nowhere better to ask
                moved = False
            if moved:
                break
        if moved or waited >= limit_s:
            logger.info("%s: no answer from broker %s for %.1f s%s: asking again",
                        ", ".join(str(s.tp) for s in states), sent_to[0][0], waited,
                        ", and a partition moved" if moved else "")
            return True
        return False

    def _no_position(self, state: _Fetching) -> None:
        if self.config.auto_offset_reset == "none":
            raise NoOffsetForPartitionError(
                f"{state.tp} has no position (no committed offset) and auto_offset_reset "
                f"is 'none'")

    def _receive(self, state: _Fetching, ref: ray.ObjectRef) -> None:
        """Take in the answer ``ref`` to ``state``'s outstanding ``list_offset``."""
        state.pending = None
        try:
            found = resolve(ref)
        except RaylogError as e:
            if not e.retriable and not isinstance(e, OffsetOutOfRangeError):
                raise
            self._retry_later(state, time.monotonic())  # (out of range: the log moved)
            return
        state.reset(found[0])

    def _receive_fetch(self, fetch: BrokerFetch) -> None:
        """Take in the answer to ``fetch`` (a stream's next one), partition by partition:
        one partition's error (raised if not retriable, after the others were taken in)
        fails none of the others."""
        if isinstance(fetch, BrokerStream):
            self._receive_streamed(fetch)
            return
        if self._fetches.get(fetch.key) is fetch:
            del self._fetches[fetch.key]
        try:
            answer: Any = resolve(fetch.ref)
        except RaylogError as e:  # the whole call: every partition in it
            answer = e
        self._take_answer(fetch, answer)

    def _receive_streamed(self, stream: BrokerStream) -> None:
        try:
            answer: Any = _next_answer(stream.ref)
        except StopIteration:  # the broker ended it (its lifetime): made again next
            if self._fetches.get(stream.key) is stream:
                del self._fetches[stream.key]
            stream.detach()
            return
        except RaylogError as e:  # the whole stream: every partition in it
            answer = e
        stream.sent_at = time.monotonic()  # answered: the next answer is due from now
        try:
            self._take_answer(stream, answer)
        finally:
            if not stream.taken() and self._fetches.get(stream.key) is stream:
                self._give_up(stream.key)

    def _take_answer(self, fetch: BrokerFetch, answer: Any) -> None:
        answers, throttled = fetch.split(answer)
        self.throttle_time_ms += throttled
        failure: RaylogError | None = None
        for state, result, from_leader in answers:
            try:
                if isinstance(result, RaylogError):
                    self._fetch_failed(state, result, from_leader)
                else:
                    self._take_in(state, result)
            except RaylogError as e:
                failure = failure or e
        if failure is not None:
            raise failure

    def _fetch_failed(self, state: _Fetching, error: RaylogError, from_leader: bool) -> None:
        if isinstance(error, OffsetOutOfRangeError):
            if not from_leader:
                # A follower cannot tell whether the position exists (it may lag, or have
                # run retention before the leader): ask the leader (KIP-392).
                state.leader_only_until = time.monotonic() + LEADER_ONLY_S
                return
            if self.config.auto_offset_reset == "none":
                raise error
            logger.info("%s: offset %d out of range, resetting to %s", state.tp,
                        state.fetch_offset, self.config.auto_offset_reset)
            state.reset(None)
            return
        if not error.retriable:
            raise error
        self._retry_later(state, time.monotonic())

    def _take_in(self, state: _Fetching, result: Any) -> None:
        """Buffer a partition's fetched batches (decoded, not yet records)."""
        if not result.data:
            return
        start = state.fetch_offset
        # Markers are never records; read_committed also skips the batches of the aborted
        # transactions the answer lists (by producer id and offset range, as Kafka's).
        skip = aborted_or_control(result.aborted or ())
        for pos, header in iter_batches(result.data):
            if skip(header):  # nothing to show: move past it
                state.fetch_offset = max(state.fetch_offset, header.next_offset)
                continue
            payload = decode(header, result.data, pos)
            lo, hi = row_range(header, payload, start)
            if lo < hi:
                state.chunks.append([header, payload, lo, hi])
                state.buffered += hi - lo
            state.fetch_offset = max(state.fetch_offset, header.next_offset)
        if not state.chunks:
            # An answer of nothing but skipped batches (markers, aborted transactions):
            # the position moves past them now, as take() moves it once records are out.
            state.position = state.fetch_offset

    def _drain(self, max_records: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        states = list(self._assigned.values())
        with gc_paused():
            for i in range(len(states)):
                state = states[(self._next + i) % len(states)]
                if state.buffered and state.tp not in self._paused:
                    state.take(max_records - len(out), out)
                    if len(out) >= max_records:
                        break
        self._next = (self._next + 1) % max(len(states), 1)
        return out

    def poll(self, timeout_ms: int = 0, max_records: int | None = None, *,
             timeout: float | None = None) -> list[ConsumerRecord]:
        """Records fetched for the assigned partitions, in offset order per partition.

        Waits up to ``timeout_ms`` milliseconds (as kafka-python's ``poll``), or ``timeout``
        seconds (as confluent-kafka's), for at least one; returns at most ``max_records``
        (default ``max_poll_records``). Positions move past what is returned. With a
        deserializer, a record it fails on raises InvalidRecordError naming its partition
        and offset, after the records before it were returned; the partition's position
        stays on it (``seek`` past it to skip it).
        """
        self._check_open()
        timeout_ms = poll_timeout_ms(timeout_ms, timeout)
        limit = self.config.max_poll_records if max_records is None else \
            check_int("max_records", max_records, 1, INT32_MAX)
        deadline = time.monotonic() + timeout_ms / 1000
        self._maybe_auto_commit()
        while True:
            self._news.clear()  # what happens from here on ends the wait below
            if self._membership is not None:
                self._apply_membership()
            self._send_fetches()
            records = self._drain(limit)
            if records:
                return self._deserialized(records) if self._deserializers != (None, None) \
                    else records
            now = time.monotonic()
            self._watch_requests(now)
            pending: dict[Any, _Fetching | BrokerFetch] = {
                s.pending: s for s in self._assigned.values() if s.pending is not None}
            pending.update((f.ref, f) for f in self._fetches.values()
                           if not (isinstance(f, BrokerStream) and
                                   any(self._full(s) for s in f.attached())))
            remaining = deadline - now
            if not pending:
                if remaining <= 0:
                    return []
                self._news.wait(self._quiet_s(now, remaining))
                continue
            # At least every WATCH_INTERVAL_S, look for requests to give up.
            done = self._wait(list(pending), min(max(remaining, 0), WATCH_INTERVAL_S))
            for ref in done:
                owner = pending[ref]
                if isinstance(owner, BrokerFetch):
                    self._receive_fetch(owner)
                else:
                    self._receive(owner, ref)
            if remaining <= 0:
                # Time is up, whatever came: fetches that keep answering at once (errors
                # while a leader moves) must not keep poll from returning.
                records = self._drain(limit)
                return self._deserialized(records) if records and \
                    self._deserializers != (None, None) else records

    def _wait(self, refs: list[Any], timeout: float) -> list[Any]:
        """The requests among ``refs`` answered within ``timeout`` s: Ray's (by ``ray.wait``)
        and streams over a data socket (each wakes ``_news`` as an answer comes). With both
        kinds out (while a socket connects, or a position is asked of a leader), Ray's wait
        is taken in slices of MIXED_WAIT_S, the streams looked at between them."""
        sockets = [r for r in refs if isinstance(r, SocketStream)]
        if not sockets:
            return wait_done(refs, timeout)
        rays = [r for r in refs if not isinstance(r, SocketStream)]
        deadline = time.monotonic() + timeout
        while True:
            done = [s for s in sockets if s.ready()]
            if rays:
                done += wait_done(rays, 0 if done else
                                  max(min(MIXED_WAIT_S, deadline - time.monotonic()), 0))
            elif not done:
                # Woken by an answer, or by other news poll's loop looks at (it clears it).
                self._news.wait(max(deadline - time.monotonic(), 0))
                return [s for s in sockets if s.ready()]
            if done or time.monotonic() >= deadline:
                return done

    def _quiet_s(self, now: float, remaining: float) -> float:
        """How long a poll with nothing in flight (nothing assigned, leaders missing,
        buffers full) may wait before something changes by itself: a partition's retry
        backoff ends, or the member's session would run out. Anything else that changes
        it (the coordinator's answer, a committed-offset lookup or a final commit ending)
        sets ``_news`` and ends the wait earlier."""
        until = min((s.not_before for s in self._assigned.values() if s.not_before > now),
                    default=now + remaining)
        if self._membership is not None:
            until = min(until, self._membership.session_ends())
        return max(min(until - now, remaining), 0.001)

    def _deserialized(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """The records with key and value deserialized. At the first that fails: the ones
        before it, every partition's position back at its first record not returned, and
        InvalidRecordError at once if there are none before it."""
        key_of, value_of = self._deserializers
        out = []
        for i, record in enumerate(records):
            try:
                key = record.key if key_of is None or record.key is None else key_of(record.key)
                value = record.value if value_of is None or record.value is None \
                    else value_of(record.value)
            except Exception as e:  # a user's function: report where, keep the position
                rewound: set[TopicPartition] = set()
                for rest in records[i:]:
                    tp = TopicPartition(rest.topic, rest.partition)
                    if tp not in rewound and tp in self._assigned:
                        rewound.add(tp)
                        self._assigned[tp].reset(rest.offset)
                if out:
                    return out
                raise InvalidRecordError(
                    f"cannot deserialize the record at {record.topic}-{record.partition} offset "
                    f"{record.offset}: {e!r} (seek past it to skip it)") from e
            out.append(record._replace(key=key, value=value))
        return out

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one by one; ends after ``consumer_timeout_ms`` without any (if set)."""
        idle_limit = self.config.consumer_timeout_ms
        idle_since = time.monotonic()
        while True:
            records = self.poll(timeout_ms=100)
            if records:
                yield from records
                idle_since = time.monotonic()
            elif idle_limit is not None and (time.monotonic() - idle_since) * 1000 >= idle_limit:
                return

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning records of these partitions until resumed."""
        wanted = topic_partitions(partitions, "pause()")
        for tp in wanted:
            self._state(tp)
        self._paused.update(wanted)

    def resume(self, *partitions: TopicPartition) -> None:
        self._paused.difference_update(topic_partitions(partitions, "resume()"))

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def close(self) -> None:
        """Commit (with auto-commit), leave the group, stop fetching. Idempotent; later
        calls raise ClientClosedError."""
        if self._closed:
            return
        try:
            if self._membership is not None:
                self.unsubscribe()
            elif self.config.group_id is not None and self.config.enable_auto_commit:
                self._commit_positions(self._assigned)
            if self._committer is not None:
                self._committer.shutdown(wait=True)
        finally:
            self._closed = True
            for state in self._assigned.values():
                discard(state.pending)
            for key in list(self._fetches):
                self._give_up(key)
            self._assigned, self._fetches = {}, {}

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
