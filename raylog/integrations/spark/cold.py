"""The cold part of a ``format("raylog")`` read: what the Java connector calls, across
languages, to plan and read offsets below a partition's local log start from the object
store, without a broker.

Why Python tasks, not Java reading the objects: the hot path already splits the work this
way (a broker's ``java_read_batches`` finds the batches in its files, leaves out markers
and aborted transactions, and the task's BatchDecoder checks and decodes them into Arrow
vectors), so the cold path reuses both halves as they are. The store is reached through
``pyarrow.fs`` with the cluster's URI and settings (S3, file://, any pyarrow filesystem; the
JVM has no S3 client in Spark's jars), the checksum and transaction rules stay written once
in Python (raylog/tiered/cold_read.py), and nothing is done per record outside Arrow and C:
Python touches each batch header once (to cut the range and drop aborted batches), hashlib
checks the object, and the JVM decodes columns as it does for hot data.

- :func:`java_split` (a Ray task the connector's planner starts): each partition's whole-log
  start and cold pieces, one per remote segment below the local log start, and, for read_committed,
  the aborted transactions each piece needs (from the remote ``txn.index`` objects and
  the leader's local log).
- :func:`java_cold_read` (a Ray task per cold piece, started by a Spark task's reader): the
  piece's stored batches (for BatchDecoder) or, for queries without ``value``, an Arrow IPC
  stream of only the columns asked for, in Spark's layout, as a broker's ``java_read``.

Both are plain functions: Ray's cross-language calls (``PyFunction.of(module, name)``)
import this module in a Python worker and run them as tasks, with the resources the
connector asks for (COLD_READ_CPUS). Errors cross as raylog's do from the actors'
``java_*`` methods (raylog/util/interop.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from raylog.client.connection import RaylogCluster, cluster_or_default
from raylog.errors import InvalidArgumentError, RaylogError
from raylog.integrations.ray_data import cold as ray_data_cold
from raylog.integrations.ray_data import read_retrying
from raylog.records.kafka_columns import ipc_bytes
from raylog.replica.partition import READ_COMMITTED
from raylog.storage.txn_index import AbortedTxn
from raylog.tiered.cold_plan import split_range
from raylog.tiered.cold_read import (
    aborted_transactions,
    segment_batches,
    segment_spark_table,
)
from raylog.tiered.layout import RemoteSegment
from raylog.tiered.store import cached_store
from raylog.types import TopicPartition
from raylog.util.interop import java_error

COLD_READ_CPUS = ray_data_cold.COLD_READ_CPUS


def cold_plan(cluster: RaylogCluster,
              ranges: Mapping[TopicPartition, tuple[int, int] | None], isolation: str,
              timeout_s: float | None = None) -> str:
    """The cold pieces of ``ranges`` (None for a partition: its whole cold part) as the
    connector's ``tieredPlan`` option takes them: JSON ``{"pieces": {topic: {partition:
    [[start, end, piece], ...]}}, "log_starts": {topic: {partition: offset}}}``, a piece
    being the JSON text :func:`java_cold_read` reads (store, segment, aborted transactions)
    and a log start the whole log's (a broker's ``java_offsets`` answers its local log's).
    Offsets of a range in no piece are hot. Retriable failures (a leader moving) are asked
    again with fresh metadata, as a read's are (raylog.integrations.ray_data.read_retrying)."""
    return read_retrying(f"planning the cold ranges of {len(ranges)} partitions",
                         lambda refresh: _cold_plan(cluster, ranges, isolation, refresh,
                                                    timeout_s), timeout_s)


def _cold_plan(cluster: RaylogCluster,
               ranges: Mapping[TopicPartition, tuple[int, int] | None], isolation: str,
               refresh: bool, timeout_s: float | None) -> str:
    tps = sorted(ranges)
    views = ray_data_cold.tiered_views(cluster, tps, refresh, timeout_s)
    out: dict[str, dict[str, list[list[Any]]]] = {}
    starts: dict[str, dict[str, int]] = {}
    for tp in tps:
        view = views.get(tp)
        if view is None:
            continue
        starts.setdefault(tp.topic, {})[str(tp.partition)] = view.log_start
        first, last = ranges[tp] or (view.log_start, view.local_log_start)
        pieces, _ = split_range(view, first, last)
        if not pieces:
            continue
        aborted: list[AbortedTxn] = []
        if isolation == READ_COMMITTED:
            store = cached_store(view.uri, view.settings)
            aborted = aborted_transactions(store, view.remote, first, last)
            aborted += [e for e in ray_data_cold.local_aborted(cluster, view, tp, timeout_s)
                        if e.first_offset < last]
        out.setdefault(tp.topic, {})[str(tp.partition)] = [
            [p.start, p.end, json.dumps({
                "uri": view.uri, "settings": view.settings,
                "segment": p.segment.to_json().decode(),
                "aborted": [list(e) for e in aborted
                            if e.last_offset >= p.start and e.first_offset < p.end]})]
            for p in pieces]
    return json.dumps({"pieces": out, "log_starts": starts})


def java_split(request: str) -> str:
    """``request``: JSON ``{"partitions": [[topic, partition], ...], "isolation"}``; the
    answer: :func:`cold_plan` of their whole cold parts."""
    try:
        body = json.loads(request)
        ranges = {TopicPartition(t, int(p)): None for t, p in body["partitions"]}
        return cold_plan(cluster_or_default(None), ranges, body.get("isolation", ""))
    except RaylogError as e:
        raise java_error(e) from e


def java_cold_read(piece: str, start: int, end: int, batches: bool, columns: str) -> bytes:
    """Records [start, end) of a cold piece (:func:`cold_plan`): with ``batches``, its
    stored batches (for BatchDecoder); else an Arrow IPC stream of ``columns``
    (comma-separated; none: the offsets alone) in Spark's layout."""
    try:
        body = json.loads(piece)
        store = cached_store(body["uri"], body["settings"])
        segment = RemoteSegment.from_json(body["segment"])
        aborted = [AbortedTxn(*e) for e in body["aborted"]]
        if batches:
            return segment_batches(store, segment, start, end, aborted)
        try:
            table = segment_spark_table(store, segment, start, end,
                                        [c for c in columns.split(",") if c], aborted)
        except ValueError as e:
            raise InvalidArgumentError(str(e)) from e
        return ipc_bytes(table)
    except RaylogError as e:
        raise java_error(e) from e

