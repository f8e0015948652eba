"""Client quotas where a broker's process serves raylog's own clients (docs/quotas.md).

Each serving process (the broker actor and each replica host: ``ReplicaHost``) holds a
:class:`~raylog.quotas.enforcer.ClientQuotas` that follows the controller's quotas
(raylog/quotas/follow.py), and charges each produce and fetch that names its client id:
the bytes of the batch appended or of the batches answered, and the time the request took
here (a fetch's wait for data not counted). An answer over its client's quota is held back
by the throttle time (the request is done: only its answer waits), which it then carries
(``AppendInfo.throttle_time_ms``, ``FetchResult.throttle_time_ms``), and the process counts
it (``raylog_throttle_time_ms``, by quota and client id). Native clients have no principal:
only client-id quotas apply to them.

Requests without a client id (the Kafka listener's, which enforces quotas itself; brokers'
replication; the controller's) are never charged.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray

from raylog.quotas.enforcer import ClientQuotas, QuotaSettings
from raylog.quotas.entity import REQUEST_PERCENTAGE
from raylog.quotas.follow import WATCH_SLACK_S, WATCH_WAIT_S, follow_quotas

logger = logging.getLogger(__name__)


class HostQuotas:
    """The quotas of one serving process and their follower (a task on its event loop,
    started by :meth:`start`, asking the controller through ``controller``, a function
    giving its handle, and ``lost``, called when that handle is dead)."""

    def __init__(self, settings: QuotaSettings | None = None) -> None:
        self.quotas = ClientQuotas(settings or QuotaSettings.from_environ())
        self._follower: asyncio.Task | None = None

    def start(self, controller: Any, lost: Any) -> None:
        async def watch(version: int, wait_s: float) -> dict[str, Any]:
            try:
                return await asyncio.wait_for(
                    controller().watch_quotas.remote(version, wait_s), wait_s + WATCH_SLACK_S)
            except ray.exceptions.RayActorError:
                lost()  # created again: look it up anew
                raise

        self._follower = asyncio.get_event_loop().create_task(
            follow_quotas(watch, self.quotas, WATCH_WAIT_S))

    def stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()

    async def hold(self, key: str, client_id: str | None, size: int, took_s: float) -> int:
        """Charge one answer to ``client_id`` (``size`` bytes against the ``key`` byte rate,
        ``took_s`` against its request time); wait out the throttle time, if any, and return
        it (ms). 0 at once without a client id or a quota."""
        if client_id is None or not self.quotas.active:
            return 0
        delay = self.quotas.charge(None, client_id, {key: size, REQUEST_PERCENTAGE: took_s})
        if delay <= 0:
            return 0
        await asyncio.sleep(delay)
        return int(delay * 1000)
