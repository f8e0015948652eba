"""ACLs on the listener, on raw sockets over the fake cluster: the per-API checks, the audit
of denials, and CreateAcls/DescribeAcls/DeleteAcls. The connections are PLAINTEXT, so the
principal is User:ANONYMOUS from 127.0.0.1."""

from __future__ import annotations

import logging

import pytest
from kafka.protocol.admin import (
    CreateAclsRequest,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
)
from kafka.protocol.consumer import JoinGroupRequest, OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

from raylog.kafka.auth.acls import (
    AclBinding,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    decode,
)
from raylog.kafka.gateway.access import Access
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.listener import KafkaListener, ListenerThread
from tests.unit.kafka.builders import kafka_batch
from tests.unit.kafka.gateway import wire
from tests.unit.kafka.gateway.test_produce_fetch import RECORDS, fetch, partition_answer, produce
from tests.unit.kafka.gateway.test_transactions import add_partitions, txn_offset_commit

ANON = "User:ANONYMOUS"
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
L, P = PatternType.LITERAL, PatternType.PREFIXED


def acl(op, type_=T, name="orders", perm=Permission.ALLOW, pattern=L, principal=ANON):
    return AclBinding(principal, "*", type_, name, pattern, op, perm)


@pytest.fixture
def written() -> list:
    return []


@pytest.fixture
def authorizer() -> Authorizer:
    return Authorizer(super_users=["User:admin"])


@pytest.fixture
def addr(backend, authorizer, written):
    backend.add_topic("payments", partitions=1)
    access = Access(authorizer, written.extend)
    with ListenerThread(KafkaListener(backend, port=0, access=access)) as running:
        yield running.listener.host, running.listener.port


def test_produce_without_write_is_refused_nothing_written_and_audited(addr, backend, caplog):
    caplog.set_level(logging.INFO, logger="raylog.audit")
    answer = wire.call(addr, produce(kafka_batch(RECORDS)), 9)
    assert partition_answer(answer).error_code == Code.TOPIC_AUTHORIZATION_FAILED
    assert not backend.logs.get(("orders", 0))
    assert ("DENIED principal=User:ANONYMOUS host=127.0.0.1 operation=WRITE "
            "resource=TOPIC:orders") in caplog.text


def test_produce_with_write_is_appended_and_deny_overrides(addr, backend, authorizer):
    authorizer.add(acl(Operation.WRITE))
    answer = wire.call(addr, produce(kafka_batch(RECORDS)), 9)
    assert partition_answer(answer).error_code == Code.NONE
    assert len(backend.logs[("orders", 0)]) == 1
    authorizer.add(acl(Operation.WRITE, perm=Permission.DENY, name="ord", pattern=P))
    answer = wire.call(addr, produce(kafka_batch(RECORDS)), 9)
    assert partition_answer(answer).error_code == Code.TOPIC_AUTHORIZATION_FAILED
    assert len(backend.logs[("orders", 0)]) == 1


def test_fetch_needs_read(addr, authorizer):
    answer = wire.call(addr, fetch(0), 12)
    assert answer.responses[0].partitions[0].error_code == Code.TOPIC_AUTHORIZATION_FAILED
    authorizer.add(acl(Operation.READ))
    answer = wire.call(addr, fetch(0), 12)
    assert answer.responses[0].partitions[0].error_code == Code.NONE


def test_metadata_lists_only_describable_topics(addr, authorizer):
    assert wire.call(addr, MetadataRequest[1](topics=None), 1).topics == []
    authorizer.add(acl(Operation.READ, name="pay", pattern=P))  # READ implies DESCRIBE
    listed = wire.call(addr, MetadataRequest[1](topics=None), 1).topics
    assert [t.name for t in listed] == ["payments"]
    named = wire.call(addr, MetadataRequest[1](topics=[
        MetadataRequest.MetadataRequestTopic(name="orders")]), 1).topics
    assert named[0].error_code == Code.TOPIC_AUTHORIZATION_FAILED and not named[0].partitions


def test_join_group_needs_read_on_the_group(addr):
    answer = wire.call(addr, JoinGroupRequest[5](
        group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=20_000, member_id="",
        group_instance_id=None, protocol_type="consumer", protocols=[]), 5)
    assert answer.error_code == Code.GROUP_AUTHORIZATION_FAILED


def test_offset_fetch_needs_read_on_the_group(addr):
    answer = wire.call(addr, OffsetFetchRequest[5](group_id="g", topics=None), 5)
    assert answer.error_code == Code.GROUP_AUTHORIZATION_FAILED


def test_offset_commit_needs_read_on_the_group_and_on_each_topic(addr, authorizer):
    def commit():
        C = OffsetCommitRequest
        answer = wire.call(addr, C[5](
            group_id="g", generation_id_or_member_epoch=-1, member_id="",
            topics=[C.OffsetCommitRequestTopic(name="orders", partitions=[
                C.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_metadata="")])]), 5)
        return answer.topics[0].partitions[0].error_code

    assert commit() == Code.GROUP_AUTHORIZATION_FAILED
    authorizer.add(acl(Operation.READ, type_=G, name="g"))
    assert commit() == Code.TOPIC_AUTHORIZATION_FAILED  # nothing reaches the coordinator


def test_idempotent_init_producer_id(addr, authorizer):
    def init():
        return wire.call(addr, InitProducerIdRequest[2](
            transactional_id=None, transaction_timeout_ms=60000), 2).error_code

    assert init() == Code.CLUSTER_AUTHORIZATION_FAILED
    authorizer.add(acl(Operation.WRITE, name="payments"))  # WRITE on any topic will do
    assert init() == Code.NONE


def test_a_transactional_id_needs_write_on_it(addr, backend, authorizer, caplog):
    caplog.set_level(logging.INFO, logger="raylog.audit")
    asked = []

    async def coordinator(method: str, *args, timeout_s: float):
        asked.append(method)
        return 4242, 0

    backend.controller_call = coordinator

    def init():
        return wire.call(addr, InitProducerIdRequest[2](
            transactional_id="tx-1", transaction_timeout_ms=60000), 2).error_code

    assert init() == Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "operation=WRITE resource=TRANSACTIONAL_ID:tx-1" in caplog.text
    assert not asked  # refused before the coordinator is asked
    caplog.clear()
    authorizer.add(acl(Operation.WRITE, type_=ResourceType.TRANSACTIONAL_ID, name="tx-1"))
    assert init() == Code.NONE
    assert asked == ["txn_init_producer_id"]
    assert "DENIED" not in caplog.text


X = ResourceType.TRANSACTIONAL_ID


@pytest.fixture
def asked(backend) -> list:
    """The coordinator's calls: the fake controller records each and answers it."""
    calls: list = []

    async def coordinator(method: str, *args, timeout_s: float):
        calls.append(method)
        return 4242, 0

    backend.controller_call = coordinator
    return calls


def test_add_partitions_to_txn_needs_write_on_the_id_and_on_each_topic(addr, authorizer,
                                                                       asked, caplog):
    caplog.set_level(logging.INFO, logger="raylog.audit")
    both = {"orders": [0], "payments": [0]}
    assert add_partitions(addr, both) == dict.fromkeys(
        [("orders", 0), ("payments", 0)], Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    assert "operation=WRITE resource=TRANSACTIONAL_ID:tx" in caplog.text
    authorizer.add(acl(Operation.WRITE, type_=X, name="tx"))
    authorizer.add(acl(Operation.WRITE, name="orders"))
    assert add_partitions(addr, {**both, "nope": [0]}) == {
        ("orders", 0): Code.OPERATION_NOT_ATTEMPTED,
        ("payments", 0): Code.TOPIC_AUTHORIZATION_FAILED,
        ("nope", 0): Code.TOPIC_AUTHORIZATION_FAILED}  # unknown and not writable: denied
    assert not asked  # nothing added
    assert add_partitions(addr, {"orders": [0]}) == {("orders", 0): Code.NONE}
    assert asked == ["txn_add_partitions"]


def test_add_offsets_to_txn_needs_write_on_the_id_and_read_on_the_group(addr, authorizer,
                                                                        asked):
    def add_offsets():
        return wire.call(addr, AddOffsetsToTxnRequest[3](
            transactional_id="tx", producer_id=4242, producer_epoch=0, group_id="g"),
            3).error_code

    assert add_offsets() == Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    authorizer.add(acl(Operation.WRITE, type_=X, name="tx"))
    assert add_offsets() == Code.GROUP_AUTHORIZATION_FAILED
    assert not asked
    authorizer.add(acl(Operation.READ, type_=G, name="g"))
    assert add_offsets() == Code.NONE
    assert asked == ["txn_add_offsets"]


def test_end_txn_needs_write_on_the_id(addr, authorizer, asked):
    def end():
        return wire.call(addr, EndTxnRequest[3](
            transactional_id="tx", producer_id=4242, producer_epoch=0, committed=True),
            3).error_code

    assert end() == Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    authorizer.add(acl(Operation.READ, type_=X, name="tx"))  # READ is not WRITE
    assert end() == Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert not asked
    authorizer.add(acl(Operation.WRITE, type_=X, name="t", pattern=P))
    assert end() == Code.NONE
    assert asked == ["txn_end"]


def test_txn_offset_commit_needs_write_on_the_id_and_read_on_the_group_and_topics(
        addr, authorizer, asked):
    offsets = {("orders", 0): 1, ("payments", 0): 2}

    def commit():
        return txn_offset_commit(addr, 3, offsets)

    assert commit() == dict.fromkeys(offsets, Code.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    authorizer.add(acl(Operation.WRITE, type_=X, name="tx"))
    assert commit() == dict.fromkeys(offsets, Code.GROUP_AUTHORIZATION_FAILED)
    authorizer.add(acl(Operation.READ, type_=G, name="g"))
    assert commit() == dict.fromkeys(offsets, Code.TOPIC_AUTHORIZATION_FAILED)
    assert not asked
    authorizer.add(acl(Operation.READ, name="orders"))
    assert commit() == {("orders", 0): Code.NONE,
                        ("payments", 0): Code.TOPIC_AUTHORIZATION_FAILED}
    assert asked == ["txn_offset_commit"]


def test_delete_topics_needs_delete(addr, backend, authorizer):
    request = DeleteTopicsRequest[4](topic_names=["orders"], timeout_ms=1000)
    assert wire.call(addr, request, 4).responses[0].error_code == \
        Code.TOPIC_AUTHORIZATION_FAILED
    assert "orders" in backend.topics
    authorizer.add(acl(Operation.DELETE))
    assert wire.call(addr, request, 4).responses[0].error_code == Code.NONE


def creation(binding: AclBinding):
    return CreateAclsRequest.AclCreation(
        resource_type=binding.resource_type, resource_name=binding.resource_name,
        resource_pattern_type=binding.pattern, principal=binding.principal, host=binding.host,
        operation=binding.operation, permission_type=binding.permission)


def any_filter(**fields):
    values = dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                  principal_filter=None, host_filter=None, operation=1, permission_type=1)
    values.update(fields)
    return values


def test_acl_apis_need_alter_and_describe_on_the_cluster(addr, written):
    wanted = acl(Operation.WRITE, principal="User:bob")
    answer = wire.call(addr, CreateAclsRequest[2](creations=[creation(wanted)]), 2)
    assert answer.results[0].error_code == Code.CLUSTER_AUTHORIZATION_FAILED
    described = wire.call(addr, DescribeAclsRequest[2](**any_filter()), 2)
    assert described.error_code == Code.CLUSTER_AUTHORIZATION_FAILED
    assert written == []


def test_create_describe_delete_acls(addr, authorizer, written):
    authorizer.add(acl(Operation.ALTER, type_=C, name="kafka-cluster"))  # implies DESCRIBE
    wanted = acl(Operation.WRITE, principal="User:bob", name="pay", pattern=P)
    bad = CreateAclsRequest.AclCreation(
        resource_type=T, resource_name="x", resource_pattern_type=PatternType.MATCH,
        principal="User:bob", host="*", operation=Operation.READ, permission_type=3)
    answer = wire.call(addr, CreateAclsRequest[2](creations=[creation(wanted), bad]), 2)
    assert [r.error_code for r in answer.results] == [Code.NONE, Code.INVALID_REQUEST]
    assert [decode(k, v) for k, v in written] == [(wanted, True)]
    assert authorizer.authorize("User:bob", "h", Operation.WRITE, Resource(T, "payments"))

    described = wire.call(addr, DescribeAclsRequest[2](**any_filter(principal_filter="User:bob")),
                          2)
    assert described.error_code == Code.NONE
    [resource] = described.resources
    assert (resource.resource_type, resource.resource_name, resource.pattern_type) == \
        (T, "pay", P)
    assert [(a.principal, a.operation, a.permission_type) for a in resource.acls] == \
        [("User:bob", Operation.WRITE, Permission.ALLOW)]

    deleted = wire.call(addr, DeleteAclsRequest[2](filters=[DeleteAclsRequest.DeleteAclsFilter(
        **any_filter(principal_filter="User:bob"))]), 2)
    assert [m.resource_name for m in deleted.filter_results[0].matching_acls] == ["pay"]
    assert decode(*written[-1]) == (wanted, False)
    assert wanted not in authorizer.bindings()


def test_acl_apis_without_an_authorizer_say_security_disabled(backend):
    with ListenerThread(KafkaListener(backend, port=0)) as running:
        addr = running.listener.host, running.listener.port
        described = wire.call(addr, DescribeAclsRequest[2](**any_filter()), 2)
        assert described.error_code == Code.SECURITY_DISABLED
        # and nothing else is checked
        answer = wire.call(addr, produce(kafka_batch(RECORDS)), 9)
        assert partition_answer(answer).error_code == Code.NONE


def test_the_user_apis_follow_the_acls_on_the_cluster(backend):
    """Not a super user, alice may describe users with DESCRIBE on the cluster; without
    ALTER she may not alter them."""
    from raylog.kafka.auth.credentials import CredentialStore
    from raylog.kafka.auth.scram import Mechanism, make_credential
    from raylog.kafka.gateway.security import ListenerSecurity
    from tests.unit.kafka.gateway.test_scram_users import alter, describe, logged_in, upsert

    credentials = CredentialStore()
    credentials.put("alice", Mechanism.SCRAM_SHA_256,
                    make_credential("pw", Mechanism.SCRAM_SHA_256))

    authorizer = Authorizer(super_users=["User:admin"], bindings=[
        acl(Operation.DESCRIBE, type_=C, name="kafka-cluster", principal="User:alice")])
    security = ListenerSecurity(security_protocol="SASL_PLAINTEXT", super_users="User:admin")
    written: list = []
    listener = KafkaListener(backend, port=0, security=security, credentials=credentials,
                             write_users=written.extend, access=Access(authorizer))
    with ListenerThread(listener) as running, logged_in(running, "alice") as sock:
        assert describe(sock).error_code == Code.NONE
        assert alter(sock, [upsert("carol")]).results[0].error_code == \
            Code.CLUSTER_AUTHORIZATION_FAILED
    assert written == []
