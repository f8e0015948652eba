"""Names shared by the actors and the clients that look them up."""

from __future__ import annotations

import os
from pathlib import Path

NAMESPACE = "raylog"
CONTROLLER_NAME = "raylog-controller"
BROKER_RESOURCE = "raylog_broker"
HEAD_RESOURCE = "node:__internal_head__"
DATA_DIR_ENV = "RAYLOG_DATA_DIR"


def replica_name(topic: str, partition: int, node_id: str, topic_id: str) -> str:
    """The actor name of one replica; unique per topic incarnation and node."""
    return f"replica:{topic}:{partition}:{node_id}:{topic_id[:12]}"


def node_data_dir(node_id: str) -> Path:
    """This node's data directory: ``$RAYLOG_DATA_DIR`` if the node sets it (cluster.yaml
    does, per broker), else a per-node directory under ``~/.raylog`` so that several nodes
    on one machine never share files."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured)
    return Path.home() / ".raylog" / "nodes" / node_id
