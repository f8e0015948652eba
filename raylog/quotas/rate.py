"""A rate measured over a window of samples, as Kafka's ``Rate`` over a ``SampledStat``.

The window is ``samples`` samples of ``sample_s`` seconds each (Kafka's
``quota.window.num``, 11, and ``quota.window.size.seconds``, 1). A value recorded goes into
the current sample; a sample older than ``sample_s`` is closed and a new one started at the
time of the record; a sample that started ``samples * sample_s`` or more ago counts no more.
The rate is the sum of the samples over the time since the oldest one started, that time
taken as at least ``samples - 1`` whole samples: a client that just started is measured over
nearly the whole window, so its first burst is not read as a huge rate (Kafka does the
same, and a new client may so send up to about ``(samples - 1) * sample_s`` seconds' worth
of its quota before it is first delayed).

Plain Python; time in seconds from the caller (an injected clock). Not thread-safe: one
owner (an event loop) records and measures.
"""

from __future__ import annotations


class WindowedRate:
    __slots__ = ("_current", "_starts", "_values", "sample_s", "samples")

    def __init__(self, samples: int, sample_s: float, now: float) -> None:
        self.samples = samples
        self.sample_s = sample_s
        self._starts = [now] * samples   # when each sample started (s)
        self._values = [0.0] * samples
        self._current = 0

    def record(self, value: float, now: float) -> None:
        """Add ``value`` at time ``now`` (seconds, from the same clock every call)."""
        self._expire(now)
        if now - self._starts[self._current] >= self.sample_s:
            self._current = (self._current + 1) % self.samples  # the oldest slot is reused
            self._starts[self._current] = now
            self._values[self._current] = 0.0
        self._values[self._current] += value

    def window_s(self, now: float) -> float:
        """The time the rate is measured over: since the oldest sample started, at least
        ``samples - 1`` whole samples (and never 0)."""
        self._expire(now)
        elapsed = now - min(self._starts)
        full = int(elapsed // self.sample_s)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.sample_s
        return max(elapsed, 0.001)

    def rate(self, now: float) -> float:
        """Units per second over the window."""
        window = self.window_s(now)
        return sum(self._values) / window

    def last_recorded(self) -> float:
        """When the current sample started: at or before the last record."""
        return self._starts[self._current]

    def _expire(self, now: float) -> None:
        """Samples that started a whole window ago count no more: they start again now,
        empty (so an idle client's next burst is measured afresh)."""
        horizon = self.samples * self.sample_s
        for i, start in enumerate(self._starts):
            if now - start >= horizon:
                self._starts[i] = now
                self._values[i] = 0.0
