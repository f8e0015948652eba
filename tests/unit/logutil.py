"""Helpers shared by the storage tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from raylog.records import BatchBuilder, Codec, Record, read_records
from raylog.storage import PartitionLog


class FakeClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def batch_of(values: Sequence[bytes | None], *, ts: int = 1_700_000_000_000,
             keys: Sequence[bytes | None] | None = None, codec: Codec = Codec.LZ4,
             producer_id: int | None = None, producer_epoch: int = 0,
             base_sequence: int = 0) -> bytes:
    """One batch of ``values``; with ``producer_id``, an idempotent producer's batch."""
    builder = BatchBuilder(max_bytes=64 << 20, codec=codec)
    for i, value in enumerate(values):
        assert builder.append(ts, keys[i] if keys else None, value)
    if producer_id is not None:
        builder.set_producer(producer_id, producer_epoch, base_sequence)
    return builder.build()


def all_records(log: PartitionLog) -> list[Record]:
    """Every record in the log, read with small reads that cross segments."""
    out: list[Record] = []
    for chunk in log.read_range(log.log_start_offset, log.log_end_offset):
        out.extend(read_records(chunk))
    return out


def files_snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(directory).iterdir()) if p.is_file()}
