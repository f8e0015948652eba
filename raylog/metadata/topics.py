"""Topic names, partitions and configs: what is acceptable, checked before anything is
stored (by clients for fast answers, and again by the controller)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from raylog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    RaylogError,
    UnknownPartitionError,
    UnknownTopicError,
)
from raylog.storage.config import LogConfig
from raylog.types import EARLIEST, LATEST, TopicPartition
from raylog.util.arguments import INT32_MAX, INT64_MAX, check_int, short_repr, unknown_name

MAX_TOPIC_NAME_LENGTH = 249
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000  # Kafka's replica.lag.time.max.ms
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# Internal topics (names starting with "__": hidden from listings, refused to users'
# create, delete and alter calls; raylog creates them itself, replicated as
# internal_topic_configs says).
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"  # the group coordinator's (raylog/groups)
TRANSACTION_STATE_TOPIC = "__transaction_state"  # the transaction coordinator's (transactions)
MAX_COMMIT_METADATA = 4096  # characters of metadata per committed offset, as Kafka's default

# Topic configs beyond the log's own, with their defaults.
REPLICATION_DEFAULTS: dict[str, Any] = {
    "min_insync_replicas": 1,
    "unclean_leader_election_enable": False,
    "replica_lag_time_max_ms": DEFAULT_REPLICA_LAG_TIME_MAX_MS,  # a follower this long behind
                                                                 # leaves the ISR
    # raylog.replica.dedicated: each replica in a Ray actor of its own, on its broker's node
    # (actors/replica_hosts.py); taken into account when a broker is next told its state.
    "raylog_replica_dedicated": False,
    # Bytes a second a replica moving to a broker copies at (docs/balancing.md); None: the
    # cluster's RAYLOG_REPLICATION_THROTTLED_RATE, 0: unthrottled.
    "replication_throttled_rate": None,
}
_LOG_FIELDS = {f.name: f for f in dataclasses.fields(LogConfig)}


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a legal topic name; raise InvalidTopicError otherwise.

    Legal names are 1 to 249 characters from ``[a-zA-Z0-9._-]``, and neither ``.`` nor ``..``:
    a name becomes a directory name on every broker, so it must never escape the data directory.
    """
    if not isinstance(name, str):
        raise InvalidTopicError(f"a topic name must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidTopicError("a topic name cannot be empty")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if not _LEGAL_NAME.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL_NAME.fullmatch(c)})
        raise InvalidTopicError(
            f"topic name {name!r} has characters outside [a-zA-Z0-9._-]: {''.join(bad)!r}")
    return name


def check_user_topic(name: object) -> str:
    """A legal name that is not internal: users do not create, delete or grow topics whose
    names start with ``__``; raylog manages them (``__consumer_offsets``) itself."""
    validate_topic_name(name)
    if name.startswith("__"):
        raise InvalidTopicError(f"topic names starting with '__' are internal and managed by "
                                f"raylog itself: {name!r}")
    return name


def _coerce(name: str, value: Any, spelled: str) -> Any:
    """Accept the string form a command line gives (``"1000"``, ``"true"``); a refusal
    names the config as the caller ``spelled`` it (``retention.ms`` or ``retention_ms``)."""
    if not isinstance(value, str):
        return value
    default = REPLICATION_DEFAULTS.get(name)
    field = _LOG_FIELDS.get(name)
    if isinstance(default, bool) or (field is not None and field.type == "bool"):
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise InvalidConfigError(f"{spelled} must be true or false, got {value!r}")
    if field is not None and field.type == "float":
        try:
            return float(value)
        except ValueError:
            raise InvalidConfigError(f"{spelled} must be a number, got {value!r}") from None
    if name in REPLICATION_DEFAULTS or (field is not None and "int" in str(field.type)):
        try:
            return int(value)
        except ValueError:
            raise InvalidConfigError(f"{spelled} must be an integer, got {value!r}") from None
    return value


def _config_names(spelling: str) -> list[str]:
    """Every topic config name, in the spelling (dotted or not) the caller used."""
    names = [*_LOG_FIELDS, *REPLICATION_DEFAULTS]
    return [n.replace("_", ".") for n in names] if "." in spelling else names


def canonical_config_name(raw_name: object) -> str:
    """The underscore spelling of a known topic config name; InvalidConfigError (naming the
    closest known one) otherwise."""
    if not isinstance(raw_name, str):
        raise InvalidConfigError(f"config names must be strings, got {short_repr(raw_name)}")
    name = raw_name.replace(".", "_")
    if name not in _LOG_FIELDS and name not in REPLICATION_DEFAULTS:
        raise InvalidConfigError(unknown_name("topic config", raw_name,
                                              _config_names(raw_name)))
    return name


def kafka_config_name(name: str) -> str:
    """The spelling Kafka's tools show (``retention.ms``) of a canonical config name."""
    return name.replace("_", ".")


def described_configs(overrides: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every topic config as Kafka's describe-configs shows it, keyed by Kafka's name:
    ``{"value": ..., "is_default": bool}``; "no limit" is -1, as Kafka writes it."""
    return {kafka_config_name(name): {"value": -1 if value is None else value,
                                      "is_default": name not in overrides}
            for name, value in sorted(effective_configs(overrides).items())}


def normalize_configs(configs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate topic config overrides; return them keyed by canonical (underscore) names.

    Accepts Kafka's dotted spellings (``retention.ms``) and string values. Raises
    InvalidConfigError naming the config and the value.
    """
    if configs is not None and not isinstance(configs, Mapping):
        raise InvalidConfigError(f"topic configs must be a mapping of name to value, got "
                                 f"{short_repr(configs)}")
    out: dict[str, Any] = {}
    for raw_name, raw_value in (configs or {}).items():
        name = canonical_config_name(raw_name)
        value = out[name] = _coerce(name, raw_value, raw_name)
        if type(value) is int and value > INT64_MAX:
            raise InvalidConfigError(f"{name} must be at most {INT64_MAX}, got {value}")
    log_config(out)  # validates the log part
    check_int("min_insync_replicas", out.get("min_insync_replicas", 1), 1, INT32_MAX,
              InvalidConfigError)
    check_int("replica_lag_time_max_ms",
              out.get("replica_lag_time_max_ms", DEFAULT_REPLICA_LAG_TIME_MAX_MS), 1,
              INT32_MAX, InvalidConfigError)
    if out.get("replication_throttled_rate") is not None:
        check_int("replication.throttled.rate (bytes a second; 0: unthrottled)",
                  out["replication_throttled_rate"], 0, INT64_MAX, InvalidConfigError)
    for name in ("unclean_leader_election_enable", "raylog_replica_dedicated"):
        if not isinstance(out.get(name, False), bool):
            raise InvalidConfigError(f"{name} must be true or false, got {out[name]!r}")
    return out


def check_min_insync(what: str, configs: Mapping[str, Any], replicas: int,
                     error: type[RaylogError] = InvalidConfigError) -> None:
    """Refuse (``error``) ``replicas`` replicas for ``what`` (a topic, a partition) whose
    normalized ``configs`` ask more of them in sync: no acks=all write could ever succeed."""
    min_insync = configs.get("min_insync_replicas", REPLICATION_DEFAULTS["min_insync_replicas"])
    if min_insync > replicas:
        raise error(f"{what}: min.insync.replicas={min_insync} is larger than its {replicas} "
                    f"replicas: no acks=all write could ever succeed")


def check_remote_storage(topic: str, configs: Mapping[str, Any], store_configured: bool,
                         before: Mapping[str, Any] | None = None) -> None:
    """Refuse tiering ``topic`` (normalized ``configs``) on a cluster without an object store
    (raylog/tiered/settings.py), and, as Kafka does, turning it off once on (``before``: the
    configs it had): its old segments would be in the store and nowhere else."""
    enabled = configs.get("remote_storage_enable", False)
    if enabled and not store_configured:
        raise InvalidConfigError(f"topic {topic!r}: remote.storage.enable needs the cluster's "
                                 f"object store, and none is set (RAYLOG_REMOTE_STORAGE_URI "
                                 f"on the head node)")
    if before is not None and before.get("remote_storage_enable", False) and not enabled:
        raise InvalidConfigError(f"topic {topic!r}: remote.storage.enable cannot be turned off "
                                 f"once on (its old segments are only in the object store)")


INTERNAL_REPLICATION = 3  # internal topics: min(this, live brokers) replicas ...
INTERNAL_MIN_INSYNC = 2   # ... and this min.insync.replicas when they have that many


def internal_topic_configs(configs: Mapping[str, Any], live_brokers: int
                           ) -> tuple[int, dict[str, Any]]:
    """(the replication factor, the configs) of an internal topic (``__consumer_offsets``,
    ``_schemas``) created while ``live_brokers`` brokers are alive: min(3, live brokers)
    replicas, min.insync.replicas 2 when it has 3, else 1. ``configs`` in Kafka's spelling."""
    factor = min(INTERNAL_REPLICATION, live_brokers)
    min_insync = INTERNAL_MIN_INSYNC if factor >= INTERNAL_REPLICATION else 1
    return factor, {**configs, "min.insync.replicas": min_insync}


def configs_to_delete(topic: str, configs: Mapping[str, Any], names: object) -> list[str]:
    """The canonical names of the overrides ``names`` would delete from a topic's
    ``configs``; each must be a known config that is set (deleting one that is not would
    silently do nothing)."""
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, Iterable) or isinstance(names, bytes | Mapping):
        raise InvalidConfigError(f"configs to delete must be a list of names, got "
                                 f"{short_repr(names)}")
    out = []
    for raw_name in names:
        name = canonical_config_name(raw_name)
        if name not in configs:
            raise InvalidConfigError(f"topic {topic!r} has no value set for {raw_name!r} (it "
                                     f"has its default): nothing to delete")
        out.append(name)
    return out


def log_config(configs: Mapping[str, Any]) -> LogConfig:
    """The LogConfig a topic's partitions use, from its normalized overrides."""
    return LogConfig(**{k: v for k, v in configs.items() if k in _LOG_FIELDS})


def effective_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Every topic config with its value: overrides over defaults."""
    return {**LogConfig().to_dict(), **REPLICATION_DEFAULTS, **configs}


# -- topics and partitions named by callers -------------------------------------------------

def topic_names(topics: object, what: str = "topics", allow_empty: bool = False) -> list[str]:
    """Topic names from one name or an iterable of names, each checked."""
    if isinstance(topics, str):
        return [validate_topic_name(topics)]
    if isinstance(topics, bytes | Mapping) or not isinstance(topics, Iterable):
        raise InvalidTopicError(f"{what} must be a topic name or a list of names, got "
                                f"{short_repr(topics)}")
    names = [validate_topic_name(name) for name in topics]
    if not names and not allow_empty:
        raise InvalidTopicError(f"{what}: no topic given")
    return names


def topic_partition(value: object) -> TopicPartition:
    """A TopicPartition from itself or a (topic, partition) pair, both checked."""
    if isinstance(value, str | bytes) or not isinstance(value, tuple | list) or len(value) != 2:
        raise InvalidArgumentError(f"expected a TopicPartition or a (topic, partition) pair, "
                                   f"got {short_repr(value)}")
    topic, partition = value
    validate_topic_name(topic)
    if type(partition) is not int:
        raise InvalidArgumentError(f"a partition must be an integer, got {short_repr(partition)}")
    if partition < 0:
        raise UnknownPartitionError(f"topic {topic!r} has no partition {partition}")
    return TopicPartition(topic, partition)


def topic_pattern(pattern: object) -> str:
    """A regular expression selecting topics by name."""
    if not isinstance(pattern, str):
        raise InvalidArgumentError(f"a topic pattern must be a string, got {short_repr(pattern)}")
    try:
        re.compile(pattern)
    except re.error as e:
        raise InvalidArgumentError(f"topic pattern {short_repr(pattern)} is not a regular "
                                   f"expression: {e}") from None
    return pattern


def check_partition(topic: str, partition: object, count: int) -> int:
    """``partition`` if topic ``topic`` with ``count`` partitions has it."""
    if type(partition) is not int or not 0 <= partition < count:
        raise UnknownPartitionError(
            f"topic {topic!r} has partitions 0..{count - 1}, not {short_repr(partition)}")
    return partition


def check_partition_growth(topic: str, current: int, total: int) -> None:
    """A topic of ``current`` partitions may grow to ``total``: more, never fewer."""
    if total < current:
        raise InvalidPartitionsError(
            f"topic {topic!r} has {current} partitions and cannot have fewer ({total}): "
            f"partitions are added, never removed")
    if total == current:
        raise InvalidPartitionsError(f"topic {topic!r} already has {total} partitions")


def topic_partitions(values: object, what: str) -> list[TopicPartition]:
    """TopicPartitions from an iterable of TopicPartitions or (topic, partition) pairs."""
    if isinstance(values, str | bytes | TopicPartition) or not isinstance(values, Iterable):
        raise InvalidArgumentError(f"{what} takes a list of TopicPartitions, got "
                                   f"{short_repr(values)}")
    return [topic_partition(value) for value in values]


def check_offset_entries(entries: Iterable[Any], partition_counts: Mapping[str, int]) -> None:
    """Offsets to commit as (topic, partition, offset, metadata) entries, for topics and
    partitions that exist (``partition_counts``: topic -> number of partitions)."""
    for entry in entries:
        if not isinstance(entry, tuple | list) or len(entry) != 4:
            raise InvalidArgumentError(f"an offset to commit is (topic, partition, offset, "
                                       f"metadata), got {short_repr(entry)}")
        topic, partition, offset, metadata = entry
        tp = topic_partition((topic, partition))
        if tp.topic not in partition_counts:
            raise UnknownTopicError(f"cannot commit offsets of unknown topic {tp.topic!r}")
        check_partition(tp.topic, tp.partition, partition_counts[tp.topic])
        check_int(f"the offset of {tp.topic}-{tp.partition}", offset)
        if not isinstance(metadata, str) or len(metadata) > MAX_COMMIT_METADATA:
            raise InvalidArgumentError(f"commit metadata must be a string of at most "
                                       f"{MAX_COMMIT_METADATA} characters, got "
                                       f"{short_repr(metadata)}")


def reset_spec(to: object) -> str | int | list:
    """Where ``Admin.reset_offsets`` moves a group, in the form the controller takes:
    ``"earliest"``, ``"latest"``, a timestamp in ms (from ``{"timestamp": ms}``) or
    ``["offset", n]`` (from an int)."""
    if isinstance(to, Mapping) and set(to) == {"timestamp"}:
        return check_int("the timestamp to reset to", to["timestamp"])
    if type(to) is int:
        return check_reset_spec(["offset", to])
    return check_reset_spec(to)


def check_reset_spec(spec: object) -> str | int | list:
    """A reset target as the controller receives it (see :func:`reset_spec`)."""
    if isinstance(spec, str) and spec in (EARLIEST, LATEST):
        return spec
    if type(spec) is int and spec >= 0:
        return spec
    if isinstance(spec, list | tuple) and len(spec) == 2 and spec[0] == "offset":
        return ["offset", check_int("the offset to reset to", spec[1])]
    raise InvalidArgumentError(f"reset to 'earliest', 'latest', an offset >= 0 or "
                               f"{{'timestamp': ms}}, got {short_repr(spec)}")


def reset_partitions(partitions: object) -> list[int]:
    """The partitions a reset names: a non-empty list of partition numbers."""
    if not isinstance(partitions, list | tuple) or not partitions:
        raise InvalidArgumentError(f"partitions must be a non-empty list of partition "
                                   f"numbers or None (all), got {short_repr(partitions)}")
    for partition in partitions:
        if type(partition) is not int:
            raise InvalidArgumentError(f"a partition must be an integer, got "
                                       f"{short_repr(partition)}")
        if partition < 0:
            raise UnknownPartitionError(f"there is no partition {partition}")
    return list(partitions)
