"""How a mirror waits before trying an unreachable cluster again.

Exponential backoff with jitter (KIP-580's shape): ``initial_s``, then twice as long each
time up to ``max_s``, each wait spread by +-``jitter`` so that many partitions that failed
together do not knock again together. :class:`Retrying` adds a deadline and says in one
line what failed and when it tries again. Time and randomness are injected: plain Python,
no Ray.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from raylog.errors import RaylogError

T = TypeVar("T")


class Backoff:
    """The waits between attempts. Not safe for concurrent use; one per retrying loop.

    >>> backoff = Backoff(0.5, 4.0, jitter=0)
    >>> [backoff.next() for _ in range(5)]
    [0.5, 1.0, 2.0, 4.0, 4.0]
    """

    def __init__(self, initial_s: float = 0.5, max_s: float = 30.0, jitter: float = 0.2,
                 rng: random.Random | None = None) -> None:
        if not 0 < initial_s <= max_s:
            raise ValueError(f"backoff needs 0 < initial_s <= max_s, got {initial_s}, {max_s}")
        self.initial_s, self.max_s, self.jitter = initial_s, max_s, jitter
        self._rng = rng or random.Random()
        self.attempts = 0

    def next(self) -> float:
        """Seconds to wait before the next attempt."""
        base = min(self.initial_s * 2 ** self.attempts, self.max_s)
        self.attempts += 1
        return base * self._rng.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter \
            else base

    def reset(self) -> None:
        """An attempt worked: the next failure starts again from ``initial_s``."""
        self.attempts = 0


class Retrying:
    """Runs a call until it works, waiting per a :class:`Backoff` after each retriable
    failure (by default a RaylogError with ``retriable``), telling ``report`` what failed
    and when it tries again. Gives up with the last error once ``give_up_after_s`` (None:
    never) have passed, or at once when ``stopped()`` says so; other errors go straight
    through."""

    def __init__(self, backoff: Backoff, report: Callable[[str], None],
                 give_up_after_s: float | None = None,
                 stopped: Callable[[], bool] = lambda: False,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep,
                 retriable: Callable[[RaylogError], bool] = lambda e: e.retriable) -> None:
        self.backoff, self.report, self.give_up_after_s = backoff, report, give_up_after_s
        self.stopped, self.clock, self.sleep = stopped, clock, sleep
        self.retriable = retriable

    def call(self, what: str, fn: Callable[[], T]) -> T:
        started = self.clock()
        while True:
            try:
                result = fn()
            except RaylogError as e:
                if not self.retriable(e) or self.stopped():
                    raise
                wait = self.backoff.next()
                waited = self.clock() - started
                if self.give_up_after_s is not None and waited + wait > self.give_up_after_s:
                    raise
                self.report(f"{what}: {e}; trying again in {wait:.1f} s")
                self.sleep(wait)
                continue
            self.backoff.reset()
            return result
