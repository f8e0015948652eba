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
    )
    from raylog.session import init


def __getattr__(name: str) -> Any:
    if name in __all__:
        # raylog.session first: it makes raylog.init how a client given no cluster connects
        session = importlib.import_module("raylog.session")
        source = session if name == "init" else importlib.import_module("raylog.client")
        value = getattr(source, name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'raylog' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
