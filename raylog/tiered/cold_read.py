"""Reading a remote (tiered) segment straight from the object store, without a broker.

Analytics (Ray Data's and Spark's readers) read cold offsets this way: the segment's
``segment.log`` object is fetched whole, its size and sha256 checked against the segment's
record (a mismatch or a missing object is a RemoteObjectError naming the object, never
data), and its batches turned into exactly what a broker's range read gives for the same
offsets:

- :func:`segment_batches`: the stored batches holding the offsets, as a broker's
  ``read_batches`` answers them (never markers; read_committed: never an aborted
  transaction's batch), for readers that decode batches themselves (the Spark connector's
  BatchDecoder);
- :func:`segment_table`: the records as a KAFKA_SCHEMA table, as a broker's
  ``read_kafka_table`` answers them (records.read_table decodes each batch's Arrow payload
  whole: no per-record Python).

Both readers carry a piece as JSON text (:func:`piece_text`: the store's URI and settings
without credentials, the segment's record, the aborted transactions it needs) and have it
read by a node's cold-read gateway (actors/cold_reader.py, which opens the cluster's store
with the settings the controller gives it: the text sits in Spark's plan and logs and in
Ray's task specs, the credentials never do): :func:`read_piece` for the Spark connector,
:func:`piece_table` for Ray Data.

read_committed needs the aborted transactions holding the offsets: :func:`aborted_transactions`
collects them from the ``txn.index`` objects of the segment and of every later remote segment
(an abort marker may lie in a later segment than its transaction's batches); entries whose
marker is still only in the local log come from the leader (the caller adds them).

Stateless functions; safe to call from any thread or task. An unreachable store raises the
retriable RemoteStorageUnavailableError.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from raylog.errors import InvalidArgumentError, RemoteObjectError
from raylog.records import read_table
from raylog.records.header import iter_headers
from raylog.records.kafka_columns import ipc_bytes, kafka_table, spark_table
from raylog.storage.txn_index import (
    AbortedTxn,
    aborted_or_control,
    decode_entries,
    without_batches,
)
from raylog.tiered.layout import SEGMENT, TXN_INDEX, RemoteSegment
from raylog.tiered.reader import fetch_verified
from raylog.tiered.store import ObjectStore, cached_store, public_settings

_TXN_ENTRY_BYTES = 32


def aborted_transactions(store: ObjectStore, segments: Iterable[RemoteSegment], start: int,
                         end: int) -> list[AbortedTxn]:
    """The aborted transactions holding an offset in [start, end) that the ``txn.index``
    objects of ``segments`` list (pass the segment holding ``start`` and every later one),
    each once: a leader's upload lists a transaction in every segment it overlaps."""
    out: dict[AbortedTxn, None] = {}
    for segment in segments:
        if segment.end_offset < start or TXN_INDEX not in segment.files:
            continue
        data = fetch_verified(store, segment, TXN_INDEX)
        if len(data) % _TXN_ENTRY_BYTES:
            raise RemoteObjectError(
                f"{segment.folder(store.prefix)}/{TXN_INDEX}: {len(data)} bytes, not whole "
                f"{_TXN_ENTRY_BYTES}-byte entries")
        out.update((e, None) for e in decode_entries(data)
                   if e.last_offset >= start and e.first_offset < end)
    return list(out)


def segment_batches(store: ObjectStore, segment: RemoteSegment, start: int, end: int,
                    aborted: Sequence[AbortedTxn] = ()) -> bytes:
    """The stored batches of ``segment`` holding offsets [start, end), whole (the first and
    last may hold offsets outside the range: the reader trims them), without markers and
    without the batches of the ``aborted`` transactions."""
    data = fetch_verified(store, segment, SEGMENT)
    first = last = 0
    # The object's checksum held: no batch needs its CRCs checked to be cut out here.
    for pos, header in iter_headers(data, verify=False):
        if header.last_offset < start:
            continue
        if header.base_offset >= end:
            break
        if not last:
            first = pos
        last = pos + header.size
    return without_batches(data[first:last], aborted_or_control(aborted))


def segment_table(store: ObjectStore, segment: RemoteSegment, start: int, end: int,
                  aborted: Sequence[AbortedTxn] = ()) -> pa.Table:
    """Records [start, end) of ``segment`` as a KAFKA_SCHEMA table."""
    batches = segment_batches(store, segment, start, end, aborted)
    return kafka_table(read_table(batches, start, end), segment.topic, segment.partition)


def segment_spark_table(store: ObjectStore, segment: RemoteSegment, start: int, end: int,
                        columns: Sequence[str], aborted: Sequence[AbortedTxn] = ()
                        ) -> pa.Table:
    """Only ``columns`` of records [start, end), in Spark's layout (as a broker's
    ``java_read`` builds them)."""
    batches = segment_batches(store, segment, start, end, aborted)
    return spark_table(read_table(batches, start, end), segment.topic, segment.partition,
                       columns)


def piece_text(uri: str | None, settings: Mapping[str, Any], segment: RemoteSegment,
               aborted: Iterable[AbortedTxn]) -> str:
    """A cold piece as JSON text for :func:`read_piece`: the store (its URI, and its settings
    without credentials), the segment's record and the aborted transactions its offsets need
    (read_committed)."""
    return json.dumps({"uri": uri, "settings": public_settings(settings),
                       "segment": segment.to_json().decode(),
                       "aborted": [list(e) for e in aborted]})


def _open_piece(piece: str, cluster_store: Mapping[str, Any] | None
                ) -> tuple[ObjectStore, RemoteSegment, list[AbortedTxn]]:
    """The store, segment and aborted transactions of a :func:`piece_text` piece. The store
    is opened with ``cluster_store``'s settings (``{"uri", "settings"}``, the controller's
    ``remote_storage``: credentials included) when it names the piece's URI, else with the
    piece's own (none secret: a store that takes no credentials, or finds them itself)."""
    body = json.loads(piece)
    settings = body["settings"]
    if cluster_store is not None and cluster_store.get("uri") == body["uri"]:
        settings = cluster_store["settings"]
    return (cached_store(body["uri"], settings), RemoteSegment.from_json(body["segment"]),
            [AbortedTxn(*e) for e in body["aborted"]])


def read_piece(piece: str, start: int, end: int, batches: bool, columns: str,
               cluster_store: Mapping[str, Any] | None = None) -> bytes:
    """Records [start, end) of a :func:`piece_text` piece (its store opened as
    :func:`_open_piece` says): with ``batches``, its stored batches
    (:func:`segment_batches`); else an Arrow IPC stream of ``columns`` (comma-separated;
    none: the offsets alone) in Spark's layout. The Spark connector's read."""
    store, segment, aborted = _open_piece(piece, cluster_store)
    if batches:
        return segment_batches(store, segment, start, end, aborted)
    try:
        table = segment_spark_table(store, segment, start, end,
                                    [c for c in columns.split(",") if c], aborted)
    except ValueError as e:
        raise InvalidArgumentError(str(e)) from e
    return ipc_bytes(table)


def piece_table(piece: str, start: int, end: int,
                cluster_store: Mapping[str, Any] | None = None) -> pa.Table:
    """Records [start, end) of a :func:`piece_text` piece (its store opened as
    :func:`_open_piece` says) as a KAFKA_SCHEMA table: Ray Data's read."""
    store, segment, aborted = _open_piece(piece, cluster_store)
    return segment_table(store, segment, start, end, aborted)
