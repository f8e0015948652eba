"""The cold part of a Ray Data read: offsets below a partition's local log start, read by Ray
tasks straight from the object store, one task per remote segment, without a broker.

Planning (:func:`plan_read`, plain Python): each partition's leader describes its log with
``tiered_view`` (:class:`raylog.tiered.cold_plan.TieredView`); a planned range is cut into
the pieces of remote segments below the local log start and the hot rest, which brokers
serve as before. A broker without ``tiered_view`` (a cluster without tiered storage) makes
every range hot.

Reading (:func:`cold_refs`): one task per piece fetches the segment's ``segment.log``, checks
its checksum and decodes its batches into the same KAFKA_SCHEMA table a broker's
``read_kafka_table`` answers (raylog/tiered/cold_read.py). Tasks take COLD_READ_CPUS each, so
a small cluster runs several at once; with a ``file://`` store (a directory every node
mounts) they are spread over the nodes, each reading through its own mount. read_committed:
the aborted transactions come from the ``txn.index`` objects of the piece's segment and the
later remote segments, and from the leader for abort markers still only in its local log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import pyarrow as pa
import ray

from raylog.client.connection import RaylogCluster
from raylog.client.remote import resolve as resolve_ref
from raylog.integrations.ray_data.ranges import split
from raylog.replica.partition import READ_COMMITTED
from raylog.storage.txn_index import AbortedTxn
from raylog.tiered.cold_plan import ColdPiece, TieredView, split_range
from raylog.tiered.cold_read import aborted_transactions, segment_table
from raylog.tiered.layout import RemoteSegment
from raylog.tiered.store import cached_store
from raylog.types import TopicPartition

COLD_READ_CPUS = 0.25  # per cold-read task: decoding is short, fetching waits


class ReadPlan(NamedTuple):
    """The blocks a read asks brokers for, and the remote pieces its tasks read."""

    hot: list[tuple[TopicPartition, int, int]]
    cold: list[tuple[TieredView, ColdPiece]]


def plan_read(ranges: Mapping[TopicPartition, tuple[int, int]],
              views: Mapping[TopicPartition, TieredView | None],
              max_records_per_block: int) -> ReadPlan:
    """Each range's cold pieces (one per remote segment) and its hot rest, cut into blocks
    of at most ``max_records_per_block`` records. Raises OffsetOutOfRangeError when the
    remote segments leave a gap in a cold range (raylog.tiered.cold_plan.split_range)."""
    hot: list[tuple[TopicPartition, int, int]] = []
    cold: list[tuple[TieredView, ColdPiece]] = []
    for tp, (first, last) in ranges.items():
        view = views.get(tp)
        pieces, rest = ([], (first, last)) if view is None else split_range(view, first, last)
        cold.extend((view, piece) for piece in pieces)
        if rest is not None:
            hot.extend((tp, s, e) for s, e in split(*rest, max_records_per_block))
    return ReadPlan(hot, cold)


def tiered_views(cluster: RaylogCluster, tps: list[TopicPartition], refresh: bool,
                 timeout_s: float | None = None) -> dict[TopicPartition, TieredView | None]:
    """Each partition's view from its leader (None: its broker has no tiered storage)."""
    refs = {}
    for tp in tps:
        client = cluster.topic(tp.topic, refresh=refresh).partitions[tp.partition] \
            .leader_client()
        try:
            method = client.handle.tiered_view
        except AttributeError:  # a broker from before tiered storage: all is local
            return {tp: None for tp in tps}
        refs[tp] = method.remote(tp.topic, tp.partition)
    return {tp: TieredView.from_answer(resolve_ref(ref, timeout_s)) for tp, ref in refs.items()}


def local_aborted(cluster: RaylogCluster, view: TieredView, tp: TopicPartition,
                  timeout_s: float | None = None) -> tuple[AbortedTxn, ...]:
    """The aborted transactions the leader's local log lists from its local start on: an
    abort marker not uploaded yet may end a transaction whose batches are remote."""
    client = cluster.topic(tp.topic).partitions[tp.partition].leader_client()
    found = resolve_ref(client.fetch(view.local_log_start, 1, 0, 0, READ_COMMITTED), timeout_s)
    return tuple(found.aborted or ())


def cold_refs(cluster: RaylogCluster, cold: list[tuple[TieredView, ColdPiece]],
              isolation: str, timeout_s: float | None = None) -> list[ray.ObjectRef]:
    """Start a task per cold piece; their tables' references, in the order of ``cold``."""
    committed = isolation == READ_COMMITTED
    local: dict[tuple[str, int], tuple[AbortedTxn, ...]] = {}
    refs = []
    for view, piece in cold:
        segment = piece.segment
        later: list[bytes] = []
        extra: tuple[AbortedTxn, ...] = ()
        if committed:
            later = [s.to_json() for s in view.remote if s.base_offset > segment.base_offset]
            key = (segment.topic, segment.partition)
            if key not in local:
                local[key] = local_aborted(cluster, view, TopicPartition(*key), timeout_s)
            extra = local[key]
        spread = {"scheduling_strategy": "SPREAD"} if (view.uri or "").startswith("file:") \
            else {}
        refs.append(_read_cold.options(**spread).remote(
            view.uri, view.settings, segment.to_json(), piece.start, piece.end,
            later if committed else None, extra))
    return refs



@ray.remote(num_cpus=COLD_READ_CPUS)
def _read_cold(uri: str, settings: dict[str, Any], segment_json: bytes, start: int, end: int,
               later: list[bytes] | None, local_aborted: tuple[AbortedTxn, ...]) -> pa.Table:
    """Records [start, end) of one remote segment as a KAFKA_SCHEMA table; ``later`` (the
    later remote segments' records) is None for read_uncommitted."""
    store = cached_store(uri, settings)
    segment = RemoteSegment.from_json(segment_json)
    aborted: list[AbortedTxn] = []
    if later is not None:
        segments = [segment, *(RemoteSegment.from_json(s) for s in later)]
        aborted = aborted_transactions(store, segments, start, end)
        aborted += [e for e in local_aborted if e.last_offset >= start and e.first_offset < end]
    return segment_table(store, segment, start, end, aborted)
