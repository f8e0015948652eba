"""Batches of transactions for tests: a transactional producer's data batches and markers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from raylog.records import PAYLOAD_SCHEMA, Codec, encode, stamp
from raylog.records.control import MarkerType, control_batch

NOW = 1_700_000_000_000


def txn_batch(values: Sequence[bytes], producer_id: int, producer_epoch: int = 0,
              base_sequence: int = 0, *, ts: int = NOW, keys: Sequence[bytes] | None = None
              ) -> bytes:
    """A transactional producer's batch of ``values`` (unstamped)."""
    n = len(values)
    columns = pa.record_batch([[ts] * n, list(keys) if keys else [None] * n, list(values),
                               [[] for _ in range(n)]], schema=PAYLOAD_SCHEMA)
    return encode(columns, codec=Codec.NONE, producer_id=producer_id,
                  producer_epoch=producer_epoch, base_sequence=base_sequence,
                  transactional=True)


def marker(kind: MarkerType, producer_id: int, producer_epoch: int = 0,
           coordinator_epoch: int = 0, *, ts: int = NOW) -> bytes:
    """A commit or abort marker (unstamped)."""
    return control_batch(kind, producer_id=producer_id, producer_epoch=producer_epoch,
                         coordinator_epoch=coordinator_epoch, timestamp=ts)


def append_marker(partition: Any, kind: MarkerType, producer_id: int) -> int:
    """Append a marker (at producer epoch 0) to a fake leader's log
    (tests/unit/fake_remote.FakePartition), where it takes an offset; that offset."""
    data = bytearray(marker(kind, producer_id, ts=1))
    offset = len(partition.values)
    stamp(data, offset, partition.leader_epoch)
    partition.batches.append(bytes(data))
    partition.values.append(None)  # the marker takes an offset, and holds no record
    return offset


COMMIT, ABORT = MarkerType.COMMIT, MarkerType.ABORT
