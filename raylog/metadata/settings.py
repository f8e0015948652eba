"""Cluster settings of the controller's replication, from its environment.

Set them where the head node's ``ray start`` runs (as ``RAYLOG_DATA_DIR`` is), then restart
the controller:

- ``RAYLOG_REPLACE_BROKER_AFTER_S`` (default 600): a broker gone this long has its replicas
  placed on other live brokers (each rebuilt from its partition's leader), so that its
  partitions get back to their replication factor. 0 turns it off: a broker's replicas wait
  for a node that presents its data directory.
- ``RAYLOG_REBALANCE_LEADERS_S`` (default 300, Kafka's leader.imbalance.check.interval):
  how often partitions are given back to their preferred (first) replica when it is alive
  and in sync, after failovers moved their leadership. 0 turns it off.
- ``RAYLOG_BROKER_SESSION_TIMEOUT_MS`` (default 9000, Kafka's broker.session.timeout.ms): a
  broker the controller has not heard from for this long is fenced as if it were dead (its
  leaderships move, it leaves every ISR), even though its process still lives (stopped, stuck
  on a disk, in a long pause). Brokers answer the controller's health check every quarter of
  it, and a broker that finds it was itself stalled for a third of it stops serving until the
  controller has confirmed its state (raylog/metadata/sessions.py).

Plain Python.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping

from raylog.errors import InvalidConfigError
from raylog.util.arguments import settings_from_environ

REPLACE_AFTER_ENV = "RAYLOG_REPLACE_BROKER_AFTER_S"
DEFAULT_REPLACE_AFTER_S = 600.0
REBALANCE_ENV = "RAYLOG_REBALANCE_LEADERS_S"
DEFAULT_REBALANCE_S = 300.0
SESSION_TIMEOUT_ENV = "RAYLOG_BROKER_SESSION_TIMEOUT_MS"
DEFAULT_SESSION_TIMEOUT_MS = 9000.0

# field -> (environment variable, unit, whether 0 is allowed (it turns the feature off))
_FIELDS = {
    "replace_broker_after_s": (REPLACE_AFTER_ENV, "seconds", True),
    "rebalance_leaders_s": (REBALANCE_ENV, "seconds", True),
    "broker_session_timeout_ms": (SESSION_TIMEOUT_ENV, "milliseconds", False),
}


@dataclasses.dataclass(frozen=True)
class ReplicationSettings:
    replace_broker_after_s: float = DEFAULT_REPLACE_AFTER_S            # 0: never
    rebalance_leaders_s: float = DEFAULT_REBALANCE_S                   # 0: never
    broker_session_timeout_ms: float = DEFAULT_SESSION_TIMEOUT_MS     # > 0

    def __post_init__(self) -> None:
        for name, (env, unit, zero_ok) in _FIELDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
                bound = ">= 0" if zero_ok else "> 0"
                raise InvalidConfigError(f"{env} must be a number of {unit} {bound}, "
                                         f"got {value!r}")

    @property
    def broker_session_timeout_s(self) -> float:
        return self.broker_session_timeout_ms / 1000

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> ReplicationSettings:
        values = settings_from_environ(environ, {
            name: (env, float, f"a number of {unit}") for name, (env, unit, _) in _FIELDS.items()})
        return cls(**values)
