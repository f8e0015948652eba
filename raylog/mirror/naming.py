"""Which topics a mirror copies, what they are called on the target, which configs follow.

A topic ``orders`` of the source cluster with alias ``east`` becomes ``east.orders`` on the
target (MirrorMaker 2's default replication policy). A two-way pair, ``east`` mirrored into
``west`` and ``west`` into ``east``, never loops as long as each mirror is told the alias its
target goes by on the other side (``target_alias``): the mirror into ``west`` then skips
``west.orders`` on ``east``, which came from ``west`` in the first place, as it skips any
topic whose name carries ``west.`` among its alias prefixes.

Plain Python: no Ray, no Arrow.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from raylog.errors import InvalidArgumentError, InvalidTopicError
from raylog.metadata.topics import MAX_TOPIC_NAME_LENGTH, validate_topic_name

SEPARATOR = "."
MAX_ALIAS_LENGTH = 64
_ALIAS = re.compile(r"[a-zA-Z0-9_-]+")
CHECKPOINTS_PREFIX = "_mirror."
# Configs that are the target cluster's own business (how many of its brokers must hold a
# write), as MirrorMaker 2 leaves them out; every other topic config is copied.
TARGET_OWN_CONFIGS = frozenset({"min_insync_replicas", "unclean_leader_election_enable",
                                "replica_lag_time_max_ms"})


def check_alias(alias: object, what: str = "alias") -> str:
    """A cluster alias: 1 to 64 characters from ``[a-zA-Z0-9_-]`` (no dot: the dot separates
    it from the topic name)."""
    if not isinstance(alias, str) or not _ALIAS.fullmatch(alias) or len(alias) > MAX_ALIAS_LENGTH:
        raise InvalidArgumentError(
            f"{what} must be 1 to {MAX_ALIAS_LENGTH} characters from [a-zA-Z0-9_-], got "
            f"{alias!r}")
    return alias


def remote_topic(alias: str, topic: str) -> str:
    """The target's name for source topic ``topic``: ``<alias>.<topic>``."""
    name = f"{alias}{SEPARATOR}{topic}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"the remote topic {name!r} would be longer than "
                                f"{MAX_TOPIC_NAME_LENGTH} characters")
    return validate_topic_name(name)


def source_topic(alias: str, remote: str) -> str | None:
    """The source topic a remote topic of this alias mirrors, None if it is not one."""
    prefix = alias + SEPARATOR
    return remote[len(prefix):] if remote.startswith(prefix) and len(remote) > len(prefix) \
        else None


def checkpoints_topic(alias: str) -> str:
    """The target's internal topic holding offset syncs and group checkpoints of ``alias``."""
    return f"{CHECKPOINTS_PREFIX}{check_alias(alias)}.checkpoints"


def is_internal(topic: str) -> bool:
    """raylog's own topics and mirrors' checkpoint topics: never mirrored."""
    return topic.startswith("__") or topic.startswith(CHECKPOINTS_PREFIX)


def _patterns(what: str, patterns: Sequence[str] | None) -> list[re.Pattern[str]]:
    compiled = []
    for pattern in patterns or ():
        try:
            compiled.append(re.compile(pattern))
        except re.error as e:
            raise InvalidArgumentError(f"{what} pattern {pattern!r} is not a regular "
                                       f"expression: {e}") from None
    return compiled


class TopicFilter:
    """Decides which source topics a mirror copies. Immutable; safe to share.

    A topic is copied when it matches an allow pattern (every topic when none is given),
    matches no deny pattern, is not internal, and would not close a loop: none of the
    alias prefixes in its name is ``target_alias``. Patterns are Python regular expressions
    matched against the whole name.

    >>> TopicFilter(["orders.*"], ["orders-test"], "east", "west").wants("orders-eu")
    True
    """

    def __init__(self, allow: Sequence[str] | None, deny: Sequence[str] | None, alias: str,
                 target_alias: str | None = None) -> None:
        self.alias = check_alias(alias)
        self.target_alias = None if target_alias is None else check_alias(target_alias,
                                                                          "target alias")
        if self.target_alias == self.alias:
            raise InvalidArgumentError(f"the source and the target cannot both be called "
                                       f"{alias!r}")
        self._allow = _patterns("allow", allow)
        self._deny = _patterns("deny", deny)

    def loops(self, topic: str) -> bool:
        """Whether copying ``topic`` would send records back where they came from."""
        return self.target_alias is not None and \
            self.target_alias in topic.split(SEPARATOR)[:-1]

    def wants(self, topic: str) -> bool:
        if is_internal(topic) or self.loops(topic):
            return False
        if self._allow and not any(p.fullmatch(topic) for p in self._allow):
            return False
        return not any(p.fullmatch(topic) for p in self._deny)


def copied_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """The topic configs (canonical names) a remote topic takes from its source."""
    return {name: value for name, value in configs.items() if name not in TARGET_OWN_CONFIGS}


def config_changes(source: Mapping[str, Any], target: Mapping[str, Any]
                   ) -> tuple[dict[str, Any], list[str]]:
    """What to set and what to delete on the target so that its copied configs are the
    source's: ``(set, delete)``, both empty when they agree."""
    wanted, current = copied_configs(source), copied_configs(target)
    updates = {name: value for name, value in wanted.items() if current.get(name) != value}
    deletes = sorted(name for name in current if name not in wanted)
    return updates, deletes
