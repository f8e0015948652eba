"""Kafka clients logging in to the Kafka listener over TLS (raylog/kafka/gateway/sasl.py,
security.py; docs/security.md), on the session's cluster: confluent-kafka producing and
consuming with SASL_SSL and SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN against credentials in
``__raylog_users``; kcat with SASL_SSL; ``raylog users`` and ``raylog gateway`` as commands;
the listener actors of ``raylog start`` with SASL_SSL; Kafka's Java client with
SCRAM-SHA-512 over TLS. Refused: a wrong password, an unknown user, a plaintext client
against the TLS listener, a deleted user (its open connection closed too): each time nothing
is written and the listener serves the next good client.

Certificates are made by the test (tests/tls.py): a CA and a server certificate for
127.0.0.1, which librdkafka checks (``ssl.endpoint.identification.algorithm`` https, its
default).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Producer as KafkaProducer

from raylog import Consumer, TopicPartition
from raylog.kafka.auth.scram import Mechanism, make_credential
from raylog.kafka.gateway.security import ListenerSecurity
from raylog.kafka.gateway.users import UsersTopic
from tests.children import Child
from tests.integration.conftest import (
    consume_all,
    kafka_listener,
    kafka_listener_actors,
    node_pki,
    wait_for,
)
from tests.integration.test_kafka_clients import BASE_TS, java_runner
from tests.integration.test_kafka_gateway import consume_with_confluent

PARTITIONS = 3
PASSWORD = "wonder-land"
# How long a refused client tries before its records fail: long enough for several logins,
# as it connects again within RECONNECT_MAX_MS (librdkafka's backoff doubles up to 10 s by
# default) and the listener answers a failed login within 1 s (sasl_ssl).
REFUSED_TIMEOUT_MS = 4_000
RECONNECT_MAX_MS = 500


@pytest.fixture(scope="module")
def users(ray_cluster) -> UsersTopic:
    """``__raylog_users`` with alice (both SCRAM mechanisms)."""
    topic = UsersTopic(ray_cluster.raylog)
    topic.put("alice", [make_credential(PASSWORD, m) for m in Mechanism])
    return topic


def sasl_ssl(pki) -> ListenerSecurity:
    """SASL_SSL with every mechanism, alice a super user; failed logins answered after 50 ms
    doubling up to 1 s (the default's 5 s would outlast the refused clients' message
    timeouts here, where every test's failures come from one address)."""
    return ListenerSecurity(security_protocol="SASL_SSL",
                            sasl_enabled_mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                            ssl_certfile=str(pki.server_cert), ssl_keyfile=str(pki.server_key),
                            failed_authentication_delay_ms=50,
                            failed_authentication_max_delay_ms=1000,
                            super_users=("User:alice",))


@pytest.fixture(scope="module")
def secure_gateway(ray_cluster, pki, follower) -> Iterator[str]:
    """A SASL_SSL listener on loopback for the module, following the users: its bootstrap
    address."""
    with kafka_listener(ray_cluster.raylog, security=sasl_ssl(pki), credentials=follower.store,
                        write_users=follower.topic.write) as bootstrap:
        yield bootstrap


def client_config(bootstrap: str, pki, mechanism: str = "SCRAM-SHA-256",
                  user: str = "alice", password: str = PASSWORD, **more) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(pki.ca), **more}


def produce(config: dict, topic: str, n: int, timeout_ms: int = 60_000) -> tuple[int, list]:
    """(records delivered, errors seen) producing n keyed records."""
    errors: list = []
    delivered = []
    producer = KafkaProducer({**config, "acks": "all", "linger.ms": 5,
                              "message.timeout.ms": timeout_ms,
                              "reconnect.backoff.max.ms": RECONNECT_MAX_MS,
                              "error_cb": errors.append})

    def report(error, message) -> None:
        if error is None:
            delivered.append(message.key())
        else:
            errors.append(error)

    for i in range(n):
        producer.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(),
                         on_delivery=report)
    producer.flush(timeout_ms / 1000 + 30)
    return len(delivered), errors


def consume(config: dict, topic: str, expected: int) -> list:
    settings = dict(config)
    return consume_with_confluent(settings.pop("bootstrap.servers"), topic, expected,
                                  **settings)


def stored(topic: str) -> int:
    """How many records the topic holds, by raylog's own end offsets."""
    with Consumer() as consumer:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return sum(consumer.end_offsets(tps).values())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_confluent_kafka_logs_in_over_tls_produces_and_consumes(secure_gateway, pki, topic,
                                                                mechanism):
    config = client_config(secure_gateway, pki, mechanism)
    delivered, errors = produce(config, topic, 200)
    assert (delivered, errors) == (200, [])
    read = consume(config, topic, 200)
    assert sorted(m.key() for m in read) == sorted(f"k{i}".encode() for i in range(200))
    assert sorted(r.key for r in consume_all(topic, PARTITIONS, 200)) == \
        sorted(m.key() for m in read)


def assert_refused_then_served(secure_gateway, pki, topic, config: dict,
                               expected: set[int]) -> None:
    """A client with ``config`` gets nothing written (with one of the ``expected`` errors);
    a good client right after is served."""
    delivered, errors = produce(config, topic, 5, timeout_ms=REFUSED_TIMEOUT_MS)
    assert delivered == 0
    assert expected & {e.code() for e in errors}, errors
    assert stored(topic) == 0
    assert produce(client_config(secure_gateway, pki), topic, 5) == (5, [])


@pytest.mark.parametrize("user, password", [("alice", "guess"), ("mallory", PASSWORD)])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_wrong_password_and_an_unknown_user_are_refused(secure_gateway, pki, topic, user,
                                                          password, mechanism):
    config = client_config(secure_gateway, pki, mechanism, user, password)
    assert_refused_then_served(secure_gateway, pki, topic, config, {KafkaError._AUTHENTICATION})


def test_a_plaintext_client_against_the_tls_listener_gets_nothing_through(secure_gateway, pki,
                                                                          topic):
    config = {"bootstrap.servers": secure_gateway, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": PASSWORD}
    # the TLS handshake fails on the listener's side: librdkafka sees its broker down
    assert_refused_then_served(secure_gateway, pki, topic, config,
                               {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


def test_a_deleted_users_next_login_fails(secure_gateway, pki, topic, users):
    users.put("carol", [make_credential("carols", Mechanism.SCRAM_SHA_256)])
    config = client_config(secure_gateway, pki, user="carol", password="carols")
    wait_for(lambda: produce(config, topic, 1, timeout_ms=5_000)[0] == 1, timeout=60,
             what="carol's login, once the listener read her credential")
    users.delete("carol", [Mechanism.SCRAM_SHA_256])
    before = stored(topic)
    wait_for(lambda: produce(config, topic, 1, timeout_ms=3_000)[0] == 0, timeout=60,
             what="carol's login refused once the listener read her deletion")
    assert stored(topic) == before
    assert produce(client_config(secure_gateway, pki), topic, 1) == (1, [])


def test_a_deleted_users_open_connection_is_closed_and_its_relogin_refused(
        secure_gateway, pki, topic, users):
    """A producer logged in as dave keeps its connection; deleting dave closes it on the
    listener (Kafka's brokers would keep it until re-authentication, KIP-368): the
    producer's reconnection is a login, refused, and none of its records land."""
    users.put("dave", [make_credential("daves", Mechanism.SCRAM_SHA_512)])
    errors: list = []
    failed: list = []
    producer = KafkaProducer({**client_config(secure_gateway, pki, "SCRAM-SHA-512", "dave",
                                              "daves"),
                              "acks": "all", "linger.ms": 0,
                              "message.timeout.ms": REFUSED_TIMEOUT_MS,
                              "reconnect.backoff.max.ms": RECONNECT_MAX_MS,
                              "error_cb": errors.append})

    def send(n: int) -> int:
        """How many of n records failed."""
        failed.clear()
        for i in range(n):
            producer.produce(topic, value=b"v", key=f"d{i}".encode(),
                             on_delivery=lambda e, _m: failed.append(e) if e else None)
        producer.flush(30)
        return len(failed)

    wait_for(lambda: send(1) == 0, timeout=60,
             what="dave's login, once the listener read his credential")
    users.delete("dave", [Mechanism.SCRAM_SHA_512])

    def relogin_refused() -> bool:
        send(1)  # a record to send keeps the producer reconnecting
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)

    wait_for(relogin_refused, timeout=60,
             what="dave's connection closed and his login refused once the listener read "
                  "his deletion")
    written = stored(topic)
    assert send(5) == 5  # none delivered
    assert stored(topic) == written
    assert produce(client_config(secure_gateway, pki), topic, 1) == (1, [])


def test_the_java_client_with_scram_sha_512_over_tls_produces_and_consumes(
        secure_gateway, pki, topic, tmp_path, monkeypatch):
    """Kafka's Java producer and consumer with SASL_SSL and SCRAM-SHA-512, trusting the
    test CA as a PEM truststore and checking the server's name (https, their default)."""
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{PASSWORD}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={pki.ca}\n")
    monkeypatch.setenv("KAFKA_CLIENT_PROPERTIES", str(properties))
    java = java_runner()
    n = 100
    delivered = java("produce", secure_gateway, topic, str(n), str(BASE_TS))
    assert [d["i"] for d in delivered] == list(range(n))
    assert stored(topic) == n
    lines = java("consume", secure_gateway, topic, f"java-{uuid.uuid4().hex[:8]}", str(n))
    committed = lines.pop()["committed"]
    assert sorted(bytes.fromhex(line["key"]) for line in lines) == \
        sorted(f"key-{i}".encode() for i in range(n))
    assert sum(committed.values()) == n


def test_a_super_user_administers_users_with_the_admin_client(secure_gateway, pki, topic,
                                                              users):
    """confluent-kafka's AdminClient: alice (a super user) adds erin, erin logs in but may
    not alter users, alice deletes her, erin's next login fails."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(client_config(secure_gateway, pki))
    name = f"erin-{uuid.uuid4().hex[:6]}"
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        name, info, b"erins password")])[name].result(60)
    described = admin.describe_user_scram_credentials([name])[name].result(60)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_256, 8192)]
    assert UsersTopic(users.cluster).load().check_password(name, "erins password")
    erin = client_config(secure_gateway, pki, user=name, password="erins password")
    assert produce(erin, topic, 3) == (3, [])
    # (Her refused *describe* is left out: librdkafka 2.16 frees a bad pointer on a
    # DescribeUserScramCredentials answer with a top-level error, which is what Kafka's
    # brokers send too; the unit tests check that answer on raw sockets.)
    erins = AdminClient(erin)  # kept: a client collected early fails its futures
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        erins.alter_user_scram_credentials([UserScramCredentialUpsertion(
            name, info, b"her own choice")])[name].result(60)
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(
        name, ScramMechanism.SCRAM_SHA_256)])[name].result(60)
    assert produce(erin, topic, 1, timeout_ms=REFUSED_TIMEOUT_MS)[0] == 0
    assert stored(topic) == 3


@pytest.mark.skipif(shutil.which("kcat") is None,
                    reason="kcat is not installed (Debian package kcat; `make kcat`)")
def test_kcat_with_sasl_ssl_and_scram(secure_gateway, pki, topic):
    options = ["-b", secure_gateway, "-X", "security.protocol=SASL_SSL",
               "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice",
               "-X", f"sasl.password={PASSWORD}", "-X", f"ssl.ca.location={pki.ca}"]
    lines = [f"k{i}:v{i}" for i in range(30)]
    subprocess.run(["kcat", *options, "-P", "-t", topic, "-K", ":"],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=60)
    out = subprocess.run(["kcat", *options, "-C", "-t", topic, "-e", "-q", "-o", "beginning",
                          "-f", "%k=%s\\n"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert sorted(out.split()) == sorted(line.replace(":", "=") for line in lines)


def raylog_command() -> str:
    return os.path.join(os.path.dirname(sys.executable), "raylog")


def test_the_commands_add_a_user_and_serve_sasl_ssl(ray_cluster, pki, topic):
    address = ray_cluster.cluster.address
    name = f"dave-{uuid.uuid4().hex[:6]}"
    subprocess.run([raylog_command(), "users", "add", name, "--password-stdin",
                    "--mechanism", "SCRAM-SHA-512", "--address", address],
                   input="daves password\n", text=True, check=True, timeout=120)
    listed = subprocess.run([raylog_command(), "users", "list", "--address", address],
                            capture_output=True, text=True, check=True, timeout=120).stdout
    assert f"{name}\tSCRAM-SHA-512 (4096 iterations)" in listed
    with Child([raylog_command(), "gateway", "--address", address, "--port", "0",
                "--security-protocol", "SASL_SSL", "--sasl-mechanisms", "SCRAM-SHA-512",
                "--ssl-certfile", str(pki.server_cert), "--ssl-keyfile", str(pki.server_key)],
               merge_stderr=True) as command:
        line = command.wait_for_line("Kafka listener on", timeout=120)
        assert "(SASL_SSL)" in line
        bootstrap = re.search(r"advertised as (\S+)", line).group(1)
        config = client_config(bootstrap, pki, "SCRAM-SHA-512", name, "daves password")
        assert produce(config, topic, 10) == (10, [])
        wrong = client_config(bootstrap, pki, "SCRAM-SHA-512", name, "not it")
        assert produce(wrong, topic, 1, timeout_ms=REFUSED_TIMEOUT_MS)[0] == 0
        command.stop()
    assert stored(topic) == 10


def test_the_listener_actors_serve_sasl_ssl(ray_cluster, pki, topic, users):
    """``raylog start --kafka-port 0 --kafka-security-protocol SASL_SSL ...``: every broker
    node's listener logs clients in against the same users."""
    import ray

    from raylog.kafka.gateway.cluster import listener_actor_name
    from raylog.util.cluster_names import NAMESPACE

    nodes_pki = node_pki(pki.directory / "nodes")
    security = ListenerSecurity(security_protocol="SASL_SSL",
                                ssl_certfile=str(nodes_pki.server_cert),
                                ssl_keyfile=str(nodes_pki.server_key))
    with kafka_listener_actors(security) as listeners:
        host, port = next(iter(listeners.values()))
        config = client_config(f"{host}:{port}", nodes_pki, "SCRAM-SHA-256")
        assert produce(config, topic, 30) == (30, [])
        assert len(consume(config, topic, 30)) == 30
        bad = client_config(f"{host}:{port}", nodes_pki, "SCRAM-SHA-256", password="no")
        assert produce(bad, topic, 1, timeout_ms=REFUSED_TIMEOUT_MS)[0] == 0
        handles = [ray.get_actor(listener_actor_name(n), namespace=NAMESPACE)
                   for n in listeners]
        wait_for(lambda: sum(ray.get(h.stats.remote())["authentication_failures"]
                             for h in handles) >= 1, what="the failed login counted")
