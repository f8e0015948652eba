"""Apache Kafka as the benchmark suite's peer: its jars, fetched with Maven, and a KRaft
cluster on loopback that the suite starts and always stops.

Jars: ``benchmarks/kafka/pom.xml`` (the broker, ``kafka_2.13``) and
``benchmarks/kafka/spark/pom.xml`` (Spark 3.5's ``format("kafka")`` source) are copied by
``mvn dependency:copy-dependencies`` into a cache directory named by the pom's digest
(``$XDG_CACHE_HOME/raylog/kafka/``), so a changed pom fetches again and an unchanged one never
does. ``make bench`` fetches them (``python benchmarks/kafka_peer.py fetch``); the suite does
too when they are missing.

Clusters: ``KafkaCluster(nodes)`` formats KRaft storage (``kafka.tools.StorageTool format``)
and starts ``nodes`` combined broker+controller processes (``process.roles=broker,controller``;
with 3 nodes, a 3-voter KRaft quorum), each with free loopback ports, its data in a scratch
directory on local disk, a heap of HEAP, and Kafka's defaults otherwise (no fsync per message:
``log.flush.interval.messages`` is left at its default, as raylog's ``flush.messages``). Each
process leads its own process group; ``stop()`` ends the groups (TERM, then KILL), and runs
from the context manager's exit, from ``atexit`` and on any error while starting.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BROKER_POM = HERE / "kafka" / "pom.xml"
SPARK_POM = HERE / "kafka" / "spark" / "pom.xml"
HEAP = "1G"
# kafka-run-class.sh's default JVM options (KAFKA_JVM_PERFORMANCE_OPTS).
JVM_OPTIONS = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
               "-Djava.awt.headless=true"]
START_TIMEOUT_S = 180.0    # a loaded 2-core machine starts three JVMs slowly
STOP_TIMEOUT_S = 30.0
FETCH_TIMEOUT_S = 900.0
LOG4J2 = """\
Configuration:
  Appenders:
    File:
      name: file
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: file
"""


# -- the jars ----------------------------------------------------------------------------------

def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "raylog" / "kafka"


def lib_dir(pom: Path, root: Path | None = None) -> Path:
    """Where ``pom``'s jars are cached: a directory named by the pom's content."""
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    return (root or cache_root()) / f"{pom.parent.name}-{digest}"


def missing_tools() -> str | None:
    """Why Kafka cannot run here (no java, no mvn with nothing cached), or None."""
    if shutil.which("java") is None:
        return "java is not installed (Kafka 4 needs Java 17: `apt-get install openjdk-17-jre`)"
    if shutil.which("mvn") is None and not all(
            (lib_dir(p) / ".complete").exists() for p in (BROKER_POM, SPARK_POM)):
        return "mvn is not installed and Kafka's jars are not cached (`apt-get install maven`)"
    return None


def fetch(pom: Path, root: Path | None = None) -> Path:
    """``pom``'s runtime jars in the cache, fetched with Maven unless there already."""
    target = lib_dir(pom, root)
    if (target / ".complete").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("mvn is not installed: cannot fetch Kafka's jars")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        done = subprocess.run(
            [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={partial}"],
            capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
        if done.returncode != 0 or not any(partial.glob("*.jar")):
            raise RuntimeError(f"mvn could not fetch {pom}: {(done.stdout + done.stderr)[-1500:]}")
        (partial / ".complete").write_text(pom.read_text())
        with contextlib.suppress(FileExistsError, OSError):  # another fetch won the race
            partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def kafka_version(lib: Path) -> str:
    """The broker's version, from its jar's name (kafka_2.13-<version>.jar)."""
    for jar in lib.glob("kafka_2.13-*.jar"):
        return jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")
    raise RuntimeError(f"no kafka_2.13 jar in {lib}")


def spark_source_jars(lib: Path, spark_jars: Path) -> list[Path]:
    """The Kafka source's jars that pyspark does not ship already (by artifact name: a second
    Scala library or Hadoop client on the classpath would clash with pyspark's own)."""
    def artifact(name: str) -> str:
        stem = name.removesuffix(".jar")
        parts = stem.split("-")
        while len(parts) > 1 and parts[-1][:1].isdigit():
            parts.pop()
        return "-".join(parts)

    shipped = {artifact(j.name) for j in spark_jars.glob("*.jar")}
    return sorted(j for j in lib.glob("*.jar") if artifact(j.name) not in shipped)


# -- the cluster -------------------------------------------------------------------------------

def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (all held open until all are chosen)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as Kafka's Uuid),
    never starting with "-", which `kafka-storage format -t` would take for an option (Kafka's
    own Uuid.randomUuid draws again then too; one id in 64 did, and the run lost Kafka)."""
    while (ident := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
           ).startswith("-"):
        pass
    return ident


def node_properties(node_id: int, broker_ports: list[int], controller_ports: list[int],
                    log_dir: Path) -> dict[str, str]:
    """server.properties of combined node ``node_id`` (1-based) of a static KRaft quorum of
    ``len(controller_ports)`` voters. Kafka's defaults otherwise, but the internal topics'
    replication, which cannot exceed the nodes."""
    nodes = len(controller_ports)
    voters = ",".join(f"{i + 1}@127.0.0.1:{port}" for i, port in enumerate(controller_ports))
    replicas = str(min(3, nodes))
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_ports[node_id - 1]},"
                     f"CONTROLLER://127.0.0.1:{controller_ports[node_id - 1]}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_ports[node_id - 1]}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": str(min(2, nodes)),
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": str(min(2, nodes)),
        "group.initial.rebalance.delay.ms": "0",
    }


def write_properties(path: Path, properties: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))


def stop_processes(processes: list[Any], timeout: float = STOP_TIMEOUT_S) -> None:
    """End each process's group: TERM to all at once (a quorum stopping node by node would
    leave the last ones waiting for a controller), then KILL whatever still runs after
    ``timeout``. Safe to repeat."""
    def signal_all(signum: int) -> None:
        for process in processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signum)

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, deadline - time.monotonic()))
    signal_all(signal.SIGKILL)
    for process in processes:
        process.wait(timeout)


class KafkaCluster:
    """``nodes`` Kafka processes this suite started (combined broker+controller each), their
    scratch directory and their bootstrap address. Started by the constructor, which stops
    whatever it started when it fails; ``stop()`` (the context manager's exit, or ``atexit``
    if the interpreter ends first) ends every process group and removes the directory."""

    def __init__(self, nodes: int, lib: Path, *, java: str | None = None,
                 popen: Any = subprocess.Popen, run: Any = subprocess.run,
                 wait: bool = True) -> None:
        self.nodes, self.lib = nodes, lib
        self.java = java or shutil.which("java") or "java"
        self.directory = Path(tempfile.mkdtemp(prefix="raylog-bench-kafka-"))
        self.processes: list[Any] = []
        atexit.register(self.stop)
        try:
            ports = free_ports(2 * nodes)
            self.broker_ports, self.controller_ports = ports[:nodes], ports[nodes:]
            self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.broker_ports)
            self.version = kafka_version(lib)
            ident = cluster_id()
            for node in range(1, nodes + 1):
                config = self._configure(node)
                done = run(self._java("kafka.tools.StorageTool", "format", "-t", ident, "-c",
                                      str(config), "--ignore-formatted"),
                           capture_output=True, text=True, timeout=300)
                if done.returncode != 0:
                    raise RuntimeError(f"formatting node {node}'s storage failed: "
                                       f"{(done.stdout + done.stderr)[-1500:]}")
            for node in range(1, nodes + 1):
                log = open(self.directory / f"node-{node}.out", "wb")  # noqa: SIM115
                with log:
                    self.processes.append(popen(
                        self._java("kafka.Kafka", str(self.directory / f"node-{node}.properties"),
                                   heap=True, log=self.directory / f"node-{node}.log"),
                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                        start_new_session=True))  # its own group: stop() ends all it spawned
            if wait:
                self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def _configure(self, node: int) -> Path:
        data = self.directory / f"data-{node}"
        data.mkdir()
        path = self.directory / f"node-{node}.properties"
        write_properties(path, node_properties(node, self.broker_ports, self.controller_ports,
                                               data))
        return path

    def _java(self, main: str, *args: str, heap: bool = False, log: Path | None = None
              ) -> list[str]:
        options = [f"-Xmx{HEAP}", f"-Xms{HEAP}", *JVM_OPTIONS] if heap else ["-Xmx256M"]
        if log is not None:
            config = log.with_suffix(".log4j2.yaml")
            config.write_text(LOG4J2.format(log=log))
            options.append(f"-Dlog4j2.configurationFile={config}")
        return [self.java, *options, "-cp", str(self.lib / "*"), main, *args]

    @property
    def settings(self) -> dict[str, Any]:
        """What the report says of this cluster."""
        return {"version": self.version, "nodes": self.nodes,
                "roles": "process.roles=broker,controller; every node a voter of a static "
                         "KRaft quorum",
                "heap": f"-Xmx{HEAP} -Xms{HEAP}", "jvm": " ".join(JVM_OPTIONS),
                "listeners": "PLAINTEXT on 127.0.0.1, free ports",
                "log_dirs": "a scratch directory on local disk",
                "overrides": {k: v for k, v in node_properties(
                    1, self.broker_ports, self.controller_ports, Path("-")).items()
                    if k.startswith(("offsets.", "transaction.", "share.", "group."))},
                "fsync": "Kafka's default: no flush per message (log.flush.interval.messages "
                         "unset), the OS writes pages back"}

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until a metadata request (confluent-kafka's AdminClient) lists every broker."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        # log_level 0: no "connection refused" lines while the brokers are still starting
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + timeout
        while True:
            for i, process in enumerate(self.processes):
                if process.poll() is not None:
                    raise RuntimeError(f"Kafka node {i + 1} exited ({process.returncode}): "
                                       f"{self.log_tail(i + 1)}")
            with contextlib.suppress(KafkaException):
                if len(admin.list_topics(timeout=5).brokers) == self.nodes:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka did not answer within {timeout:.0f} s: "
                                   f"{self.log_tail(1)}")
            time.sleep(0.5)

    def log_tail(self, node: int) -> str:
        texts = []
        for name in (f"node-{node}.out", f"node-{node}.log"):
            with contextlib.suppress(OSError):
                texts.append((self.directory / name).read_text(errors="replace")[-800:])
        return " | ".join(texts) or "(no log)"

    def create_topic(self, name: str, partitions: int, replication: int,
                     configs: dict[str, str] | None = None) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, replication,
                                                config=configs or {})], request_timeout=60)
        futures[name].result(120)
        deadline = time.monotonic() + 120
        while True:  # every partition has a leader before the first record is timed
            topic = admin.list_topics(name, timeout=10).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions \
                    and all(p.leader >= 0 and len(p.isrs) == replication
                            for p in topic.partitions.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka topic {name} has no leaders or replicas in sync")
            time.sleep(0.2)

    def stop(self) -> None:
        try:
            stop_processes(self.processes)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
            atexit.unregister(self.stop)

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def kafka_or_none(nodes: int) -> Iterator[tuple[KafkaCluster | None, str | None]]:
    """(a started cluster of ``nodes``, None), or (None, why Kafka cannot be measured)."""
    reason = missing_tools()
    if reason is None:
        try:
            lib = fetch(BROKER_POM)
            cluster = KafkaCluster(nodes, lib)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            reason = str(e)
    if reason is not None:
        print(f"NOTE: Kafka not measured: {reason}", file=sys.stderr)
        yield None, reason
        return
    with cluster:
        yield cluster, None


def main(argv: list[str]) -> int:
    """``fetch``: cache both poms' jars (for ``make bench``); ``start N``: run a cluster of
    N nodes until Ctrl-C (to try it by hand)."""
    if argv[:1] == ["fetch"]:
        if (reason := missing_tools()) is not None:
            print(f"Kafka's jars not fetched: {reason}; the suite runs without Kafka")
            return 0
        for pom in (BROKER_POM, SPARK_POM):
            print(f"{pom.relative_to(HERE.parent)}: {fetch(pom)}")
        return 0
    if argv[:1] == ["start"]:
        with KafkaCluster(int(argv[1]) if len(argv) > 1 else 1, fetch(BROKER_POM)) as cluster:
            print(f"Kafka {cluster.version} at {cluster.bootstrap} (Ctrl-C stops it)", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while all(p.poll() is None for p in cluster.processes):
                    time.sleep(1)
        return 0
    print("usage: kafka_peer.py fetch | start [NODES]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
