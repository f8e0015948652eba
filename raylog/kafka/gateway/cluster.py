"""The gateway's :class:`~raylog.kafka.gateway.backend.Backend` over a running raylog
cluster, through raylog's clients (raylog/client/): the controller client for metadata
and admin changes, the replica clients for appends, fetches, offsets and deletions.

Replica calls are Ray ObjectRefs, awaited on the listener's event loop; controller calls
block, and run on a small thread pool of their own. Topic metadata comes from the
connection's cache (``RaylogCluster``); a request that asks for it fresher (Metadata) or
finds it stale (a partition error that means the leader moved) asks the controller, one
request per topic at a time however many wait for it.

Which listener speaks for each broker (what Metadata advertises) is an :class:`Advertiser`'s
answer: :class:`NodeListeners` for one listener actor per broker node (``raylog start
--kafka-port``), each the Kafka broker with its raylog broker's id, found by its name;
:class:`OneAddress` for a single listener speaking for the whole cluster (``raylog
gateway``), which is then one Kafka broker leading every partition. (Advertising every
broker id at one address would not do: librdkafka before 2.x's later releases keeps one
broker per address and moves the id between them, so it never reaches most partitions.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import ray

from raylog.client.admin import Admin
from raylog.client.connection import REQUEST_SLACK_S, RaylogCluster, TopicMetadata
from raylog.client.remote import discard, unwrap
from raylog.errors import LeaderNotAvailableError, RaylogError, RequestTimeoutError
from raylog.kafka.gateway.appends import DEFAULT_MAX_IN_FLIGHT, Appender, mergeable
from raylog.kafka.gateway.backend import Broker
from raylog.replica.partition import READ_UNCOMMITTED, FetchResult
from raylog.storage.log import AppendInfo
from raylog.util.cluster_names import NAMESPACE

T = TypeVar("T")

BROKERS_MAX_AGE_S = 1.0  # the live brokers, as the controller knows them, this fresh
CALL_TIMEOUT_S = 30.0  # a replica call that asks for no wait of its own
LISTENER_PREFIX = "raylog-kafka-"  # + Ray node id: the name of a broker node's listener


def listener_actor_name(node_id: str) -> str:
    return f"{LISTENER_PREFIX}{node_id}"


class Advertiser(Protocol):
    async def addresses(self, broker_ids: list[int]) -> dict[int, Broker]:
        """The Kafka broker (listener) speaking for each of these live raylog brokers that
        has one."""


class OneAddress:
    """One listener at ``host:port`` speaks for every broker, as one Kafka broker whose id
    is the lowest live raylog broker's."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    async def addresses(self, broker_ids: list[int]) -> dict[int, Broker]:
        if not broker_ids:
            return {}
        one = Broker(min(broker_ids), self.host, self.port)
        return dict.fromkeys(broker_ids, one)


class NodeListeners:
    """A listener actor on every broker node, named ``listener_actor_name(node id)``
    (actors/gateway.py): each raylog broker is the Kafka broker with its id at the listener
    of the node serving it. The node of each broker comes from the controller; each
    listener is asked where it listens; both answers are kept for ``max_age_s``. A broker
    whose node has no live listener is left out (its partitions then have no reachable
    leader, and clients wait for one)."""

    def __init__(self, controller: Any, max_age_s: float = 10.0) -> None:
        self.controller = controller
        self.max_age_s = max_age_s
        self._nodes: tuple[float, dict[int, str]] | None = None  # broker id -> node id
        self._known: dict[str, tuple[float, tuple[str, int] | None]] = {}  # node -> address

    async def addresses(self, broker_ids: list[int]) -> dict[int, Broker]:
        now = time.monotonic()
        if self._nodes is None or now - self._nodes[0] > self.max_age_s or \
                any(b not in self._nodes[1] for b in broker_ids):
            status = await asyncio.to_thread(self.controller.cluster_status)
            self._nodes = (now, {b["broker_id"]: b["node_id"] for b in status["brokers"]
                                 if b["node_id"] is not None})
        nodes = {b: self._nodes[1][b] for b in broker_ids if b in self._nodes[1]}
        stale = sorted({n for n in nodes.values()
                        if n not in self._known or now - self._known[n][0] > self.max_age_s})
        if stale:
            found = await asyncio.gather(*(self._ask(n) for n in stale))
            for node, address in zip(stale, found, strict=True):
                self._known[node] = (now, address)
        return {b: Broker(b, *self._known[n][1]) for b, n in nodes.items()
                if self._known[n][1] is not None}

    async def _ask(self, node_id: str) -> tuple[str, int] | None:
        try:
            handle = ray.get_actor(listener_actor_name(node_id), namespace=NAMESPACE)
            host, port = await asyncio.wait_for(handle.address.remote(), CALL_TIMEOUT_S)
        except (ValueError, TimeoutError, ray.exceptions.RayError):
            return None  # no listener there (yet, or any more)
        return host, port


def _batch_bytes(item: tuple[str, int, int, bytes]) -> int:
    return len(item[3])


async def _resolve(ref: Awaitable[T], timeout: float) -> T:
    """An awaited replica call with raylog's errors (raylog/client/remote.py's rules)."""
    try:
        return await asyncio.wait_for(ref, timeout)
    except RaylogError:
        raise
    except TimeoutError as e:
        raise RequestTimeoutError(f"no answer within {timeout:g} s") from e
    except Exception as e:
        raise unwrap(e) from e


class ClusterBackend:
    """Backend over ``cluster`` (a connected RaylogCluster) with ``advertiser`` saying where
    each broker's listener is. Used from one event loop."""

    def __init__(self, cluster: RaylogCluster, advertiser: Advertiser,
                 cluster_id: str, threads: int = 8,
                 append_calls_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self.cluster = cluster
        self.advertiser = advertiser
        self.cluster_id = cluster_id
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, "raylog-kafka-admin")
        self._admin = Admin(cluster=cluster)
        self._brokers: tuple[float, dict[int, Broker]] | None = None
        self._brokers_asked: asyncio.Future | None = None
        self._topics_asked: dict[str, asyncio.Future] = {}
        self._appenders: dict[Any, Appender] = {}  # broker handle -> its merged appends
        self.append_calls_in_flight = append_calls_in_flight  # per broker: appends.py
        self.appends_sent = [0, 0]  # mergeable batches: calls sent, batches in them

    @classmethod
    def connect(cls, cluster: RaylogCluster, advertiser: Advertiser) -> ClusterBackend:
        """A backend for ``cluster``, asking its controller for the cluster id (blocks)."""
        return cls(cluster, advertiser, cluster.controller.ready()["cluster_id"])

    @property
    def controller(self) -> Any:
        return self.cluster.controller

    @property
    def admin(self) -> Admin:
        return self._admin

    async def blocking(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

    async def controller_call(self, method: str, *args: Any, timeout_s: float) -> Any:
        ref = getattr(self.controller.handle, method).remote(*args)
        try:
            return await _resolve(ref, timeout_s)
        except RequestTimeoutError:
            discard(ref)  # its answer, if it ever comes, goes unread
            raise

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- brokers and topics --------------------------------------------------------------------

    async def brokers(self) -> dict[int, Broker]:
        if self._brokers is not None and \
                time.monotonic() - self._brokers[0] < BROKERS_MAX_AGE_S:
            return self._brokers[1]
        if self._brokers_asked is None:  # one question at a time, shared by every asker
            self._brokers_asked = asyncio.ensure_future(self._ask_brokers())
            self._brokers_asked.add_done_callback(lambda _: self._forget_brokers_asked())
        return await asyncio.shield(self._brokers_asked)

    def _forget_brokers_asked(self) -> None:
        self._brokers_asked = None

    async def _ask_brokers(self) -> dict[int, Broker]:
        asked = time.monotonic()
        live = (await self.blocking(self.controller.ready))["brokers"]
        brokers = await self.advertiser.addresses(sorted(live))
        self._brokers = (asked, brokers)
        return brokers

    async def controller_id(self) -> int:
        brokers = await self.brokers()
        return min(b.node_id for b in brokers.values()) if brokers else -1

    async def topic(self, name: str, max_age_s: float = 300.0) -> TopicMetadata:
        meta = self.cluster.cached(name) if type(name) is str else None
        if meta is not None and time.monotonic() - meta.fetched_at < max_age_s:
            return meta
        asked = self._topics_asked.get(name)
        if asked is None:
            asked = asyncio.ensure_future(self.blocking(self.cluster.topic, name, True))
            self._topics_asked[name] = asked
            asked.add_done_callback(lambda _: self._topics_asked.pop(name, None))
        return await asyncio.shield(asked)

    async def list_topics(self) -> list[str]:
        return await self.blocking(self.controller.list_topics, False)

    def forget(self, name: str) -> None:
        self.cluster.refresh_soon(name)

    # -- a partition's leader ------------------------------------------------------------------

    @staticmethod
    def _leader(topic: TopicMetadata, partition: int) -> Any:
        if not 0 <= partition < topic.num_partitions:
            raise LeaderNotAvailableError(f"{topic.name} has no partition {partition}")
        return topic.partitions[partition].leader_client()

    def append(self, topic: TopicMetadata, partition: int, batch: bytes, acks: int,
               timeout_ms: int) -> Awaitable[AppendInfo]:
        replica = self._leader(topic, partition)
        if mergeable(batch, acks):
            answer = self._appender(replica.handle, timeout_ms).append(
                (replica.topic, replica.partition, replica.leader_epoch, batch))
        else:
            self._flush(replica.handle)
            answer = replica.append(batch, acks, timeout_ms)
        return _resolve(answer, timeout_ms / 1000 + REQUEST_SLACK_S)

    def _flush(self, handle: Any) -> None:
        """Send the mergeable batches waiting for ``handle`` now: they were appended before
        the one about to be sent alone, and leave before it."""
        waiting = self._appenders.get(handle)
        if waiting is not None:
            waiting.flush()

    def _appender(self, handle: Any, timeout_ms: int) -> Appender:
        """The Appender of mergeable batches (raylog/kafka/gateway/appends.py) for the broker
        (or replica host) ``handle``, kept while it has calls in flight or batches waiting.
        (``timeout_ms``, the first batch's, goes with every call: an acks=1 append does not
        wait on it.)"""
        appender = self._appenders.get(handle)
        if appender is None:
            def one(item: tuple[str, int, int, bytes]) -> Any:
                self.appends_sent[0] += 1
                self.appends_sent[1] += 1
                return handle.produce.remote(*item, 1, timeout_ms)

            def many(items: list[tuple[str, int, int, bytes]]) -> Any:
                self.appends_sent[0] += 1
                self.appends_sent[1] += len(items)
                return handle.produce_batches.remote(items, 1, timeout_ms)

            appender = self._appenders[handle] = Appender(
                one, many, _batch_bytes, self.append_calls_in_flight,
                idle=lambda: self._appenders.pop(handle, None))
        return appender

    def append_unacknowledged(self, topic: TopicMetadata, partition: int,
                              batch: bytes) -> None:
        """acks=0: send the append, read no answer."""
        replica = self._leader(topic, partition)
        self._flush(replica.handle)
        discard(replica.append(batch, 1))

    async def fetch(self, topic: TopicMetadata, partition: int, offset: int, max_bytes: int,
                    max_wait_ms: int, min_bytes: int,
                    isolation: str = READ_UNCOMMITTED) -> FetchResult:
        ref = self._leader(topic, partition).fetch(offset, max_bytes, max_wait_ms, min_bytes,
                                                   isolation)
        return await _resolve(ref, max_wait_ms / 1000 + REQUEST_SLACK_S)

    async def list_offset(self, topic: TopicMetadata, partition: int,
                          spec: str | int) -> tuple[int, int] | None:
        ref = self._leader(topic, partition).list_offset(spec)
        return await _resolve(ref, CALL_TIMEOUT_S)

    async def delete_records(self, topic: TopicMetadata, partition: int, offset: int) -> int:
        ref = self._leader(topic, partition).delete_records(offset)
        return await _resolve(ref, CALL_TIMEOUT_S)
