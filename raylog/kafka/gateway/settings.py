"""The gateway's settings: one place for their defaults, units in their names, bad values
refused when built (with the name and the value)."""

from __future__ import annotations

import dataclasses

from raylog.errors import InvalidConfigError

DEFAULT_REQUEST_MAX_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms (10 min)
DEFAULT_MAX_IN_FLIGHT = 32  # requests read from one connection and not yet answered


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
    """

    request_max_bytes: int = DEFAULT_REQUEST_MAX_BYTES
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    auto_create_topics_enable: bool = False
    auto_create_partitions: int = 1
    auto_create_replication_factor: int = 1

    def __post_init__(self) -> None:
        for name in ("request_max_bytes", "connections_max_idle_ms", "max_in_flight",
                     "auto_create_partitions", "auto_create_replication_factor"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise InvalidConfigError(f"gateway setting {name} must be an integer > 0, "
                                         f"got {value!r}")
        if type(self.auto_create_topics_enable) is not bool:
            raise InvalidConfigError(f"gateway setting auto_create_topics_enable must be "
                                     f"True or False, got {self.auto_create_topics_enable!r}")
