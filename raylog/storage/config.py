"""Settings of one partition log, validated when built."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from raylog.errors import InvalidConfigError

DAY_MS = 24 * 3600 * 1000

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
LOCAL_AS_WHOLE = -2  # Kafka's local.retention.* default: the whole log's retention


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """How a partition log rolls, flushes, retains and compacts its segments.

    Every field is checked in ``__post_init__``; a bad value raises InvalidConfigError naming
    the field and the value. ``None`` means "no limit" (Kafka's -1 is accepted for the same).
    Names match Kafka's topic configs with ``.`` replaced by ``_``; :meth:`from_mapping`
    accepts either spelling. Ranges are Kafka's: ``flush_messages`` >= 1, ``flush_ms`` >= 0,
    ``min_cleanable_dirty_ratio`` from 0 to 1.
    """

    segment_bytes: int = 1 << 30          # roll the active segment past this size
    segment_ms: int = 7 * DAY_MS          # ... or when its first batch is this old
    index_interval_bytes: int = 4096      # bytes of log between two offset-index entries
    flush_messages: int | None = None     # fsync after this many records (None: leave to OS)
    flush_ms: int | None = None           # fsync when the last one is this old (None: OS;
                                          # 0: at every append, as flush_messages=1)
    retention_ms: int | None = 7 * DAY_MS  # delete segments whose newest record is older
    retention_bytes: int | None = None    # delete oldest segments while the log is larger
    cleanup_policy: str = "delete"        # "delete", "compact" or "compact,delete"
    delete_retention_ms: int = DAY_MS     # keep tombstones this long in compacted logs
    min_cleanable_dirty_ratio: float = 0.5  # compact once the uncleaned share of the
                                            # cleanable bytes reaches this (0 to 1)
    max_message_bytes: int = 8 << 20      # largest batch the log accepts
    # Tiered storage (docs/tiered.md): closed segments are copied to the cluster's object
    # store; retention_ms / retention_bytes then bound the whole log (remote and local) and
    # these two the local tail, whose segments go only once their copy is recorded.
    remote_storage_enable: bool = False
    local_retention_ms: int | None = LOCAL_AS_WHOLE    # -2: as retention_ms
    local_retention_bytes: int | None = LOCAL_AS_WHOLE  # -2: as retention_bytes

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "cleanup_policy":
                continue
            if field.type == "bool":
                if type(value) is not bool:
                    raise InvalidConfigError(f"{field.name} must be true or false, "
                                             f"got {value!r}")
                continue
            if value == LOCAL_AS_WHOLE and field.name in _LOCAL_RETENTION:
                continue
            if field.type == "float":
                if type(value) not in (int, float) or not 0 <= value <= 1:
                    raise InvalidConfigError(
                        f"{field.name} must be a number from 0 to 1, got {value!r}")
                object.__setattr__(self, field.name, float(value))
                continue
            optional = field.type.endswith("None")
            if value == -1 and optional:
                object.__setattr__(self, field.name, None)
                continue
            if value is None and optional:
                continue
            if type(value) is not int:
                raise InvalidConfigError(
                    f"{field.name} must be an integer, got {value!r}"
                )
            minimum = 1 if field.name in _POSITIVE else 0
            if value < minimum:
                raise InvalidConfigError(
                    f"{field.name} must be >= {minimum}{' or -1' if optional else ''}, "
                    f"got {value}"
                )
        policy = self.cleanup_policy
        if isinstance(policy, str):
            policy = ",".join(sorted(p.strip() for p in policy.split(",")))
        if policy not in CLEANUP_POLICIES:
            raise InvalidConfigError(
                f"cleanup_policy must be one of {', '.join(CLEANUP_POLICIES)}, "
                f"got {self.cleanup_policy!r}"
            )
        object.__setattr__(self, "cleanup_policy", policy)
        if self.segment_bytes < 1024:
            raise InvalidConfigError(f"segment_bytes must be >= 1024, got {self.segment_bytes}")
        self._check_tiered()

    def _check_tiered(self) -> None:
        """Kafka's rules: a compacted log is not tiered, and the local tail's retention is
        at most the whole log's (None, no limit, is the largest)."""
        if self.remote_storage_enable and self.compact:
            raise InvalidConfigError(
                f"remote_storage_enable cannot be set on a log with cleanup_policy "
                f"{self.cleanup_policy!r}: compacted logs are not tiered")
        for local, whole in (("local_retention_ms", "retention_ms"),
                             ("local_retention_bytes", "retention_bytes")):
            local_value, whole_value = getattr(self, local), getattr(self, whole)
            if local_value == LOCAL_AS_WHOLE or whole_value is None:
                continue
            if local_value is None or local_value > whole_value:
                raise InvalidConfigError(
                    f"{local} ({'-1' if local_value is None else local_value}) must not be "
                    f"more than {whole} ({whole_value})")

    @property
    def local_retention(self) -> tuple[int | None, int | None]:
        """(ms, bytes) the local tail of a tiered log keeps: local_retention_*, or the whole
        log's where those are -2."""
        ms, size = self.local_retention_ms, self.local_retention_bytes
        return (self.retention_ms if ms == LOCAL_AS_WHOLE else ms,
                self.retention_bytes if size == LOCAL_AS_WHOLE else size)

    @property
    def syncs_each_append(self) -> bool:
        """Whether every append is fsynced before it returns (``flush_messages=1``, or
        ``flush_ms=0``): then a replica counts only synced records toward the high
        watermark, and acks=all means on disk at every in-sync replica."""
        return self.flush_messages == 1 or self.flush_ms == 0

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> LogConfig:
        """Build from a mapping of settings; unknown names are refused."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {}
        for name, value in settings.items():
            key = name.replace(".", "_")
            if key not in known:
                raise InvalidConfigError(f"unknown log config {name!r}")
            values[key] = value
        return cls(**values)

    def replace(self, **changes: Any) -> LogConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_LOCAL_RETENTION = ("local_retention_ms", "local_retention_bytes")
_POSITIVE = {"segment_bytes", "segment_ms", "index_interval_bytes", "flush_messages",
             "max_message_bytes"}
