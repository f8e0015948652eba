"""The quotas in force at one place that serves clients (a broker's process, a Kafka
listener), and the delay each answer gets from them.

:class:`ClientQuotas` holds the quotas as the controller last said them
(:meth:`ClientQuotas.replace`) and one :class:`~raylog.quotas.rate.WindowedRate` per quota
key and client (or group of clients sharing an entity: raylog/quotas/entity.py). Each
answer is recorded (:meth:`ClientQuotas.record`: the bytes of a produce request or of a
fetch answer, the time a request took) and, when the client's rate is then above its
quota, gets a throttle time as Kafka computes it::

    throttle = (rate - quota) / quota * window

(about the time after which the rate over the window is back at the quota if nothing
more comes). For request time it is at most one sample, as Kafka's; for byte rates it is
not bounded by the window (a client that burst far beyond its quota waits until the window
has forgotten the burst: bounding it there would let the next burst through at once), only
by MAX_THROTTLE_S, so that a held answer stays within a client's request timeout (30 s by
default). The caller delays the answer, or the connection's next request, by it, and
reports it to the client; nothing is refused.

A quota is enforced by each serving process on its own, as Kafka's by each broker: a
client talking to three brokers may reach three times its quota in all.

Plain Python with an injected clock (seconds). Not thread-safe: one owner (an event loop)
records; :meth:`replace` from the same loop.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from raylog.errors import InvalidConfigError
from raylog.quotas.entity import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    resolve,
)
from raylog.quotas.rate import WindowedRate
from raylog.util.arguments import settings_from_environ
from raylog.util.metrics import recorder

MAX_THROTTLE_S = 20.0  # no answer is held back longer (clients' request timeouts: 30 s)
MAX_RESOLVED = 10_000  # clients whose quotas are remembered (then forgotten all at once)
WINDOW_NUM_ENV = "RAYLOG_QUOTA_WINDOW_NUM"
WINDOW_SIZE_ENV = "RAYLOG_QUOTA_WINDOW_SIZE_SECONDS"


@dataclasses.dataclass(frozen=True)
class QuotaSettings:
    """Kafka's ``quota.window.num`` (samples in the window) and
    ``quota.window.size.seconds`` (each sample's length), from the environment of the
    process that enforces (``RAYLOG_QUOTA_WINDOW_NUM``, ``RAYLOG_QUOTA_WINDOW_SIZE_SECONDS``,
    set where its node's ``ray start`` runs)."""

    window_num: int = 11
    window_size_s: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.window_num, bool) or not isinstance(self.window_num, int) \
                or self.window_num < 2:
            raise InvalidConfigError(f"{WINDOW_NUM_ENV} must be an integer >= 2, got "
                                     f"{self.window_num!r}")
        if isinstance(self.window_size_s, bool) \
                or not isinstance(self.window_size_s, int | float) \
                or not 0 < self.window_size_s <= 3600:
            raise InvalidConfigError(f"{WINDOW_SIZE_ENV} must be a number of seconds in "
                                     f"(0, 3600], got {self.window_size_s!r}")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> QuotaSettings:
        return cls(**settings_from_environ(environ, {
            "window_num": (WINDOW_NUM_ENV, int, "an integer"),
            "window_size_s": (WINDOW_SIZE_ENV, float, "a number of seconds")}))


class ClientQuotas:
    """The quotas of every entity (as the controller said them) and the rates of the
    clients that have one. ``throttled_s``: the delays given, in all, per quota key (the
    metric, raylog_throttle_time_ms, is counted by :meth:`charge`)."""

    def __init__(self, settings: QuotaSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or QuotaSettings()
        self._clock = clock
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        self._rates: dict[tuple[str, str, str], WindowedRate] = {}
        # Each client's quota as resolve() found it, until the quotas change: a request
        # pays one dict lookup, not a walk over the entities (most clients have none).
        self._resolved: dict[tuple[str, str | None, str],
                             tuple[float, tuple[str, str]] | None] = {}
        self._last_sweep = clock()
        self.version = -1  # of the controller's quotas last replaced; -1: none yet
        self.throttled_s = {PRODUCER_BYTE_RATE: 0.0, CONSUMER_BYTE_RATE: 0.0,
                            REQUEST_PERCENTAGE: 0.0}

    @property
    def active(self) -> bool:
        """Whether any quota is set (without one, nothing needs recording)."""
        return bool(self._quotas)

    def replace(self, quotas: Mapping[QuotaEntity, Mapping[str, float]],
                version: int) -> None:
        """The quotas in force from now on (the rates measured so far stay)."""
        self._quotas = {entity: dict(values) for entity, values in quotas.items()}
        self._resolved = {}
        self.version = version

    def quota(self, key: str, user: str | None, client_id: str) -> float | None:
        """The ``key`` quota of this client, None when it has none."""
        found = self._resolve(key, user, client_id)
        return None if found is None else found[0]

    def charge(self, user: str | None, client_id: str, values: Mapping[str, float]) -> float:
        """Record one answer of the client (``values``: quota key -> bytes, or seconds of
        handling for request_percentage); the seconds it is to be held back, the largest of
        the keys' delays (0: none), counted as ``raylog_throttle_time_ms`` by that key and
        the client id. 0 at once while no quota is set."""
        if not self._quotas:
            return 0.0
        key, delay = max(((k, self.record(k, user, client_id, v)) for k, v in values.items()),
                         key=lambda kv: kv[1], default=("", 0.0))
        if delay > 0:
            recorder().inc("raylog_throttle_time_ms", int(delay * 1000), quota=key,
                           client_id=client_id)
        return delay

    def _resolve(self, key: str, user: str | None,
                 client_id: str) -> tuple[float, tuple[str, str]] | None:
        """resolve() over the quotas in force, remembered until they change."""
        asked = (key, user, client_id)
        try:
            return self._resolved[asked]
        except KeyError:
            pass
        if len(self._resolved) >= MAX_RESOLVED:  # many short-lived client ids
            self._resolved.clear()
        found = self._resolved[asked] = resolve(self._quotas, key, user, client_id)
        return found

    def record(self, key: str, user: str | None, client_id: str, value: float) -> float:
        """Record ``value`` (bytes; for request_percentage, seconds of handling) for the
        client; the seconds its answer is to be delayed (0 when within its quota or
        without one)."""
        found = self._resolve(key, user, client_id)
        if found is None:
            return 0.0
        bound, (user_tag, client_tag) = found
        now = self._clock()
        self._sweep(now)
        settings = self.settings
        rate = self._rates.get((key, user_tag, client_tag))
        if rate is None:
            rate = self._rates[(key, user_tag, client_tag)] = WindowedRate(
                settings.window_num, settings.window_size_s, now)
        if key == REQUEST_PERCENTAGE:
            value *= 100  # seconds of handling -> percent-seconds: the rate is a percentage
        rate.record(value, now)
        measured = rate.rate(now)
        if measured <= bound:
            return 0.0
        delay = (measured - bound) / bound * rate.window_s(now)
        if key == REQUEST_PERCENTAGE:
            delay = min(delay, settings.window_size_s)  # Kafka's bound: one sample
        delay = min(delay, MAX_THROTTLE_S)
        self.throttled_s[key] += delay
        return delay

    def _sweep(self, now: float) -> None:
        """Forget the rates of clients silent for a whole window (once per window): a
        process serving many short-lived client ids keeps only the recent ones."""
        horizon = self.settings.window_size_s * self.settings.window_num
        if now - self._last_sweep < horizon:
            return
        self._last_sweep = now
        for tags in [t for t, r in self._rates.items() if now - r.last_recorded() >= horizon]:
            del self._rates[tags]


class Throttled(NamedTuple):
    """A serving process's answer that was held back by the client's quota for
    ``throttle_time_ms`` (only a request that named its client id gets one: raylog's
    producer and consumer unwrap it)."""

    answer: Any
    throttle_time_ms: int


def unwrap(answer: Any) -> tuple[Any, int]:
    """(the answer, the ms it was held back: 0 if it was not)."""
    if isinstance(answer, Throttled):
        return answer.answer, answer.throttle_time_ms
    return answer, 0
