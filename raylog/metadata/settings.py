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

Plain Python.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from raylog.errors import InvalidConfigError

REPLACE_AFTER_ENV = "RAYLOG_REPLACE_BROKER_AFTER_S"
DEFAULT_REPLACE_AFTER_S = 600.0
REBALANCE_ENV = "RAYLOG_REBALANCE_LEADERS_S"
DEFAULT_REBALANCE_S = 300.0


@dataclasses.dataclass(frozen=True)
class ReplicationSettings:
    replace_broker_after_s: float = DEFAULT_REPLACE_AFTER_S  # 0: never
    rebalance_leaders_s: float = DEFAULT_REBALANCE_S         # 0: never

    def __post_init__(self) -> None:
        for name, env in (("replace_broker_after_s", REPLACE_AFTER_ENV),
                          ("rebalance_leaders_s", REBALANCE_ENV)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidConfigError(f"{env} must be a number of seconds >= 0, "
                                         f"got {value!r}")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> ReplicationSettings:
        values = {}
        for name, env in (("replace_broker_after_s", REPLACE_AFTER_ENV),
                          ("rebalance_leaders_s", REBALANCE_ENV)):
            text = environ.get(env, "").strip()
            if text:
                try:
                    values[name] = float(text)
                except ValueError:
                    raise InvalidConfigError(f"{env} must be a number of seconds, got "
                                             f"{text!r}") from None
        return cls(**values)
