"""raylog: a durable, partitioned, replicated commit log built as actors on Ray.

The client names below are imported on first use (PEP 562), so that a process that needs
only part of raylog (a broker actor: storage, records, the partition's rules)
does not import the clients, Ray Data or pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerRecord",
    "NewTopic",
    "OffsetAndTimestamp",
    "Producer",
    "RaylogCluster",
    "RecordMetadata",
    "TopicPartition",
    "init",
]

if TYPE_CHECKING:
    from raylog.client import (
        Admin,
        Consumer,
        ConsumerRecord,
        NewTopic,
        OffsetAndTimestamp,
        Producer,
        RaylogCluster,
        RecordMetadata,
        TopicPartition,
        init,
    )


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module("raylog.client"), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'raylog' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
