"""Topic names and topic configs: what is accepted, and the errors for what is not."""

from __future__ import annotations

import pytest

from raylog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    UnknownPartitionError,
    UnknownTopicError,
)
from raylog.metadata.topics import (
    CONSUMER_OFFSETS_TOPIC,
    MAX_COMMIT_METADATA,
    MAX_TOPIC_NAME_LENGTH,
    REPLICATION_DEFAULTS,
    check_offset_entries,
    check_partition,
    check_partition_growth,
    check_reset_spec,
    check_user_topic,
    configs_to_delete,
    effective_configs,
    log_config,
    normalize_configs,
    reset_partitions,
    reset_spec,
    topic_names,
    topic_partition,
    topic_partitions,
    topic_pattern,
    validate_topic_name,
)
from raylog.storage import LogConfig
from raylog.storage.config import DAY_MS
from raylog.types import TopicPartition

# -- topic names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "a",
    "pageviews",
    "Page.Views_2024-01",
    "a" * MAX_TOPIC_NAME_LENGTH,
    "...",
    ".hidden",
    "-dash-first",
    "_",
    "0123456789",
    CONSUMER_OFFSETS_TOPIC,
])
def test_legal_topic_names_are_returned_unchanged(name):
    assert validate_topic_name(name) == name


def test_the_length_limit_is_249_characters():
    assert MAX_TOPIC_NAME_LENGTH == 249
    validate_topic_name("x" * 249)
    with pytest.raises(InvalidTopicError, match=r"250 characters long; the limit is 249"):
        validate_topic_name("x" * 250)


@pytest.mark.parametrize(("name", "message"), [
    ("", r"cannot be empty"),
    (".", r"cannot be '\.'"),
    ("..", r"cannot be '\.\.'"),
    ("a/b", r"characters outside \[a-zA-Z0-9._-\]: '/'"),
    ("../etc", r"characters outside .*'/'"),
    ("/", r"'/'"),
    ("two words", r"characters outside .*' '"),
    (" leading", r"' '"),
    ("tab\there", r"'\\t'"),
    ("new\nline", r"'\\n'"),
    ("café", r"'é'"),
    ("naïve-ünïcode", r"'ïü'"),
    ("温度", r"characters outside"),
    ("a:b", r"':'"),
    ("a\\b", r"characters outside"),
    ("a\x00b", r"characters outside"),
])
def test_illegal_topic_names_are_refused_naming_the_problem(name, message):
    with pytest.raises(InvalidTopicError, match=message):
        validate_topic_name(name)


def test_illegal_characters_are_listed_once_each_and_sorted():
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name("a b/c d/e")
    assert "' /'" in str(info.value)
    assert "'a b/c d/e'" in str(info.value)


@pytest.mark.parametrize(("name", "type_name"), [
    (None, "NoneType"),
    (42, "int"),
    (b"bytes-topic", "bytes"),
    (["topic"], "list"),
])
def test_non_string_topic_names_are_refused_naming_the_type(name, type_name):
    with pytest.raises(InvalidTopicError, match=f"must be a string, got {type_name}"):
        validate_topic_name(name)


def test_invalid_topic_error_is_a_value_error():
    with pytest.raises(ValueError):
        validate_topic_name("")


# -- topic configs -------------------------------------------------------------------------------


def test_no_configs_normalize_to_an_empty_dict():
    assert normalize_configs(None) == {}
    assert normalize_configs({}) == {}


def test_dotted_and_underscore_spellings_give_canonical_names():
    dotted = normalize_configs({
        "retention.ms": 1000, "segment.bytes": 4096, "cleanup.policy": "compact",
        "min.insync.replicas": 2, "unclean.leader.election.enable": True,
        "max.message.bytes": 1 << 20,
    })
    underscored = normalize_configs({
        "retention_ms": 1000, "segment_bytes": 4096, "cleanup_policy": "compact",
        "min_insync_replicas": 2, "unclean_leader_election_enable": True,
        "max_message_bytes": 1 << 20,
    })
    assert dotted == underscored == {
        "retention_ms": 1000, "segment_bytes": 4096, "cleanup_policy": "compact",
        "min_insync_replicas": 2, "unclean_leader_election_enable": True,
        "max_message_bytes": 1 << 20,
    }


def test_string_values_are_coerced_for_int_configs():
    out = normalize_configs({
        "retention.ms": "86400000", "segment.bytes": "4096", "min.insync.replicas": "2",
        "flush.messages": "10", "delete.retention.ms": "0",
    })
    assert out == {"retention_ms": 86_400_000, "segment_bytes": 4096, "min_insync_replicas": 2,
                   "flush_messages": 10, "delete_retention_ms": 0}
    assert all(type(v) is int for v in out.values())


@pytest.mark.parametrize(("configs", "messages", "ms", "each"), [
    ({"flush.messages": "1"}, 1, None, True),
    ({"flush_messages": 1}, 1, None, True),
    ({"flush.ms": "0"}, None, 0, True),        # Kafka's range for flush.ms starts at 0
    ({"flush.messages": 100, "flush.ms": "1000"}, 100, 1000, False),
    ({"flush.messages": "-1", "flush.ms": -1}, None, None, False),  # -1: never, the default
    ({"flush.messages": 9223372036854775807}, 9223372036854775807, None, False),  # Kafka's
])
def test_kafka_flush_configs_in_either_spelling(configs, messages, ms, each):
    config = log_config(normalize_configs(configs))
    assert (config.flush_messages, config.flush_ms) == (messages, ms)
    assert config.syncs_each_append is each


@pytest.mark.parametrize(("configs", "field"), [
    ({"flush.messages": 0}, "flush_messages"), ({"flush.messages": "0"}, "flush_messages"),
    ({"flush.ms": -2}, "flush_ms"), ({"flush.messages": "often"}, "flush.messages"),
    ({"flush.messages": True}, "flush_messages"), ({"flush.ms": 1.5}, "flush_ms"),
])
def test_bad_flush_configs_are_refused(configs, field):
    with pytest.raises(InvalidConfigError, match=field):
        normalize_configs(configs)


def test_string_minus_one_means_no_limit_for_optional_configs():
    out = normalize_configs({"retention.ms": "-1", "retention.bytes": "-1"})
    config = log_config(out)
    assert config.retention_ms is None
    assert config.retention_bytes is None


@pytest.mark.parametrize(("raw", "expected"), [
    ("true", True), ("false", False), ("TRUE", True), ("False", False), (True, True),
    (False, False),
])
def test_bool_configs_accept_true_and_false_in_any_case(raw, expected):
    out = normalize_configs({"unclean.leader.election.enable": raw})
    assert out == {"unclean_leader_election_enable": expected}


def test_string_values_of_string_configs_are_kept():
    assert normalize_configs({"cleanup.policy": "compact,delete"}) == {
        "cleanup_policy": "compact,delete"}


@pytest.mark.parametrize("name", ["retention.msx", "no_such_config", "retention-ms",
                                  "RETENTION.MS", "compression.type"])
def test_unknown_config_names_are_refused_naming_the_config(name):
    with pytest.raises(InvalidConfigError, match=rf"unknown topic config '{name}'"):
        normalize_configs({name: 1})


def test_non_string_config_names_are_refused():
    with pytest.raises(InvalidConfigError, match=r"config names must be strings, got 7"):
        normalize_configs({7: 1})


@pytest.mark.parametrize(("configs", "field", "value"), [
    ({"retention.ms": "a week"}, "retention_ms", "'a week'"),
    ({"segment.bytes": "1.5"}, "segment_bytes", "'1.5'"),
    ({"min.insync.replicas": "two"}, "min_insync_replicas", "'two'"),
    ({"unclean.leader.election.enable": "yes"}, "unclean_leader_election_enable", "'yes'"),
    ({"unclean.leader.election.enable": 1}, "unclean_leader_election_enable", "1"),
    ({"retention.ms": 1.5}, "retention_ms", "1.5"),
    ({"retention.ms": -2}, "retention_ms", "-2"),
    ({"segment.bytes": 10}, "segment_bytes", "10"),
    ({"segment_ms": 0}, "segment_ms", "0"),
    ({"max.message.bytes": True}, "max_message_bytes", "True"),
    ({"cleanup.policy": "forever"}, "cleanup_policy", "'forever'"),
    ({"cleanup.policy": 3}, "cleanup_policy", "3"),
    ({"min.insync.replicas": 1.0}, "min_insync_replicas", "1.0"),
    ({"min.insync.replicas": True}, "min_insync_replicas", "True"),
])
def test_bad_values_are_refused_naming_field_and_value(configs, field, value):
    with pytest.raises(InvalidConfigError) as info:
        normalize_configs(configs)
    message = str(info.value)
    assert field in message or field.replace("_", ".") in message  # either spelling
    assert value in message


@pytest.mark.parametrize("value", [0, -1, "0", "-3"])
def test_min_insync_replicas_below_one_is_refused(value):
    with pytest.raises(InvalidConfigError, match=r"min_insync_replicas must be an integer >= 1"):
        normalize_configs({"min.insync.replicas": value})


def test_normalize_does_not_modify_its_argument():
    configs = {"retention.ms": "1000"}
    normalize_configs(configs)
    assert configs == {"retention.ms": "1000"}


def test_log_config_takes_only_the_log_fields():
    out = normalize_configs({"retention.ms": "1000", "min.insync.replicas": "2",
                             "unclean.leader.election.enable": "true",
                             "cleanup.policy": "delete,compact"})
    config = log_config(out)
    assert isinstance(config, LogConfig)
    assert config.retention_ms == 1000
    assert config.cleanup_policy == "compact,delete"
    assert config.segment_bytes == LogConfig().segment_bytes


def test_log_config_of_no_overrides_is_the_default():
    assert log_config({}) == LogConfig()


def test_effective_configs_lists_every_config_with_overrides_on_top():
    defaults = effective_configs({})
    assert defaults == {**LogConfig().to_dict(), **REPLICATION_DEFAULTS}
    assert defaults["retention_ms"] == 7 * DAY_MS
    assert defaults["min_insync_replicas"] == 1
    assert defaults["unclean_leader_election_enable"] is False

    overridden = effective_configs(
        normalize_configs({"retention.ms": "5", "min.insync.replicas": 3}))
    assert set(overridden) == set(defaults)
    assert overridden["retention_ms"] == 5
    assert overridden["min_insync_replicas"] == 3
    assert {k: v for k, v in overridden.items()
            if k not in ("retention_ms", "min_insync_replicas")} == {
        k: v for k, v in defaults.items() if k not in ("retention_ms", "min_insync_replicas")}


@pytest.mark.parametrize("configs", ["notadict", ["retention.ms", 5], 7, b"x"])
def test_configs_that_are_not_a_mapping_are_refused(configs):
    with pytest.raises(InvalidConfigError, match=r"topic configs must be a mapping"):
        normalize_configs(configs)


@pytest.mark.parametrize(("name", "hint"), [
    ("retention.msx", "did you mean 'retention.ms'?"),
    ("retention_msx", "did you mean 'retention_ms'?"),
    ("cleanup.polcy", "did you mean 'cleanup.policy'?"),
    ("min.isr", "valid: "),
])
def test_unknown_config_names_come_with_the_closest_known_one(name, hint):
    with pytest.raises(InvalidConfigError) as info:
        normalize_configs({name: 1})
    assert hint in str(info.value)


def test_config_values_beyond_a_64_bit_long_are_refused():
    with pytest.raises(InvalidConfigError, match=r"retention_ms must be at most"):
        normalize_configs({"retention.ms": 2**63})
    with pytest.raises(InvalidConfigError, match=r"min_insync_replicas must be an integer <="):
        normalize_configs({"min.insync.replicas": 2**40})


def test_configs_to_delete_must_be_known_and_set():
    configs = {"retention_ms": 5, "segment_bytes": 4096}
    assert configs_to_delete("t", configs, ["retention.ms", "segment_bytes"]) == [
        "retention_ms", "segment_bytes"]
    assert configs_to_delete("t", configs, "retention.ms") == ["retention_ms"]
    with pytest.raises(InvalidConfigError, match=r"topic 't' has no value set for "
                                                 r"'cleanup.policy' \(it has its default\)"):
        configs_to_delete("t", configs, ["cleanup.policy"])
    with pytest.raises(InvalidConfigError, match=r"did you mean 'retention.ms'"):
        configs_to_delete("t", configs, ["retention.mss"])
    with pytest.raises(InvalidConfigError, match=r"must be a list of names"):
        configs_to_delete("t", configs, 5)


def test_internal_topics_are_not_for_users():
    assert check_user_topic("pageviews") == "pageviews"
    with pytest.raises(InvalidTopicError, match=r"internal"):
        check_user_topic(CONSUMER_OFFSETS_TOPIC)


def test_partitions_grow_and_never_shrink():
    check_partition_growth("t", 3, 4)
    with pytest.raises(InvalidPartitionsError, match=r"cannot have fewer \(2\): partitions "
                                                     r"are added, never removed"):
        check_partition_growth("t", 3, 2)
    with pytest.raises(InvalidPartitionsError, match=r"already has 3 partitions"):
        check_partition_growth("t", 3, 3)


def test_a_string_is_one_topic_name():
    assert topic_names("pageviews") == ["pageviews"]
    assert topic_names(["a", "b"]) == ["a", "b"]
    assert topic_names(iter(["a"])) == ["a"]


@pytest.mark.parametrize(("topics", "error"), [
    (5, InvalidTopicError), (None, InvalidTopicError), ([], InvalidTopicError),
    ({"a": 1}, InvalidTopicError), (b"a", InvalidTopicError), (["ok", ""], InvalidTopicError),
    (["ok", 5], InvalidTopicError),
])
def test_bad_topic_lists_are_refused(topics, error):
    with pytest.raises(error):
        topic_names(topics)


def test_topic_partitions_from_pairs():
    assert topic_partition(("t", 1)) == TopicPartition("t", 1)
    assert topic_partitions([TopicPartition("t", 0), ["u", 2]], "assign()") == [
        TopicPartition("t", 0), TopicPartition("u", 2)]


@pytest.mark.parametrize(("value", "error"), [
    ("t", InvalidArgumentError), (5, InvalidArgumentError), (("t",), InvalidArgumentError),
    (("t", 0, 1), InvalidArgumentError), (("t", "0"), InvalidArgumentError),
    (("t", True), InvalidArgumentError), (("t", -1), UnknownPartitionError),
    ((5, 0), InvalidTopicError), (("bad/name", 0), InvalidTopicError),
])
def test_bad_topic_partitions_are_refused(value, error):
    with pytest.raises(error):
        topic_partition(value)


@pytest.mark.parametrize("values", ["t", TopicPartition("t", 0), 5, None])
def test_a_list_of_topic_partitions_is_needed(values):
    with pytest.raises(InvalidArgumentError, match=r"assign\(\) takes a list of "
                                                   r"TopicPartitions"):
        topic_partitions(values, "assign()")


def test_check_partition():
    assert check_partition("t", 1, 2) == 1
    for bad in (2, -1, True, "1", None):
        with pytest.raises(UnknownPartitionError, match=r"topic 't' has partitions 0\.\.1"):
            check_partition("t", bad, 2)


def test_topic_patterns_must_compile():
    assert topic_pattern("page.*") == "page.*"
    with pytest.raises(InvalidArgumentError, match=r"not a regular expression"):
        topic_pattern("(")
    with pytest.raises(InvalidArgumentError, match=r"must be a string"):
        topic_pattern(5)


def test_offsets_to_commit_name_existing_partitions():
    counts = {"t": 2}
    check_offset_entries([("t", 1, 5, ""), ["t", 0, 0, "meta"]], counts)
    for entries, error in [
        ([("u", 0, 5, "")], UnknownTopicError),
        ([("t", 2, 5, "")], UnknownPartitionError),
        ([("t", 0, -1, "")], InvalidArgumentError),
        ([("t", 0, 2**63, "")], InvalidArgumentError),
        ([("t", 0, 5)], InvalidArgumentError),
        ([("t", 0, 5, "m" * (MAX_COMMIT_METADATA + 1))], InvalidArgumentError),
        ([("t", 0, 5, None)], InvalidArgumentError),
    ]:
        with pytest.raises(error):
            check_offset_entries(entries, counts)


@pytest.mark.parametrize(("to", "spec"), [
    ("earliest", "earliest"), ("latest", "latest"), (5, ["offset", 5]),
    ({"timestamp": 1000}, 1000),
])
def test_reset_targets(to, spec):
    assert reset_spec(to) == spec
    assert check_reset_spec(spec) == spec


@pytest.mark.parametrize("to", ["first", -1, True, 1.5, {"timestamp": "x"},
                                {"timestamp": -5}, {"ts": 1}, None, ["offset"]])
def test_bad_reset_targets_are_refused(to):
    with pytest.raises(InvalidArgumentError):
        reset_spec(to)


def test_reset_partitions_are_a_non_empty_list_of_numbers():
    assert reset_partitions([0, 2]) == [0, 2]
    for bad, error in [([], InvalidArgumentError), (3, InvalidArgumentError),
                       (["0"], InvalidArgumentError), ([True], InvalidArgumentError),
                       ([-1], UnknownPartitionError)]:
        with pytest.raises(error):
            reset_partitions(bad)
