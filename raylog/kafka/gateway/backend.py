"""What the gateway's handlers need from a raylog cluster: the seam between the Kafka
protocol and Ray.

:class:`Backend` is the interface. ``raylog/kafka/gateway/cluster.py`` implements it over a
connected :class:`~raylog.client.connection.RaylogCluster` (raylog's clients, so Ray);
unit tests pass a fake. Every method is a coroutine and never blocks the event loop.
Errors are raylog's (raylog/errors.py); handlers turn them into Kafka codes
(raylog/kafka/gateway/errors.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, Protocol, TypeVar

from raylog.client.connection import TopicMetadata
from raylog.replica.partition import READ_UNCOMMITTED, FetchResult
from raylog.storage.log import AppendInfo

T = TypeVar("T")


class Broker(NamedTuple):
    """A raylog broker as Kafka clients see it: its id and where its listener is."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


class Backend(Protocol):
    cluster_id: str

    async def brokers(self) -> dict[int, Broker]:
        """Each live raylog broker with a listener speaking for it -> that listener as a
        Kafka broker (its own id when each broker node has a listener; one Kafka broker
        for all when one listener speaks for the whole cluster)."""

    async def controller_id(self) -> int:
        """The broker Kafka clients send admin requests to (any of them will do: every
        listener reaches the controller)."""

    async def topic(self, name: str, max_age_s: float = 300.0) -> TopicMetadata:
        """Metadata of a topic no older than ``max_age_s`` (UnknownTopicError,
        InvalidTopicError)."""

    async def list_topics(self) -> list[str]:
        """The user topics (internal ones are not shown to Kafka clients)."""

    def forget(self, name: str) -> None:
        """The cached metadata of ``name`` is stale: the next request for it asks again."""

    def append(self, topic: TopicMetadata, partition: int, batch: bytes, acks: int,
               timeout_ms: int) -> Awaitable[AppendInfo]:
        """Send a raylog batch to the partition's leader (appends sent by one caller reach a
        leader in the order sent; the cluster's backend may carry several in one call,
        raylog/kafka/gateway/appends.py); await the answer. Raises at once when the
        partition has no leader (LeaderNotAvailableError)."""

    def append_unacknowledged(self, topic: TopicMetadata, partition: int,
                              batch: bytes) -> None:
        """acks=0: send the batch to the leader, read no answer."""

    async def fetch(self, topic: TopicMetadata, partition: int, offset: int, max_bytes: int,
                    max_wait_ms: int, min_bytes: int,
                    isolation: str = READ_UNCOMMITTED) -> FetchResult:
        """Batches from ``offset`` below the high watermark, from the leader; with
        ``read_committed``, below the last stable offset, with the aborted transactions."""

    async def list_offset(self, topic: TopicMetadata, partition: int,
                          spec: str | int) -> tuple[int, int] | None:
        """(offset, timestamp) for "earliest", "latest", "last_stable" or a timestamp
        (ms)."""

    async def delete_records(self, topic: TopicMetadata, partition: int, offset: int) -> int:
        """Records below ``offset`` (-1: the high watermark) deleted; the new log start."""

    async def controller_call(self, method: str, *args: Any, timeout_s: float) -> Any:
        """The controller's RPC ``method`` (a name of the controller actor's API), awaited
        on the event loop with no thread held: for calls that may wait long (a JoinGroup
        waits for its round). RequestTimeoutError after ``timeout_s``; raylog's errors."""

    async def blocking(self, call: Callable[..., T], *args: Any) -> T:
        """Run a blocking call (the controller client's) off the event loop."""

    @property
    def admin(self) -> Any:
        """raylog's Admin client (raylog.client.admin.Admin) of this cluster; its calls
        block: make them through :meth:`blocking`."""

    @property
    def controller(self) -> Any:
        """The controller client (raylog.client.remote.ControllerClient); its calls
        block: make them through :meth:`blocking`."""
