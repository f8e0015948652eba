"""Producer and consumer settings: defaults, normalisation, and refusal of bad values."""

from __future__ import annotations

import dataclasses
import re

import pytest

from raylog.client.consumer import OFFSET_RESETS, ConsumerConfig
from raylog.client.producer import ProducerConfig, producer_config
from raylog.errors import InvalidConfigError
from raylog.records.builder import BATCH_OVERHEAD
from raylog.util.arguments import build_config


def _escaped(value: object) -> str:
    return re.escape(repr(value))


# -- ProducerConfig ------------------------------------------------------------------------------


def test_producer_defaults():
    config = ProducerConfig()
    assert config.acks == 1
    assert config.compression_type == "lz4"
    assert config.batch_size > BATCH_OVERHEAD


@pytest.mark.parametrize(("acks", "normalized"), [
    (0, 0), (1, 1), ("all", "all"), (-1, "all"), ("0", 0), ("1", 1), ("-1", "all"),
])
def test_acks_are_normalized_to_0_1_or_all(acks, normalized):
    config = ProducerConfig(acks=acks)
    assert config.acks == normalized
    assert type(config.acks) is type(normalized)


@pytest.mark.parametrize("acks", [2, -2, "ALL", "2", "", None, "leader", 0.5, [1]])
def test_bad_acks_are_refused_naming_the_value(acks):
    with pytest.raises(InvalidConfigError, match=rf"acks must be 0, 1 or 'all', got "
                                                 rf"{_escaped(acks)}"):
        ProducerConfig(acks=acks)


@pytest.mark.parametrize("acks", [True, False, 1.0, 0.0])
def test_acks_of_other_types_equal_to_0_or_1_are_refused(acks):
    """True == 1 and 1.0 == 1 in Python, but neither is a valid acks setting: every other
    integer setting refuses them (``type(value) is not int``), and ``acks`` must come out
    as exactly 0, 1 or 'all'."""
    with pytest.raises(InvalidConfigError, match=r"acks"):
        ProducerConfig(acks=acks)


@pytest.mark.parametrize("codec", ["gzip", "LZ4", "", None, "snappy"])
def test_unknown_compression_is_refused_naming_the_value(codec):
    with pytest.raises(InvalidConfigError, match=rf"compression_type must be 'lz4' or 'none', "
                                                 rf"got {_escaped(codec)}"):
        ProducerConfig(compression_type=codec)


@pytest.mark.parametrize("value", [1, "true", None])
def test_produce_socket_must_be_a_bool(value):
    with pytest.raises(InvalidConfigError, match=rf"produce_socket must be true or false, "
                                                 rf"got {_escaped(value)}"):
        ProducerConfig(produce_socket=value)


def test_compression_none_is_accepted():
    assert ProducerConfig(compression_type="none").compression_type == "none"


PRODUCER_INT_FIELDS = [f.name for f in dataclasses.fields(ProducerConfig)
                       if f.name not in ("acks", "compression_type", "transactional_id",
                                         "client_id", "produce_socket")]
ZERO_OK = {"linger_ms", "retry_backoff_ms"}


@pytest.mark.parametrize("field", PRODUCER_INT_FIELDS)
@pytest.mark.parametrize("value", ["100", 1.5, None, True, -1])
def test_producer_integer_settings_refuse_bad_values_naming_field_and_value(field, value):
    with pytest.raises(InvalidConfigError) as info:
        ProducerConfig(**{field: value})
    message = str(info.value)
    assert field in message
    assert repr(value) in message


@pytest.mark.parametrize("field", PRODUCER_INT_FIELDS)
def test_producer_zero_is_allowed_only_for_linger_and_backoff(field):
    if field in ZERO_OK:
        assert getattr(ProducerConfig(**{field: 0}), field) == 0
    else:
        with pytest.raises(InvalidConfigError, match=rf"{field} must be an integer >= 1, got 0"):
            ProducerConfig(**{field: 0})


def test_batch_size_must_exceed_the_batch_overhead():
    with pytest.raises(InvalidConfigError, match=rf"batch_size must be > {BATCH_OVERHEAD}, "
                                                 rf"got {BATCH_OVERHEAD}"):
        ProducerConfig(batch_size=BATCH_OVERHEAD)
    assert ProducerConfig(batch_size=BATCH_OVERHEAD + 1).batch_size == BATCH_OVERHEAD + 1


@pytest.mark.parametrize(("settings", "hint"), [
    ({"linger": 5}, "did you mean 'linger_ms'?"),
    ({"lingerms": 5}, "did you mean 'linger_ms'?"),
    ({"batchsize": 5}, "did you mean 'batch_size'?"),
    ({"partitioners": 5}, "did you mean 'partitioner'?"),
])
def test_unknown_producer_settings_are_refused_naming_the_closest(settings, hint):
    name = next(iter(settings))
    with pytest.raises(InvalidConfigError, match=rf"unknown Producer option '{name}' "
                                                 rf"\({re.escape(hint)}\)"):
        producer_config(settings)


def test_producer_settings_check_the_partitioner():
    assert producer_config({"partitioner": lambda key, n: 0}) == ProducerConfig()
    with pytest.raises(InvalidConfigError, match=r"partitioner must be a callable"):
        producer_config({"partitioner": "murmur2"})
    with pytest.raises(InvalidConfigError, match=r"producer settings must be a dict"):
        producer_config(["linger_ms"])


@pytest.mark.parametrize("codec", [["lz4"], {"lz4": 1}])
def test_unhashable_values_of_choices_are_refused_typed(codec):
    with pytest.raises(InvalidConfigError, match=r"compression_type"):
        ProducerConfig(compression_type=codec)
    with pytest.raises(InvalidConfigError, match=r"partition_assignment_strategy"):
        ConsumerConfig(partition_assignment_strategy=codec)


@pytest.mark.parametrize("field", PRODUCER_INT_FIELDS)
def test_producer_settings_refuse_huge_values(field):
    with pytest.raises(InvalidConfigError, match=rf"{field} must be an integer <="):
        ProducerConfig(**{field: 2**64})


def test_producer_config_is_frozen():
    config = ProducerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.acks = 0


# -- ConsumerConfig ------------------------------------------------------------------------------


def test_consumer_defaults():
    config = ConsumerConfig()
    assert config.auto_offset_reset == "latest"
    assert config.consumer_timeout_ms is None
    assert config.fetch_min_bytes == 1


@pytest.mark.parametrize("reset", OFFSET_RESETS)
def test_every_offset_reset_is_accepted(reset):
    assert ConsumerConfig(auto_offset_reset=reset).auto_offset_reset == reset


@pytest.mark.parametrize("reset", ["smallest", "Earliest", "", None, 0])
def test_unknown_offset_reset_is_refused_naming_the_value(reset):
    with pytest.raises(InvalidConfigError, match=rf"auto_offset_reset must be one of .*got "
                                                 rf"{_escaped(reset)}"):
        ConsumerConfig(auto_offset_reset=reset)


CONSUMER_INT_FIELDS = [f.name for f in dataclasses.fields(ConsumerConfig)
                       if "int" in str(f.type)]


@pytest.mark.parametrize("field", CONSUMER_INT_FIELDS)
@pytest.mark.parametrize("value", ["100", 2.5, True, -1])
def test_consumer_integer_settings_refuse_bad_values_naming_field_and_value(field, value):
    with pytest.raises(InvalidConfigError) as info:
        ConsumerConfig(**{field: value})
    message = str(info.value)
    assert field in message
    assert repr(value) in message


@pytest.mark.parametrize("field", CONSUMER_INT_FIELDS)
def test_none_is_accepted_only_for_consumer_timeout(field):
    if field == "consumer_timeout_ms":
        assert ConsumerConfig(consumer_timeout_ms=None).consumer_timeout_ms is None
    else:
        with pytest.raises(InvalidConfigError, match=rf"{field} must be an integer"):
            ConsumerConfig(**{field: None})


@pytest.mark.parametrize("field", CONSUMER_INT_FIELDS)
def test_consumer_zero_is_allowed_only_for_waits_and_timeouts(field):
    if field in ("fetch_max_wait_ms", "consumer_timeout_ms"):
        assert getattr(ConsumerConfig(**{field: 0}), field) == 0
    else:
        with pytest.raises(InvalidConfigError, match=rf"{field} must be an integer >= 1, got 0"):
            ConsumerConfig(**{field: 0})


@pytest.mark.parametrize(("settings", "field"), [
    ({"group_id": ""}, "group_id"),
    ({"group_id": 5}, "group_id"),
    ({"client_id": ""}, "client_id"),
    ({"enable_auto_commit": "yes"}, "enable_auto_commit"),
    ({"partition_assignment_strategy": "sticky-ish"}, "partition_assignment_strategy"),
])
def test_consumer_group_settings_refuse_bad_values(settings, field):
    with pytest.raises(InvalidConfigError, match=field):
        ConsumerConfig(**settings)


def test_unknown_consumer_settings_are_refused_naming_the_closest():
    with pytest.raises(InvalidConfigError, match=r"unknown Consumer option 'group' "
                                                 r"\(did you mean 'group_id'\?\)"):
        build_config(ConsumerConfig, "Consumer", {"group": "g"}, ("cluster",))


@pytest.mark.parametrize("field", CONSUMER_INT_FIELDS)
def test_consumer_settings_refuse_huge_values(field):
    with pytest.raises(InvalidConfigError, match=rf"{field} must be an integer <="):
        ConsumerConfig(**{field: 2**31})


def test_heartbeats_must_come_more_often_than_the_session_times_out():
    with pytest.raises(InvalidConfigError, match=r"heartbeat_interval_ms \(10000\) must be "
                                                 r"lower than session_timeout_ms \(10000\)"):
        ConsumerConfig(heartbeat_interval_ms=10_000, session_timeout_ms=10_000)


@pytest.mark.parametrize(("field", "value"), [
    ("group_id", "g" * 256), ("client_id", "c" * 256), ("group_id", "bad\udc80"),
])
def test_consumer_ids_are_bounded_and_unicode(field, value):
    with pytest.raises(InvalidConfigError, match=field):
        ConsumerConfig(**{field: value})


@pytest.mark.parametrize(("config", "name", "hint"), [
    (ProducerConfig, "linger", "linger_ms"),
    (ConsumerConfig, "group", "group_id"),
])
def test_configs_built_directly_name_the_closest_option_too(config, name, hint):
    with pytest.raises(InvalidConfigError, match=rf"unknown {config.__name__} option "
                                                 rf"'{name}' \(did you mean '{hint}'\?\)"):
        config(**{name: 1})
