"""The gateway through which Spark's raylog reader reads cold pieces (offsets of a tiered
partition below its local log start) straight from the object store: one actor per node,
asked for by the connector's readers on that node (ControllerActor.java_cold_reader starts
it).

Why a long-lived actor: a piece's own work (fetch the segment object, check its sha256, cut
the range) is a few milliseconds, but a Ray task per piece, started across languages from
the JVM, needed a Python worker each time: Ray keeps few idle workers, so most tasks paid a
worker's start and raylog's import (measured, docs/tiered.md), several times the read. This
actor is started once per node and imported once; its threads read several pieces at once
(the fetch and the sha256 run outside the GIL) while the Spark tasks decode the ones they
have. It holds no state but the cluster's store setting, asked of the controller on its first
read (``remote_storage``, as brokers ask): the pieces name their store by URI and settings
without credentials (they sit in Spark's plan and logs), and a piece of the cluster's store is
read with the controller's settings, credentials included. A replacement (after it died)
serves the same calls.
"""

from __future__ import annotations

import threading
from typing import Any

import ray

from actors import log_what_matters
from raylog.errors import RaylogError, RemoteStorageUnavailableError
from raylog.tiered.cold_read import read_piece
from raylog.util.cluster_names import CONTROLLER_NAME, NAMESPACE
from raylog.util.interop import java_error

COLD_READ_CONCURRENCY = 8  # pieces read at once: every reader on the node asks a few ahead
CONTROLLER_TIMEOUT_S = 30.0


@ray.remote(num_cpus=0, max_concurrency=COLD_READ_CONCURRENCY)
class SparkColdReader:
    """Reads cold pieces for the Spark tasks of its node. Its calls run on
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

    def java_cold_read(self, piece: str, start: int, end: int, batches: bool,
                       columns: str) -> bytes:
        """Records [start, end) of a cold piece (raylog.tiered.cold_read.read_piece): its
        stored batches (``batches``) or an Arrow IPC stream of ``columns``."""
        try:
            return read_piece(piece, start, end, batches, columns, self.cluster_store())
        except RaylogError as e:
            raise java_error(e) from e
