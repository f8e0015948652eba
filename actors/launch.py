"""Starting raylog's controller: called by ``raylog.init`` (raylog/session.py), and so by
``raylog start`` and the demo. The clients never start actors; they find them by name
(raylog/util/cluster_names.py)."""

from __future__ import annotations

import ray

from raylog.util.cluster_names import (
    ACTOR_RUNTIME_ENV,
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
