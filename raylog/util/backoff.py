"""How long to wait before trying again, said once: exponential backoff with jitter (the
shape of Kafka's KIP-580).

The wait before retry ``n`` (0: the first) is ``initial_s * 2**n``, at most ``max_s``, spread
by +-``jitter`` (a fraction) so that many callers that failed together do not knock again
together. :func:`backoff_s` computes one wait from a retry count; :class:`Backoff` counts
the retries of one loop. Randomness is injected: plain Python.
"""

from __future__ import annotations

import random


def backoff_s(retry: int, initial_s: float, max_s: float, jitter: float = 0.0,
              rng: random.Random | None = None) -> float:
    """The wait before retry number ``retry`` (0: the first).

    >>> [backoff_s(n, 0.1, 1.0) for n in range(6)]
    [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    """
    base = min(initial_s * 2 ** retry, max_s)
    if not jitter:
        return base
    return base * (rng or random).uniform(1 - jitter, 1 + jitter)


class Backoff:
    """The waits between attempts. Not safe for concurrent use; one per retrying loop.

    >>> backoff = Backoff(0.5, 4.0, jitter=0)
    >>> [backoff.next() for _ in range(5)]
    [0.5, 1.0, 2.0, 4.0, 4.0]
    """

    def __init__(self, initial_s: float = 0.5, max_s: float = 30.0, jitter: float = 0.2,
                 rng: random.Random | None = None) -> None:
        if not 0 <= initial_s <= max_s:
            raise ValueError(f"backoff needs 0 <= initial_s <= max_s, got {initial_s}, {max_s}")
        self.initial_s, self.max_s, self.jitter = initial_s, max_s, jitter
        self._rng = rng or random.Random()
        self.attempts = 0

    def peek(self) -> float:
        """The wait :meth:`next` will give (without jitter), without counting it."""
        return backoff_s(self.attempts, self.initial_s, self.max_s)

    def next(self) -> float:
        """Seconds to wait before the next attempt."""
        wait = backoff_s(self.attempts, self.initial_s, self.max_s, self.jitter, self._rng)
        self.attempts += 1
        return wait

    def reset(self) -> None:
        """An attempt worked: the next failure starts again from ``initial_s``."""
        self.attempts = 0


def retry_backoff(retry_backoff_ms: float) -> Backoff:
    """A client's waits between tries of one request: its ``retry_backoff_ms``, doubled per
    try up to a second (or that setting, if longer), without jitter."""
    first_s = retry_backoff_ms / 1000
    return Backoff(first_s, max(first_s, 1.0), jitter=0)
