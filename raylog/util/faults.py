"""Fail points: named places in the code where a fault test can make a process misbehave.

A fault test needs some faults at an exact moment that no outside kill can hit reliably,
say the controller dying after it committed an ISR change and before it answered. The code
marks such a place with ``faults.point("controller.isr_committed")``; a test arms it by
writing a line ``controller.isr_committed = exit-once:/tmp/marker`` into the file that
``$RAYLOG_FAILPOINTS_FILE`` names in the process's environment (every process of a test
cluster on one machine can share one file; each re-reads it when it changes).

Actions:

- ``exit``: the process ends at once (``os._exit``), as a crash would, with nothing flushed.
- ``exit-once:<path>``: ``exit``, the first time only: ``path`` is created (exclusively)
  before the process ends, and a point whose marker exists does nothing. A restarted actor
  hits the same point again; this keeps it from crashing again and again.
- ``sleep:<seconds>``: the calling thread (an actor's event loop too) stops that long, as a
  stuck disk or a long pause would stop it.
- ``off`` (or the point not listed): nothing.

Without ``$RAYLOG_FAILPOINTS_FILE`` a point costs one global lookup: production never sets it.
Plain Python; safe to call from any thread (a stale read of the file only delays arming).
"""

from __future__ import annotations

import logging
import os
import time

logger = logging.getLogger(__name__)

FILE_ENV = "RAYLOG_FAILPOINTS_FILE"

_file = os.environ.get(FILE_ENV) or None
_loaded: tuple[float, int] | None = None  # (mtime, size) of the file as last read
_actions: dict[str, str] = {}


def point(name: str) -> None:
    """Act as the fail point ``name`` is armed to, if it is; else return at once."""
    if _file is None:
        return
    action = _armed().get(name)
    if action is None or action == "off":
        return
    kind, _, argument = action.partition(":")
    if kind == "sleep":
        logger.warning("fail point %s: sleeping %s s", name, argument)
        time.sleep(float(argument))
    elif kind == "exit" or kind == "exit-once":
        if kind == "exit-once" and not _claim(argument):
            return
        logger.warning("fail point %s: exiting", name)
        os._exit(1)
    else:
        logger.error("fail point %s: unknown action %r ignored", name, action)


def _armed() -> dict[str, str]:
    """The actions in the file, read again when its modification time or size changed."""
    global _loaded, _actions
    try:
        stat = os.stat(_file)
    except OSError:
        _loaded, _actions = None, {}
        return _actions
    if _loaded != (stat.st_mtime, stat.st_size):
        actions = {}
        try:
            with open(_file) as f:
                for line in f:
                    name, sep, action = line.partition("=")
                    if sep and name.strip() and not name.lstrip().startswith("#"):
                        actions[name.strip()] = action.strip()
        except OSError:
            return _actions
        _loaded, _actions = (stat.st_mtime, stat.st_size), actions
    return _actions


def _claim(marker: str) -> bool:
    """Create ``marker`` exclusively: whether this call created it."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    return True
