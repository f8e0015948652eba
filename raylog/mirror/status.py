"""What a running mirror shows: records copied per second and lag, per remote topic.

:class:`MirrorStatus` counts (thread-safe; copiers update it); :class:`StatusDisplay` shows
it on a thread of its own: one tqdm bar per topic on a terminal, plain lines at most every
``every_s`` seconds otherwise (logs stay readable, as :mod:`raylog.util.progress` does).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from raylog.util.progress import PLAIN_EVERY_S


@dataclasses.dataclass
class TopicRow:
    topic: str
    copied: int
    rate: float     # records/s since the previous look
    lag: int        # source offsets not copied yet (from the source's high watermarks)


class MirrorStatus:
    """Records copied and partition positions per remote topic. Safe for concurrent use."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._copied: dict[str, int] = {}
        self._lag: dict[tuple[str, int], int] = {}
        self._seen: dict[str, tuple[float, int]] = {}
        self._first: dict[str, tuple[float, int]] = {}  # when each topic began copying

    def copied(self, topic: str, records: int) -> None:
        with self._lock:
            self._first.setdefault(topic, (self._clock(), 0))
            self._copied[topic] = self._copied.get(topic, 0) + records

    def position(self, topic: str, partition: int, copied_to: int, high_watermark: int) -> None:
        """Where a partition's copy stands against its source's high watermark."""
        with self._lock:
            self._copied.setdefault(topic, 0)
            self._lag[(topic, partition)] = max(high_watermark - copied_to, 0)

    def total(self) -> int:
        with self._lock:
            return sum(self._copied.values())

    def rows(self, overall: bool = False) -> list[TopicRow]:
        """Each topic's figures; the rate is over the time since the previous call (with
        ``overall``, since the topic was first seen)."""
        now = self._clock()
        out = []
        with self._lock:
            for topic, copied in sorted(self._copied.items()):
                self._first.setdefault(topic, (now, copied))
                since, before = self._first[topic] if overall else \
                    self._seen.get(topic, (now, copied))
                rate = (copied - before) / (now - since) if now > since else 0.0
                self._seen[topic] = (now, copied)
                lag = sum(v for (t, _), v in self._lag.items() if t == topic)
                out.append(TopicRow(topic, copied, rate, lag))
        return out


class StatusDisplay:
    """Shows a MirrorStatus on ``stream`` until :meth:`close` (which shows it once more)."""

    def __init__(self, status: MirrorStatus, stream: TextIO, every_s: float = PLAIN_EVERY_S
                 ) -> None:
        self.status, self.stream = status, stream
        self._tty = stream.isatty()
        self._every_s = 0.5 if self._tty else every_s
        self._bars: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raylog-mirror-status",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self.show()

    def show(self, overall: bool = False) -> None:
        for row in self.status.rows(overall):
            if self._tty:
                self._bar(row)
            else:
                self.stream.write(f"mirror: {row.topic}: {row.copied:,} records copied "
                                  f"({row.rate:,.0f}/s), lag {row.lag:,}\n")
        if not self._tty:
            self.stream.flush()

    def _bar(self, row: TopicRow) -> None:
        bar = self._bars.get(row.topic)
        if bar is None:
            from tqdm import tqdm

            bar = self._bars[row.topic] = tqdm(desc=row.topic, unit=" records", unit_scale=True,
                                               file=self.stream, dynamic_ncols=True,
                                               position=len(self._bars), leave=True)
        bar.update(row.copied - bar.n)
        bar.set_postfix_str(f"lag {row.lag:,}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.show(overall=True)
        for bar in self._bars.values():
            bar.close()
