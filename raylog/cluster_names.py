"""Names shared by the actors and the clients that look them up, and where data lives."""

from __future__ import annotations

import os
from pathlib import Path

NAMESPACE = "raylog"
CONTROLLER_NAME = "raylog-controller"
BROKER_RESOURCE = "raylog_broker"
HEAD_RESOURCE = "node:__internal_head__"
DATA_DIR_ENV = "RAYLOG_DATA_DIR"


def replica_name(topic: str, partition: int, broker_id: int, node_id: str,
                 topic_id: str) -> str:
    """The actor name of one replica: unique per topic incarnation, broker and the node
    serving the broker (an actor left on a node that died never blocks the name of its
    successor on the node that took the broker's disk over)."""
    return f"replica:{topic}:{partition}:b{broker_id}:{node_id[:12]}:{topic_id[:12]}"


def agent_name(node_id: str) -> str:
    """The actor name of the broker agent of one Ray node."""
    return f"broker-agent:{node_id}"


def raylog_home() -> Path:
    return Path.home() / ".raylog"


def configured_data_dir() -> str | None:
    """``$RAYLOG_DATA_DIR`` of this node, if set (cluster.yaml sets it per broker)."""
    return os.environ.get(DATA_DIR_ENV) or None


def default_broker_root() -> Path:
    """Where a node without ``$RAYLOG_DATA_DIR`` takes a data directory slot: the same slot
    every run for a single node, a distinct one for each node on one machine."""
    return raylog_home() / "brokers"


def controller_data_dir() -> Path:
    """The controller's directory on the head node: under ``$RAYLOG_DATA_DIR`` if the head
    sets it, else ``~/.raylog/controller``. It does not depend on the Ray node ID, so a
    controller restarted by Ray, or a whole cluster restarted, finds its metadata again."""
    configured = configured_data_dir()
    if configured:
        return Path(configured).expanduser().resolve() / "__controller"
    return raylog_home() / "controller"
