"""When a future is overdue (not resolved past its deadline plus the slack), the stacks of
every thread of the run's process, written to a file: what the producer's threads were
waiting on is what a ``late_resolution`` anomaly needs to be diagnosed."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from pathlib import Path

from tests.history import SLACK_S
from tests.integration.workload import Sent


class OverdueWatch:
    """Looks at the producers' sends every ``interval`` s in a thread; for each spell in
    which one is overdue, dumps every thread's stack to ``<root>/overdue-<t>.txt`` (t: s
    after ``origin``) once."""

    def __init__(self, sent: list[list[Sent]], root: Path, origin: float,
                 interval: float = 1.0) -> None:
        self.dumps: list[str] = []
        self._sent = sent
        self._root = root
        self._origin = origin
        self._interval = interval
        self._first = [0] * len(sent)  # per producer: its first send not yet resolved
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="overdue-watch")
        self._thread.start()

    def _overdue(self, now: float) -> Sent | None:
        for i, mine in enumerate(self._sent):
            while self._first[i] < len(mine) and mine[self._first[i]].future.done():
                self._first[i] += 1
            for s in mine[self._first[i]:self._first[i] + 1000]:
                if not s.future.done() and s.deadline is not None and \
                        now > s.deadline + SLACK_S:
                    return s
        return None

    def _run(self) -> None:
        spell = False
        while not self._stop.wait(self._interval):
            late = self._overdue(time.monotonic())
            if late is not None and not spell:
                self._dump(late)
            spell = late is not None

    def _dump(self, late: Sent) -> None:
        at = time.monotonic() - self._origin
        names = {t.ident: t.name for t in threading.enumerate()}
        lines = [f"t+{at:.1f} s: producer {late.producer} send {late.index} unresolved "
                 f"{time.monotonic() - late.deadline:.1f} s after its deadline\n"]
        for ident, frame in sys._current_frames().items():
            lines.append(f"\n--- thread {names.get(ident, ident)}\n")
            lines.extend(traceback.format_stack(frame))
        path = self._root / f"overdue-{at:.0f}.txt"
        path.write_text("".join(lines))
        self.dumps.append(str(path))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
