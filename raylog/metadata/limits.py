"""How many partitions a topic may have, and how many replicas a broker may hold.

Cluster settings, read by the controller from its environment (set them where ``ray start
--head`` runs, as ``RAYLOG_DATA_DIR`` is, then restart the controller):

- ``RAYLOG_MAX_PARTITIONS_PER_TOPIC`` (default 10,000): partitions one topic may have.
- ``RAYLOG_MAX_REPLICAS_PER_BROKER`` (default: the broker node's memory / 1 MiB): replicas
  one broker may hold, over all topics. A broker is one process hosting all its replicas
  (actors/broker.py); ``benchmarks/density.py`` measures about 8 KB for each more empty
  partition. A partition with data also keeps its segments' indexes in memory, about 0.5%
  of its log's bytes (an entry of 20 bytes per 4 KB of log), and one open file per
  segment, so 1 MiB per replica leaves room for a partition holding some 200 MB.

Both are checked before a topic is created or grows, before anything is written, so that an
impossible request is refused at once instead of creating replicas the brokers cannot hold.
Plain Python: the controller passes in what it knows of the brokers.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from raylog.errors import InvalidConfigError, InvalidPartitionsError
from raylog.util.arguments import INT32_MAX, check_int, settings_from_environ

MAX_PARTITIONS_ENV = "RAYLOG_MAX_PARTITIONS_PER_TOPIC"
MAX_REPLICAS_ENV = "RAYLOG_MAX_REPLICAS_PER_BROKER"
DEFAULT_MAX_PARTITIONS_PER_TOPIC = 10_000
REPLICA_MEMORY_BYTES = 1 << 20  # one replica in its broker, with room for its indexes
UNKNOWN_MEMORY_REPLICAS = 1000   # a broker whose memory Ray does not report


@dataclasses.dataclass(frozen=True)
class PartitionLimits:
    """The two limits; ``max_replicas_per_broker`` None derives it from each broker's memory.

    >>> limits = PartitionLimits.from_environ({"RAYLOG_MAX_PARTITIONS_PER_TOPIC": "500"})
    >>> limits.check_topic_size("pageviews", 501)
    Traceback (most recent call last):
    InvalidPartitionsError: ...
    """

    max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC
    max_replicas_per_broker: int | None = None

    def __post_init__(self) -> None:
        check_int("max_partitions_per_topic", self.max_partitions_per_topic, 1, INT32_MAX,
                  InvalidConfigError)
        if self.max_replicas_per_broker is not None:
            check_int("max_replicas_per_broker", self.max_replicas_per_broker, 1, INT32_MAX,
                      InvalidConfigError)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> PartitionLimits:
        values = settings_from_environ(environ, {
            "max_partitions_per_topic": (MAX_PARTITIONS_ENV, int, "an integer"),
            "max_replicas_per_broker": (MAX_REPLICAS_ENV, int, "an integer")})
        return cls(**values)

    def check_topic_size(self, topic: str, partitions: int) -> None:
        """Refuse a topic of more than ``max_partitions_per_topic`` partitions."""
        if partitions > self.max_partitions_per_topic:
            raise InvalidPartitionsError(
                f"topic {topic!r} cannot have {partitions} partitions: the limit is "
                f"{self.max_partitions_per_topic} per topic (set {MAX_PARTITIONS_ENV} where "
                f"the head node's `ray start` runs and restart the controller to change it)")

    def replicas_allowed(self, memory_bytes: float | None) -> int:
        """Replicas one broker may hold, given the memory Ray reports for its node."""
        if self.max_replicas_per_broker is not None:
            return self.max_replicas_per_broker
        if not memory_bytes:
            return UNKNOWN_MEMORY_REPLICAS
        return max(1, int(memory_bytes // REPLICA_MEMORY_BYTES))

    def check_placement(self, topic: str, new: Sequence[Sequence[int]],
                        existing: Iterable[Sequence[str]],
                        memory: Mapping[int, float | None]) -> None:
        """Refuse placing the ``new`` replica lists when a broker would then hold more
        replicas than it may (``existing``: every partition's replica list so far;
        ``memory``: each live broker's memory in bytes, None if unknown)."""
        held = Counter(broker for brokers in existing for broker in brokers)
        added = Counter(broker for brokers in new for broker in brokers)
        for broker, count in sorted(added.items()):
            allowed = self.replicas_allowed(memory.get(broker))
            if held[broker] + count > allowed:
                how = (f"{MAX_REPLICAS_ENV}={allowed}" if self.max_replicas_per_broker
                       else f"{allowed}: {REPLICA_MEMORY_BYTES >> 20} MiB per replica in the "
                            f"node's memory; {MAX_REPLICAS_ENV} sets it")
                raise InvalidPartitionsError(
                    f"{sum(map(len, new))} more replicas of topic {topic!r} would put "
                    f"{held[broker] + count} replicas on broker {broker}, which holds "
                    f"{held[broker]}; the limit per broker is {how}. Add broker nodes, or use "
                    f"fewer partitions")
