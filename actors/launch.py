"""Starting raylog's controller (called by ``raylog.init``, raylog/session.py, and so by
``raylog start`` and the demo) and the Kafka listeners of the broker nodes (``raylog start
--kafka-port``). The clients never start actors; they find them by name
(raylog/util/cluster_names.py)."""

from __future__ import annotations

import os

import ray

from raylog.util.cluster_names import (
    ACTOR_RUNTIME_ENV,
    BROKER_RESOURCE,
    CONTROLLER_NAME,
    HEAD_RESOURCE,
    NAMESPACE,
)


def start_controller() -> ray.actor.ActorHandle:
    """The controller's handle: the running one, or a new detached one on the head node,
    restarted by Ray after a crash (it replays its metadata log)."""
    try:
        return ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    except ValueError:
        pass
    # Imported here: only the process that starts the controller pays for its modules.
    from actors.controller import ControllerActor

    return ControllerActor.options(
        name=CONTROLLER_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        max_task_retries=0,
        resources={HEAD_RESOURCE: 0.001},
        runtime_env=ACTOR_RUNTIME_ENV,
    ).remote()


def listener_runtime_env() -> dict:
    """Every raylog actor's runtime environment, and Ray's inline-argument threshold a Kafka
    listener's produce calls want (raylog/kafka/gateway/settings.py: this process's own
    value if the user set one)."""
    from raylog.kafka.gateway.settings import inline_appends
    from raylog.util.ray_inline import INLINE_SETTING

    env_vars = dict(ACTOR_RUNTIME_ENV["env_vars"])
    if INLINE_SETTING in os.environ:
        env_vars[INLINE_SETTING] = os.environ[INLINE_SETTING]
    inline_appends(env_vars)
    return {**ACTOR_RUNTIME_ENV, "env_vars": env_vars}


def start_kafka_listeners(port: int, settings: dict | None = None,
                          security: dict | None = None,
                          timeout_s: float = 120.0) -> dict[str, tuple[str, int]]:
    """A Kafka listener actor (actors/gateway.py) on every live broker node that has none,
    listening on ``port`` (0: a free port each) with ``settings`` (GatewaySettings) and
    ``security`` (ListenerSecurity, as dicts); returns node id -> (host, port) of every
    broker node's listener. Safe to repeat: a node's running listener is kept (with the
    port and settings it was started with). A listener that cannot start (its security
    files missing on its node) is killed, so that a corrected call starts it again, and its
    error raised."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from actors.gateway import KafkaListenerActor
    from raylog.kafka.gateway.cluster import listener_actor_name

    nodes = [n["NodeID"] for n in ray.nodes()
             if n.get("Alive") and n.get("Resources", {}).get(BROKER_RESOURCE, 0) > 0]
    handles = {node: KafkaListenerActor.options(
        name=listener_actor_name(node), namespace=NAMESPACE, lifetime="detached",
        get_if_exists=True, max_restarts=-1, max_task_retries=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
        runtime_env=listener_runtime_env()).remote(port, dict(settings or {}),
                                                   dict(security or {}))
        for node in nodes}
    asked = {node: h.address.remote() for node, h in handles.items()}
    addresses = {}
    failed: list[BaseException] = []
    for node, ref in asked.items():
        try:
            addresses[node] = tuple(ray.get(ref, timeout=timeout_s))
        except ray.exceptions.RayTaskError as e:
            ray.kill(handles[node])
            failed.append(e.as_instanceof_cause())
    if failed:
        raise failed[0]
    return addresses
