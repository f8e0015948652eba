"""Topic names and topic configs: what is acceptable, checked before anything is stored."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from raylog.errors import InvalidConfigError, InvalidTopicError
from raylog.storage.config import LogConfig

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

# Topic configs beyond the log's own, with their defaults.
REPLICATION_DEFAULTS: dict[str, Any] = {
    "min_insync_replicas": 1,
    "unclean_leader_election_enable": False,
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


def _coerce(name: str, value: Any) -> Any:
    """Accept the string form a command line gives (``"1000"``, ``"true"``)."""
    if not isinstance(value, str):
        return value
    default = REPLICATION_DEFAULTS.get(name)
    if isinstance(default, bool):
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise InvalidConfigError(f"{name} must be true or false, got {value!r}")
    field = _LOG_FIELDS.get(name)
    if name in REPLICATION_DEFAULTS or (field is not None and "int" in str(field.type)):
        try:
            return int(value)
        except ValueError:
            raise InvalidConfigError(f"{name} must be an integer, got {value!r}") from None
    return value


def normalize_configs(configs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate topic config overrides; return them keyed by canonical (underscore) names.

    Accepts Kafka's dotted spellings (``retention.ms``) and string values. Raises
    InvalidConfigError naming the config and the value.
    """
    out: dict[str, Any] = {}
    for raw_name, raw_value in (configs or {}).items():
        if not isinstance(raw_name, str):
            raise InvalidConfigError(f"config names must be strings, got {raw_name!r}")
        name = raw_name.replace(".", "_")
        if name not in _LOG_FIELDS and name not in REPLICATION_DEFAULTS:
            raise InvalidConfigError(f"unknown topic config {raw_name!r}")
        out[name] = _coerce(name, raw_value)
    log_config(out)  # validates the log part
    minimum = out.get("min_insync_replicas", 1)
    if type(minimum) is not int or minimum < 1:
        raise InvalidConfigError(f"min_insync_replicas must be an integer >= 1, got {minimum!r}")
    unclean = out.get("unclean_leader_election_enable", False)
    if not isinstance(unclean, bool):
        raise InvalidConfigError(
            f"unclean_leader_election_enable must be true or false, got {unclean!r}")
    return out


def log_config(configs: Mapping[str, Any]) -> LogConfig:
    """The LogConfig a topic's partitions use, from its normalized overrides."""
    return LogConfig(**{k: v for k, v in configs.items() if k in _LOG_FIELDS})


def effective_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Every topic config with its value: overrides over defaults."""
    return {**LogConfig().to_dict(), **REPLICATION_DEFAULTS, **configs}
