"""The controller's metadata log: events persisted on local disk before they count.

It is a :class:`PartitionLog` like any partition's (one JSON event per record, one batch per
event), flushed on every append, so an acknowledged change survives a crash of the
controller's process or machine.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from raylog.records import BatchBuilder, Codec, read_records
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.log import wall_clock_ms

METADATA_LOG_CONFIG = LogConfig(
    segment_bytes=64 << 20,
    flush_messages=1,          # fsync every event before acknowledging it
    retention_ms=None,
    cleanup_policy="delete",
)


class MetadataStore:
    """Appends events durably and replays them in order. Not safe for concurrent use."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.log = PartitionLog(directory, METADATA_LOG_CONFIG)

    def append(self, event: dict[str, Any]) -> int:
        """Persist one event (fsynced when this returns); return its offset."""
        builder = BatchBuilder(codec=Codec.NONE)
        builder.append(wall_clock_ms(), None, json.dumps(event, sort_keys=True).encode())
        return self.log.append(builder.build()).base_offset

    def replay(self) -> Iterator[dict[str, Any]]:
        for chunk in self.log.read_range(self.log.log_start_offset, self.log.log_end_offset):
            for record in read_records(chunk):
                yield json.loads(record.value)

    def close(self) -> None:
        self.log.close()
