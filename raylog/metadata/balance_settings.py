"""Cluster settings of the partition balancer, from the controller's environment.

Set them where the head node's ``ray start`` runs (as ``RAYLOG_DATA_DIR`` is), then restart
the controller (docs/balancing.md):

- ``RAYLOG_AUTO_BALANCE`` (default false): when a broker joins, or one gone for good has had
  its replicas replaced (``RAYLOG_REPLACE_BROKER_AFTER_S``), the controller plans a balance
  (raylog/metadata/balance.py) and carries it out by itself.
- ``RAYLOG_AUTO_BALANCE_AFTER_S`` (default 30): the live brokers must have stayed the same
  this long before the controller plans, so that nodes an autoscaler adds together are
  balanced in one plan.
- ``RAYLOG_REPLICATION_THROTTLED_RATE`` (default 104857600, 100 MiB/s): the bytes a second
  a broker copies the replicas moving to it at, unless their topic's
  ``replication.throttled.rate`` says otherwise; 0: unthrottled.

Plain Python.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

from raylog.errors import InvalidConfigError
from raylog.util.arguments import INT64_MAX, settings_from_environ

AUTO_BALANCE_ENV = "RAYLOG_AUTO_BALANCE"
AUTO_BALANCE_AFTER_ENV = "RAYLOG_AUTO_BALANCE_AFTER_S"
THROTTLED_RATE_ENV = "RAYLOG_REPLICATION_THROTTLED_RATE"
DEFAULT_AUTO_BALANCE_AFTER_S = 30.0
DEFAULT_THROTTLED_RATE = 100 << 20  # bytes a second


def _flag(text: str) -> bool:
    value = text.lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(text)


@dataclasses.dataclass(frozen=True)
class BalanceSettings:
    auto_balance: bool = False
    auto_balance_after_s: float = DEFAULT_AUTO_BALANCE_AFTER_S         # >= 0
    replication_throttled_rate: int = DEFAULT_THROTTLED_RATE          # bytes/s, 0: none

    def __post_init__(self) -> None:
        if not isinstance(self.auto_balance, bool):
            raise InvalidConfigError(f"{AUTO_BALANCE_ENV} must be true or false, got "
                                     f"{self.auto_balance!r}")
        after = self.auto_balance_after_s
        if isinstance(after, bool) or not isinstance(after, int | float) \
                or not math.isfinite(after) or after < 0:
            raise InvalidConfigError(f"{AUTO_BALANCE_AFTER_ENV} must be a number of seconds "
                                     f">= 0, got {after!r}")
        rate = self.replication_throttled_rate
        if type(rate) is not int or not 0 <= rate <= INT64_MAX:
            raise InvalidConfigError(f"{THROTTLED_RATE_ENV} must be a number of bytes a "
                                     f"second >= 0 (0: unthrottled), got {rate!r}")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> BalanceSettings:
        return cls(**settings_from_environ(environ, {
            "auto_balance": (AUTO_BALANCE_ENV, _flag, "true or false"),
            "auto_balance_after_s": (AUTO_BALANCE_AFTER_ENV, float, "a number of seconds"),
            "replication_throttled_rate": (THROTTLED_RATE_ENV, int,
                                           "a number of bytes a second")}))


def throttled_rate(configs: Mapping[str, Any], cluster_rate: int) -> int | None:
    """The bytes a second a replica of a topic with these (normalized) configs copies at
    while it moves: the topic's ``replication.throttled.rate``, else the cluster's; None for
    unthrottled (0)."""
    rate = configs.get("replication_throttled_rate")
    rate = cluster_rate if rate is None else rate
    return rate or None
