"""Processes a test starts and talks to while they run (``raylog consume``, ``raylog
registry``, a driver script): started, read, waited on and stopped by one class, so that no
test can hang on one.

- Every pipe is read by a thread as the child writes; a test waits for a line, or for the
  exit, with a deadline, and fails saying what it waited for and what the child wrote.
- The child starts in a session (process group) of its own and the whole group is killed
  when the test is done with it, whatever happened.
- The child starts with SIGINT at its default disposition, whatever this process has: a
  test run started in the background by a shell without job control (``make test &`` in a
  script, a CI runner, nohup) has SIGINT ignored, and a child would inherit that and ignore
  the test's Ctrl-C (``os.execvp`` keeps an ignored signal ignored, so the reset is made in
  the child before it becomes the command).

For a command that only runs to its end, ``subprocess.run(..., timeout=...)`` is enough.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType

# Runs in the child: SIGINT back to its default, then becomes the command (same pid).
_SIGINT_AT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                      "os.execvp(sys.argv[1], sys.argv[1:])")
STOP_TIMEOUT_S = 60.0  # a command asked to stop has this long to exit


class Child:
    """One running command: ``lines`` (its stdout, and its stderr with ``merge_stderr``) and
    ``errors`` (its stderr) as they come. Use as a context manager, or call :meth:`kill`
    in a ``finally``."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike | None = None, stdin: bool = False,
                 merge_stderr: bool = False) -> None:
        self.argv = list(argv)
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SIGINT_AT_DEFAULT, *self.argv], env=env, cwd=cwd,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, text=True,
            start_new_session=True)
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._taken = 0  # lines handed out by next_line
        self._changed = threading.Condition()
        self._readers = [self._reader(self.process.stdout, self.lines)]
        if not merge_stderr:
            self._readers.append(self._reader(self.process.stderr, self.errors))

    def _reader(self, pipe, into: list[str]) -> threading.Thread:
        def read() -> None:
            for line in pipe:
                with self._changed:
                    into.append(line.rstrip("\n"))
                    self._changed.notify_all()
            with self._changed:  # end of output: whoever waits must look at the exit
                self._changed.notify_all()

        thread = threading.Thread(target=read, daemon=True, name=f"read {self.argv[0]}")
        thread.start()
        return thread

    @property
    def stderr(self) -> str:
        return "".join(f"{line}\n" for line in self.errors)

    def _wait(self, ready, timeout: float, what: str):
        """``ready()`` under the lock until it gives something, the output ends, or the
        deadline passes (then fail, saying what the child wrote)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = ready()
                if found is not None:
                    return found
                ended = not any(r.is_alive() for r in self._readers)
                left = deadline - time.monotonic()
                if ended or left <= 0:
                    break
                self._changed.wait(left)
        status = self.process.poll()
        raise AssertionError(
            f"{' '.join(self.argv)}: no {what} within {timeout} s "
            f"({'running' if status is None else f'exited with status {status}'}); "
            f"it wrote: {self.lines[-20:]} {self.errors[-20:]}")

    def next_line(self, timeout: float = 60) -> str:
        """The next line of stdout this method has not returned yet."""
        def ready() -> str | None:
            if self._taken < len(self.lines):
                self._taken += 1
                return self.lines[self._taken - 1]
            return None
        return self._wait(ready, timeout, "line")

    def wait_for_line(self, text: str, timeout: float = 60) -> str:
        """The first line of stdout (merged: and stderr) that holds ``text``."""
        return self._wait(lambda: next((line for line in self.lines if text in line), None),
                          timeout, f"line with {text!r}")

    def send(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def stop(self, sig: int = signal.SIGINT, timeout: float = STOP_TIMEOUT_S) -> int:
        """Send ``sig`` (as Ctrl-C or a supervisor would) and wait, with a deadline, for the
        exit and the end of the output; its exit status. A child that does not exit in
        time is killed and the test fails."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.wait(timeout, f"exit after {signal.Signals(sig).name}")

    def close_stdin(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """End the child's input and wait for its exit (a driver that stops at EOF)."""
        self.process.stdin.close()
        return self.wait(timeout, "exit after the end of its input")

    def wait(self, timeout: float = STOP_TIMEOUT_S, what: str = "exit") -> int:
        """The exit status, within ``timeout``; all it wrote is in ``lines``/``errors``."""
        try:
            status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{' '.join(self.argv)}: no {what} within {timeout} s; "
                                 f"killed. It wrote: {self.lines[-20:]} "
                                 f"{self.errors[-20:]}") from None
        deadline = time.monotonic() + 10  # what it wrote last, unless a grandchild holds on
        for reader in self._readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        return status

    def kill(self) -> None:
        """SIGKILL to the child's whole process group, if it is still there."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(30)

    def __enter__(self) -> Child:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.kill()


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """This process ignores SIGINT while the block runs, as a test run started with
    ``make test &`` from a script does: a child started in the block would inherit that,
    unless it resets it as :class:`Child` does."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def sigint_handled() -> Iterator[None]:
    """SIGINT at Python's default handler while the block runs, whatever this process
    inherited: a test run started in the background by a script (``make test &``,
    ``nohup``) starts with SIGINT ignored, and a command keeps an inherited ignore."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
