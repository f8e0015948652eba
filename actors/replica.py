"""The partition replica actor: one per (topic, partition, replica), pinned to its node.

It owns a :class:`raylog.partition.Partition` over ``<data_dir>/<topic>-<partition>`` in the
data directory of its broker, on the node serving that broker, and does the Ray and asyncio
work: long-poll fetches, background maintenance (flush, retention, compaction,
high-watermark checkpoints). Ray restarts it on the same node after a crash
(``max_restarts=-1``); the restarted actor reopens its log and serves everything it had.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.abc
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray

from raylog.errors import OutOfOrderSequenceError
from raylog.partition import FetchResult, Partition
from raylog.producer_state import SequenceGap
from raylog.records.kafka_columns import kafka_table
from raylog.storage import AppendInfo, PartitionLog
from raylog.topics import log_config

logger = logging.getLogger(__name__)

METADATA_FILE = "partition.metadata"
MAINTENANCE_INTERVAL_S = 1.0
IDLE_MAINTENANCE_INTERVAL_S = 30.0
SEQUENCE_WAIT_S = 2.0
HW_CHECKPOINT_INTERVAL_S = 5.0


def forgo_pandas() -> None:
    """Make ``import pandas`` fail in this process, unless it is imported already.

    pyarrow imports pandas, if it can, the first time anything is converted to or from Arrow
    (to ask whether it is a Series): some 30 MB in every replica process, of which a broker
    runs thousands, for nothing: a replica never builds or returns pandas objects. pandas
    is an optional dependency of pyarrow, which works without it. Only replica processes do
    this (a Ray actor has its process to itself); a driver importing this module does not.
    """
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import finder that refuses pandas (and its submodules)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"a replica process does not import {name}", name=name)


def open_partition_dir(data_dir: Path, topic: str, partition: int, topic_id: str) -> Path:
    """The replica's directory, emptied first if it belonged to an older topic of that name."""
    directory = data_dir / f"{topic}-{partition}"
    marker = directory / METADATA_FILE
    if marker.exists():
        try:
            owner = json.loads(marker.read_text()).get("topic_id")
        except (ValueError, OSError):
            owner = None
        if owner != topic_id:
            logger.warning("removing %s: it belongs to topic id %s, not %s",
                           directory, owner, topic_id)
            shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        marker.write_text(json.dumps({"topic": topic, "partition": partition,
                                      "topic_id": topic_id}))
    return directory


@ray.remote(num_cpus=0)
class ReplicaActor:
    """Hosts one partition replica. Calls run on one asyncio loop, one at a time between
    awaits, so the plain Partition inside never sees concurrent use."""

    def __init__(self, topic: str, partition: int, topic_id: str, broker_id: int,
                 node_id: str, data_dir: str, configs: dict[str, Any]) -> None:
        forgo_pandas()
        here = ray.get_runtime_context().get_node_id()
        if here != node_id:
            raise RuntimeError(f"replica of {topic}-{partition} placed on {here}, "
                               f"assigned to {node_id}")
        self.node_id = node_id
        self.broker_id = broker_id
        directory = open_partition_dir(Path(data_dir), topic, partition, topic_id)
        log = PartitionLog(directory, log_config(configs))
        self.partition = Partition(topic, partition, log, broker_id, configs)
        self._new_data = asyncio.Event()
        self._wake_maintenance = asyncio.Event()  # set by appends and config changes
        self._appended = True  # since the last maintenance round (a reopened log: maybe)
        self._last_hw_checkpoint = time.monotonic()
        # An async actor's __init__ runs on its event loop: maintenance starts with every
        # incarnation, including the ones Ray restarts without the controller asking.
        self._maintenance = asyncio.get_event_loop().create_task(self._maintain())
        logger.info("replica %s opened %s: %s", self.partition.name, directory, log.recovery)

    async def ready(self) -> dict[str, Any]:
        """Describe the replica once it is up; the controller awaits this."""
        return self.describe()

    def describe(self) -> dict[str, Any]:
        return {**self.partition.describe(), "broker_id": self.broker_id,
                "node_id": self.node_id}

    def _notify(self) -> None:
        self._new_data.set()
        self._new_data = asyncio.Event()
        self._appended = True
        self._wake_maintenance.set()

    async def append(self, batch: bytes, acks: int | str = 1,
                     leader_epoch: int | None = None) -> AppendInfo:
        """Append a producer batch; a batch ahead of its producer's sequence waits (up to
        SEQUENCE_WAIT_S) for the batches before it, which Ray may have started later."""
        deadline = time.monotonic() + SEQUENCE_WAIT_S
        while True:
            try:
                info = self.partition.append(batch, acks, leader_epoch,
                                             accept_unknown=time.monotonic() >= deadline)
                break
            except SequenceGap as gap:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise OutOfOrderSequenceError(
                        f"{self.partition.name}: batch waited for sequence {gap.expected} "
                        f"for {SEQUENCE_WAIT_S} s") from None
                with contextlib.suppress(TimeoutError):  # then one last try, accepting
                    await asyncio.wait_for(self._new_data.wait(), remaining)
        self._notify()
        return info

    async def fetch(self, offset: int, max_bytes: int = 8 << 20, max_wait_ms: int = 0,
                    min_bytes: int = 1) -> FetchResult:
        """Batches from ``offset`` below the high watermark; waits up to ``max_wait_ms`` for at
        least ``min_bytes`` to be there."""
        result = self.partition.fetch(offset, max_bytes)
        deadline = time.monotonic() + max_wait_ms / 1000
        while len(result.data) < min_bytes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(self._new_data.wait(), remaining)
            except TimeoutError:
                break
            result = self.partition.fetch(offset, max_bytes)
        return result

    async def list_offset(self, spec: str | int) -> tuple[int, int] | None:
        return self.partition.list_offset(spec)

    async def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for a follower's truncation (Kafka's OffsetForLeaderEpoch)."""
        return tuple(self.partition.end_offset_for_epoch(leader_epoch))

    async def read_kafka_table(self, start: int, end: int) -> pa.Table:
        """Records [start, end) with the columns of Spark's Kafka source (KAFKA_SCHEMA)."""
        partition = self.partition
        return kafka_table(partition.read_table(start, end), partition.topic,
                           partition.partition)

    async def update_configs(self, configs: dict[str, Any]) -> None:
        self.partition.update_configs(configs)
        self._wake_maintenance.set()  # say, a shorter retention.ms

    async def delete(self) -> None:
        """Remove the replica's files; the controller kills the actor next."""
        self._maintenance.cancel()
        self.partition.log.delete()

    async def close(self) -> None:
        self._maintenance.cancel()
        self.partition.log.close()

    async def _maintain(self) -> None:
        """Flush by time, enforce retention, compact and checkpoint the high watermark."""
        while True:
            await self._next_round()
            self._appended = False
            log = self.partition.log
            try:
                log.maybe_flush()
                self.partition.enforce_retention()
                if log.config.compact:
                    log.compact(max_offset=log.high_watermark)
                if time.monotonic() - self._last_hw_checkpoint >= HW_CHECKPOINT_INTERVAL_S:
                    log.checkpoint_high_watermark()
                    self._last_hw_checkpoint = time.monotonic()
            except Exception:  # one failed round must not stop maintenance for good
                logger.exception("maintenance of %s failed", self.partition.name)

    async def _next_round(self) -> None:
        """Wait for the next maintenance round. Every MAINTENANCE_INTERVAL_S while there is
        work: records appended since the last round (compaction), or what only time
        finishes (a flush by time, the high watermark's checkpoint). An idle replica sleeps
        until an append or a config change wakes it, or for IDLE_MAINTENANCE_INTERVAL_S
        (time-based retention, as Kafka's retention check): a broker holds thousands of
        replicas, and an idle one should cost no CPU."""
        if self._appended or self.partition.log.time_work_pending():
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            return
        self._wake_maintenance.clear()
        try:
            await asyncio.wait_for(self._wake_maintenance.wait(), IDLE_MAINTENANCE_INTERVAL_S)
        except TimeoutError:
            return
        await asyncio.sleep(MAINTENANCE_INTERVAL_S)  # woken: take the appends that follow too
