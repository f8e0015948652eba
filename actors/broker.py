"""The broker agent: one small actor per broker node that holds the node's data directory.

It takes the directory (``$RAYLOG_DATA_DIR``, or a free slot under ``~/.raylog/brokers``)
under an advisory lock for as long as it lives, tells the controller which broker identity
the directory holds, and writes a new identity when the controller adopts the directory.
The controller does the deciding (raylog/metadata/brokers.py).
"""

from __future__ import annotations

import logging
from typing import Any

import ray

from raylog.cluster_names import configured_data_dir, default_broker_root
from raylog.identity import (
    BrokerIdentity,
    IdentityError,
    claim_data_dir,
    read_identity,
    write_identity,
)

logger = logging.getLogger(__name__)


@ray.remote(num_cpus=0)
class BrokerAgent:
    """Holds one node's data directory (locked) and its identity file."""

    def __init__(self, node_id: str) -> None:
        self.node_id = ray.get_runtime_context().get_node_id()
        self.host = ray.util.get_node_ip_address()
        self.error: str | None = None
        self.directory = None
        if self.node_id != node_id:
            self.error = f"broker agent for {node_id} placed on {self.node_id}"
            return
        try:
            self.directory, self._lock = claim_data_dir(configured_data_dir(),
                                                        default_broker_root())
        except (IdentityError, OSError) as e:
            self.error = str(e)

    def identify(self) -> dict[str, Any]:
        """Where this node runs, its data directory and the identity that holds (or the
        error that keeps it from serving)."""
        answer: dict[str, Any] = {"node_id": self.node_id, "host": self.host,
                                  "data_dir": str(self.directory), "error": self.error,
                                  "identity": None}
        if self.error is None:
            try:
                identity = read_identity(self.directory)
            except IdentityError as e:
                answer["error"] = str(e)
                return answer
            if identity is not None:
                answer["identity"] = [identity.broker_id, identity.cluster_id]
        return answer

    def adopt(self, broker_id: int, cluster_id: str) -> None:
        """Write the identity of a new broker into a directory that has none."""
        existing = read_identity(self.directory)
        wanted = BrokerIdentity(broker_id, cluster_id)
        if existing is not None and existing != wanted:
            raise IdentityError(f"{self.directory} already holds {existing}")
        if existing is None:
            write_identity(self.directory, wanted)
            logger.info("%s is broker %d of cluster %s", self.directory, broker_id, cluster_id)
