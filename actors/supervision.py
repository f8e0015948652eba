"""Watching replica actors without blocking the controller.

One :class:`ReplicaWatch` per replica actor holds its handle and at most one outstanding
health check (as Ray Serve's controller supervises its replicas): each round of the
controller's loop looks at the check without waiting for it. A check that fails with
``ActorDiedError`` (a RayActorError that is not ActorUnavailableError) means the actor is
gone for good (killed without restart, or out of restarts), and ``ActorUnschedulableError``
that the node it is pinned to is gone: the controller then creates it again on the node
serving its broker, where it reopens its log. An actor that Ray is restarting answers its
check once it is back, so it is not re-created.
"""

from __future__ import annotations

import enum
import time

import ray
from ray.exceptions import (
    ActorUnavailableError,
    ActorUnschedulableError,
    GetTimeoutError,
    RayActorError,
)

CHECK_INTERVAL_S = 1.0  # between the end of one check and the start of the next


class Health(enum.Enum):
    ALIVE = "alive"          # the last check answered (or none has been made yet)
    CHECKING = "checking"    # a check is outstanding
    RESTARTING = "restarting"  # Ray says the actor is unavailable for now
    DEAD = "dead"            # the actor will not come back by itself


class ReplicaWatch:
    """A replica actor's handle and its outstanding health check. Not thread-safe: the
    controller's event loop is its only user."""

    def __init__(self, handle: ray.actor.ActorHandle, node_id: str,
                 clock=time.monotonic) -> None:
        self.handle = handle
        self.node_id = node_id  # the node it was created on
        self._clock = clock
        self._check: ray.ObjectRef | None = None
        self._next_check = clock() + CHECK_INTERVAL_S
        self.health = Health.ALIVE

    async def poll(self) -> Health:
        """Look at the outstanding check (never waiting) and start the next when due."""
        now = self._clock()
        if self._check is None:
            if now >= self._next_check:
                self._check = self.handle.__ray_ready__.remote()
            return self.health
        ready, _ = ray.wait([self._check], timeout=0)
        if not ready:
            return self.health
        check, self._check = self._check, None
        self._next_check = now + CHECK_INTERVAL_S
        try:
            await check  # done already: this only reads the outcome
            self.health = Health.ALIVE
        except (ActorUnavailableError, GetTimeoutError):  # before its base, RayActorError
            self.health = Health.RESTARTING
        except (RayActorError, ActorUnschedulableError):
            # ActorDiedError: gone for good; unschedulable: pinned to a node that is gone
            self.health = Health.DEAD
        return self.health
