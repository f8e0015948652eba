"""Progress of long work: a bar (tqdm) on a terminal, plain lines otherwise.

The demo, the benchmarks and ``raylog produce --file`` report progress through
:func:`progress`. On a terminal it draws a tqdm bar on stderr; when stderr is a file or a
pipe (CI logs, ``2> log``) it prints a plain line at most every ``every_s`` seconds and one
at the end, so that logs stay readable and a bar's carriage returns never land in them.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

PLAIN_EVERY_S = 10.0


class Progress:
    """Counts units of work done; ``update(n)`` after each step, ``close()`` at the end
    (or use it as a context manager)."""

    def __init__(self, total: int | None, what: str, unit: str, stream: TextIO,
                 every_s: float) -> None:
        self.total, self.what, self.unit = total, what, unit
        self.done = 0
        self._stream = stream
        self._every_s = every_s
        self._started = self._last = time.monotonic()
        self._bar = None
        if stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=what, unit=f" {unit}", unit_scale=True,
                             file=stream, dynamic_ncols=True, leave=True)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= self._every_s:
            self._last = now
            self._line(now)

    def _line(self, now: float) -> None:
        elapsed = max(now - self._started, 1e-9)
        of = f" of {self.total:,}" if self.total is not None else ""
        self._stream.write(f"{self.what}: {self.done:,}{of} {self.unit} in {elapsed:.1f} s "
                           f"({self.done / elapsed:,.0f} {self.unit}/s)\n")
        self._stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._every_s >= 0:
            self._line(time.monotonic())
            self._every_s = -1.0  # once

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def progress(total: int | None, what: str, unit: str = "records", stream: TextIO | None = None,
             every_s: float = PLAIN_EVERY_S) -> Progress:
    """A progress display for ``total`` units (None: unknown) of ``what``, on ``stream``
    (default stderr)."""
    return Progress(total, what, unit, stream or sys.stderr, every_s)
