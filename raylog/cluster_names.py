"""Names shared by the actors and the clients that look them up, and where data lives."""

from __future__ import annotations

import os
from pathlib import Path

NAMESPACE = "raylog"
CONTROLLER_NAME = "raylog-controller"
BROKER_RESOURCE = "raylog_broker"
HEAD_RESOURCE = "node:__internal_head__"
DATA_DIR_ENV = "RAYLOG_DATA_DIR"


def broker_actor_name(node_id: str) -> str:
    """The actor name of the broker actor of one Ray node (it learns which broker it serves
    from the data directory it finds there)."""
    return f"broker:{node_id}"


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
