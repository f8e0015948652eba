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

Python runs signal handlers in the main thread: enter the block there. The kernel may
deliver a process's signal to any of its threads (Ray's and gRPC's included); the main
thread, asleep in :meth:`~StopSignals.wait`, would then not wake, and the handler would run
only when its wait timed out. So the block owns Python's wakeup fd
(:func:`signal.set_wakeup_fd`), which the C-level handler writes to in whichever thread
took the signal, and the main thread waits on that socket, not on a lock.
"""

from __future__ import annotations

import contextlib
import select
import signal
import socket
import threading
import time
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
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        self._previous_wakeup_fd = -1

    def is_set(self) -> bool:
        """Whether a stop was asked for."""
        return self._requested.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Until a stop is asked for (True), or ``timeout`` seconds (False)."""
        if self._wakeup is None or threading.current_thread() is not threading.main_thread():
            return self._requested.wait(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        reader = self._wakeup[0]
        while not self._requested.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            # Readable once a signal came, whichever thread took it; its Python handler
            # runs in this thread right after select returns.
            if select.select([reader], [], [], left)[0]:
                with contextlib.suppress(BlockingIOError):  # drained by an earlier wake
                    reader.recv(4096)
        return True

    def __enter__(self) -> StopSignals:
        for sig in SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                self._previous[sig] = signal.signal(sig, self._handle)
        if threading.current_thread() is threading.main_thread():
            reader, writer = socket.socketpair()
            reader.setblocking(False)
            writer.setblocking(False)
            self._wakeup = (reader, writer)
            self._previous_wakeup_fd = signal.set_wakeup_fd(writer.fileno(),
                                                            warn_on_full_buffer=False)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            # None: a handler set outside Python, which Python cannot set again.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()
        if self._wakeup is not None:
            signal.set_wakeup_fd(self._previous_wakeup_fd)
            for end in self._wakeup:
                end.close()
            self._wakeup = None

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
