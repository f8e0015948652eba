"""Connecting to a raylog cluster: Ray, the controller, and cached topic metadata."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from raylog.client.remote import ControllerClient, ReplicaClient, in_background
from raylog.errors import (
    ClusterAuthenticationError,
    InvalidArgumentError,
    LeaderNotAvailableError,
    NoClusterError,
    RaylogError,
)
from raylog.metadata.limits import PartitionLimits
from raylog.metadata.topics import validate_topic_name
from raylog.util.arguments import check_bool, short_repr
from raylog.util.backoff import backoff_s
from raylog.util.cluster_names import (
    ACTOR_RUNTIME_ENV,
    BROKER_RESOURCE,
    CONTROLLER_NAME,
    DATA_DIR_ENV,
    NAMESPACE,
)

logger = logging.getLogger(__name__)

# How long topic metadata is used from a cache before it is asked again (Kafka's
# metadata.max.age.ms); an error about a partition's leader refreshes it at once. The Spark
# connector (raylog/java) is told this age with every topic's metadata (actors/java_api.py).
METADATA_MAX_AGE_S = 300.0
METADATA_TIMEOUT_S = 30.0  # a background refresh waits this long for the controller
# A request to a replica outstanding this long (past any wait it asked for) is unusual: the
# client asks, at most every SLOW_REFRESH_S, whether the partition has a new leader, and
# gives the request up if so. A replica that hangs answers nothing until the cluster fences
# it (broker.session.timeout.ms) and elects another; nothing of the client waits on it
# past its request timeout and REQUEST_SLACK_S either.
SLOW_REQUEST_S = 2.0
SLOW_REFRESH_S = 1.0
REQUEST_SLACK_S = 5.0


@dataclasses.dataclass(frozen=True)
class PartitionMetadata:
    """Where one partition is served: its leader, leader epoch, replicas and ISR (broker ids)
    and a client for each replica whose broker is alive."""

    partition: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    clients: dict[int, ReplicaClient] = dataclasses.field(default_factory=dict)

    @property
    def replica(self) -> ReplicaClient | None:
        """The leader's client, None while it has no live leader."""
        return self.clients.get(self.leader) if self.leader is not None else None

    def leader_client(self) -> ReplicaClient:
        client = self.replica
        if client is None:
            raise LeaderNotAvailableError(f"partition {self.partition} has no leader right now")
        return client

    def nearest_client(self, node_id: str | None) -> ReplicaClient:
        """The replica to read from (KIP-392): an in-sync one on ``node_id`` if there is one,
        else the leader."""
        if node_id is not None:
            for broker in self.isr:
                client = self.clients.get(broker)
                if client is not None and client.node_id == node_id:
                    return client
        return self.leader_client()


@dataclasses.dataclass(frozen=True)
class TopicMetadata:
    name: str
    topic_id: str
    partitions: tuple[PartitionMetadata, ...]
    configs: dict[str, Any]
    fetched_at: float  # monotonic s when it was asked for: the state is no older than that

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @classmethod
    def from_controller(cls, raw: dict[str, Any], asked_at: float | None = None
                        ) -> TopicMetadata:
        """The metadata in the controller's answer ``raw`` to a request sent at ``asked_at``
        (monotonic s; default now), which becomes its ``fetched_at``."""
        name, brokers = raw["name"], raw["brokers"]
        partitions = []
        for p in raw["partitions"]:
            # A replica's own host actor where its broker named one (a broker node runs
            # several processes), else the broker's actor.
            hosts = p.get("hosts", {})
            clients = {b: ReplicaClient(hosts.get(b, brokers[b]["handle"]), name,
                                        p["partition"], p["leader_epoch"], b,
                                        brokers[b]["node_id"])
                       for b in p["replicas"] if b in brokers}
            partitions.append(PartitionMetadata(p["partition"], p["leader"], p["leader_epoch"],
                                                tuple(p["replicas"]), tuple(p["isr"]), clients))
        return cls(name, raw["topic_id"], tuple(partitions), raw["configs"],
                   time.monotonic() if asked_at is None else asked_at)


class MetadataRefresher:
    """Refreshes topic metadata on a thread of its own, for threads that must never wait on
    the controller: a producer's sender (expiring batches, serving partitions whose leaders
    answer) and a consumer's poll.

    ``request(name)`` returns at once. Requests coalesce: every topic wanted when a round
    starts is fetched in that round, one round at a time, at most one every
    ``min_interval_s``; a topic asked for during a round is fetched in the next. A round
    that fails retriably (the controller hangs past its deadline, restarts) asks again
    after a backoff doubling up to a second; a topic the controller refuses (deleted) is
    dropped. So however many clients ask and however long the controller hangs, this
    connection has at most one metadata request outstanding.

    ``load(names)`` fetches and stores the topics' metadata (raises RaylogError). The
    thread starts on the first request and ends when nothing was wanted for ``idle_s``.
    Thread-safe.
    """

    def __init__(self, load: Callable[[list[str]], object], min_interval_s: float = 0.1,
                 idle_s: float = 10.0) -> None:
        self._load = load
        self._min_interval_s = min_interval_s
        self._idle_s = idle_s
        self._wanted: dict[str, None] = {}
        self._next_round = 0.0  # monotonic s: no round before
        self._failures = 0  # consecutive failed rounds
        self._thread: threading.Thread | None = None
        self._wake = threading.Condition(threading.Lock())

    def request(self, name: str) -> None:
        with self._wake:
            if name in self._wanted and self._thread is not None:
                return
            self._wanted[name] = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="raylog-metadata")
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        in_background()
        while True:
            with self._wake:
                idle_until = time.monotonic() + self._idle_s
                while not self._wanted or time.monotonic() < self._next_round:
                    now = time.monotonic()
                    if not self._wanted and now >= idle_until:
                        self._thread = None
                        return
                    self._wake.wait((self._next_round if self._wanted else idle_until) - now)
                names = list(self._wanted)
                self._wanted.clear()
            self._round(names)

    def _round(self, names: list[str]) -> None:
        try:
            self._load(names)
        except RaylogError as e:
            if e.retriable:
                logger.debug("metadata refresh of %s failed: %r; asking again", names, e)
                self._failed(names)
                return
            if len(names) > 1:  # one topic refused (deleted, say) must not hold up the others
                for name in names:
                    self._round([name])
                return
            logger.debug("metadata refresh of %s refused: %r", names, e)
        except (Exception, SystemExit):  # a bug, or Ray shut down under us (its worker
            # raises SystemExit in threads waiting on it then): say so, ask no more
            logger.warning("metadata refresh of %s failed", names, exc_info=True)
        with self._wake:
            self._failures = 0
            self._next_round = time.monotonic() + self._min_interval_s

    def _failed(self, names: list[str]) -> None:
        with self._wake:
            for name in names:
                self._wanted.setdefault(name, None)
            self._failures += 1
            backoff = backoff_s(self._failures, self._min_interval_s, 1.0)
            self._next_round = time.monotonic() + backoff


class RaylogCluster:
    """A connection to one raylog cluster. Safe to share between threads and clients.

    Caches topic metadata for ``METADATA_MAX_AGE_S``. :meth:`topic` fetches it on demand
    and waits (clients call it with ``refresh=True`` after a stale-metadata error, with a
    deadline); :meth:`cached` and :meth:`refresh_soon` never wait: a refresh they ask for
    is made by the connection's one :class:`MetadataRefresher` thread, and what it brings
    replaces the cached metadata for everyone. Every entry is stamped with when its request
    was sent, and an answer never replaces one requested after it.
    """

    def __init__(self, controller: ray.actor.ActorHandle, embedded: bool = False,
                 limits: PartitionLimits | None = None) -> None:
        self.controller = ControllerClient(controller)
        self.embedded = embedded  # raylog.init started this Ray cluster itself
        self.limits = limits  # the controller's, for checks before asking it (None: unknown)
        self._topics: dict[str, TopicMetadata] = {}
        self._lock = threading.Lock()
        self.refresher = MetadataRefresher(self._refresh_in_background)

    def topic(self, name: str, refresh: bool = False,
              timeout: float | None = None) -> TopicMetadata:
        """Metadata of topic ``name``, asking the controller (waiting at most ``timeout`` s,
        default the controller client's) unless a cached one is young enough and
        ``refresh`` is not asked; raises InvalidTopicError, UnknownTopicError,
        RequestTimeoutError."""
        cached = self._topics.get(name) if type(name) is str else None
        if cached is not None and not refresh and \
                time.monotonic() - cached.fetched_at < METADATA_MAX_AGE_S:
            return cached
        validate_topic_name(name)
        return self._load([name], timeout)[name]

    def cached(self, name: str) -> TopicMetadata | None:
        """The cached metadata of ``name`` (None if there is none), however old, at once;
        one past its maximum age is refreshed in the background."""
        meta = self._topics.get(name)
        if meta is not None and time.monotonic() - meta.fetched_at >= METADATA_MAX_AGE_S:
            self.refresh_soon(name)
        return meta

    def refresh_soon(self, name: str, newer_than: float | None = None) -> None:
        """Have ``name`` refreshed in the background, unless the cached metadata was asked
        for at or after ``newer_than`` (a monotonic time). Returns at once."""
        meta = self._topics.get(name)
        if newer_than is not None and meta is not None and meta.fetched_at >= newer_than:
            return
        self.refresher.request(name)

    def _load(self, names: list[str], timeout: float | None) -> dict[str, TopicMetadata]:
        """Ask the controller for these topics and cache the answers; the newest of each."""
        sent = time.monotonic()
        answer = self.controller.metadata(names, timeout=timeout)
        out = {}
        with self._lock:
            for name in names:
                meta = TopicMetadata.from_controller(answer[name], sent)
                known = self._topics.get(name)
                if known is None or known.fetched_at <= meta.fetched_at:
                    self._topics[name] = known = meta
                out[name] = known
        return out

    def _refresh_in_background(self, names: list[str]) -> None:
        if not ray.is_initialized():  # shut down: never reconnect Ray from a thread
            raise NoClusterError("Ray is not running")
        self._load(names, METADATA_TIMEOUT_S)

    def forget(self, name: str) -> None:
        with self._lock:
            self._topics.pop(name, None)


_default: RaylogCluster | None = None
_default_lock = threading.Lock()


def _no_cluster(address: str) -> NoClusterError:
    return NoClusterError(
        f"no Ray cluster at {address!r}: start one with `ray up cluster.yaml`, or "
        f"`ray start --head --resources='{{\"{BROKER_RESOURCE}\": 1}}'`")


def _reachable(address: str, timeout: float = 3.0) -> bool:
    """Whether something listens at host:port. Ray itself would retry for minutes."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _find_cluster(address: str | None) -> str | None:
    """The host:port of the Ray cluster to join, or None for none.

    Only a cluster the caller named (``address``, else ``$RAY_ADDRESS``) is joined: a Ray
    cluster that merely runs on this machine may be someone else's. ``"auto"`` asks Ray to
    find the local one, for whoever wants exactly that."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None or address == "local":
        return None
    if address.startswith("ray://"):
        return address  # Ray Client: let ray.init connect
    if address == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address

            address = canonicalize_bootstrap_address("auto")
        except (ConnectionError, ValueError):
            return None
        if address is None:
            return None
    if not _reachable(address):
        raise _no_cluster(address)
    _check_token(address)
    return address


AUTH_HELP = ("set RAY_AUTH_MODE=token and give the cluster's token: RAY_AUTH_TOKEN, the file "
             "RAY_AUTH_TOKEN_PATH names, or ~/.ray/auth_token")


def _check_token(address: str) -> None:
    """Ask the cluster's GCS for its id as this process would authenticate, and refuse in
    one line a cluster that wants a token this process does not have or has wrong. (Ray
    itself would retry for 20 s, warning every second, then fail with ConnectionError.)"""
    try:
        import grpc
        from ray._private.authentication.grpc_authentication_client_interceptor import (
            _get_authentication_metadata_tuple,
        )
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:  # a Ray without token authentication
        return
    try:
        metadata = _get_authentication_metadata_tuple()
    except ray.exceptions.AuthenticationError:
        raise ClusterAuthenticationError(
            f"RAY_AUTH_MODE=token is set but no token was found for the Ray cluster at "
            f"{address!r}: {AUTH_HELP}") from None
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=10,
                              metadata=metadata)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAUTHENTICATED:
                return  # anything else: ray.init says what it finds
            if metadata:
                raise ClusterAuthenticationError(
                    f"the Ray cluster at {address!r} refused this process's token: {AUTH_HELP}"
                ) from None
            raise ClusterAuthenticationError(
                f"the Ray cluster at {address!r} requires token authentication: {AUTH_HELP}"
            ) from None


def _same_endpoint(a: str, b: str) -> bool:
    """Whether two host:port addresses name the same listener."""
    host_a, _, port_a = a.rpartition(":")
    host_b, _, port_b = b.rpartition(":")
    if port_a != port_b:
        return False
    try:
        resolve_host = socket.gethostbyname
        return resolve_host(host_a.strip("[]")) == resolve_host(host_b.strip("[]"))
    except OSError:
        return host_a == host_b


def _check_same_cluster(address: str | None) -> None:
    """This process is connected to Ray already: an explicit address must name that cluster.

    Ray can hold one connection per process; silently using it for a request that named
    another cluster would act on the wrong cluster."""
    address = address or os.environ.get("RAY_ADDRESS")
    if address in (None, "", "auto", "local") or address.startswith("ray://"):
        return
    current = ray.get_runtime_context().gcs_address
    if _same_endpoint(address, current):
        return
    if not _reachable(address):
        raise _no_cluster(address)
    raise NoClusterError(f"this process is already connected to the Ray cluster at "
                         f"{current!r}; it cannot also join the one at {address!r}")


def _connect_ray(address: str | None, start_local: bool) -> bool:
    """Connect this process to Ray; return True if that meant starting a local cluster."""
    if ray.is_initialized():
        _check_same_cluster(address)
        return False
    found = _find_cluster(address)
    # This process's calls to a broker that died fail as soon as Ray knows, not a second
    # later (see ACTOR_RUNTIME_ENV): a producer's in-flight batch then moves to the new leader
    # sooner. Read by Ray when it connects this process; a value the user set is kept.
    for name, value in ACTOR_RUNTIME_ENV["env_vars"].items():
        os.environ.setdefault(name, value)
    if found is not None:
        ray.init(address=found, logging_level=logging.WARNING, log_to_driver=False)
        return False
    if not start_local:
        if found is None and not (address or os.environ.get("RAY_ADDRESS")):
            raise NoClusterError("no Ray cluster named: give --address HOST:PORT or set "
                                 "RAY_ADDRESS (raylog joins only the cluster it is told to)")
        raise _no_cluster(address or "auto")
    logger.info("no running Ray cluster: starting an embedded local one")
    ray.init(address="local", resources={BROKER_RESOURCE: 1}, include_dashboard=False,
             logging_level=logging.WARNING, log_to_driver=False)
    return True


def find_controller() -> ray.actor.ActorHandle:
    """The running controller's handle, found by name (clients never start it: ``raylog.init``
    and ``raylog start`` do)."""
    try:
        return ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    except ValueError:
        raise NoClusterError("this Ray cluster runs no raylog controller; raylog.init() or "
                             "`raylog start` creates it") from None


def connect(address: str | None = None, *, start_local: bool = False,
            data_dir: str | os.PathLike | None = None,
            controller: Callable[[], ray.actor.ActorHandle] = find_controller) -> RaylogCluster:
    """Connect this process to Ray and to raylog's controller, and make that the default
    cluster of new clients. ``controller`` gives the controller's handle once Ray is
    connected: by default the running one, found by name (``raylog.init`` passes one that
    starts it). With ``start_local`` and no cluster found, starts an embedded single-node Ray
    cluster whose node is a broker; ``data_dir`` then sets where it keeps data."""
    global _default
    if address is not None and not isinstance(address, str):
        raise InvalidArgumentError(f"address must be a Ray address string or None, got "
                                   f"{short_repr(address)}")
    check_bool("start_local", start_local)
    if data_dir is not None and not isinstance(data_dir, str | os.PathLike):
        raise InvalidArgumentError(f"data_dir must be a path, got {short_repr(data_dir)}")
    with _default_lock:
        if data_dir is not None and not ray.is_initialized():
            os.environ[DATA_DIR_ENV] = os.fspath(data_dir)
        embedded = _connect_ray(address, start_local)
        handle = controller()
        ready = ControllerClient(handle).ready()
        limits = ready.get("limits")
        _default = RaylogCluster(handle, embedded,
                                 PartitionLimits(**limits) if limits is not None else None)
        return _default


# How a client given no cluster connects when nothing connected this process yet:
# ``raylog.init`` sets itself here when the raylog package hands out its names (it may start
# the controller; a client never does). Until then: the running raylog, found by name.
_connect_default: Callable[[], RaylogCluster] = connect


def connect_default_with(connector: Callable[[], RaylogCluster]) -> None:
    """Make ``connector()`` how a client given no cluster connects (see above)."""
    global _connect_default
    _connect_default = connector


def default_cluster() -> RaylogCluster:
    """The cluster this process connected to, connecting now if it has not."""
    if _default is None:
        return _connect_default()
    return _default


def cluster_or_default(cluster: object) -> RaylogCluster:
    """A client's ``cluster`` argument: a RaylogCluster (or a test's stand-in for one:
    anything with its ``topic`` method), or None for the default one."""
    if cluster is None:
        return default_cluster()
    if not callable(getattr(cluster, "topic", None)):
        raise InvalidArgumentError(f"cluster must be a RaylogCluster (from raylog.init()) or "
                                   f"None, got {short_repr(cluster)}")
    return cluster


def reset_default() -> None:
    """Forget the default connection (after ``ray.shutdown()``)."""
    global _default
    with _default_lock:
        _default = None
