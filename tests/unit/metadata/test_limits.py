"""Partition limits: per topic, and per broker from its memory or a setting."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidConfigError, InvalidPartitionsError
from raylog.metadata.limits import (
    DEFAULT_MAX_PARTITIONS_PER_TOPIC,
    MAX_PARTITIONS_ENV,
    MAX_REPLICAS_ENV,
    REPLICA_MEMORY_BYTES,
    UNKNOWN_MEMORY_REPLICAS,
    PartitionLimits,
)

GB = 1 << 30


def test_defaults():
    limits = PartitionLimits.from_environ({})
    assert limits.max_partitions_per_topic == DEFAULT_MAX_PARTITIONS_PER_TOPIC == 10_000
    assert limits.max_replicas_per_broker is None


def test_settings_come_from_the_environment():
    limits = PartitionLimits.from_environ({MAX_PARTITIONS_ENV: " 500 ", MAX_REPLICAS_ENV: "40"})
    assert limits == PartitionLimits(500, 40)


@pytest.mark.parametrize(("environ", "message"), [
    ({MAX_PARTITIONS_ENV: "many"}, rf"{MAX_PARTITIONS_ENV} must be an integer, got 'many'"),
    ({MAX_PARTITIONS_ENV: "0"}, r"max_partitions_per_topic must be an integer >= 1, got 0"),
    ({MAX_REPLICAS_ENV: "-5"}, r"max_replicas_per_broker must be an integer >= 1, got -5"),
    ({MAX_REPLICAS_ENV: str(2**40)}, r"max_replicas_per_broker must be an integer <="),
])
def test_bad_settings_are_refused_naming_them(environ, message):
    with pytest.raises(InvalidConfigError, match=message):
        PartitionLimits.from_environ(environ)


def test_topic_size_is_bounded_and_the_message_says_how_to_change_it():
    limits = PartitionLimits(max_partitions_per_topic=100)
    limits.check_topic_size("t", 100)
    with pytest.raises(InvalidPartitionsError) as info:
        limits.check_topic_size("t", 101)
    message = str(info.value)
    assert "'t' cannot have 101 partitions" in message
    assert "the limit is 100 per topic" in message
    assert MAX_PARTITIONS_ENV in message


def test_replicas_per_broker_follow_memory_unless_set():
    derived = PartitionLimits()
    assert derived.replicas_allowed(16 * GB) == 16 * GB // REPLICA_MEMORY_BYTES
    assert derived.replicas_allowed(REPLICA_MEMORY_BYTES // 2) == 1
    assert derived.replicas_allowed(None) == UNKNOWN_MEMORY_REPLICAS
    assert PartitionLimits(max_replicas_per_broker=7).replicas_allowed(16 * GB) == 7


def test_placement_counts_existing_replicas_per_broker():
    limits = PartitionLimits(max_replicas_per_broker=3)
    existing = [[0], [1]]
    memory = {0: None, 1: None}
    limits.check_placement("t", [[0], [1], [0], [1]], existing, memory)
    with pytest.raises(InvalidPartitionsError) as info:
        limits.check_placement("t", [[0], [0], [0]], existing, memory)
    message = str(info.value)
    assert "would put 4 replicas on broker 0, which holds 1" in message
    assert f"{MAX_REPLICAS_ENV}=3" in message


def test_placement_limit_derived_from_memory_names_the_reason():
    memory = {7: 2 * REPLICA_MEMORY_BYTES}  # a broker on a node with little memory
    with pytest.raises(InvalidPartitionsError, match=r"limit per broker is 2: 1 MiB per replica"):
        PartitionLimits().check_placement("t", [[7]] * 3, [], memory)
