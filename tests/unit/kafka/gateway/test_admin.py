"""Topic administration through the listener, over a fake cluster."""

from __future__ import annotations

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)

from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.listener import KafkaListener, ListenerThread
from raylog.kafka.gateway.settings import GatewaySettings
from tests.unit.kafka.gateway import wire

C = CreateTopicsRequest
D = DescribeConfigsRequest
A = IncrementalAlterConfigsRequest


@pytest.fixture
def addr(backend):
    settings = GatewaySettings(auto_create_partitions=4)
    with ListenerThread(KafkaListener(backend, settings, port=0)) as running:
        yield running.listener.host, running.listener.port


def create(name: str, partitions: int = 3, replicas: int = 1, configs=(),
           validate_only: bool = False, assignments=()) -> CreateTopicsRequest:
    return C[7](topics=[C.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replicas,
        assignments=list(assignments),
        configs=[C.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in configs])],
        timeout_ms=1000, validate_only=validate_only)


@pytest.mark.parametrize("version", [2, 5, 7])
def test_create_topics(addr, backend, version):
    answer = wire.call(addr, create("fresh", configs=[("retention.ms", "1000")]), version)
    [result] = answer.topics
    assert (result.name, result.error_code) == ("fresh", Code.NONE)
    assert backend.topics["fresh"].num_partitions == 3
    assert backend.configs["fresh"] == {"retention_ms": 1000}
    if version >= 5:  # the created topic's configs: the Java AdminClient reads them
        configs = {c.name: c.value for c in result.configs}
        assert configs["retention.ms"] == "1000" and len(configs) > 1
    again = wire.call(addr, create("fresh"), version).topics[0]
    assert again.error_code == Code.TOPIC_ALREADY_EXISTS
    if version >= 1:
        assert "already exists" in again.error_message


def test_create_topics_refusals_and_defaults(addr, backend):
    assert wire.call(addr, create("bad name!"), 7).topics[0].error_code == \
        Code.INVALID_TOPIC_EXCEPTION
    assert wire.call(addr, create("x", configs=[("no.such.config", "1")]), 7).topics[0] \
        .error_code == Code.INVALID_CONFIG
    manual = create("y", partitions=-1, replicas=-1, assignments=[
        C.CreatableTopic.CreatableReplicaAssignment(partition_index=0, broker_ids=[1])])
    assert wire.call(addr, manual, 7).topics[0].error_code == Code.INVALID_REQUEST
    assert wire.call(addr, create("z", validate_only=True), 7).topics[0].error_code == \
        Code.NONE
    assert {"bad name!", "x", "y", "z"}.isdisjoint(backend.topics)
    defaults = wire.call(addr, create("d", partitions=-1, replicas=-1), 7).topics[0]
    assert (defaults.error_code, defaults.num_partitions) == (Code.NONE, 4)
    assert backend.topics["d"].num_partitions == 4


@pytest.mark.parametrize("version", [1, 5, 6])
def test_delete_topics(addr, backend, version):
    if version >= 6:
        T = DeleteTopicsRequest.DeleteTopicState
        request = DeleteTopicsRequest[version](topics=[T(name="orders"), T(name="nope")],
                                               timeout_ms=1000)
    else:
        request = DeleteTopicsRequest[version](topic_names=["orders", "nope"], timeout_ms=1000)
    answer = wire.call(addr, request, version)
    assert [(r.name, r.error_code) for r in answer.responses] == \
        [("orders", Code.NONE), ("nope", Code.UNKNOWN_TOPIC_OR_PARTITION)]
    assert "orders" not in backend.topics


def test_create_partitions(addr, backend):
    P = CreatePartitionsRequest
    answer = wire.call(addr, P[3](topics=[P.CreatePartitionsTopic(name="orders", count=5,
                                                                  assignments=None),
                                          P.CreatePartitionsTopic(name="orders", count=1,
                                                                  assignments=None)],
                                  timeout_ms=1000, validate_only=False), 3)
    assert [r.error_code for r in answer.results] == [Code.NONE, Code.INVALID_PARTITIONS]
    assert backend.topics["orders"].num_partitions == 5


def test_describe_and_alter_configs(addr, backend):
    def describe(keys=None, resource_type=2, name="orders"):
        return wire.call(addr, D[4](resources=[D.DescribeConfigsResource(
            resource_type=resource_type, resource_name=name, configuration_keys=keys)],
            include_synonyms=False, include_documentation=False), 4).results[0]

    every = describe()
    assert every.error_code == Code.NONE
    retention = {c.name: c for c in every.configs}["retention.ms"]
    assert retention.config_source == 5  # the default
    alter = A[1](resources=[A.AlterConfigsResource(resource_type=2, resource_name="orders",
                                                   configs=[A.AlterConfigsResource.AlterableConfig(
                                                       name="retention.ms", config_operation=0,
                                                       value="60000")])],
                 validate_only=False)
    assert wire.call(addr, alter, 1).responses[0].error_code == Code.NONE
    [changed] = describe(["retention.ms"]).configs
    assert (changed.value, changed.config_source) == ("60000", 1)
    append = A[1](resources=[A.AlterConfigsResource(resource_type=2, resource_name="orders",
                                                    configs=[A.AlterConfigsResource.AlterableConfig(
                                                        name="cleanup.policy",
                                                        config_operation=2, value="compact")])],
                  validate_only=False)
    assert wire.call(addr, append, 1).responses[0].error_code == Code.INVALID_CONFIG
    assert describe(resource_type=4, name="1").error_code == Code.INVALID_REQUEST
    assert describe(name="nope").error_code == Code.UNKNOWN_TOPIC_OR_PARTITION
