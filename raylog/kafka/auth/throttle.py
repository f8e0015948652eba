"""Limits per client address against password guessing and connection floods.

- :class:`FailureThrottle`: each failed login from an address is answered after a delay
  that doubles with that address's recent failures (from ``base_ms`` up to ``max_ms``); an
  address with no failure for ``forget_ms`` starts again from ``base_ms``. Kafka delays
  every failed authentication by ``connection.failed.authentication.delay.ms`` (100 ms); the
  growth makes guessing from one address slow without slowing anyone else.
- :class:`ConnectionLimit`: at most ``max_per_address`` open connections per address
  (Kafka's ``max.connections.per.ip``); None: no limit.

Rates per user and client id (Kafka's client quotas) are another thing, measured and
enforced by raylog/quotas/ and raylog/kafka/gateway/quotas.py (docs/quotas.md).

Plain Python with an injected clock; used from the listener's event loop only (not
thread-safe).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from raylog.errors import InvalidConfigError


class FailureThrottle:
    def __init__(self, base_ms: int = 100, max_ms: int = 5000, forget_ms: int = 60_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 <= base_ms <= max_ms or forget_ms <= 0:
            raise InvalidConfigError(f"failed-authentication delays need 0 <= base_ms "
                                     f"({base_ms}) <= max_ms ({max_ms}) and forget_ms "
                                     f"({forget_ms}) > 0")
        self.base_ms, self.max_ms, self.forget_ms = base_ms, max_ms, forget_ms
        self._clock = clock
        self._failures: dict[str, tuple[int, float]] = {}  # address -> (count, last, s)

    def failed(self, address: str) -> float:
        """Record a failure from ``address``; the delay (seconds) before answering it."""
        now = self._clock()
        self._forget_old(now)
        count, _ = self._failures.get(address, (0, now))
        count += 1
        self._failures[address] = (count, now)
        return min(self.base_ms * 2 ** min(count - 1, 32), self.max_ms) / 1000

    def failures(self, address: str) -> int:
        """Recent failures from ``address``."""
        self._forget_old(self._clock())
        return self._failures.get(address, (0, 0.0))[0]

    def _forget_old(self, now: float) -> None:
        horizon = now - self.forget_ms / 1000
        for address in [a for a, (_, last) in self._failures.items() if last <= horizon]:
            del self._failures[address]


class ConnectionLimit:
    def __init__(self, max_per_address: int | None) -> None:
        if max_per_address is not None and (type(max_per_address) is not int
                                            or max_per_address <= 0):
            raise InvalidConfigError(f"max_connections_per_ip must be an integer > 0 or "
                                     f"None, got {max_per_address!r}")
        self.max_per_address = max_per_address
        self._open: dict[str, int] = {}

    def acquire(self, address: str) -> bool:
        """Count a new connection from ``address``; False (and not counted) when the
        address has its maximum open already."""
        count = self._open.get(address, 0)
        if self.max_per_address is not None and count >= self.max_per_address:
            return False
        self._open[address] = count + 1
        return True

    def release(self, address: str) -> None:
        count = self._open.get(address, 0) - 1
        if count > 0:
            self._open[address] = count
        else:
            self._open.pop(address, None)

    def open(self, address: str) -> int:
        return self._open.get(address, 0)
