"""Checking producers' large batches ahead of their appends, on threads, in call order.

A leader checks every producer batch's payload before appending it (``PartitionLog.append``:
one LZ4 decompression and Arrow's full validation of the stream). For large LZ4 batches
that check was about half of the broker's event loop's time, and the loop does one thing at
a time: while it checked a call's batches the file writes of the next waited, and the
second core stayed idle once the producer had finished compressing (docs/performance.md,
"The broker's payload checks off its event loop").

So a produce call that carries large batches (``CHECK_AHEAD_BYTES`` each or more) has them
checked on a small pool of threads first: LZ4 and Arrow's reader release the GIL, so the
checks of a call run on every core, beside the loop's appends of the calls before it. The
appends themselves stay on the event loop, unchanged, and take the check's outcome in
place of checking again (an error the check found is raised where the append would have
raised it, among its other checks).

Order: the appends of produce calls keep the order the calls started in, as when every
append ran at the start of its call: a call that waits for its checks takes a turn
(:class:`AppendTurns`), and any call that starts while an earlier one still waits waits
behind it. A call that finds no one waiting and has no large batch appends at once, without
yielding to the loop: small batches (latency's) never wait for a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from raylog.records.payload import check_ahead

# A batch this large or larger is checked on a thread: below it the hand-off to a thread
# (tens of microseconds) is a fair share of the check itself.
CHECK_AHEAD_BYTES = 256 << 10


class AppendTurns:
    """The order of the appends of calls that wait before appending (one per event loop).

    A call that must wait (for its checks, or for an earlier call that waits) appends inside
    ``async with turns.turn():``; it enters once every call that took a turn before it has
    left its own. ``busy`` says whether any has not: then a call that would append at once
    must take a turn too, or it would overtake them.
    """

    def __init__(self) -> None:
        self._last: asyncio.Future[None] | None = None

    def busy(self) -> bool:
        return self._last is not None and not self._last.done()

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        prior = self._last if self.busy() else None
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last = mine
        try:
            if prior is not None:
                # asyncio.wait, not await: a caller cancelled here must not cancel the
                # earlier call's turn (every later one waits on it)
                await asyncio.wait([prior])
            yield
        finally:
            mine.set_result(None)
            if self._last is mine:
                self._last = None

    async def wait_for_earlier(self) -> None:
        """Return once every call that took a turn before this one appended: at once,
        without yielding, if none is waiting. The caller appends before it next yields."""
        if self.busy():
            async with self.turn():
                pass


class PayloadChecks:
    """The threads of one broker process that check large batches ahead of their appends."""

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads or min(4, os.cpu_count() or 1)
        self._executor: ThreadPoolExecutor | None = None

    def start(self, batches: Sequence[pa.Buffer | bytes | memoryview]
              ) -> list[asyncio.Future[pa.Table | Exception] | None] | None:
        """Start checking each large batch of a call on the threads: for each batch its
        check's future, or None (checked inline by its append); None if no batch is large."""
        if not any(len(batch) >= CHECK_AHEAD_BYTES for batch in batches):
            return None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._threads,
                                                thread_name_prefix="raylog-check")
        loop = asyncio.get_running_loop()
        return [loop.run_in_executor(self._executor, check_ahead, batch)
                if len(batch) >= CHECK_AHEAD_BYTES else None for batch in batches]

    @staticmethod
    async def outcomes(checks: list[asyncio.Future[pa.Table | Exception] | None] | None,
                       count: int) -> list[pa.Table | Exception | None]:
        """The outcome of each batch's check once all are done (None: checked inline)."""
        if checks is None:
            return [None] * count
        started = [check for check in checks if check is not None]
        if started:
            await asyncio.wait(started)
        return [None if check is None else check.result() for check in checks]

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
