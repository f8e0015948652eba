"""Spark's Python workers reading ranges of partitions: the fallback path of
``read(..., via="arrow")`` and of Avro values without the connector (``avro.py``).

Each worker connects once to the raylog cluster the driver runs on, and takes its ranges as
Arrow tables from an in-sync replica on its own node if there is one, else the leader.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import ray

from raylog.client.connection import RaylogCluster, connect
from raylog.client.remote import resolve
from raylog.integrations.ray_data import read_retrying
from raylog.integrations.ray_data.ranges import plan_tasks
from raylog.types import TopicPartition


def python_frame(spark: Any, ranges: dict[TopicPartition, tuple[int, int]],
                 max_records_per_task: int, schema: Any, convert: Callable[[Any], Any]) -> Any:
    """A DataFrame of ``schema`` made by Spark's Python workers: the ranges are planned
    into tasks, and each worker hands Spark ``convert(table)`` of every range's Kafka table
    (see :func:`_read_tasks`)."""
    tasks = [[(tp.topic, tp.partition, start, end) for tp, start, end in task]
             for task in plan_tasks(ranges, max_records_per_task,
                                    spark.sparkContext.defaultParallelism)]
    if not tasks:
        return spark.createDataFrame([], schema)
    # One row per task id, made in the JVM: the task list itself travels in the function.
    ids = spark.range(0, len(tasks), 1, len(tasks))
    address = ray.get_runtime_context().gcs_address
    return ids.mapInArrow(functools.partial(_read_tasks, address, tasks, convert), schema)


@functools.cache
def _worker_cluster(address: str) -> RaylogCluster:
    """The raylog cluster at ``address``, connected once per Spark Python worker (which
    Spark reuses from task to task)."""
    return connect(address)


def _nearest_table(cluster: RaylogCluster, topic: str, partition: int, start: int,
                   end: int) -> Any:
    """Records [start, end) of a partition as an Arrow table, from an in-sync replica on
    this worker's node if there is one, else the leader (KIP-392); retriable errors (a moved
    leader, a broker restarting, a new leader not sure yet that the range is committed)
    refresh metadata and retry (raylog.integrations.ray_data.read_retrying). Asked as an
    analytics block (a small one comes as an Arrow IPC stream:
    raylog.records.kafka_columns.analytics_block says why)."""
    node_id = ray.get_runtime_context().get_node_id()

    def attempt(refresh: bool) -> Any:
        meta = cluster.topic(topic, refresh=refresh).partitions[partition]
        data = resolve(meta.nearest_client(node_id).read_kafka_table(start, end, block=True))
        return pa.ipc.open_stream(data).read_all() if isinstance(data, bytes) else data

    return read_retrying(f"reading {topic}-{partition} [{start}, {end})", attempt)


def _read_tasks(address: str, tasks: list[list[tuple[str, int, int, int]]],
                convert: Callable[[Any], Any], ids: Iterator[Any]) -> Iterator[Any]:
    """In a Spark Python worker: the Arrow record batches of the tasks whose ids arrive,
    each a list of (topic, partition, start, end) ranges, every range's table converted."""
    cluster = _worker_cluster(address)
    for batch in ids:
        for task_id in batch.column(0).to_pylist():
            for topic, partition, start, end in tasks[task_id]:
                table = _nearest_table(cluster, topic, partition, start, end)
                yield from convert(table).to_batches()
