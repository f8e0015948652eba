"""ACLs on the Kafka listener (raylog/kafka/auth/acls.py, raylog/kafka/gateway/access.py;
docs/security.md), on the session's cluster: confluent-kafka clients logged in with SCRAM over
SASL_SSL as alice (a super user) and bob (no ACL of his own at first), against a listener
whose authorizer follows ``__raylog_acls``. Refused: bob producing without WRITE (nothing
written) and seeing the topic in metadata without DESCRIBE, bob joining a group without READ
on it; allowed by a literal or a prefixed ALLOW, refused again by a DENY; an ACL created by
alice with AdminClient.create_acls is enforced within a poll; ``raylog acls add`` and
``raylog gateway --authorizer`` as commands; the listener actors of ``raylog start
--kafka-authorizer``. The listener serves the next client each time.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding as KafkaAclBinding
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as KafkaResourceType

from raylog import Admin
from raylog.kafka.auth.acls import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    encode,
)
from raylog.kafka.auth.scram import Mechanism, make_credential
from raylog.kafka.gateway.access import Access
from raylog.kafka.gateway.users import (
    AclsTopic,
    Follower,
    UsersTopic,
    start_access,
)
from tests.children import Child
from tests.integration.conftest import (
    kafka_listener,
    kafka_listener_actors,
    node_pki,
    wait_for,
)
from tests.integration.test_kafka_security import (
    PASSWORD,
    client_config,
    produce,
    raylog_command,
    sasl_ssl,
    stored,
)

PARTITIONS = 3
BOB = f"bob-{uuid.uuid4().hex[:6]}"  # the users topic lives for the session


@pytest.fixture(scope="module")
def users(ray_cluster) -> UsersTopic:
    """``__raylog_users`` with alice (the super user of sasl_ssl) and bob."""
    topic = UsersTopic(ray_cluster.raylog)
    for name in ("alice", BOB):
        topic.put(name, [make_credential(PASSWORD, m) for m in Mechanism])
    return topic


@pytest.fixture(scope="module")
def acls(ray_cluster, pki) -> Iterator[tuple[Follower, Access]]:
    """The ACL follower and Access of a listener with an authorizer, as ``raylog gateway
    --authorizer`` makes them (alice the super user)."""
    security = dataclasses.replace(sasl_ssl(pki), authorizer=True)
    following, access = start_access(ray_cluster.raylog, security, poll_ms=200)
    try:
        yield following, access
    finally:
        following.close()


@pytest.fixture(scope="module")
def acl_gateway(ray_cluster, pki, follower, acls) -> Iterator[str]:
    _, access = acls
    with kafka_listener(ray_cluster.raylog, security=sasl_ssl(pki), credentials=follower.store,
                        write_users=follower.topic.write, access=access) as bootstrap:
        yield bootstrap


def bob(bootstrap: str, pki) -> dict:
    return client_config(bootstrap, pki, user=BOB)


def alice(bootstrap: str, pki) -> dict:
    return client_config(bootstrap, pki)


def allow(topic_name: str, operation=Operation.WRITE, permission=Permission.ALLOW,
          pattern=PatternType.LITERAL, resource_type=ResourceType.TOPIC) -> AclBinding:
    return AclBinding(f"User:{BOB}", "*", resource_type, topic_name, pattern, operation,
                      permission)


def add(cluster, acls: tuple[Follower, Access], *bindings: AclBinding) -> None:
    """Write bindings as ``raylog acls add`` does (another writer than the listener), and
    wait until the listener's follower read them."""
    AclsTopic(cluster).write([encode(b) for b in bindings])
    authorizer = acls[1].authorizer
    wait_for(lambda: all(b in authorizer.bindings() for b in bindings), timeout=30,
             what="the listener's follower reading the ACLs")


def refused_codes(errors: list) -> set:
    return {e.code() for e in errors}


def test_no_acl_refuses_produce_and_hides_the_topic(acl_gateway, pki, topic):
    delivered, errors = produce(bob(acl_gateway, pki), topic, 10, timeout_ms=10_000)
    assert delivered == 0
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in refused_codes(errors)
    assert stored(topic) == 0
    listed = AdminClient(bob(acl_gateway, pki)).list_topics(timeout=30).topics
    assert topic not in listed
    # the listener serves the next client: the super user
    assert produce(alice(acl_gateway, pki), topic, 10) == (10, [])
    assert topic in AdminClient(alice(acl_gateway, pki)).list_topics(timeout=30).topics


def test_an_allow_lets_and_a_deny_overrides(ray_cluster, acls, acl_gateway, pki, topic):
    add(ray_cluster.raylog, acls, allow(topic))
    assert produce(bob(acl_gateway, pki), topic, 10) == (10, [])
    assert stored(topic) == 10
    assert topic in AdminClient(bob(acl_gateway, pki)).list_topics(timeout=30).topics
    add(ray_cluster.raylog, acls, allow(topic, permission=Permission.DENY))
    delivered, errors = produce(bob(acl_gateway, pki), topic, 10, timeout_ms=10_000)
    assert delivered == 0
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in refused_codes(errors)
    assert stored(topic) == 10


def test_a_prefixed_acl(ray_cluster, acls, acl_gateway, pki, topic):
    add(ray_cluster.raylog, acls, allow(topic[:6], pattern=PatternType.PREFIXED))  # "t-xxxx"
    assert produce(bob(acl_gateway, pki), topic, 5) == (5, [])


def test_a_group_without_read_refuses_the_join(ray_cluster, acls, acl_gateway, pki, topic):
    add(ray_cluster.raylog, acls, allow(topic, operation=Operation.READ))
    consumer = KafkaConsumer({**bob(acl_gateway, pki), "group.id": f"g-{topic}",
                              "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: list = []
    try:
        def refused() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                seen.append(message.error().code())
            return KafkaError.GROUP_AUTHORIZATION_FAILED in seen

        wait_for(refused, timeout=60, what="the consumer's join refused")
    finally:
        consumer.close()
    assert produce(alice(acl_gateway, pki), topic, 1) == (1, [])  # still serving


def test_an_acl_created_with_the_admin_client_is_enforced(acl_gateway, pki, topic):
    admin = AdminClient(alice(acl_gateway, pki))
    binding = KafkaAclBinding(KafkaResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                              f"User:{BOB}", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding], request_timeout=30).values():
        future.result()

    def produced() -> bool:
        return produce(bob(acl_gateway, pki), topic, 1, timeout_ms=10_000)[0] == 1

    wait_for(produced, timeout=30, what="bob's produce allowed by the created ACL")
    described = admin.describe_acls(AclBindingFilter(
        KafkaResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
        AclOperation.ANY, AclPermissionType.ANY), request_timeout=30).result()
    assert [(b.principal, b.operation) for b in described] == \
        [(f"User:{BOB}", AclOperation.WRITE)]


def test_a_user_without_cluster_alter_cannot_create_acls(acl_gateway, pki, topic):
    admin = AdminClient(bob(acl_gateway, pki))
    binding = KafkaAclBinding(KafkaResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                              f"User:{BOB}", "*", AclOperation.ALL, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        for future in admin.create_acls([binding], request_timeout=30).values():
            future.result()
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(refused.value)


def test_the_commands_add_an_acl_and_serve_with_the_authorizer(ray_cluster, pki, users,
                                                                topic):
    """``raylog acls add`` then ``raylog gateway --authorizer``: bob may write the topic the
    ACL names, and not another."""
    address = ray_cluster.cluster.address
    subprocess.run([raylog_command(), "acls", "add", "--allow-principal", f"User:{BOB}",
                    "--operation", "Write", "--topic", topic, "--address", address],
                   check=True, timeout=120, capture_output=True)
    listed = subprocess.run([raylog_command(), "acls", "list", "--topic", topic,
                             "--address", address],
                            capture_output=True, text=True, check=True, timeout=120).stdout
    assert f"ALLOW User:{BOB} from * WRITE on TOPIC:LITERAL:{topic}" in listed
    with Child([raylog_command(), "gateway", "--address", address, "--port", "0",
                "--security-protocol", "SASL_SSL", "--ssl-certfile", str(pki.server_cert),
                "--ssl-keyfile", str(pki.server_key), "--authorizer",
                "--super-users", "User:alice"], merge_stderr=True) as command:
        line = command.wait_for_line("Kafka listener on", timeout=120)
        bootstrap = re.search(r"advertised as (\S+)", line).group(1)
        assert produce(bob(bootstrap, pki), topic, 10) == (10, [])
        other = f"{topic}-other"
        Admin().create_topic(other, partitions=PARTITIONS, replication_factor=3)
        delivered, errors = produce(bob(bootstrap, pki), other, 1, timeout_ms=10_000)
        assert delivered == 0
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in refused_codes(errors)
        command.stop()
    assert stored(topic) == 10 and stored(other) == 0


def test_the_listener_actors_enforce_acls(ray_cluster, pki, users, topic):
    """``raylog start --kafka-port 0 --kafka-authorizer ...``: each broker node's listener
    follows ``__raylog_acls``: bob is refused, then allowed once an ACL is written."""
    nodes_pki = node_pki(pki.directory / "acl-nodes")
    security = dataclasses.replace(sasl_ssl(nodes_pki), authorizer=True)
    with kafka_listener_actors(security) as listeners:
        host, port = next(iter(listeners.values()))
        config = bob(f"{host}:{port}", nodes_pki)
        delivered, errors = produce(config, topic, 1, timeout_ms=10_000)
        assert delivered == 0
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in refused_codes(errors)
        AclsTopic(ray_cluster.raylog).write([encode(allow(topic))])
        wait_for(lambda: produce(config, topic, 1, timeout_ms=10_000)[0] == 1, timeout=60,
                 what="the listener actor following the ACL")
    assert stored(topic) == 1  # the refused attempts wrote nothing
