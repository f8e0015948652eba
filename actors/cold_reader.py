"""The gateway through which analytics read cold pieces (offsets of a tiered partition below
its local log start) straight from the object store: one actor per node, started by the
controller (``cold_reader`` / ``java_cold_reader``, actors/java_api.py), shared by Spark's
raylog reader (its tasks on that node call ``java_cold_read`` across languages) and Ray
Data's ``read_topic`` (``read_table``, asked for on the nodes of the partitions' leaders).

Why a long-lived actor: a piece's own work (fetch the segment object, check its sha256, cut
the range, decode it) is a few milliseconds, but a Ray task per piece needed a Python worker
each time: Ray keeps few idle workers, so most tasks paid a worker's start and raylog's
import (measured, docs/tiered.md), several times the read. This actor is started once per
node and imported once; its threads read several pieces at once (the fetch, the sha256 and
Arrow's decoding run outside the GIL).

No credentials travel: a piece names its store by URI and by the settings that are not
secret (raylog.tiered.cold_read.piece_text; it sits in Spark's plan and logs, in Ray's task
specs); the gateway asks the controller for the cluster's store on its first read
(``remote_storage``, as brokers ask) and reads a piece of the cluster's store with the
controller's settings, credentials included. It holds no other state: a replacement (after
it died) serves the same calls.
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import ray

from actors import log_what_matters
from raylog.errors import RaylogError, RemoteStorageUnavailableError
from raylog.records.kafka_columns import analytics_block
from raylog.tiered.cold_read import piece_table, read_piece
from raylog.util.cluster_names import CONTROLLER_NAME, NAMESPACE
from raylog.util.interop import java_error

COLD_READ_CONCURRENCY = 8  # pieces read at once: every reader on the node asks a few ahead
CONTROLLER_TIMEOUT_S = 30.0


@ray.remote(num_cpus=0, max_concurrency=COLD_READ_CONCURRENCY)
class ColdReader:
    """Reads cold pieces for the analytics readers of its node. Its calls run on
    COLD_READ_CONCURRENCY threads; the store setting, once known, is shared (under a lock)."""

    def __init__(self) -> None:
        log_what_matters()
        self._lock = threading.Lock()
        self._cluster_store: dict[str, Any] | None = None

    def cluster_store(self) -> dict[str, Any]:
        """The cluster's store (``{"uri", "settings"}``), asked of the controller once;
        RemoteStorageUnavailableError (retriable) while it cannot answer."""
        with self._lock:
            if self._cluster_store is None:
                try:
                    controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
                    self._cluster_store = ray.get(controller.remote_storage.remote(),
                                                  timeout=CONTROLLER_TIMEOUT_S)
                except (ValueError, ray.exceptions.RayError) as e:
                    raise RemoteStorageUnavailableError(
                        f"the controller did not name the cluster's store: {e}") from e
            return self._cluster_store

    def read_table(self, piece: str, start: int, end: int) -> pa.Table | bytes:
        """Records [start, end) of a cold piece as a KAFKA_SCHEMA table
        (raylog.tiered.cold_read.piece_table), as Ray Data's block: a small one in an Arrow
        IPC stream (raylog.records.kafka_columns.analytics_block). Raises raylog's errors.

        A small table's answer carried bytes of this process's freed memory in the gaps Ray
        leaves between its buffers, and with it the Dataset and whatever the block was sent
        to. Here that memory holds the gateway's signed S3 requests: the access key (in
        ``Authorization``) and the session token (``x-amz-security-token``) were found in
        Datasets (docs/tiered.md)."""
        return analytics_block(piece_table(piece, start, end, self.cluster_store()))

    def java_cold_read(self, piece: str, start: int, end: int, batches: bool,
                       columns: str) -> bytes:
        """Records [start, end) of a cold piece (raylog.tiered.cold_read.read_piece): its
        stored batches (``batches``) or an Arrow IPC stream of ``columns``."""
        try:
            return read_piece(piece, start, end, batches, columns, self.cluster_store())
        except RaylogError as e:
            raise java_error(e) from e
