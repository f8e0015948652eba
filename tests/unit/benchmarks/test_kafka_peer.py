"""benchmarks/kafka_peer.py's pure parts: the config it writes, port choice, where jars are
cached, which jars go on Spark's classpath, and that a cluster failing to start stops what it
started (fake processes: no Java runs here)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture
def kafka_peer(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import kafka_peer

    return kafka_peer


def test_free_ports_are_distinct_and_bindable(kafka_peer):
    import socket

    ports = kafka_peer.free_ports(6)
    assert len(set(ports)) == 6
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_cluster_ids_are_kafka_uuids(kafka_peer):
    import base64

    ident = kafka_peer.cluster_id()
    assert len(ident) == 22 and "=" not in ident
    assert len(base64.urlsafe_b64decode(ident + "==")) == 16
    assert ident != kafka_peer.cluster_id()


def test_a_cluster_id_never_starts_like_an_option(kafka_peer, monkeypatch):
    """kafka-storage format -t -xyz... refuses the id: drawn again, as Kafka's Uuid does."""
    import uuid

    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=bytes(16))])
    monkeypatch.setattr(kafka_peer.uuid, "uuid4", lambda: next(draws))
    assert kafka_peer.cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"


def test_a_three_node_quorum_names_every_voter_and_replicates_internal_topics(kafka_peer,
                                                                              tmp_path):
    props = kafka_peer.node_properties(2, [9001, 9002, 9003], [9101, 9102, 9103], tmp_path)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == \
        "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9002"
    assert props["log.dirs"] == str(tmp_path)
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    # no fsync per message: Kafka's default, as raylog's
    assert not any(k.startswith("log.flush") for k in props)


def test_one_node_keeps_internal_topics_to_one_replica(kafka_peer, tmp_path):
    props = kafka_peer.node_properties(1, [9001], [9101], tmp_path)
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9101"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    path = tmp_path / "server.properties"
    kafka_peer.write_properties(path, props)
    assert "node.id=1\n" in path.read_text()
    assert path.read_text().count("\n") == len(props)


def test_jars_are_cached_by_the_poms_content(kafka_peer, tmp_path):
    pom = tmp_path / "kafka" / "pom.xml"
    pom.parent.mkdir()
    pom.write_text("<project>1</project>")
    first = kafka_peer.lib_dir(pom, tmp_path / "cache")
    assert first.parent == tmp_path / "cache" and first.name.startswith("kafka-")
    pom.write_text("<project>2</project>")
    assert kafka_peer.lib_dir(pom, tmp_path / "cache") != first


def test_a_cached_fetch_runs_no_maven(kafka_peer, tmp_path, monkeypatch):
    pom = tmp_path / "kafka" / "pom.xml"
    pom.parent.mkdir()
    pom.write_text("<project/>")
    cached = kafka_peer.lib_dir(pom, tmp_path)
    cached.mkdir()
    (cached / ".complete").write_text("")
    monkeypatch.setattr(kafka_peer.shutil, "which", lambda name: None)  # no mvn at all
    assert kafka_peer.fetch(pom, tmp_path) == cached


def test_missing_java_is_a_reason_not_an_error(kafka_peer, monkeypatch):
    monkeypatch.setattr(kafka_peer.shutil, "which", lambda name: None)
    assert "java is not installed" in kafka_peer.missing_tools()


def test_spark_gets_only_the_jars_pyspark_lacks(kafka_peer, tmp_path):
    lib, spark = tmp_path / "lib", tmp_path / "spark"
    lib.mkdir()
    spark.mkdir()
    for name in ("spark-sql-kafka-0-10_2.12-3.5.7.jar", "kafka-clients-3.4.1.jar",
                 "commons-pool2-2.11.1.jar", "scala-library-2.12.18.jar",
                 "hadoop-client-api-3.3.4.jar", "slf4j-api-1.7.36.jar"):
        (lib / name).write_text("")
    for name in ("scala-library-2.12.18.jar", "hadoop-client-api-3.3.4.jar",
                 "slf4j-api-2.0.7.jar", "spark-sql_2.12-3.5.7.jar"):
        (spark / name).write_text("")
    assert [j.name for j in kafka_peer.spark_source_jars(lib, spark)] == [
        "commons-pool2-2.11.1.jar", "kafka-clients-3.4.1.jar",
        "spark-sql-kafka-0-10_2.12-3.5.7.jar"]


class FakeProcess:
    """A started Kafka node that never exits by itself; records the signals its group got."""

    def __init__(self, args, **options):
        self.args, self.options = args, options
        self.pid, self.returncode, self.signals = 10_000 + len(FakeProcess.started), None, []
        FakeProcess.started.append(self)

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


FakeProcess.started: list[FakeProcess] = []


@pytest.fixture
def fake_cluster(kafka_peer, tmp_path, monkeypatch):
    """KafkaCluster's collaborators faked: formatting succeeds, processes are FakeProcess,
    killpg records the signal and ends the fake on KILL (TERM is ignored, as by a stuck JVM)."""
    FakeProcess.started.clear()
    (tmp_path / "kafka_2.13-4.4.0.jar").write_text("")

    def killpg(pid, signum):
        process = next(p for p in FakeProcess.started if p.pid == pid)
        process.signals.append(signum)
        if signum == signal.SIGKILL:
            process.returncode = -9

    def run(args, **options):
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(kafka_peer.os, "killpg", killpg)
    return {"lib": tmp_path, "run": run, "popen": FakeProcess, "java": "java"}


def test_nodes_start_in_their_own_process_groups(kafka_peer, fake_cluster):
    cluster = kafka_peer.KafkaCluster(3, **fake_cluster, wait=False)
    try:
        assert len(FakeProcess.started) == 3
        first = FakeProcess.started[0]
        assert first.options["start_new_session"] is True
        assert first.args[-2:] == ["kafka.Kafka", str(cluster.directory / "node-1.properties")]
        assert "-Xmx1G" in first.args
        assert (cluster.directory / "node-3.properties").exists()
        assert cluster.version == "4.4.0"
        assert len(cluster.bootstrap.split(",")) == 3
    finally:
        cluster.stop()
    assert all(p.signals == [signal.SIGTERM, signal.SIGKILL] for p in FakeProcess.started)
    assert not cluster.directory.exists()


def test_a_failed_start_stops_every_node_it_started(kafka_peer, fake_cluster, monkeypatch):
    def not_ready(self, timeout=0):
        raise RuntimeError("Kafka did not answer")

    monkeypatch.setattr(kafka_peer.KafkaCluster, "wait_ready", not_ready)
    made: list = []
    monkeypatch.setattr(kafka_peer.tempfile, "mkdtemp",
                        lambda prefix, _real=kafka_peer.tempfile.mkdtemp:
                        made.append(_real(prefix=prefix)) or made[-1])
    with pytest.raises(RuntimeError, match="did not answer"):
        kafka_peer.KafkaCluster(3, **fake_cluster)
    assert len(FakeProcess.started) == 3
    assert all(p.returncode == -9 and p.signals[0] == signal.SIGTERM
               for p in FakeProcess.started)
    assert not os.path.exists(made[0])


def test_a_failed_format_starts_nothing(kafka_peer, fake_cluster):
    def refuse(args, **options):
        return subprocess.CompletedProcess(args, 1, "", "bad config")

    with pytest.raises(RuntimeError, match="bad config"):
        kafka_peer.KafkaCluster(1, **{**fake_cluster, "run": refuse})
    assert FakeProcess.started == []


def test_stopping_twice_signals_nothing_more(kafka_peer, fake_cluster):
    cluster = kafka_peer.KafkaCluster(1, **fake_cluster, wait=False)
    cluster.stop()
    cluster.stop()
    assert FakeProcess.started[0].signals == [signal.SIGTERM, signal.SIGKILL]


# -- the report's Kafka figures, ratios and table (figures invented) ----------------------------

def kafka_runs() -> tuple[dict, dict]:
    from tests.unit.benchmarks.test_benchmarks import made_up_runs

    single, matrix = made_up_runs()
    single |= {"kafka_produce_records_per_s": 600_000.0, "kafka_consume_records_per_s": 5e6,
               "kafka_produce_records_per_cpu_s": 2e6,
               "kafka_client_raylog_produce_records_per_s": None,
               "kafka_latency": [{"p50_ms": 900.0, "p99_ms": 2500.0, "p999_ms": 2600.0},
                                 {"p50_ms": 2.0, "p99_ms": 4.5, "p999_ms": 30.0}],
               "kafka_analytics": {"records": 500_000,
                                   "spark_count_raylog_records_per_s": 9e6,
                                   "spark_count_kafka_records_per_s": 3e6,
                                   "spark_sum_raylog_records_per_s": 2e6,
                                   "spark_sum_kafka_records_per_s": 1e6,
                                   "ray_data_raylog_records_per_s": 1e6,
                                   "ray_data_kafka_records_per_s": 4e6}}
    matrix |= {"kafka": {"available": True, "rf3_acksall_records_per_s": 300_000.0}}
    return single, matrix


@pytest.fixture
def report(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import suite_report

    return suite_report


def test_kafka_ratios_sit_beside_their_raw_figures(report):
    figures = report.headline_figures(*kafka_runs())
    assert figures["vs_kafka_produce"] == 2.0            # 1.2M / 600k
    assert figures["vs_kafka_consume"] == 0.5
    assert figures["vs_kafka_rf3_acksall"] == 2.0        # 600k / 300k
    assert figures["vs_kafka_e2e_p99"] == 2.0            # 9 ms / 4.5 ms: lower is better
    assert figures["vs_kafka_e2e_p99_linger0"] == 0.01   # 25 ms / 2.5 s
    assert figures["vs_kafka_spark_count"] == 3.0
    assert figures["vs_kafka_ray_data_read"] == 0.25
    assert figures["kafka_e2e_p99_ms"] == 4.5 and figures["analytics_records"] == 500_000
    targets = report.targets_report(figures)
    assert targets["vs_kafka_spark_count"]["met"] is True   # at least 3x
    assert targets["vs_kafka_e2e_p99"]["met"] is False      # above 1.5x
    assert targets["vs_kafka_ray_data_read"]["met"] is False


def test_kafka_ratios_are_none_when_kafka_did_not_run(report):
    from tests.unit.benchmarks.test_benchmarks import made_up_runs

    figures = report.headline_figures(*made_up_runs())
    assert all(figures[name] is None for name in report.KAFKA_RATIOS)
    assert report.targets_report(figures)["vs_kafka_produce"]["met"] is None


def test_the_kafka_table_and_note(report):
    figures = report.headline_figures(*kafka_runs())
    results = {**figures, "targets": report.targets_report(figures),
               "kafka": {"available": True, "version": "4.4.0", "roles": "combined",
                         "heap": "-Xmx1G -Xms1G", "jvm": "-XX:+UseG1GC",
                         "listeners": "loopback", "log_dirs": "scratch", "fsync": "no flush",
                         "overrides": {"offsets.topic.replication.factor": "1"},
                         "workload": "Clients: confluent-kafka.",
                         "latency_offered_records_per_s": 10_000}}
    table = report.kafka_table(results)
    assert "| produce, 1 producer, 100 B, rf 1 (records/s) | 1,200,000 | 600,000 | 2.00x | " \
           ">= 1: met |" in table
    assert "| end-to-end p99 at 10,000 records/s, linger 5 ms (ms; lower is better) | 9.00 | " \
           "4.50 | 2.00x | <= 1.5: **missed** |" in table
    assert "| end-to-end p99 at 10,000 records/s, linger 0 (ms; lower is better) | 25.00 | " \
           "2500.00 | 0.01x | - |" in table
    assert "| end-to-end p50 / p99.9, linger 5 ms (ms) | 4.00 / 12.00 | 2.00 / 30.00 |" in table
    assert "| producer process: records per CPU-second | - | 2,000,000 | - | - |" in table
    # the listener's rows are there, its figures not measured in these runs
    assert "| produce as above, confluent-kafka -> raylog's Kafka listener (records/s) | - | " \
           "600,000 | - | - |" in table
    note = report.kafka_note(results["kafka"])
    assert "Apache Kafka 4.4.0" in note and "`offsets.topic.replication.factor=1`" in note
    assert "Kafka listener" not in note
    note = report.kafka_note({**results["kafka"], "raylog_listener": "`raylog gateway`"})
    assert note.endswith("confluent-kafka.. raylog's Kafka listener: `raylog gateway`")
    assert report.kafka_note({"available": False, "reason": "java is not installed"}) == \
        "Apache Kafka: **not measured**: java is not installed"


def test_without_java_the_suite_runs_without_kafka(kafka_peer, monkeypatch, capsys):
    monkeypatch.setattr(kafka_peer.shutil, "which", lambda name: None)
    with kafka_peer.kafka_or_none(1) as (cluster, reason):
        assert cluster is None and "java is not installed" in reason
    assert "NOTE: Kafka not measured: java is not installed" in capsys.readouterr().err


def test_a_kafka_that_cannot_start_is_a_reason_not_an_error(kafka_peer, monkeypatch, tmp_path):
    def broken(nodes, lib):
        raise RuntimeError("Kafka node 1 exited (1): address in use")

    monkeypatch.setattr(kafka_peer, "missing_tools", lambda: None)
    monkeypatch.setattr(kafka_peer, "fetch", lambda pom: tmp_path)
    monkeypatch.setattr(kafka_peer, "KafkaCluster", broken)
    with kafka_peer.kafka_or_none(3) as (cluster, reason):
        assert cluster is None and "address in use" in reason
