"""raylog: a durable, partitioned, replicated commit log built as actors on Ray."""

from raylog.client import (
    Admin,
    Consumer,
    ConsumerRecord,
    OffsetAndTimestamp,
    Producer,
    RaylogCluster,
    RecordMetadata,
    TopicPartition,
    init,
)

__version__ = "0.1.0"

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerRecord",
    "OffsetAndTimestamp",
    "Producer",
    "RaylogCluster",
    "RecordMetadata",
    "TopicPartition",
    "init",
]
