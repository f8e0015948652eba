"""Client quotas on a Kafka listener (docs/quotas.md), as Kafka's brokers enforce them.

:class:`ListenerQuotas` holds the listener's :class:`~raylog.quotas.enforcer.ClientQuotas`,
following the controller's quotas through the backend (a long ``watch_quotas`` call,
raylog/quotas/follow.py), and charges each answered request to its connection's user (the
principal's name: ``ANONYMOUS`` on a listener without logins, as Kafka's) and the request
header's client id:

- Produce: the request's size, against ``producer_byte_rate`` (Kafka counts the request);
- Fetch: the records in the answer, against ``consumer_byte_rate``;
- every API but Fetch and the login's (ApiVersions, SaslHandshake, SaslAuthenticate): the
  time the handler took, against ``request_percentage`` (a Fetch's time is mostly its wait
  for data, which Kafka does not count either).

An answer over a quota carries the throttle time (``throttle_time_ms``) and goes out at
once; the connection then reads nothing more from the client until that time has passed
(KIP-219, as Kafka's brokers mute the channel). Clients that honour the throttle time wait
themselves; the others find their next requests answered that much later. Nothing is
refused. Used from the listener's event loop only.
"""

from __future__ import annotations

import asyncio
from typing import Any

from raylog.quotas.enforcer import ClientQuotas
from raylog.quotas.entity import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from raylog.quotas.follow import WATCH_SLACK_S, WATCH_WAIT_S, follow_quotas

PRODUCE_KEY = 0
FETCH_KEY = 1
NOT_TIMED = frozenset({FETCH_KEY, 17, 18, 36})  # Fetch, SaslHandshake, ApiVersions, SaslAuth.


class ListenerQuotas:
    """The quotas a listener enforces. ``quotas``: its ClientQuotas (a new one with the
    environment's window settings if not given)."""

    def __init__(self, quotas: ClientQuotas | None = None) -> None:
        self.quotas = quotas or ClientQuotas()
        self._follower: asyncio.Task | None = None

    def start(self, backend: Any) -> None:
        """Follow the controller's quotas through ``backend`` (its ``controller_call``), on
        the running loop, until :meth:`stop`."""
        async def watch(version: int, wait_s: float) -> dict[str, Any]:
            return await backend.controller_call("watch_quotas", version, wait_s,
                                                 timeout_s=wait_s + WATCH_SLACK_S)

        self._follower = asyncio.get_running_loop().create_task(
            follow_quotas(watch, self.quotas, WATCH_WAIT_S))

    def stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()

    def charge(self, api_key: int, user: str, client_id: str | None, request_bytes: int,
               body: Any, took_s: float) -> float:
        """Record one answered request; the seconds the connection is to be held back (0:
        none), also set as the answer's ``throttle_time_ms`` when it has one."""
        if not self.quotas.active:
            return 0.0
        values = {}
        if api_key == PRODUCE_KEY:
            values[PRODUCER_BYTE_RATE] = request_bytes
        elif api_key == FETCH_KEY and body is not None:
            values[CONSUMER_BYTE_RATE] = body.records_bytes()
        if api_key not in NOT_TIMED:
            values[REQUEST_PERCENTAGE] = took_s
        delay = self.quotas.charge(user, client_id or "", values)
        if delay > 0 and body is not None and hasattr(body, "throttle_time_ms"):
            body.throttle_time_ms = int(delay * 1000)
        return delay
