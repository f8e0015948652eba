"""How a mirror waits before trying an unreachable cluster again.

Exponential backoff with jitter (raylog/util/backoff.py's :class:`Backoff`, KIP-580's
shape), so that many partitions that failed together do not knock again together.
:class:`Retrying` adds a deadline and says in one line what failed and when it tries again.
Time and randomness are injected: plain Python, no Ray.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from raylog.errors import RaylogError
from raylog.util.backoff import Backoff

__all__ = ["Backoff", "Retrying"]

T = TypeVar("T")


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
