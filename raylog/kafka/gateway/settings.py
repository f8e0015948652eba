"""The gateway's settings: one place for their defaults, units in their names, bad values
refused when built (with the name and the value)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import MutableMapping

from raylog.errors import InvalidConfigError
from raylog.util.ray_inline import INLINE_SETTING

DEFAULT_REQUEST_MAX_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms (10 min)
DEFAULT_MAX_IN_FLIGHT = 32  # requests read from one connection and not yet answered

# Ray puts a call's argument of more than max_direct_call_object_size (100 KB by default)
# into the object store: a copy and two blocking round trips to the raylet per call, a
# third of the listener's CPU in a produce, where each Kafka batch (librdkafka's: 200-400 KB
# once translated, 1 MB at most) is one call to its leader. Up to this size the batch goes
# inline in the call instead (measured: docs/kafka-protocol.md, "Produce, second pass").
INLINE_ARGUMENT_BYTES = 4 << 20


def inline_appends(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set a listener process's Ray calls to carry arguments up to INLINE_ARGUMENT_BYTES
    inline, unless the user set it; before Ray starts in the process (Ray reads it then).
    ``raylog gateway`` calls it on its own environment; the listener actors get it in theirs
    (actors/launch.py)."""
    environ.setdefault(INLINE_SETTING, str(INLINE_ARGUMENT_BYTES))


@dataclasses.dataclass(frozen=True)
class GatewaySettings:
    """How one listener serves.

    - ``request_max_bytes`` (socket.request.max.bytes): a frame announcing more is refused
      by closing its connection before its body is read.
    - ``connections_max_idle_ms`` (connections.max.idle.ms): a connection with no request
      in flight and nothing received for this long is closed.
    - ``max_in_flight``: requests of one connection handled at once; the connection is not
      read further until one is answered (its answers still go out in request order).
    - ``auto_create_topics_enable`` (auto.create.topics.enable, default off as raylog's own
      clients): a Metadata request naming an unknown topic, when its client allows it,
      creates it with ``auto_create_partitions`` partitions and
      ``auto_create_replication_factor`` replicas.
    - ``max_connections_per_ip`` (max.connections.per.ip): connections from one client
      address beyond this many are closed as they are accepted; None (Kafka's default): no
      limit.
    """

    request_max_bytes: int = DEFAULT_REQUEST_MAX_BYTES
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    auto_create_topics_enable: bool = False
    auto_create_partitions: int = 1
    auto_create_replication_factor: int = 1
    max_connections_per_ip: int | None = None

    def __post_init__(self) -> None:
        for name in ("request_max_bytes", "connections_max_idle_ms", "max_in_flight",
                     "auto_create_partitions", "auto_create_replication_factor"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise InvalidConfigError(f"gateway setting {name} must be an integer > 0, "
                                         f"got {value!r}")
        limit = self.max_connections_per_ip
        if limit is not None and (type(limit) is not int or limit <= 0):
            raise InvalidConfigError(f"gateway setting max_connections_per_ip must be an "
                                     f"integer > 0 or None, got {limit!r}")
        if type(self.auto_create_topics_enable) is not bool:
            raise InvalidConfigError(f"gateway setting auto_create_topics_enable must be "
                                     f"True or False, got {self.auto_create_topics_enable!r}")
