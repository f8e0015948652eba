"""The byte rate a follower copies a moving replica at (``replication.throttled.rate``).

A replica that a reassignment or a balance adds copies its partition from the leader while
producers go on; so that the copy does not take the leader's disk and network from them, the
follower asks for no more than its budget allows (docs/balancing.md). :class:`ByteRate` is
that budget: a token bucket of ``rate`` bytes a second, holding at most ``BURST_S`` seconds
of them, that may go into debt, because a fetch returns at least one whole batch however
small the allowance; a debt is paid back before the next fetch. Time is injected.

Plain Python; one event loop uses each (not thread-safe).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from raylog.errors import InvalidArgumentError

BURST_S = 0.5  # at most this many seconds of the rate are fetched at once


class ByteRate:
    """A budget of ``rate`` bytes a second shared by the fetches it throttles.

    >>> now = [0.0]
    >>> budget = ByteRate(1000, clock=lambda: now[0])
    >>> budget.take(10_000)   # the burst: half a second's worth
    500
    >>> budget.settle(500, 700)  # the leader answered a whole batch of 700 bytes
    >>> budget.take(10_000), round(budget.wait_s(), 3)
    (0, 0.201)
    """

    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        if type(rate) is not int or rate <= 0:
            raise InvalidArgumentError(f"a throttled rate is a number of bytes a second > 0, "
                                       f"got {rate!r}")
        self.rate = rate
        self._clock = clock
        self._capacity = max(1.0, rate * BURST_S)
        self._tokens = self._capacity
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def take(self, most: int) -> int:
        """Bytes that one fetch may ask for now, at most ``most``, taken from the budget
        (0 while it is in debt or holds less than a byte)."""
        self._refill()
        if self._tokens < 1:
            return 0
        taken = min(most, int(self._tokens))
        self._tokens -= taken
        return taken

    def settle(self, taken: int, used: int) -> None:
        """A fetch that took ``taken`` got ``used`` bytes: give back the rest, or owe more."""
        self._tokens += taken - used

    def wait_s(self) -> float:
        """Seconds until the budget holds a byte again."""
        self._refill()
        return max(0.0, (1 - self._tokens) / self.rate)
