"""Futures of produced records: one shared result per batch, a light future per record."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from raylog.errors import InvalidArgumentError, RequestTimeoutError
from raylog.records.append import RecordSlot
from raylog.types import RecordMetadata
from raylog.util.arguments import check_timeout

logger = logging.getLogger(__name__)

def _run_callback(callback: Callable[[], None]) -> None:
    """Run a user's callback; its error is logged, never raised into the producer."""
    try:
        callback()
    except Exception:
        logger.exception("a record future's callback raised")


# Guards callback lists against a result completing while a callback is being added.
_callbacks_lock = threading.Lock()


class BatchResult:
    """The outcome of sending one batch: its base offset, or the error that ended it.

    Completed once by the producer's sender thread; waited on by any thread.
    """

    __slots__ = ("_callbacks", "_done", "base_offset", "count", "error", "observed", "partition",
                 "topic")

    def __init__(self, topic: str, partition: int, count: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.count = count
        self.base_offset = -1
        self.error: BaseException | None = None
        self.observed = False  # someone asked for the outcome (flush reports the others)
        self._done = threading.Event()
        self._callbacks: list[Callable[[], None]] = []

    def complete(self, base_offset: int, error: BaseException | None) -> None:
        with _callbacks_lock:
            self.base_offset = base_offset
            self.error = error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _run_callback(callback)

    def done(self) -> bool:
        return self._done.is_set()

    def ready(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` s for the outcome, without counting as seen; whether it
        came."""
        return self._done.wait(timeout)

    def peek(self, timeout: float | None = None) -> BaseException | None:
        """The error, once complete (waiting up to ``timeout`` s), without counting as seen."""
        self._done.wait(timeout)
        return self.error

    def wait(self, timeout: float | None) -> None:
        self.observed = True
        if not self._done.wait(timeout):
            raise RequestTimeoutError(f"no acknowledgement within {timeout} s")
        if self.error is not None:
            raise self.error

    def on_done(self, callback: Callable[[], None]) -> None:
        self.observed = True
        with _callbacks_lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        _run_callback(callback)


class RecordFuture(RecordSlot):
    """The future RecordMetadata of one sent record: ``RecordFuture(batch, index,
    timestamp)``, the record's batch's BatchResult, its index there and its timestamp (the
    fields are RecordSlot's, made in C without running Python where _append.c is built)."""

    __slots__ = ()

    def done(self) -> bool:
        return self._batch.done()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the record's metadata; raise the error that failed its batch."""
        check_timeout("timeout", timeout)
        batch = self._batch
        batch.wait(timeout)
        offset = -1 if batch.base_offset < 0 else batch.base_offset + self._index
        return RecordMetadata(batch.topic, batch.partition, offset, self._timestamp)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error that failed the record's batch, or None; waits up to ``timeout`` s."""
        check_timeout("timeout", timeout)
        self._batch.observed = True
        if not self._batch._done.wait(timeout):
            raise RequestTimeoutError(f"no acknowledgement within {timeout} s")
        return self._batch.error

    def add_done_callback(self, fn: Callable[[RecordFuture], None]) -> None:
        if not callable(fn):
            raise InvalidArgumentError(f"a done callback must be callable, got {fn!r}")
        self._batch.on_done(lambda: fn(self))


class TableFuture:
    """The future of a ``send_batch``: (partition, base offset, rows) of every batch."""

    def __init__(self, batches: list[BatchResult]) -> None:
        self._batches = batches

    def done(self) -> bool:
        return all(b.done() for b in self._batches)

    def result(self, timeout: float | None = None) -> list[tuple[int, int, int]]:
        """Wait (``timeout`` s in all) for every batch; raise the first batch's error."""
        check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        for batch in self._batches:
            batch.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return [(b.partition, b.base_offset, b.count) for b in self._batches]
