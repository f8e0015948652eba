"""Keeping a :class:`~raylog.quotas.enforcer.ClientQuotas` up to date with the controller's
quotas, the same way in every process that enforces them (a broker's replica hosts, a Kafka
listener).

The controller answers a watch (``watch_quotas(version, wait_s)``) at once when its quotas
are at another version than the caller's, else when they change or after ``wait_s``: a
change reaches every follower within the time of one call, and an idle follower costs the
controller one waiting call. A follower that cannot reach the controller keeps the quotas it
has and tries again after ``retry_s``: enforcement goes on locally meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from raylog.quotas.enforcer import ClientQuotas
from raylog.quotas.entity import from_wire

logger = logging.getLogger(__name__)

WATCH_WAIT_S = 30.0  # one watch call waits this long for a change
RETRY_S = 1.0        # after a failed watch call
WATCH_SLACK_S = 10.0  # a watch call is given up this long after it should have answered

Watch = Callable[[int, float], Awaitable[dict[str, Any]]]


async def follow_quotas(watch: Watch, quotas: ClientQuotas, wait_s: float = WATCH_WAIT_S,
                        retry_s: float = RETRY_S) -> None:
    """Follow the controller's quotas into ``quotas`` until cancelled. ``watch(version,
    wait_s)`` is the controller's ``watch_quotas``: ``{"version": int, "quotas": [...]}``
    (raylog/quotas/entity.py's wire form)."""
    while True:
        try:
            answer = await watch(quotas.version, wait_s)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the controller restarting, a network blip: keep what we have
            logger.warning("following the controller's quotas: %s; retrying in %g s", e,
                           retry_s)
            await asyncio.sleep(retry_s)
            continue
        if answer["version"] != quotas.version:
            quotas.replace(from_wire(answer["quotas"]), answer["version"])
