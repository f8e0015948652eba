"""One multi-node Ray cluster for the whole test session.

A head node (the controller's) and three broker nodes, each a separate raylet on this machine
with its own data directory (``RAYLOG_DATA_DIR`` in the raylet's environment, inherited by
the replica actors it starts) and the ``raylog_broker`` resource. The first broker node
serves its replicas from two processes (``RAYLOG_BROKER_PROCESSES=2``), the others from one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

import raylog
from actors.serving import IDLE_MAINTENANCE_ENV
from raylog import Admin, Consumer, TopicPartition
from raylog.client.connection import reset_default
from raylog.client.remote import resolve
from raylog.metadata.hosts import PROCESSES_ENV
from raylog.metadata.limits import MAX_REPLICAS_ENV
from raylog.quotas.enforcer import WINDOW_SIZE_ENV as QUOTA_WINDOW_SIZE_ENV
from raylog.tiered import settings as tiered_settings
from raylog.tiered.sweep import INTERVAL_ENV as TIERED_SWEEP_ENV
from raylog.util import faults
from raylog.util.cluster_names import BROKER_RESOURCE, DATA_DIR_ENV, NAMESPACE, broker_actor_name

BROKERS = 3
QUOTA_WINDOW_SIZE_S = "0.25"  # each broker's RAYLOG_QUOTA_WINDOW_SIZE_SECONDS
TIERED_SWEEP_S = "2"  # each tiered leader's sweep of its store folder (default 600 s)
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 200 * 1024 * 1024}


@dataclasses.dataclass
class TestCluster:
    cluster: Cluster
    root: Path
    data_dirs: dict[str, Path]  # broker node id -> its data directory (RAYLOG_DATA_DIR)
    raylog: raylog.RaylogCluster
    processes_node: str  # the broker node with two replica-host processes

    @property
    def remote_store(self) -> Path:
        """The file:// object store of the cluster's tiered topics."""
        return self.root / "remote-store"

    def brokers(self) -> dict[int, dict]:
        """The controller's view: broker id -> node id, host, data directory, alive, ..."""
        status = self.raylog.controller.cluster_status()
        return {b["broker_id"]: b for b in status["brokers"]}

    @property
    def broker_ids(self) -> list[int]:
        return sorted(b for b, info in self.brokers().items() if info["alive"])

    @property
    def failpoints_file(self) -> Path:
        """The fail-point file every process of this cluster reads (raylog/util/faults.py)."""
        return self.root / "failpoints"

    @contextlib.contextmanager
    def failpoints(self, actions: dict[str, str]) -> Iterator[None]:
        """Arm fail points (``{"controller.isr_committed": "exit-once:/tmp/m"}``) for the
        duration of the block; every point is off again after it, however it ends."""
        lines = [f"{name} = {action}\n" for name, action in actions.items()]
        self.failpoints_file.write_text("".join(lines))
        try:
            yield
        finally:
            self.failpoints_file.write_text("")


def wait_for(condition: Callable[[], object], timeout: float = 30.0, interval: float = 0.1,
             what: str = "condition") -> object:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = condition()
        except Exception as e:  # the condition may raise while the system settles
            last_error = e
            result = None
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; "
                         f"last error: {last_error!r}")


def broker_node_env(root: Path, data_dir: Path, processes: int = 1) -> dict[str, str]:
    """The environment of a broker node of the session's cluster (its raylet's, which the
    actors it starts inherit), serving ``data_dir`` from ``processes`` processes."""
    return {DATA_DIR_ENV: str(data_dir), faults.FILE_ENV: str(root / "failpoints"),
            PROCESSES_ENV: str(processes), IDLE_MAINTENANCE_ENV: "5",
            QUOTA_WINDOW_SIZE_ENV: QUOTA_WINDOW_SIZE_S,
            TIERED_SWEEP_ENV: TIERED_SWEEP_S}


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory) -> Iterator[TestCluster]:
    root = tmp_path_factory.mktemp("raylog-cluster")
    # The controller's limit of replicas per broker, below what 10,000 partitions put on each
    # of the three (test_bad_input provokes it); the machine's memory would allow more.
    # Metrics reach the nodes' Prometheus endpoints every 2 s (Ray's default: 10 s). An idle
    # broker looks at its replicas every 5 s (default 30 s): a compaction or a deletion that
    # became due after the last write is done within seconds, not half a minute. Client
    # quotas are measured over 11 samples of 0.25 s (default 1 s): a quota holds a client
    # within about 3 s, not 11 (tests/integration/test_quotas.py). A tiered leader sweeps its
    # store folder every 2 s (default 600 s), and a folder no record names goes after twice
    # that (test_tiered.py's leader kill waits for both).
    cluster = Cluster(initialize_head=True, head_node_args={
        **NODE_ARGS, "include_dashboard": False,
        "_system_config": {"metrics_report_interval_ms": 2000},
        "env_vars": {DATA_DIR_ENV: str(root / "head"), MAX_REPLICAS_ENV: "3000",
                     faults.FILE_ENV: str(root / "failpoints"),
                     # the object store of tiered topics (test_tiered.py)
                     tiered_settings.URI_ENV: f"file://{root / 'remote-store'}"}})
    try:  # from here on the nodes are shut down however the setup ends
        data_dirs = {}
        for i in range(BROKERS):
            data_dir = root / f"broker-{i}"
            node = cluster.add_node(**NODE_ARGS, resources={BROKER_RESOURCE: 1},
                                    env_vars=broker_node_env(root, data_dir, 2 if i == 0 else 1))
            data_dirs[node.node_id] = data_dir
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        connection = raylog.init()
        yield TestCluster(cluster, root, data_dirs, connection, next(iter(data_dirs)))
    finally:
        reset_default()
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def topic_name() -> str:
    """A fresh topic name per test: the cluster and its topics live for the whole session."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def spark(ray_cluster) -> Iterator[object]:
    """One RayDP Spark session (1 executor, 1 core, 1 GB) for the whole test session."""
    from raylog.integrations import spark as raylog_spark

    session = raylog_spark.session("raylog-tests")
    try:
        yield session
    finally:
        raylog_spark.stop()


def restart_controller() -> None:
    """Kill the controller (Ray restarts it) and wait until the new one is serving."""
    from raylog.util.cluster_names import CONTROLLER_NAME, NAMESPACE

    controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    old = ray.get(controller.ready.remote())["pid"]
    ray.kill(controller, no_restart=False)
    wait_for(lambda: ray.get(controller.ready.remote(), timeout=10)["pid"] != old, timeout=90,
             what="the controller to restart")


def consume_all(topic: str, partitions: int, expected: int, timeout_s: float = 60) -> list:
    """Every record of the topic, from each partition's start to its end offset, once the end
    offsets add up to at least ``expected`` records: a record beyond what was expected (a
    duplicate) is read too, never missed."""
    return read_to_ends([TopicPartition(topic, p) for p in range(partitions)], expected,
                        timeout_s, max_poll_records=50_000)


def read_to_ends(tps: list[TopicPartition], expected: int = 0, timeout_s: float = 60,
                 **settings) -> list:
    """Every record of ``tps``, from each one's start to its end offset (its last stable
    offset for a read_committed consumer), once those ends hold at least ``expected``
    records in all. ``settings``: the Consumer's further settings."""
    with Consumer(auto_offset_reset="earliest", **settings) as consumer:
        consumer.assign(tps)

        def ends() -> dict | None:
            found = consumer.end_offsets(tps)
            starts = consumer.beginning_offsets(tps)
            return found if sum(found[tp] - starts[tp] for tp in tps) >= expected else None

        end = wait_for(ends, timeout=timeout_s, what=f"{expected} records in {tps}")
        records = []

        def progress() -> bool:
            records.extend(consumer.poll(timeout_ms=200))
            return all(consumer.position(tp) >= end[tp] for tp in tps)

        wait_for(progress, timeout=timeout_s, what=f"every record of {tps}")
    return records


@pytest.fixture
def gateway(ray_cluster) -> Iterator[str]:
    """A Kafka listener on loopback for this test (each test starts and stops its own): its
    bootstrap address."""
    with kafka_listener(ray_cluster.raylog) as bootstrap:
        yield bootstrap


@pytest.fixture
def topic(ray_cluster, topic_name, request) -> str:
    """A fresh topic of the test module's ``PARTITIONS`` partitions (3 if it names none),
    replicated on three brokers (once three are alive: an earlier test may have killed or
    stopped one, which comes back)."""
    wait_for(lambda: len(ray_cluster.broker_ids) >= 3, timeout=120, what="three live brokers")
    Admin().create_topic(topic_name, partitions=getattr(request.module, "PARTITIONS", 3),
                         replication_factor=3)
    return topic_name


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA and a server certificate for loopback (tests/tls.py), for the module."""
    from tests.tls import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def follower(ray_cluster, users) -> Iterator:
    """A follower of ``__raylog_users`` polling every 200 ms, for the module (``users``: the
    module's fixture putting its users there)."""
    from raylog.kafka.gateway.users import credential_follower

    following = credential_follower(ray_cluster.raylog, poll_ms=200)
    following.start()
    try:
        yield following
    finally:
        following.close()


def node_pki(directory: Path):
    """As the pki fixture, the server certificate naming this node's address too: the
    listener actors listen on every interface and send clients to the nodes' addresses."""
    from tests.tls import make_pki

    return make_pki(directory, ("localhost", "127.0.0.1", ray.util.get_node_ip_address()))


@contextlib.contextmanager
def kafka_listener_actors(security: object = None) -> Iterator[dict[str, tuple[str, int]]]:
    """A listener actor on every broker node (``raylog start --kafka-port 0``, ``security``
    its ListenerSecurity if any), killed after the block: node id -> (host, port)."""
    from raylog.kafka.gateway.cluster import listener_actor_name
    from raylog.session import start_kafka_listeners

    listeners = start_kafka_listeners(0, security=security)
    try:
        yield listeners
    finally:
        for node in listeners:
            ray.kill(ray.get_actor(listener_actor_name(node), namespace=NAMESPACE))


@contextlib.contextmanager
def kafka_listener(cluster: raylog.RaylogCluster, **security: object) -> Iterator[str]:
    """A Kafka listener on loopback speaking for every broker of ``cluster`` (as ``raylog
    gateway`` does), stopped after the block: its bootstrap address. ``security``: the
    KafkaListener's ``security`` (a ListenerSecurity) and ``credentials``, if any."""
    with kafka_listener_backend(cluster, listener=security) as (bootstrap, _):
        yield bootstrap


@contextlib.contextmanager
def kafka_listener_backend(cluster: raylog.RaylogCluster, listener: dict | None = None,
                           **options) -> Iterator[tuple]:
    """As kafka_listener, with ``listener`` for the KafkaListener (its security) and
    ``options`` for its ClusterBackend: (bootstrap address, the backend)."""
    from raylog.kafka.gateway.cluster import ClusterBackend, OneAddress
    from raylog.kafka.gateway.listener import KafkaListener, ListenerThread

    advertiser = OneAddress("127.0.0.1", 0)
    backend = ClusterBackend(cluster, advertiser, cluster.controller.ready()["cluster_id"],
                             **options)
    try:
        running = ListenerThread(KafkaListener(backend, host="127.0.0.1", port=0,
                                               **(listener or {})))
        host, port = running.start()
        advertiser.port = port
        try:
            yield f"{host}:{port}", backend
        finally:
            running.stop()
    finally:
        backend.close()


def leader_broker(admin: Admin, topic: str, partition: int):
    """The broker actor leading a partition (of the node the controller's metadata names
    for its leader: the process killed or stopped takes the node's replica hosts with it)."""
    client = admin._cluster.topic(topic, refresh=True).partitions[partition].leader_client()
    return ray.get_actor(broker_actor_name(client.node_id), namespace=NAMESPACE)


def broker_processes(actor) -> list[int]:
    """The process ids of a broker actor and of the replica hosts it started on its node: a
    test that stops a broker the way a hung node would stops them all."""
    node = ray._private.state.actors(actor._actor_id.hex())["Address"]["NodeID"]
    pids = sorted(a["Pid"] for a in ray._private.state.actors().values()
                  if a["State"] == "ALIVE" and a["Address"]["NodeID"] == node
                  and any(kind in a["ActorClassName"]
                          for kind in ("BrokerActor", "ReplicaHostActor")))
    if not pids:
        raise AssertionError(f"no broker process found on node {node}")
    return pids


def replica_info(admin: Admin, topic: str, partition: int, broker: int | None = None) -> dict:
    """What the partition's replica on ``broker`` (default: its leader) says of itself."""
    if broker is None:
        broker = admin.describe_topic(topic)["partitions"][partition]["leader"]
    return next(r for r in admin.describe_replicas(topic)
                if r["partition"] == partition and r["broker_id"] == broker)


def restarts(actor) -> int:
    """How often Ray restarted ``actor``, from the GCS actor table."""
    return ray._private.state.actors(actor._actor_id.hex())["NumRestarts"]


def replica_records(admin: Admin, topic: str, partition: int) -> dict[int, list]:
    """Broker -> [(offset, value)] of its replica, read from the replica itself below its
    high watermark."""
    meta = admin._cluster.topic(topic, refresh=True).partitions[partition]
    described = {r["broker_id"]: r for r in admin.describe_replicas(topic)
                 if r["partition"] == partition}
    out = {}
    for broker, client in meta.clients.items():
        info = described[broker]
        table = resolve(client.read_kafka_table(info["log_start_offset"],
                                                info["high_watermark"]), timeout=60)
        out[broker] = list(zip(table.column("offset").to_pylist(),
                               table.column("value").to_pylist(), strict=True))
    return out
