"""Pausing processes so that none stays paused: a SIGSTOP always meets its SIGCONT.

Every process stopped is written to a file (pid and the process's creation time, so a pid
used again by another process is left alone) the moment it is stopped, and taken off when it
is resumed. The holder resumes what is left when it stops; if the process holding it was
killed, whoever started that process resumes the rest from the file
(:func:`resume_left_paused`). Plain Python (psutil), no Ray.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import psutil


class Pauses:
    """The processes one holder has stopped. One thread pauses at a time; any thread may
    resume."""

    def __init__(self, record: Path) -> None:
        self.record = record
        self._paused: dict[int, float] = {}  # pid -> its process's creation time
        self._write()

    def pause(self, pid: int, seconds: float) -> None:
        """SIGSTOP ``pid`` for ``seconds``; SIGCONT however this ends."""
        self._paused[pid] = psutil.Process(pid).create_time()
        self._write()
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(seconds)  # the fault's length: what the schedule says, not a wait
        finally:
            self.resume(pid)

    def resume(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        self._paused.pop(pid, None)
        self._write()

    def resume_all(self) -> None:
        for pid in list(self._paused):
            self.resume(pid)

    def _write(self) -> None:
        self.record.write_text(json.dumps(self._paused))


def resume_left_paused(record: Path) -> list[int]:
    """SIGCONT the processes a holder left stopped (it was killed while one was paused), if
    they are still the processes it stopped; which it resumed."""
    try:
        paused = json.loads(record.read_text() or "{}")
    except FileNotFoundError:
        return []
    resumed = []
    for pid, created in paused.items():
        with contextlib.suppress(psutil.Error):
            if psutil.Process(int(pid)).create_time() == created:
                os.kill(int(pid), signal.SIGCONT)
                resumed.append(int(pid))
    return resumed
