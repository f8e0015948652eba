"""How a long-running command stops: on SIGINT (Ctrl-C) and SIGTERM alike.

``raylog consume``, ``registry``, ``mirror`` and ``flight-serve`` run until they are told
to stop. A terminal says so with Ctrl-C, a supervisor (systemd, Kubernetes, ``kill``, a
test) with SIGTERM: both end the command the same way, cleanly, its totals printed.
:class:`StopSignals` is that rule, written once for every such command::

    with StopSignals() as stop:
        while not stop.is_set():
            ...                           # one short step
    out.write(f"... totals ...\\n")

- The first signal asks for a stop: :meth:`~StopSignals.is_set` turns true,
  :meth:`~StopSignals.wait` returns, and ``on_stop`` (if given) is called, for a command
  that must be told (it runs in the signal handler: keep it quick).
- A second signal, for a command that does not stop soon enough, raises
  KeyboardInterrupt (``raylog`` then says "interrupted" and exits with status 130), or
  calls ``on_second`` instead.
- A signal this process inherited as ignored stays ignored. A shell without job control
  (``raylog consume ... &`` in a script) starts background commands with SIGINT ignored, as
  POSIX asks, so that a Ctrl-C meant for the script leaves them alone; SIGTERM still stops
  them. A test that wants to interrupt a command it starts resets the child's SIGINT.
- The handlers the process had before come back when the block ends.

Python runs signal handlers in the main thread: enter the block there.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """SIGINT and SIGTERM as a stop request while the ``with`` block runs; see the module
    docstring. ``received``: the signal that asked, once one did. ``is_set`` and ``wait``
    are safe from any thread."""

    def __init__(self, on_stop: Callable[[], None] | None = None,
                 on_second: Callable[[], None] | None = None) -> None:
        self.on_stop = on_stop
        self.on_second = on_second
        self.received: signal.Signals | None = None
        self._requested = threading.Event()
        self._previous: dict[signal.Signals, Any] = {}

    def is_set(self) -> bool:
        """Whether a stop was asked for."""
        return self._requested.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Until a stop is asked for (True), or ``timeout`` seconds (False)."""
        return self._requested.wait(timeout)

    def __enter__(self) -> StopSignals:
        for sig in SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            # None: a handler set outside Python, which Python cannot set again.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._requested.is_set():
            if self.on_second is None:
                raise KeyboardInterrupt
            self.on_second()
            return
        self.received = signal.Signals(signum)
        self._requested.set()
        if self.on_stop is not None:
            self.on_stop()
