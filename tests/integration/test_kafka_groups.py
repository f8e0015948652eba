"""Kafka consumer groups through the Kafka listener, on the session's multi-node cluster:
real confluent-kafka (librdkafka) consumers in one group, living in raylog's coordinator.

Two consumers split the partitions with one owner each; commits resume; a consumer that
closes leaves its partitions to the other at once, one whose process is killed after its
session timeout; a Kafka consumer's commits are raylog's (its native Consumer reads them,
and the other way round); the group shows in ``raylog groups``; a native consumer cannot
join a Kafka group. Records are produced with raylog's own Producer.

Every test starts and stops its own listener on loopback, speaking for every broker.
The Java client (kafka-clients from Maven Central, tests/java/kafka-clients/pom.xml, fetched
once into a cache directory by java_deps) runs a small program compiled at test time
(tests/java/kafka-clients/src/KafkaGroupMember.java).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.errors import InconsistentGroupProtocolError
from tests.children import Child
from tests.integration.conftest import restart_controller, wait_for
from tests.integration.java_deps import compile_java, java_command, maven_jars
from tests.integration.test_cli import run

PARTITIONS = 4
REPO = Path(__file__).resolve().parents[2]
SESSION_MS = 6000
STATIC_JAVA_SESSION_MS = "60000"  # a restart within the session, however loaded the machine


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def java_member() -> list[str]:
    """The command running KafkaGroupMember (tests/java/kafka-clients/src/) on kafka-clients,
    without its arguments."""
    jars = maven_jars("kafka-clients")
    return java_command(compile_java("kafka-clients", jars), jars, "KafkaGroupMember")


def produce(topic: str, n: int, start: int = 0) -> None:
    with Producer() as producer:
        for i in range(start, start + n):
            producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode())
        producer.flush()


def kafka_consumer(bootstrap: str, group: str, **config) -> KafkaConsumer:
    return KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                          "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
                          "partition.assignment.strategy": "range",
                          "enable.auto.commit": False, "auto.offset.reset": "earliest",
                          **config})


def owned(consumer: KafkaConsumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in consumer.assignment()}


def poll_until(consumers: list[KafkaConsumer], condition, what: str,
               timeout: float = 120.0, records: dict | None = None) -> None:
    """Poll every consumer in turn (rebalances happen inside poll) until ``condition()``;
    records read go to ``records[consumer index]``."""
    def step() -> bool:
        for i, consumer in enumerate(consumers):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None and records is not None:
                records.setdefault(i, []).append(message)
        return condition()

    wait_for(step, timeout=timeout, interval=0, what=what)


def all_partitions(topic: str) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(PARTITIONS)}


def split_between(topic: str, *owners: set[tuple[str, int]]) -> bool:
    """Every owner holds partitions of ``topic``, no partition has two, and none is left."""
    every = set().union(*owners)
    return all(owners) and sum(map(len, owners)) == len(every) and \
        every == all_partitions(topic)


def test_two_consumers_split_commit_resume_and_one_leaving_gives_the_other_all(
        gateway, topic, group):
    a, b = kafka_consumer(gateway, group), kafka_consumer(gateway, group)
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        # The records come once the two have split the partitions: a consumer that joined
        # first owns every partition for a generation, and what it read then is read again
        # by the next owner (nothing is committed yet), as in Kafka.
        poll_until([a, b], lambda: split_between(topic, owned(a), owned(b)),
                   "both consumers to own partitions")
        produce(topic, 200)
        records: dict[int, list] = {}
        poll_until([a, b], lambda: sum(len(r) for r in records.values()) >= 200,
                   "the two consumers to read every record", records=records)
        assert not owned(a) & owned(b)
        described = Admin().describe_group(group)
        members = {m["member_id"]: m for m in described["members"]}
        assert len(members) == 2 and all(m["kafka"] for m in members.values())
        owners = [set(map(tuple, m["owned"])) for m in members.values()]
        assert sorted(map(sorted, owners)) == sorted([sorted(owned(a)), sorted(owned(b))])
        # every record was read by the consumer owning its partition, once
        for i, consumer in enumerate([a, b]):
            for message in records.get(i, []):
                assert (message.topic(), message.partition()) in owned(consumer)
        assert sum(len(r) for r in records.values()) == 200
        a.commit(asynchronous=False)
        b.commit(asynchronous=False)

        # raylog's own Consumer of the group sees the Kafka consumers' commits
        with Consumer(group_id=group) as native:
            committed = native.committed([TopicPartition(topic, p) for p in range(PARTITIONS)])
        assert sum(committed.values()) == 200
        kafka_view = a.committed([KafkaTopicPartition(topic, p) for p in range(PARTITIONS)],
                                 timeout=30)
        assert {tp.partition: tp.offset for tp in kafka_view} == {
            tp.partition: offset for tp, offset in committed.items()}
        assert group in {g["group_id"] for g in Admin().list_groups()}
        with pytest.raises(InconsistentGroupProtocolError):
            Consumer(group_id=group).subscribe([topic])

        a.close()  # LeaveGroup: b takes everything, without waiting for a session
        poll_until([b], lambda: owned(b) == all_partitions(topic), "b to take all")
        produce(topic, 40, start=200)
        resumed: dict[int, list] = {}
        poll_until([b], lambda: len(resumed.get(0, [])) >= 40, "b to read the new records",
                   records=resumed)
        # resumed from the commits: only the 40 new records, none read again
        assert sorted(m.value() for m in resumed[0]) == sorted(
            f"v{i}".encode() for i in range(200, 240))
    finally:
        b.close()
        a.close()


def test_a_killed_consumer_loses_its_partitions_after_its_session(gateway, topic, group):
    produce(topic, 20)
    with Child([sys.executable, "-m", "tests.integration.kafka_group_member", gateway, group,
                topic], cwd=REPO) as member:
        wait_for(lambda: json.loads(member.lines[-1]) if member.lines else None,
                 timeout=120, what="the child member to own partitions")
        survivor = kafka_consumer(gateway, group)
        try:
            survivor.subscribe([topic])

            def split() -> bool:  # (the child's line comes after its poll: it may lag)
                theirs = {tuple(tp) for tp in json.loads(member.lines[-1])}
                return split_between(topic, theirs, owned(survivor))

            poll_until([survivor], split, "the two members to split the partitions")
            members = Admin().describe_group(group)["members"]
            assert sorted(len(m["owned"]) for m in members) == [2, 2]
            member.kill()  # SIGKILL: no LeaveGroup, its heartbeats just stop
            poll_until([survivor], lambda: owned(survivor) == all_partitions(topic),
                       "the survivor to take every partition after the session timeout")
            members = Admin().describe_group(group)["members"]
            assert len(members) == 1
        finally:
            survivor.close()


def test_a_native_commit_is_read_by_a_kafka_consumer_and_the_cli_shows_the_group(
        gateway, topic, group):
    produce(topic, 30)
    with Consumer(group_id=group) as native:  # a commit outside any membership
        native.commit({TopicPartition(topic, 0): 3})
    consumer = kafka_consumer(gateway, group)
    try:
        consumer.subscribe([topic])
        records: dict[int, list] = {}
        poll_until([consumer], lambda: owned(consumer) == all_partitions(topic),
                   "the consumer to own every partition", records=records)
        first = consumer.committed([KafkaTopicPartition(topic, 0)], timeout=30)[0]
        assert first.offset == 3
        code, text = run("groups", "describe", group, "--json")
        assert code == 0
        assert [m["kafka"] for m in json.loads(text)["members"]] == [True]
        code, text = run("groups", "list")
        assert code == 0 and group in text
    finally:
        consumer.close()


def java_owned(member: Child) -> set[tuple[str, int]]:
    """The last assignment a KafkaGroupMember printed."""
    lines = [line for line in member.lines if line.startswith("owned ")]
    text = lines[-1].removeprefix("owned ").strip() if lines else ""
    return {(t, int(p)) for t, p in (x.rsplit(":", 1) for x in text.split(",") if x)}


def test_a_java_consumer_and_a_librdkafka_consumer_share_a_group(gateway, topic, group,
                                                                   java_member):
    """Both clients take the empty leader for "not me", sync, and get the coordinator's
    assignment; the Java client's default assignors give range."""
    produce(topic, 20)

    with Child([*java_member, gateway, group, topic], cwd=REPO) as java:
        wait_for(lambda: java_owned(java) == all_partitions(topic), timeout=120,
                 what="the Java member to own every partition")
        consumer = kafka_consumer(gateway, group)
        try:
            consumer.subscribe([topic])

            def split() -> bool:  # (the Java member's line comes after its poll)
                return split_between(topic, java_owned(java), owned(consumer))

            poll_until([consumer], split, "the Java and librdkafka members to split")
            described = Admin().describe_group(group)
            assert described["assignor"] == "range"
            assert sorted(len(m["owned"]) for m in described["members"]) == [2, 2]
        finally:
            consumer.close()


def test_cooperative_sticky_consumers_hand_partitions_over_without_stopping(
        gateway, topic, group):
    """librdkafka's cooperative protocol: the first member keeps reading the partitions it
    keeps while the second joins (its assignment shrinks, never empties), and no partition
    has two owners in the coordinator at any point the test looks."""
    produce(topic, 20)
    a = kafka_consumer(gateway, group, **{"partition.assignment.strategy": "cooperative-sticky"})
    b = kafka_consumer(gateway, group, **{"partition.assignment.strategy": "cooperative-sticky"})
    try:
        a.subscribe([topic])
        poll_until([a], lambda: owned(a) == all_partitions(topic), "a to own everything")
        first = sorted(owned(a))
        b.subscribe([topic])
        sizes = []

        def split() -> bool:
            sizes.append(len(owned(a)))
            members = Admin().describe_group(group)["members"]
            held = [tuple(tp) for m in members for tp in m["owned"]]
            assert len(held) == len(set(held)), members  # one owner per partition
            return split_between(topic, owned(a), owned(b))

        poll_until([a, b], split, "a and b to split the partitions")
        assert min(sizes) > 0  # a never gave everything up
        assert owned(a) < set(first)  # sticky: a kept part of what it had
        assert Admin().describe_group(group)["assignor"] == "cooperative_sticky"
    finally:
        a.close()
        b.close()


def test_members_rejoin_a_restarted_coordinator_and_split_again(gateway, topic, group):
    """The controller (the coordinator) is killed and restarted: its Kafka members come back
    pending, are told to rejoin (or find the coordinator again), and the group splits again
    with one owner per partition."""
    produce(topic, 20)
    a, b = kafka_consumer(gateway, group), kafka_consumer(gateway, group)
    try:
        a.subscribe([topic])
        b.subscribe([topic])

        def split() -> bool:
            return split_between(topic, owned(a), owned(b))

        poll_until([a, b], split, "a and b to split the partitions")
        before = Admin().describe_group(group)["generation"]
        restart_controller()

        def split_again() -> bool:
            if not split():
                return False
            described = Admin().describe_group(group)
            held = [tuple(tp) for m in described["members"] for tp in m["owned"]]
            return described["generation"] > before and len(described["members"]) == 2 \
                and sorted(held) == sorted(all_partitions(topic))

        poll_until([a, b], split_again, "the group to split again after the restart",
                   timeout=180)
    finally:
        a.close()
        b.close()


def test_a_static_member_restarted_gets_its_partitions_back_without_a_rebalance(
        gateway, topic, group):
    """Static membership (``group.instance.id``): a member that closes (sending no
    LeaveGroup, as static members do) and comes back under the same instance id within its
    session gets the partitions it had, in the same generation; the other member is never
    told to rebalance (no revocation). One that does not come back loses its partitions
    after its session."""
    produce(topic, 20)
    revoked: list[list] = []

    def static(instance: str) -> KafkaConsumer:
        return kafka_consumer(gateway, group, **{"group.instance.id": instance})

    a, b = static("ia"), static("ib")
    a2 = None
    try:
        a.subscribe([topic])
        b.subscribe([topic], on_revoke=lambda _, partitions: revoked.append(partitions))
        poll_until([a, b], lambda: split_between(topic, owned(a), owned(b)),
                   "a and b to split the partitions")
        before = Admin().describe_group(group)
        assert {m["instance_id"] for m in before["members"]} == {"ia", "ib"}
        mine, theirs = owned(a), owned(b)
        revoked.clear()

        a.close()
        a2 = static("ia")
        a2.subscribe([topic])
        poll_until([a2, b], lambda: owned(a2) == mine, "the restarted a to get its partitions")
        after = Admin().describe_group(group)
        assert after["generation"] == before["generation"]
        assert {m["instance_id"]: m["member_id"] for m in after["members"]}["ib"] == \
            {m["instance_id"]: m["member_id"] for m in before["members"]}["ib"]
        for _ in range(20):  # b goes on reading, never told to give anything up
            b.poll(0.1)
            a2.poll(0.1)
        assert owned(b) == theirs and revoked == []
        assert Admin().describe_group(group)["generation"] == before["generation"]

        a2.close()  # and now it does not come back: b takes all after a2's session
        poll_until([b], lambda: owned(b) == all_partitions(topic),
                   "b to take every partition after the static member's session")
    finally:
        b.close()
        if a2 is not None:
            a2.close()
        a.close()


def test_a_static_java_member_killed_and_restarted_gets_its_partitions_back(
        gateway, topic, group, java_member):
    """The Java client's static membership: a Java member (group.instance.id "ij") is killed
    and started again under the same instance id; it gets its partitions back in the same
    generation while a static librdkafka member keeps its own, never revoked. The Java
    member's session is long (STATIC_JAVA_SESSION_MS): the test is about a restart within
    it, and a JVM started again on a loaded machine took longer than the 6 s default."""
    produce(topic, 20)
    revoked: list[list] = []
    consumer = kafka_consumer(gateway, group, **{"group.instance.id": "il"})
    try:
        with Child([*java_member, gateway, group, topic, "ij", STATIC_JAVA_SESSION_MS],
                   cwd=REPO) as java:
            wait_for(lambda: java_owned(java) == all_partitions(topic), timeout=120,
                     what="the Java member to own every partition")
            consumer.subscribe([topic], on_revoke=lambda _, ps: revoked.append(ps))
            poll_until([consumer], lambda: split_between(topic, java_owned(java),
                                                         owned(consumer)),
                       "the Java and librdkafka members to split")
            before = Admin().describe_group(group)
            theirs, mine = java_owned(java), owned(consumer)
            revoked.clear()
            java.kill()  # no LeaveGroup: a static member's partitions stay its own
        with Child([*java_member, gateway, group, topic, "ij", STATIC_JAVA_SESSION_MS],
                   cwd=REPO) as java:
            poll_until([consumer], lambda: java_owned(java) == theirs,
                       "the restarted Java member to get its partitions back")
            after = Admin().describe_group(group)
            assert after["generation"] == before["generation"]
            assert {m["instance_id"] for m in after["members"]} == {"ij", "il"}
            assert owned(consumer) == mine and revoked == []
    finally:
        consumer.close()
