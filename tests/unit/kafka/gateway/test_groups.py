"""The gateway's group handlers (raylog/kafka/gateway/groups.py) on raw sockets, with the
controller's real group service behind them in-process (actors/kafka_groups.py over a fake
__consumer_offsets leader): no Ray. Requests are built and answers read with kafka-python's
message classes; the consumer protocol's embedded data is checked against its classes and
against Kafka's byte layout."""

from __future__ import annotations

import asyncio
import struct
import threading

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from actors.kafka_groups import KafkaGroupService
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.groups import assignment, subscription
from raylog.kafka.gateway.listener import KafkaListener, ListenerThread
from raylog.types import TopicPartition
from tests.unit.actors.test_group_service import FakeLeader, group_service
from tests.unit.kafka.gateway import wire
from tests.unit.kafka.gateway.fake_backend import FakeBackend

ALL = [0, 1, 2, 3]


# -- the consumer protocol's data --------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscriptions_of_every_version_decode(version):
    fields = {"topics": ["a", "b"], "user_data": b"u"}
    if version >= 1:
        fields["owned_partitions"] = [ConsumerProtocolSubscription.TopicPartition(
            topic="a", partitions=[0])]
    if version >= 2:
        fields["generation_id"] = 4
    if version >= 3:
        fields["rack_id"] = "r1"
    data = ConsumerProtocolSubscription(**fields, version=version).encode(version=version)
    assert subscription(data) == (["a", "b"], [("a", 0)] if version >= 1 else [])


def test_a_subscription_as_kafka_lays_it_out_and_a_newer_version_decode():
    def string(s: str) -> bytes:
        return struct.pack(">h", len(s)) + s.encode()

    v0 = struct.pack(">hi", 0, 2) + string("orders") + string("x") + struct.pack(">i", -1)
    assert subscription(v0) == (["orders", "x"], [])
    # a future version: Kafka's rule is to read it as the newest known one
    v4 = struct.pack(">hi", 4, 1) + string("t") + struct.pack(">i", -1) + \
        struct.pack(">i", 0) + struct.pack(">i", -1) + struct.pack(">h", -1) + b"more"
    assert subscription(v4) == (["t"], [])
    with pytest.raises(ValueError):
        subscription(v0[:7])


def test_an_assignment_is_kafkas_v0_layout_and_reads_back():
    data = assignment([("t", 2), ("s", 0), ("t", 0)])
    expected = struct.pack(">hi", 0, 2) + \
        struct.pack(">h", 1) + b"s" + struct.pack(">ii", 1, 0) + \
        struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 2) + struct.pack(">i", -1)
    assert data == expected
    decoded = ConsumerProtocolAssignment.decode(data)
    assert sorted(decoded.partitions()) == [("s", 0), ("t", 0), ("t", 2)]
    assert ConsumerProtocolAssignment.decode(assignment([])).partitions() == []


# -- the handlers ------------------------------------------------------------------------------

class GroupsBackend(FakeBackend):
    """The fake cluster, whose controller calls reach the controller's group service, run
    on the listener's own event loop."""

    def __init__(self) -> None:
        super().__init__()
        self.add_topic("t", partitions=4)
        self.kafka = KafkaGroupService(group_service(FakeLeader()))
        self.groups = self.kafka.groups

    async def controller_call(self, method: str, *args, timeout_s: float):
        name = method.removeprefix("kafka_")
        target = self.kafka if method.startswith("kafka_") else self.groups
        return await asyncio.wait_for(getattr(target, name)(*args), timeout_s)


@pytest.fixture
def gateway():
    backend = GroupsBackend()
    with ListenerThread(KafkaListener(backend, port=0)) as running:
        yield (running.listener.host, running.listener.port), backend


def sub(*topics: str) -> bytes:
    return ConsumerProtocolSubscription(topics=list(topics), user_data=None,
                                        version=0).encode(version=0)


def join(addr, member_id: str = "", version: int = 5, protocols=None, group: str = "g",
         instance: str | None = None):
    protocols = protocols or [("range", sub("t"))]
    fields = {"group_id": group, "session_timeout_ms": 10_000, "member_id": member_id,
              "protocol_type": "consumer", "protocols": [
                  JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m)
                  for n, m in protocols]}
    if version >= 1:
        fields["rebalance_timeout_ms"] = 20_000
    if version >= 5:
        fields["group_instance_id"] = instance
    return wire.call(addr, JoinGroupRequest[version](**fields), version)


def joined(addr) -> tuple[str, object]:
    first = join(addr)
    assert first.error_code == Code.MEMBER_ID_REQUIRED and first.member_id
    return first.member_id, join(addr, first.member_id)


def sync(addr, member_id: str, generation: int, version: int = 3):
    fields = {"group_id": "g", "generation_id": generation, "member_id": member_id,
              "assignments": []}
    if version >= 3:
        fields["group_instance_id"] = None
    answer = wire.call(addr, SyncGroupRequest[version](**fields), version)
    assert answer.error_code == Code.NONE
    return sorted(ConsumerProtocolAssignment.decode(answer.assignment).partitions())


def heartbeat(addr, member_id: str, generation: int, version: int = 3,
              instance: str | None = None) -> int:
    fields = {"group_id": "g", "generation_id": generation, "member_id": member_id}
    if version >= 3:
        fields["group_instance_id"] = instance
    return wire.call(addr, HeartbeatRequest[version](**fields), version).error_code


def commit(addr, member_id: str, generation: int, offsets: dict[tuple[str, int], int],
           version: int = 8, instance: str | None = None):
    topics = {}
    for (topic, partition), offset in offsets.items():
        fields = {"partition_index": partition, "committed_offset": offset,
                  "committed_metadata": "m"}
        if version >= 6:
            fields["committed_leader_epoch"] = -1
        topics.setdefault(topic, []).append(
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(**fields))
    fields = {"group_id": "g", "generation_id_or_member_epoch": generation,
              "member_id": member_id, "topics": [
                  OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                  for t, ps in topics.items()]}
    if version >= 7:
        fields["group_instance_id"] = instance
    if version <= 4:
        fields["retention_time_ms"] = -1
    answer = wire.call(addr, OffsetCommitRequest[version](**fields), version)
    return {(t.name, p.partition_index): p.error_code
            for t in answer.topics for p in t.partitions}


def fetch(addr, partitions: list[tuple[str, int]] | None, version: int = 7):
    topics = None if partitions is None else [
        OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=[
            p for tp, p in partitions if tp == t]) for t in sorted({t for t, _ in partitions})]
    fields = {"group_id": "g", "topics": topics}
    if version >= 7:
        fields["require_stable"] = False
    answer = wire.call(addr, OffsetFetchRequest[version](**fields), version)
    return {(t.name, p.partition_index): p.committed_offset
            for t in answer.topics for p in t.partitions}


@pytest.mark.parametrize("version", [0, 1, 3])
def test_find_coordinator_answers_a_broker_of_this_gateway(gateway, version):
    addr, _ = gateway
    fields = {"key": "g"}
    if version >= 1:
        fields["key_type"] = 0
    answer = wire.call(addr, FindCoordinatorRequest[version](**fields), version)
    assert answer.error_code == Code.NONE
    assert (answer.node_id, answer.host, answer.port) == (1, "127.0.0.1", 9092)
    if version >= 1:  # a transactional id's coordinator is here as well
        fields["key_type"] = 1
        answer = wire.call(addr, FindCoordinatorRequest[version](**fields), version)
        assert answer.error_code == Code.NONE
        assert (answer.node_id, answer.host, answer.port) == (1, "127.0.0.1", 9092)
        fields["key_type"] = 2
        answer = wire.call(addr, FindCoordinatorRequest[version](**fields), version)
        assert answer.error_code == Code.INVALID_REQUEST


def test_one_member_joins_syncs_commits_fetches_and_leaves(gateway):
    addr, backend = gateway
    member_id, answer = joined(addr)
    assert answer.error_code == Code.NONE and answer.member_id == member_id
    assert answer.leader == "" and answer.protocol_name == "range" and answer.members == []
    generation = answer.generation_id
    assert sync(addr, member_id, generation) == [("t", p) for p in ALL]
    assert heartbeat(addr, member_id, generation) == Code.NONE
    assert heartbeat(addr, member_id, generation + 1) == Code.ILLEGAL_GENERATION
    assert commit(addr, member_id, generation, {("t", 0): 42, ("nope", 0): 1}) == {
        ("t", 0): Code.NONE, ("nope", 0): Code.UNKNOWN_TOPIC_OR_PARTITION}
    assert commit(addr, member_id, generation - 1, {("t", 1): 5}) == {
        ("t", 1): Code.ILLEGAL_GENERATION}
    assert commit(addr, "", -1, {("t", 1): 5}) == {("t", 1): Code.UNKNOWN_MEMBER_ID}
    assert fetch(addr, [("t", 0), ("t", 1)]) == {("t", 0): 42, ("t", 1): -1}
    assert fetch(addr, None) == {("t", 0): 42}
    assert fetch(addr, [("t", 0)], version=1) == {("t", 0): 42}
    # the same record a raylog consumer reads
    committed = backend.groups.coordinator.offsets["g"][TopicPartition("t", 0)]
    assert (committed.offset, committed.metadata) == (42, "m")

    described = wire.call(addr, DescribeGroupsRequest[5](
        groups=["g", "other"], include_authorized_operations=False), 5).groups
    assert described[0].group_state == "Stable" and described[0].protocol_data == "range"
    (member,) = described[0].members
    assert member.member_id == member_id and member.member_metadata == sub("t")
    assert sorted(ConsumerProtocolAssignment.decode(member.member_assignment).partitions()) \
        == [("t", p) for p in ALL]
    assert described[1].group_state == "Dead" and described[1].members == []
    listed = wire.call(addr, ListGroupsRequest[4](states_filter=["stable"]), 4).groups
    assert [(g.group_id, g.group_state, g.protocol_type) for g in listed] == [
        ("g", "Stable", "consumer")]
    assert wire.call(addr, ListGroupsRequest[4](states_filter=["Empty"]), 4).groups == []

    left = wire.call(addr, LeaveGroupRequest[4](group_id="g", members=[
        LeaveGroupRequest.MemberIdentity(member_id=member_id, group_instance_id=None),
        LeaveGroupRequest.MemberIdentity(member_id="nobody", group_instance_id=None)]), 4)
    assert left.error_code == Code.NONE
    assert [(m.member_id, m.error_code) for m in left.members] == [
        (member_id, Code.NONE), ("nobody", Code.UNKNOWN_MEMBER_ID)]
    assert heartbeat(addr, member_id, generation) == Code.UNKNOWN_MEMBER_ID
    # an empty group takes a commit from outside any membership (a self-assigning consumer)
    assert commit(addr, "", -1, {("t", 1): 5}) == {("t", 1): Code.NONE}


def test_two_members_wait_for_each_other_and_split_the_partitions(gateway):
    addr, _ = gateway
    a, first = joined(addr)
    b = join(addr).member_id
    parked: dict = {}
    thread = threading.Thread(target=lambda: parked.update(b=join(addr, b)))
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()  # b's JoinGroup waits for a to rejoin
    assert heartbeat(addr, a, first.generation_id) == Code.REBALANCE_IN_PROGRESS
    again = join(addr, a)
    thread.join(10)
    assert parked["b"].error_code == Code.NONE
    assert parked["b"].generation_id == again.generation_id > first.generation_id
    owned = {a: sync(addr, a, again.generation_id), b: sync(addr, b, again.generation_id)}
    assert sorted(owned[a] + owned[b]) == [("t", p) for p in ALL]
    assert len(owned[a]) == len(owned[b]) == 2
    left = wire.call(addr, LeaveGroupRequest[0](group_id="g", member_id=b), 0)
    assert left.error_code == Code.NONE
    assert heartbeat(addr, a, again.generation_id, version=0) == Code.REBALANCE_IN_PROGRESS


def test_old_clients_join_without_the_member_id_round_trip(gateway):
    addr, _ = gateway
    answer = join(addr, version=0)
    assert answer.error_code == Code.NONE and answer.member_id
    assert sync(addr, answer.member_id, answer.generation_id, version=0) == [
        ("t", p) for p in ALL]


def test_a_cooperative_member_keeps_what_its_subscription_names(gateway):
    addr, backend = gateway
    member_id = join(addr, protocols=[("cooperative-sticky", sub("t"))]).member_id
    answer = join(addr, member_id, protocols=[("cooperative-sticky", sub("t"))])
    assert answer.protocol_name == "cooperative-sticky"
    assert sync(addr, member_id, answer.generation_id) == [("t", p) for p in ALL]
    owned = ConsumerProtocolSubscription(
        topics=["t"], user_data=None, owned_partitions=[
            ConsumerProtocolSubscription.TopicPartition(topic="t", partitions=[0, 1, 2])],
        version=1).encode(version=1)
    join(addr, member_id, protocols=[("cooperative-sticky", owned)])  # gave t-3 up
    member = backend.groups.coordinator.groups["g"].members[member_id]
    assert sorted(member.owned) == [("t", 0), ("t", 1), ("t", 2)]


def test_unserved_and_undecodable_protocols_and_unknown_members_are_refused(gateway):
    addr, _ = gateway
    answer = join(addr, protocols=[("sticky", sub("t"))])
    assert answer.error_code == Code.INCONSISTENT_GROUP_PROTOCOL
    answer = join(addr, protocols=[("range", b"\x00\x00\x00")])  # not a subscription
    assert answer.error_code == Code.INCONSISTENT_GROUP_PROTOCOL
    answer = join(addr, member_id="made-up")
    assert answer.error_code == Code.UNKNOWN_MEMBER_ID


def test_static_members_rejoin_without_a_rebalance_and_fence_their_old_ids(gateway):
    addr, _ = gateway
    first = join(addr, instance="i-a")  # a static member needs no MEMBER_ID_REQUIRED
    assert first.error_code == Code.NONE and first.member_id
    a = first.member_id
    parked: dict = {}  # b's first join waits for a to join the round b started
    thread = threading.Thread(target=lambda: parked.update(b=join(addr, instance="i-b")))
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()
    again = join(addr, a, instance="i-a")
    thread.join(10)
    generation, b = again.generation_id, parked["b"].member_id
    assert parked["b"].generation_id == generation
    owned = {a: sync(addr, a, generation), b: sync(addr, b, generation)}

    # a's process restarts: its new incarnation is answered at once, same generation
    restarted = join(addr, instance="i-a")
    assert restarted.error_code == Code.NONE and restarted.member_id != a
    assert restarted.generation_id == generation
    a2 = restarted.member_id
    assert sync(addr, a2, generation) == owned[a]
    assert commit(addr, a2, generation, {owned[a][0]: 5}, instance="i-a") == {
        owned[a][0]: Code.NONE}
    assert commit(addr, a2, generation, {owned[a][0]: 6}, instance="i-b") == {
        owned[a][0]: Code.FENCED_INSTANCE_ID}  # a2 is not i-b's member id
    assert heartbeat(addr, b, generation, instance="i-b") == Code.NONE
    assert heartbeat(addr, a, generation, instance="i-a") == Code.FENCED_INSTANCE_ID
    assert commit(addr, a, generation, {owned[a][0]: 7}) == {
        owned[a][0]: Code.FENCED_INSTANCE_ID}
    assert join(addr, a, instance="i-a").error_code == Code.FENCED_INSTANCE_ID

    described = wire.call(addr, DescribeGroupsRequest[5](
        groups=["g"], include_authorized_operations=False), 5).groups[0]
    assert {m.member_id: m.group_instance_id for m in described.members} == {
        a2: "i-a", b: "i-b"}

    # an admin removes static members by instance id (removeMembersFromConsumerGroup)
    left = wire.call(addr, LeaveGroupRequest[4](group_id="g", members=[
        LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="i-a"),
        LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="i-x"),
        LeaveGroupRequest.MemberIdentity(member_id=a, group_instance_id="i-b")]), 4)
    assert [(m.group_instance_id, m.error_code) for m in left.members] == [
        ("i-a", Code.NONE), ("i-x", Code.UNKNOWN_MEMBER_ID),
        ("i-b", Code.FENCED_INSTANCE_ID)]
    assert heartbeat(addr, a2, generation, instance="i-a") == Code.UNKNOWN_MEMBER_ID
    assert heartbeat(addr, b, generation, instance="i-b") == Code.REBALANCE_IN_PROGRESS
