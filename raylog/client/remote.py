"""Every Ray call a client makes goes through these wrappers, one per remote actor kind.

They turn Ray's exceptions into raylog's: an error raised inside an actor comes back as the
raylog error it was (not wrapped in RayTaskError, however deep), a dead or unreachable actor
becomes a retriable error, a timeout becomes RequestTimeoutError, and anything else raised
inside an actor (a bug) becomes InternalError. Unit tests replace them with fakes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray
from ray.exceptions import ActorUnschedulableError, GetTimeoutError, RayActorError, RayTaskError

from raylog.client.host_socket import ConnectionClosedError, SocketCall, SocketStream, route_of
from raylog.errors import (
    ActorUnavailableError,
    ControllerUnavailableError,
    InternalError,
    LeaderNotAvailableError,
    NoClusterError,
    RaylogError,
    RequestTimeoutError,
)
from raylog.replica.fetch_stream import STREAM_AHEAD
from raylog.replica.partition import READ_UNCOMMITTED
from raylog.util.backoff import backoff_s
from raylog.util.ray_inline import inline_limit

if TYPE_CHECKING:
    from raylog.storage import AppendInfo

CONTROLLER_RETRIES = 30  # a restarting controller is back within seconds
CALL_MARGIN_S = 30.0   # beyond a wait the controller bounds itself (a drain, a restart)


def resolve(ref: ray.ObjectRef | list[ray.ObjectRef], timeout: float | None = None) -> Any:
    """``ray.get`` with raylog's errors. On a thread of raylog's own (see
    :func:`in_background`), the wait is on Python futures that Ray's completion callbacks
    complete, never inside Ray's own wait."""
    with _raylog_errors(timeout):
        if getattr(_thread_kind, "background", False):
            return _through_callbacks(ref, timeout)
        return ray.get(ref, timeout=timeout)


# Whether the calling thread is one of raylog's background threads (a connection's metadata
# refresher, a member's heartbeats, a consumer's commits, a transaction's additions).
_thread_kind = threading.local()


def in_background() -> None:
    """Mark the calling thread as one of raylog's own background threads, for its lifetime.

    Such a thread may be waiting for an answer when the user's thread shuts Ray down, and a
    thread inside Ray's wait (``ray.get``, ``ray.wait``) then crashes the whole process: the
    core worker's memory store is destroyed under it (SIGSEGV, seen at the end of integration
    runs). So its waits are on Python futures that Ray's completion callbacks complete, which
    Ray's shutdown leaves waiting (to their deadline) instead; and a call made after Ray shut
    down raises instead of connecting the process to Ray again (as ``ray.get`` would)."""
    _thread_kind.background = True


def _through_callbacks(ref: ray.ObjectRef | list[ray.ObjectRef], timeout: float | None) -> Any:
    refs = ref if isinstance(ref, list) else [ref]
    futures = [r.future() for r in refs]
    _, late = concurrent.futures.wait(futures, timeout)
    if late:
        raise GetTimeoutError(f"{len(late)} of {len(futures)} answers not ready in {timeout} s")
    values = [future.result() for future in futures]
    return values if isinstance(ref, list) else values[0]


@contextlib.contextmanager
def _raylog_errors(timeout: float | None) -> Iterator[None]:
    """Raise Ray's errors of reading an answer as the raylog errors they stand for."""
    try:
        yield
    except (RayTaskError, RayActorError, ActorUnschedulableError) as e:
        raise unwrap(e) from e
    except GetTimeoutError as e:
        raise RequestTimeoutError(f"no answer within {timeout} s") from e


class Answer:
    """The answer of a finished request, as Ray read it into the future :func:`when_done`
    waited on: :meth:`get` gives it without reading it again (a ``ray.get`` of the same
    request would fetch and deserialize it a second time)."""

    __slots__ = ("_future",)

    def __init__(self, future: concurrent.futures.Future) -> None:
        self._future = future

    def get(self) -> Any:
        """The answer, or the error the request ended with, raised as :func:`resolve`
        would."""
        with _raylog_errors(None):
            return self._future.result(timeout=0)


class _Reaper:
    """Reads the answers of requests nobody will read any more (a fetch in flight when its
    consumer closed or moved its position): Ray prints an answer that is an error and was
    never read as an "Unhandled error", though the client meant to drop it.

    Each answer is read by Ray's own completion callback (``ObjectRef.future``), never by a
    thread of raylog's waiting in ``ray.wait``: a thread inside Ray's wait when its process
    shuts Ray down crashes the process (the core worker's memory store goes away under it:
    SIGSEGV), and a dropped fetch is outstanding for up to its long poll. A callback due when
    Ray shuts down is simply never made."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pending = 0  # answers not read yet

    def add(self, ref: ray.ObjectRef) -> None:
        with self._lock:
            self.pending += 1
        ref.future().add_done_callback(self._read)

    def _read(self, future: concurrent.futures.Future) -> None:
        future.exception()  # read (Ray deserialized it for the future): dropped on purpose
        with self._lock:
            self.pending -= 1


_reaper = _Reaper()


def discard(ref: ray.ObjectRef | SocketCall | None) -> None:
    """Drop a request's answer without Ray reporting an error in it as unhandled. (Only a
    real request of a connected process: ``ray.wait`` would start a Ray instance.)"""
    if isinstance(ref, ray.ObjectRef) and ray.is_initialized():
        _reaper.add(ref)
    # (A SocketCall's answer is a plain future's: dropping it reports nothing.)


def cancel(stream: Any) -> None:
    """End a streaming call nobody reads any more (a consumer's fetch stream given up):
    the actor stops it (an async actor's task is cancelled). Errors are ignored: it may
    have ended, or Ray shut down."""
    if isinstance(stream, SocketStream):
        stream.cancel()
    elif ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.cancel(stream)


def own_actor(handle: ray.actor.ActorHandle) -> bool:
    """Whether ``handle`` is the actor this very process runs: a thread of a broker (its
    tiered metadata feed) reading partitions the broker serves itself.

    Ray (2.60) cannot stream from an actor to a caller in the actor's own process: after a
    hundred or so items the caller's ``next()`` fails ("owner is unknown", or an
    AssertionError inside Ray), where the same stream from another process, and plain calls
    to the own actor, work (docs/architecture.md, "The data path")."""
    if not ray.is_initialized():
        return False
    own = ray.get_runtime_context().get_actor_id()
    return own is not None and own == handle._actor_id.hex()


def wait_done(refs: list[ray.ObjectRef], timeout: float) -> list[ray.ObjectRef]:
    """The requests among ``refs`` that have finished: waits up to ``timeout`` s for the
    first, then takes every other one that is done too."""
    done, _ = ray.wait(refs, num_returns=1, timeout=timeout)
    if done and len(refs) > 1:
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    return done


def when_done(ref: ray.ObjectRef | SocketCall,
              callback: Callable[[Any, Answer], None]) -> None:
    """Call ``callback(ref, answer)`` once the request has finished (on a thread of Ray's, or
    at once if it has): a client waits on its own condition, woken by answers, instead of in
    ``ray.wait``, where nothing else could wake it. The caller reads the answer from
    ``answer``, read once, not with :func:`resolve`. A SocketCall (a produce call over a
    host's socket) is waited on the same way."""
    future = ref.future if isinstance(ref, SocketCall) else ref.future()
    future.add_done_callback(lambda done: callback(ref, Answer(done)))


def unwrap(error: BaseException) -> BaseException:
    """The raylog error a Ray error stands for. An actor that awaited another actor's
    failed call re-raises it wrapped once more: look through every wrapper."""
    cause = error
    while isinstance(cause, RayTaskError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, RaylogError):
        return cause
    if isinstance(error, RayActorError | ActorUnschedulableError):
        # Dead, restarting, or pinned to a node that is gone (its broker is served by
        # another node now): the caller refreshes its metadata and tries again.
        return ActorUnavailableError(f"actor unavailable: {error}")
    if isinstance(cause, RayActorError | ActorUnschedulableError):
        # the controller found a replica it called dead
        return LeaderNotAvailableError(f"a partition replica is unavailable: {cause}")
    if isinstance(error, RayTaskError):
        return InternalError(f"{type(cause).__name__} inside the cluster: {cause}")
    return error


def zero_copy(batch: bytes | pa.Buffer) -> bytes | pa.Buffer:
    """``batch`` as the argument of a produce call: a ``pa.Buffer`` when it is large.

    Ray pickles ``bytes`` into the call's object (a copy) and unpickles them into fresh
    bytes in the broker (another); a ``pa.Buffer`` goes out of band, so the broker's
    argument is a view of the object store's memory, which its checks and file write read
    in place. Measured on 2 M 120-byte records in 4 MiB batches, two calls in flight to an
    async actor: 0.25 s against 0.49 s as bytes (docs/performance.md, "Columnar produce").
    Batches Ray sends inline in the call (up to its max_direct_call_object_size, as this
    process has it) are left as they are.
    """
    if type(batch) is bytes and len(batch) > inline_limit():
        return pa.py_buffer(batch)
    return batch


def appended(info: AppendInfo, topic: str, partition: int) -> AppendInfo:
    """A leader's answer to an append (acks 1 or all), checked: InternalError for a negative
    offset, which acknowledges nothing (no leader answers one; an older one answered -1 for
    a batch it could not place)."""
    if info.base_offset < 0:
        raise InternalError(f"the leader of {topic}-{partition} answered an append at offset "
                            f"{info.base_offset}, which acknowledges nothing")
    return info


class ReplicaClient:
    """Calls to one replica of one partition, on the broker actor holding it; every request
    carries the leader epoch the client knows. Every method returns an ObjectRef."""

    __slots__ = ("broker_id", "handle", "leader_epoch", "node_id", "partition", "topic")

    def __init__(self, handle: ray.actor.ActorHandle, topic: str, partition: int,
                 leader_epoch: int, broker_id: int | None = None,
                 node_id: str | None = None) -> None:
        self.handle = handle
        self.topic = topic
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.broker_id = broker_id
        self.node_id = node_id

    def append(self, batch: bytes | pa.Buffer, acks: int | str, timeout_ms: int = 30_000,
               client_id: str | None = None) -> ray.ObjectRef:
        """``client_id``: the producer's, for its quota (docs/quotas.md); None: charged to
        nobody. A large batch goes as a ``pa.Buffer`` (see :func:`zero_copy`)."""
        batch = zero_copy(batch)
        if client_id is None:
            return self.handle.produce.remote(self.topic, self.partition, self.leader_epoch,
                                              batch, acks, timeout_ms)
        return self.handle.produce.remote(self.topic, self.partition, self.leader_epoch, batch,
                                          acks, timeout_ms, client_id=client_id)

    def append_batches(self, batches: list[tuple[ReplicaClient, bytes | pa.Buffer]],
                       acks: int | str, timeout_ms: int = 30_000,
                       client_id: str | None = None,
                       socket: bool = False) -> ray.ObjectRef | SocketCall:
        """One call to this replica's host (its ``handle``) carrying the batches of several
        partitions it serves, each with the client of its partition (the broker's
        ``produce_batches``): answered with a list, each batch's AppendInfo or the error it
        raised, in order (in a Throttled if ``client_id``'s quota held it back).

        ``socket``: over the host's data socket once this process is connected to it
        (a SocketCall; raylog/client/host_socket.py), by Ray until then. By Ray, once the
        call's batches together exceed what Ray sends inline, each goes as a ``pa.Buffer``
        (see :func:`zero_copy`): the call's argument is in the object store then anyway,
        and a buffer is read there in place where ``bytes`` would be copied out."""
        items = [(replica.topic, replica.partition, replica.leader_epoch, data)
                 for replica, data in batches]

        def by_ray() -> ray.ObjectRef:
            out_of_band = sum(len(data) for *_, data in items) > inline_limit()
            return self.handle.produce_batches.remote(
                [(topic, partition, epoch,
                  pa.py_buffer(data) if out_of_band and type(data) is bytes else data)
                 for topic, partition, epoch, data in items],
                acks, timeout_ms, client_id=client_id)

        if not socket:
            return by_ray()
        return route_of(self.handle).produce(items, acks, timeout_ms, client_id, by_ray)

    def fetch(self, offset: int, max_bytes: int, max_wait_ms: int,
              min_bytes: int, isolation: str = READ_UNCOMMITTED,
              client_id: str | None = None) -> ray.ObjectRef:
        """``client_id``: the consumer's, for its quota (docs/quotas.md)."""
        if client_id is not None:
            return self.handle.fetch.remote(self.topic, self.partition, self.leader_epoch,
                                            offset, max_bytes, max_wait_ms, min_bytes,
                                            isolation, client_id=client_id)
        if isolation == READ_UNCOMMITTED:  # the broker's default (and older brokers')
            return self.handle.fetch.remote(self.topic, self.partition, self.leader_epoch,
                                            offset, max_bytes, max_wait_ms, min_bytes)
        return self.handle.fetch.remote(self.topic, self.partition, self.leader_epoch, offset,
                                        max_bytes, max_wait_ms, min_bytes, isolation)

    def delete_records(self, offset: int) -> ray.ObjectRef:
        return self.handle.delete_records.remote(self.topic, self.partition, self.leader_epoch,
                                                 offset)

    def list_offset(self, spec: str | int) -> ray.ObjectRef:
        return self.handle.list_offset.remote(self.topic, self.partition, self.leader_epoch,
                                              spec)

    def read_kafka_table(self, start: int, end: int, isolation: str = READ_UNCOMMITTED,
                         block: bool = False) -> ray.ObjectRef:
        """``block``: answered as analytics readers take it, a small table as an Arrow IPC
        stream in ``bytes`` (raylog.records.kafka_columns.analytics_block says why)."""
        options: dict[str, Any] = {}
        if isolation != READ_UNCOMMITTED:
            options["isolation"] = isolation
        if block:
            options["block"] = True
        return self.handle.read_kafka_table.remote(self.topic, self.partition,
                                                   self.leader_epoch, start, end, **options)


    def tiered_view(self) -> ray.ObjectRef:
        """The partition's remote segments, log starts, high watermark and object store,
        for readers of cold segments without brokers (BrokerActor.tiered_view)."""
        return self.handle.tiered_view.remote(self.topic, self.partition)


class HostClient:
    """Calls about several partitions at once to the process serving them (a broker actor
    or one of its replica hosts: a ReplicaClient's ``handle``). Every method returns an
    ObjectRef."""

    __slots__ = ("handle",)

    def __init__(self, handle: ray.actor.ActorHandle) -> None:
        self.handle = handle

    def fetch_many(self, reads: list[tuple[str, int, int, int, int]], max_bytes: int,
                   max_wait_ms: int, min_bytes: int, isolation: str = READ_UNCOMMITTED,
                   client_id: str | None = None) -> ray.ObjectRef:
        """Kafka's fetch: ``(topic, partition, leader epoch, offset, most bytes)`` each,
        answered per partition (ReplicaHost.fetch_many); ``client_id``: the consumer's, for
        its quota (docs/quotas.md)."""
        return self.handle.fetch_many.remote(reads, max_bytes, max_wait_ms, min_bytes,
                                             isolation, client_id=client_id)

    def socket_connected(self) -> bool:
        """Whether this process is connected to the host's data socket (a stream made now
        would go over it); connecting begins if not."""
        return route_of(self.handle).connected() is not None

    def fetch_stream(self, reads: list[tuple[str, int, int, int, int]], max_bytes: int,
                     max_wait_ms: int, min_bytes: int, isolation: str = READ_UNCOMMITTED,
                     client_id: str | None = None,
                     wake: Callable[[], None] | None = None) -> Any:
        """As :meth:`fetch_many`, repeated in one streaming call (ReplicaHost.fetch_stream):
        an ObjectRefGenerator whose every object is a fetch_many answer; at most
        STREAM_AHEAD of them wait untaken. With ``wake``: over the host's data socket if
        this process is connected to it (a SocketStream, which calls ``wake`` as each answer
        comes; raylog/client/host_socket.py), connecting for the next time if not."""
        if wake is not None:
            connection = route_of(self.handle).connected()
            if connection is not None:
                with contextlib.suppress(ConnectionClosedError):  # (closed meanwhile)
                    return connection.open_stream(reads, max_bytes, max_wait_ms, min_bytes,
                                                  isolation, client_id, STREAM_AHEAD, wake)
        method = self.handle.fetch_stream.options(
            _generator_backpressure_num_objects=STREAM_AHEAD)
        return method.remote(reads, max_bytes, max_wait_ms, min_bytes, isolation,
                             client_id=client_id)


class ControllerClient:
    """Synchronous, typed calls to the controller, each with a deadline: ``timeout`` s in
    all (the client's default, or the call's own), retries included. A controller that
    stops answering (paused, stuck) makes the call fail at its deadline with
    RequestTimeoutError, never hang; its late answer is read and dropped.

    Reads ride out a controller restart; changes are sent once (a change cut off by a
    crash or by its deadline may have happened: ControllerUnavailableError, and the caller
    decides whether repeating it is safe, as Admin does)."""

    def __init__(self, handle: ray.actor.ActorHandle, timeout: float = 120.0) -> None:
        self.handle = handle
        self.timeout = timeout

    def _call(self, method: Any, *args: Any, retry: bool = True,
              timeout: float | None = None) -> Any:
        """Call the remote ``method`` (a method of the controller's handle) and wait, at
        most ``timeout`` s (default: the client's) in all."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        attempts = CONTROLLER_RETRIES if retry else 1
        for attempt in itertools.count(1):
            ref = method.remote(*args)
            try:
                return resolve(ref, timeout=max(deadline - time.monotonic(), 0.0))
            except RequestTimeoutError as e:
                if time.monotonic() < deadline:
                    raise  # the controller's own answer (say, a group write that timed out)
                discard(ref)  # its answer, if the controller ever gives it, goes unread
                name = getattr(method, "_method_name", "a call")
                if not retry:
                    raise ControllerUnavailableError(
                        f"the raylog controller did not answer {name} within {timeout:g} s: "
                        f"check whether the change happened before repeating it") from e
                raise RequestTimeoutError(f"the raylog controller did not answer {name} "
                                          f"within {timeout:g} s") from e
            except ActorUnavailableError as e:
                if not retry:
                    raise ControllerUnavailableError(
                        f"the raylog controller became unavailable during a change: {e}; "
                        f"check whether the change happened before repeating it") from e
                pause = backoff_s(attempt - 1, 0.1, 1.0)
                if attempt >= attempts or time.monotonic() + pause >= deadline:
                    raise NoClusterError(f"the raylog controller is unreachable: {e}") from e
                time.sleep(pause)

    # -- the cluster and its topics ------------------------------------------------------------

    def ready(self) -> dict[str, Any]:
        return self._call(self.handle.ready)

    def schema_registry(self) -> str:
        """The name of the cluster's schema registry actor, which the controller starts if
        there is none yet (as for the Java connector)."""
        return self._call(self.handle.java_schema_registry)

    def cold_reader(self, node_id: str) -> str:
        """The name of ``node_id``'s cold-read gateway (actors/cold_reader.py), which the
        controller starts if there is none yet or the one there died."""
        return self._call(self.handle.cold_reader, node_id)

    def metadata(self, names: list[str], timeout: float | None = None
                 ) -> dict[str, dict[str, Any]]:
        return self._call(self.handle.metadata, names, timeout=timeout)

    def cluster_status(self) -> dict[str, Any]:
        return self._call(self.handle.cluster_status)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self._call(self.handle.list_topics, include_internal)

    def describe_topics(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        return self._call(self.handle.describe_topics, names)

    def describe_replicas(self, name: str) -> list[dict[str, Any]]:
        return self._call(self.handle.describe_replicas, name)

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, Any], topic_id: str) -> dict[str, Any]:
        return self._call(self.handle.create_topic, name, partitions, replication_factor,
                          configs, topic_id, retry=False)

    def ensure_internal_topic(self, name: str, partitions: int,
                              configs: dict[str, Any]) -> None:
        """Create the topic if missing, replicated as ``__consumer_offsets`` is; repeating
        it is safe."""
        return self._call(self.handle.ensure_internal_topic, name, partitions, configs)

    def delete_topic(self, name: str) -> None:
        return self._call(self.handle.delete_topic, name, retry=False)

    def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        return self._call(self.handle.add_partitions, name, total, retry=False)

    def alter_configs(self, name: str, set_configs: dict[str, Any],
                      delete_configs: list[str]) -> dict[str, Any]:
        return self._call(self.handle.alter_configs, name, set_configs, delete_configs,
                          retry=False)

    def alter_quotas(self, entries: list[dict[str, Any]], validate_only: bool = False) -> None:
        # safe to repeat: setting a quota to what it is changes nothing
        return self._call(self.handle.alter_quotas, entries, validate_only)

    def describe_quotas(self, components: list[tuple[str, str, str | None]] | None = None,
                        strict: bool = False) -> list[dict[str, Any]]:
        return self._call(self.handle.describe_quotas, components, strict)

    def elect_leaders(self, names: list[str] | None) -> dict[str, list[int]]:
        return self._call(self.handle.elect_leaders, names, retry=False)

    def reassign_partitions(self, name: str, targets: dict[int, list[int]]) -> dict[str, Any]:
        return self._call(self.handle.reassign_partitions, name, targets, retry=False)

    def balance_plan(self, remove: list[int]) -> dict[str, Any]:
        return self._call(self.handle.balance_plan, remove)

    def balance_execute(self, moves: list[dict[str, Any]], remove: list[int]) -> dict[str, Any]:
        return self._call(self.handle.balance_execute, moves, remove, retry=False)

    def balance_status(self) -> dict[str, Any]:
        return self._call(self.handle.balance_status)

    # -- draining and restarting brokers (docs/operations.md) ----------------------------------
    # Changes are sent once (retry=False); the waits inside the controller are bounded by
    # the caller's timeout, and the call's own deadline is that plus a margin.

    def drain_broker(self, broker: int, force: bool, timeout_s: float) -> dict[str, Any]:
        return self._call(self.handle.drain_broker, broker, force, timeout_s, retry=False,
                          timeout=timeout_s + CALL_MARGIN_S)

    def stop_broker(self, broker: int) -> dict[str, Any]:
        return self._call(self.handle.stop_broker, broker, retry=False)

    def restart_broker(self, broker: int, timeout_s: float) -> dict[str, Any]:
        return self._call(self.handle.restart_broker, broker, timeout_s, retry=False,
                          timeout=timeout_s + CALL_MARGIN_S)

    def resume_broker(self, broker: int) -> dict[str, Any]:
        return self._call(self.handle.resume_broker, broker)

    def roll_plan(self, brokers: list[int] | None) -> dict[str, Any]:
        return self._call(self.handle.roll_plan, brokers)

    def sync_state(self) -> dict[str, Any]:
        return self._call(self.handle.sync_state)

    # -- consumer groups -----------------------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, client_id: str,
                   topics: list[str] | None, pattern: str | None, session_timeout_ms: int,
                   assignor: str, actor: ray.actor.ActorHandle | None,
                   claims: list[tuple[str, int]], timeout: float | None = None
                   ) -> dict[str, Any]:
        return self._call(self.handle.join_group, group_id, member_id, client_id, topics,
                          pattern, session_timeout_ms, assignor, actor, claims,
                          timeout=timeout)

    def heartbeat(self, group_id: str, member_id: str, owned: list[tuple[str, int]],
                  timeout: float | None = None) -> dict[str, Any]:
        return self._call(self.handle.heartbeat, group_id, member_id, owned, retry=False,
                          timeout=timeout)

    def leave_group(self, group_id: str, member_id: str, timeout: float | None = None) -> None:
        return self._call(self.handle.leave_group, group_id, member_id, timeout=timeout)

    def commit_offsets(self, group_id: str, member_id: str | None, generation: int,
                       offsets: list[tuple[str, int, int, str]],
                       timeout: float | None = None) -> None:
        return self._call(self.handle.commit_offsets, group_id, member_id, generation,
                          offsets, timeout=timeout)

    def committed_offsets(self, group_id: str, partitions: list[tuple[str, int]],
                          timeout: float | None = None, require_stable: bool = True
                          ) -> dict[tuple[str, int], tuple | None]:
        """With ``require_stable``, UnstableOffsetCommitError (retriable) while offsets of
        one of ``partitions`` are pending in an open transaction."""
        return self._call(self.handle.committed_offsets, group_id, partitions,
                          require_stable, timeout=timeout)

    def list_groups(self) -> list[dict[str, Any]]:
        return self._call(self.handle.list_groups)

    def describe_group(self, group_id: str) -> dict[str, Any]:
        return self._call(self.handle.describe_group, group_id)

    def delete_group(self, group_id: str) -> None:
        return self._call(self.handle.delete_group, group_id, retry=False)

    def reset_offsets(self, group_id: str, topic: str, spec: str | int | list[Any],
                      partitions: list[int] | None, dry_run: bool = False) -> dict[int, int]:
        return self._call(self.handle.reset_offsets, group_id, topic, spec, partitions,
                          dry_run, retry=dry_run)

    def group_history(self, group_id: str) -> list:
        return self._call(self.handle.group_history, group_id)

    # -- transactions (the transaction coordinator's; docs/transactions.md) -------------------
    # A producer's steps are safe to repeat (a retried init gets a newer epoch, a retried
    # add or end is answered as the first was), so they ride out a controller restart.

    def txn_init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                             producer_id: int = -1, producer_epoch: int = -1,
                             timeout: float | None = None) -> tuple[int, int]:
        """(producer id, epoch) of a transactional producer; a recovering one names its
        current ones (KIP-360)."""
        return tuple(self._call(self.handle.txn_init_producer_id, transactional_id,
                                transaction_timeout_ms, producer_id, producer_epoch,
                                timeout=timeout))

    def txn_add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           partitions: list[tuple[str, int]], timeout: float | None = None
                           ) -> None:
        return self._call(self.handle.txn_add_partitions, transactional_id, producer_id,
                          producer_epoch, [tuple(tp) for tp in partitions], timeout=timeout)

    def txn_add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        group_id: str, timeout: float | None = None) -> tuple[str, int]:
        """The group's __consumer_offsets partition, now in the transaction."""
        return tuple(self._call(self.handle.txn_add_offsets, transactional_id, producer_id,
                                producer_epoch, group_id, timeout=timeout))

    def txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str, member_id: str | None, generation: int,
                          entries: list[tuple[str, int, int, str]],
                          timeout: float | None = None) -> None:
        """Commit (topic, partition, offset, metadata) entries of a group inside the
        producer's transaction (after txn_add_offsets): committed with it, dropped if it
        aborts."""
        return self._call(self.handle.txn_offset_commit, transactional_id, producer_id,
                          producer_epoch, group_id, member_id, generation,
                          [tuple(e) for e in entries], timeout=timeout)

    def txn_end(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, timeout: float | None = None) -> None:
        """Commit (or abort): returns once the outcome is durable; markers follow."""
        return self._call(self.handle.txn_end, transactional_id, producer_id, producer_epoch,
                          commit, timeout=timeout)

    def txn_commit_jointly(self, write_id: str, members: list[tuple[str, int, int]],
                           timeout: float | None = None) -> None:
        """Commit the ongoing transactions of (transactional id, producer id, epoch)
        ``members`` all or none: returns once the decision is durable (the commit point;
        markers follow); refused whole otherwise. Safe to send again with the same
        ``write_id``."""
        return self._call(self.handle.txn_commit_jointly, write_id,
                          [tuple(m) for m in members], timeout=timeout)

    def txn_list(self, states: list[str] | None = None, min_age_ms: int = 0,
                 timeout: float | None = None) -> list[dict[str, Any]]:
        return self._call(self.handle.txn_list, states, min_age_ms, timeout=timeout)

    def txn_describe(self, transactional_id: str, timeout: float | None = None
                     ) -> dict[str, Any]:
        return self._call(self.handle.txn_describe, transactional_id, timeout=timeout)

    def txn_abort(self, transactional_id: str, timeout: float | None = None) -> dict[str, Any]:
        """An operator's abort of an open transaction (sent once: a change)."""
        return self._call(self.handle.txn_abort, transactional_id, retry=False,
                          timeout=timeout)
