"""Names shared by the actors and the clients that look them up, and where data lives."""

from __future__ import annotations

import os
from pathlib import Path

NAMESPACE = "raylog"
CONTROLLER_NAME = "raylog-controller"
REGISTRY_NAME = "raylog-schema-registry"  # the schema registry actor (actors/schema_registry.py)
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


# Ray settings of raylog's own actors (the controller and the brokers), given to their
# processes through runtime_env. When a peer's process dies, Ray fails the calls waiting on it
# only once it has heard why, waiting up to ``timeout_ms_task_wait_for_death_info`` (1 s by
# default) for the news: the controller learns of a dead broker, and a follower of its dead
# leader, that much later (measured: 1.7-1.9 s from SIGKILL to the failed call, 0.75-0.9 s with
# 100 ms). Failover waits on exactly that news.
ACTOR_RUNTIME_ENV = {"env_vars": {"RAY_timeout_ms_task_wait_for_death_info": "100"}}
