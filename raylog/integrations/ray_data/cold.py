"""The cold part of a Ray Data read: offsets below a partition's local log start, read
straight from the object store by the nodes' cold-read gateways, one block per remote
segment piece, without a broker.

Planning (:func:`plan_read`, plain Python): each partition's leader describes its log with
``tiered_view`` (:class:`raylog.tiered.cold_plan.TieredView`); a planned range is cut into
the pieces of remote segments below the local log start and the hot rest, which brokers
serve as before. A broker without ``tiered_view`` (a cluster without tiered storage) makes
every range hot.

Reading (:func:`cold_refs`): each piece, as the text the Spark connector carries too
(:func:`piece_texts`: the store's URI and its settings without credentials, the segment's
record, the aborted transactions its offsets need), is asked of the cold-read gateway
(actors/cold_reader.py) of its partition's leader's node: a long-lived actor that fetches the
segment's ``segment.log``, checks its checksum and decodes its batches into the same
KAFKA_SCHEMA table a broker's ``read_kafka_table`` answers (raylog/tiered/cold_read.py), on
several threads at once; a node's brokers reach the store (they upload to it). The gateway
asks the controller for the store's credentials: no secret is in a call's arguments. It
answers a small table as an Arrow IPC stream in ``bytes``, which Ray Data takes as the
block: a small table's answer carried bytes of the gateway's freed memory, its signed S3
requests among them (ColdReader.read_table).
read_committed: the aborted transactions come from the ``txn.index`` objects of the
partition's remote segments (read here, once per partition) and from the leader for abort
markers still only in its local log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import ray

from raylog.client.connection import RaylogCluster
from raylog.client.remote import resolve as resolve_ref
from raylog.errors import ActorUnavailableError
from raylog.integrations.ray_data.ranges import split
from raylog.replica.partition import READ_COMMITTED
from raylog.storage.txn_index import AbortedTxn
from raylog.tiered.cold_plan import ColdPiece, TieredView, split_range
from raylog.tiered.cold_read import aborted_transactions, piece_text
from raylog.tiered.store import cached_store
from raylog.types import TopicPartition
from raylog.util.cluster_names import NAMESPACE


class ReadPlan(NamedTuple):
    """The blocks a read asks brokers for, and the remote pieces the gateways read."""

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


def piece_texts(cluster: RaylogCluster, tp: TopicPartition, view: TieredView,
                pieces: list[ColdPiece], isolation: str, timeout_s: float | None = None
                ) -> list[str]:
    """``pieces`` (of ``tp``, in offset order) as raylog.tiered.cold_read.piece_text gives
    them, the form both readers send to a cold-read gateway: no credentials in them. For
    read_committed, each with the aborted transactions holding its offsets, from the
    ``txn.index`` objects of the view's remote segments and the leader's local log."""
    aborted: list[AbortedTxn] = []
    if isolation == READ_COMMITTED and pieces:
        first, last = pieces[0].start, pieces[-1].end
        aborted = aborted_transactions(cached_store(view.uri, view.settings), view.remote,
                                       first, last)
        aborted += [e for e in local_aborted(cluster, view, tp, timeout_s)
                    if e.last_offset >= first and e.first_offset < last]
    return [piece_text(view.uri, view.settings, p.segment,
                       [e for e in aborted if e.last_offset >= p.start and e.first_offset < p.end])
            for p in pieces]


class ColdReaders:
    """The cold-read gateways (actors/cold_reader.py) one read sends its pieces to, by node,
    as the controller names them (it starts one where there is none, or a new one, under a
    new name, where the last died). A gateway that dies fails the read's attempt with a
    retriable error; the next attempt asks the controller again. Not thread-safe."""

    def __init__(self, cluster: RaylogCluster) -> None:
        self._controller = cluster.controller
        self._handles: dict[str, ray.actor.ActorHandle] = {}

    def read_table(self, node_id: str, piece: str, start: int, end: int) -> ray.ObjectRef:
        """Records [start, end) of ``piece`` (piece_text) as a KAFKA_SCHEMA table (a small
        one in an Arrow IPC stream: a Ray Data block either way), read by ``node_id``'s
        gateway."""
        handle = self._handles.get(node_id)
        if handle is None:
            name = self._controller.cold_reader(node_id)
            try:
                handle = ray.get_actor(name, namespace=NAMESPACE)
            except ValueError as e:  # it died since the controller answered
                raise ActorUnavailableError(f"cold-read gateway {name}: {e}") from e
            self._handles[node_id] = handle
        return handle.read_table.remote(piece, start, end)


def cold_refs(cluster: RaylogCluster, cold: list[tuple[TieredView, ColdPiece]],
              isolation: str, timeout_s: float | None = None) -> list[ray.ObjectRef]:
    """Ask for each cold piece's table from its leader's node's gateway; their references,
    in the order of ``cold``."""
    by_partition: dict[TopicPartition, list[int]] = {}
    for i, (_, piece) in enumerate(cold):
        by_partition.setdefault(TopicPartition(piece.segment.topic, piece.segment.partition),
                                []).append(i)
    texts: list[str] = [""] * len(cold)
    nodes: dict[TopicPartition, str] = {}
    for tp, indexes in by_partition.items():
        found = piece_texts(cluster, tp, cold[indexes[0]][0], [cold[i][1] for i in indexes],
                            isolation, timeout_s)
        for i, text in zip(indexes, found, strict=True):
            texts[i] = text
        leader = cluster.topic(tp.topic).partitions[tp.partition].leader_client()
        nodes[tp] = leader.node_id or ray.get_runtime_context().get_node_id()
    readers = ColdReaders(cluster)
    return [readers.read_table(nodes[TopicPartition(p.segment.topic, p.segment.partition)],
                               text, p.start, p.end)
            for (_, p), text in zip(cold, texts, strict=True)]
