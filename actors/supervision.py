"""Watching broker actors without blocking the controller.

One :class:`BrokerWatch` per registered broker holds the broker actor's handle and exactly
one outstanding health check: a long poll (:meth:`BrokerActor.watch`) that the broker answers
after a while, at once if it restarted (a new incarnation), and that fails the moment the
broker's process dies. A task per watch awaits it, so the controller's loop never waits on a
broker, and it learns of a death as soon as Ray does, not at the next polling round (as Ray
Serve's controller keeps one health-check reference per replica).

- ``ActorUnavailableError``: Ray cannot reach the process for now (it died and is being
  restarted, or its connection broke). The broker is down (the controller moves its
  leaderships and takes it out of ISRs), and the watch goes on: the next check is answered by
  the process, if it lived (the same incarnation: it is up again and rejoins its ISRs as a
  follower) or by the new one (a new incarnation).
- ``ActorDiedError`` (or the node it is pinned to is gone): it will not come back by itself.
  The broker is down and the watch ends; the controller creates a broker actor on the node
  again if the node lives, or waits for a node that presents the broker's data directory.
- An answer with an incarnation other than the one known: the process restarted between two
  checks, losing its in-memory state: down, then up.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable

import ray
from ray.exceptions import ActorUnavailableError, ActorUnschedulableError, RayActorError

logger = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 10.0  # a healthy broker answers its check this often
RETRY_S = 0.2           # after a check failed while Ray restarts the broker


class Health(enum.Enum):
    ALIVE = "alive"
    RESTARTING = "restarting"  # Ray restarts the process; the next check tells
    DEAD = "dead"              # gone for good: a new actor is needed


class BrokerWatch:
    """A broker actor's handle, node and incarnation, and its outstanding health check.
    The controller's event loop is its only user (not thread-safe)."""

    def __init__(self, broker_id: int, handle: ray.actor.ActorHandle, node_id: str,
                 incarnation: str,
                 on_down: Callable[[BrokerWatch], Awaitable[None]],
                 on_up: Callable[[BrokerWatch], Awaitable[None]],
                 on_failed: Callable[[BrokerWatch, dict], Awaitable[None]] | None = None
                 ) -> None:
        self.broker_id = broker_id
        self.handle = handle
        self.node_id = node_id
        self.incarnation = incarnation
        self.health = Health.ALIVE
        self._on_down = on_down
        self._on_up = on_up
        self._on_failed = on_failed
        self._task: asyncio.Task | None = None

    @property
    def alive(self) -> bool:
        return self.health is Health.ALIVE

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            try:
                status = await self.handle.watch.remote(
                    self.incarnation if self.alive else None, WATCH_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except ActorUnavailableError:  # before its base class, RayActorError
                await self._down(Health.RESTARTING)
                await asyncio.sleep(RETRY_S)
                continue
            except (RayActorError, ActorUnschedulableError):
                await self._down(Health.DEAD)
                return
            except Exception:  # a bug must not end the watch: try again
                logger.exception("watching broker %d failed", self.broker_id)
                await asyncio.sleep(RETRY_S)
                continue
            if status["incarnation"] != self.incarnation or not self.alive:
                if self.alive:  # restarted between two checks
                    await self._down(Health.RESTARTING)
                self.incarnation = status["incarnation"]
                self.health = Health.ALIVE
                logger.info("broker %d is back (incarnation %s)", self.broker_id,
                            self.incarnation)
                await self.guarded(self._on_up)
            if status.get("failed") and self._on_failed is not None:
                await self.guarded(lambda w, failed=status["failed"]: self._on_failed(w, failed))

    async def _down(self, health: Health) -> None:
        """Going down, or from restarting to dead for good (then the controller must also
        give up on this actor: it creates a new one if the node lives)."""
        changed = health is not self.health
        was_alive = self.alive
        self.health = health
        if was_alive or (changed and health is Health.DEAD):
            logger.warning("broker %d is down (%s)", self.broker_id, health.value)
            await self.guarded(self._on_down)

    async def guarded(self, callback: Callable[[BrokerWatch], Awaitable[None]]) -> None:
        try:
            await callback(self)
        except Exception:  # the controller logs and goes on; the next change retries
            logger.exception("handling a change of broker %d failed", self.broker_id)
