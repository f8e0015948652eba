"""Watching broker actors without blocking the controller.

One :class:`BrokerWatch` per registered broker holds the broker actor's handle and exactly
one outstanding health check: a long poll (:meth:`BrokerActor.watch`) that the broker answers
every heartbeat interval (a quarter of the broker session), at once if it restarted (a new
incarnation), and that fails the moment Ray knows the broker's process died. A task per
watch awaits it, so the controller's loop never waits on a broker (as Ray Serve's controller
keeps one health-check reference per replica). Every answer renews the broker's session
(raylog/metadata/sessions.py); the controller fences a broker whose session ran out
(:meth:`BrokerWatch.fence`).

Only Ray's word that the process died, or an expired session, takes a broker down:

- ``ActorDiedError`` (or the node it is pinned to is gone): it will not come back by itself.
  The broker is down and the watch ends; the controller creates a broker actor on the node
  again if the node lives, or waits for a node that presents the broker's data directory.
- ``ActorUnavailableError`` says only that Ray cannot reach the process for now: it died and
  Ray is restarting it, or its connection broke while it lives. The GCS's record of the actor
  tells which (off the event loop, with a deadline): restarting, or alive as another process
  than the one watched, is down at once (its in-memory state is gone), and the next answer
  comes from the new process; alive as the same process is not down, and the check is made
  again; if it stays out of reach, its session runs out.
- An answer with an incarnation other than the one known: the process restarted between two
  checks, losing its in-memory state: down, then up.
- No answer for a session (stopped, stuck, unreachable): fenced (down), though the process
  may live; its next answer brings it up again (the controller tells it its state afresh).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, ActorUnschedulableError, RayActorError

from raylog.metadata.sessions import ProcessFate, after_unavailable

logger = logging.getLogger(__name__)

RETRY_S = 0.2           # after a check failed while Ray could not reach the broker
GCS_TIMEOUT_S = 10.0    # a question to the GCS about an actor


class Health(enum.Enum):
    ALIVE = "alive"
    FENCED = "fenced"          # its session ran out; the process may live: its answer tells
    RESTARTING = "restarting"  # Ray restarts the process; the next check tells
    DEAD = "dead"              # gone for good: a new actor is needed


async def gcs_record(handle: ray.actor.ActorHandle) -> tuple[str | None, int | None]:
    """(state, process id) of the actor as the GCS records it, (None, None) without a
    record. Asked on a thread: the GCS client blocks."""
    record = await asyncio.wait_for(asyncio.to_thread(
        ray._private.state.actors, handle._actor_id.hex()), GCS_TIMEOUT_S)
    if not record:
        return None, None
    return record.get("State"), record.get("Pid") or None


Callback = Callable[["BrokerWatch"], Awaitable[None]]


class BrokerWatch:
    """A broker actor's handle, node, incarnation and process id, its health, and its
    outstanding health check. Its changes of health are made one at a time (``_changing``),
    whoever asks: the check's task, the controller fencing it, the broker asking to be
    confirmed. The controller's event loop is its only user (not thread-safe)."""

    def __init__(self, broker_id: int, handle: ray.actor.ActorHandle, node_id: str,
                 incarnation: str, on_down: Callback, on_up: Callback,
                 on_failed: Callable[[BrokerWatch, dict], Awaitable[None]] | None = None,
                 on_answer: Callable[[BrokerWatch], None] | None = None,
                 poll_s: float = 2.25, session_timeout_ms: float = 9000.0,
                 pid: int | None = None,
                 lookup: Callable[[Any], Awaitable[tuple[str | None, int | None]]] = gcs_record
                 ) -> None:
        self.broker_id = broker_id
        self.handle = handle
        self.node_id = node_id
        self.incarnation = incarnation
        self.pid = pid  # of the process that last answered
        self.health = Health.ALIVE
        self.poll_s = poll_s
        self.session_timeout_ms = session_timeout_ms
        # A check unanswered this long is asked again (its session decides about the broker).
        self.deadline_s = poll_s + session_timeout_ms / 1000
        self._on_down = on_down
        self._on_up = on_up
        self._on_failed = on_failed
        self._on_answer = on_answer
        self._lookup = lookup
        self._changing = asyncio.Lock()
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
                status = await asyncio.wait_for(self.handle.watch.remote(
                    self.incarnation if self.alive else None, self.poll_s,
                    self.session_timeout_ms), self.deadline_s)
            except asyncio.CancelledError:
                raise
            except TimeoutError:  # no answer in time: ask again; its session decides
                continue
            except ActorUnavailableError:  # before its base class, RayActorError
                fate = await self._fate()
                if fate is ProcessFate.DEAD:
                    await self._down(Health.DEAD)
                    return
                if fate is ProcessFate.RESTARTED:
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
            await self._answered(status)

    async def _fate(self) -> ProcessFate:
        """What became of the process, by the GCS (which knows at once that a process died)."""
        try:
            state, pid = await self._lookup(self.handle)
        except Exception as e:  # the GCS slow or unreachable: the session decides
            logger.warning("broker %d is out of reach and the GCS did not say why: %r",
                           self.broker_id, e)
            return ProcessFate.UNKNOWN
        fate = after_unavailable(state, pid, self.pid)
        if fate is ProcessFate.SAME and self.alive:
            logger.info("broker %d is out of reach for a moment (its process lives)",
                        self.broker_id)
        return fate

    async def _answered(self, status: dict[str, Any]) -> None:
        self.pid = status.get("pid", self.pid)
        if status["incarnation"] != self.incarnation or not self.alive:
            async with self._changing:
                if status["incarnation"] != self.incarnation:
                    if self.alive:  # restarted between two checks
                        await self._set_down(Health.RESTARTING)
                    self.incarnation = status["incarnation"]
                if not self.alive:
                    await self._set_up()
        elif self._on_answer is not None:
            self._on_answer(self)
        if status.get("failed") and self._on_failed is not None:
            await self.guarded(lambda w, failed=status["failed"]: self._on_failed(w, failed))

    async def _set_up(self) -> None:
        """(``_changing`` held.) Alive again: its session starts, the controller handles it."""
        was = self.health
        self.health = Health.ALIVE
        if self._on_answer is not None:
            self._on_answer(self)
        logger.info("broker %d is back (incarnation %s, was %s)", self.broker_id,
                    self.incarnation, was.value)
        await self.guarded(self._on_up)

    async def _down(self, health: Health) -> None:
        async with self._changing:
            await self._set_down(health)

    async def _set_down(self, health: Health) -> None:
        """(``_changing`` held.) Going down, or from down to dead for good (then the
        controller must also give up on this actor: it creates a new one if the node lives)."""
        changed = health is not self.health
        was_alive = self.alive
        self.health = health
        if was_alive or (changed and health is Health.DEAD):
            logger.warning("broker %d is down (%s)", self.broker_id, health.value)
            await self.guarded(self._on_down)

    async def fence(self, silent_s: float) -> None:
        """Its session ran out: down, until it answers again."""
        async with self._changing:
            if self.alive:
                logger.warning("broker %d has not answered for %.1f s: fencing it",
                               self.broker_id, silent_s)
                await self._set_down(Health.FENCED)

    async def bring_up(self, incarnation: str) -> bool:
        """The broker itself asks (after a stall of its own): up again if it was fenced.
        Whether it is up, as that incarnation."""
        async with self._changing:
            if incarnation != self.incarnation or self.health in (Health.RESTARTING,
                                                                  Health.DEAD):
                return False
            if self.health is Health.FENCED:
                await self._set_up()
            elif self._on_answer is not None:
                self._on_answer(self)
            return self.alive

    async def guarded(self, callback: Callback) -> None:
        try:
            await callback(self)
        except Exception:  # the controller logs and goes on; the next change retries
            logger.exception("handling a change of broker %d failed", self.broker_id)
