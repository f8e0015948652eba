"""The cold part of a ``format("raylog")`` read: how the Java connector plans offsets below a
partition's local log start, read from the object store without a broker.

Why Python, not Java reading the objects: the hot path already splits the work this way (a
broker's ``java_read_batches`` finds the batches in its files, leaves out markers and
aborted transactions, and the task's BatchDecoder checks and decodes them into Arrow
vectors), so the cold path reuses both halves as they are. The store is reached through
``pyarrow.fs`` with the cluster's URI and settings (S3, file://, any pyarrow filesystem; the
JVM has no S3 client in Spark's jars), the checksum and transaction rules stay written once
in Python (raylog/tiered/cold_read.py), and nothing is done per record outside Arrow and C:
Python touches each batch header once (to cut the range and drop aborted batches), hashlib
checks the object, and the JVM decodes columns as it does for hot data.

- :func:`cold_plan` (``raylog.integrations.spark.read``, in the driver) and :func:`java_split`
  (a cross-language Ray task the connector's planner starts when it was given no plan):
  each partition's whole-log start and cold pieces, one per remote segment below the local
  log start, and, for read_committed, the aborted transactions each piece needs (from the
  remote ``txn.index`` objects and the leader's local log). A piece is the JSON text of
  raylog.tiered.cold_read.piece_text, made as Ray Data's are
  (raylog.integrations.ray_data.cold.piece_texts).
- The pieces are read by the cold-read gateway of the Spark task's node
  (actors/cold_reader.py, a long-lived actor the controller starts, which Ray Data's reads
  use too), with
  raylog.tiered.cold_read.read_piece: a piece's stored batches (for BatchDecoder) or, for
  queries without ``value``, an Arrow IPC stream of only the columns asked for.

Errors cross as raylog's do from the actors' ``java_*`` methods (raylog/util/interop.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from raylog.client.connection import RaylogCluster, cluster_or_default
from raylog.errors import RaylogError
from raylog.integrations.ray_data import cold as ray_data_cold
from raylog.integrations.ray_data import read_retrying
from raylog.tiered.cold_plan import split_range
from raylog.types import TopicPartition
from raylog.util.interop import java_error


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
        texts = ray_data_cold.piece_texts(cluster, tp, view, pieces, isolation, timeout_s)
        out.setdefault(tp.topic, {})[str(tp.partition)] = [
            [p.start, p.end, text] for p, text in zip(pieces, texts, strict=True)]
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
