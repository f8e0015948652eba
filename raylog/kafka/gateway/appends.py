"""The listener's acks=1 appends to one broker, merged into fewer Ray calls.

Each Kafka batch is one raylog batch, and each used to be one Ray call to its leader:
librdkafka's producers send one partition's batch per Produce request (its sticky
partitioner), 5,000-9,000 records of 100 bytes, so the calls were many, and each cost the
listener and the broker a share of their CPU whatever it carried. An :class:`Appender`
sends a broker's batches at the end of the event loop's turn in which they came (the
batches of the requests read together leave together) while fewer than ``max_in_flight``
of its calls are unanswered; batches that come while that many are, wait, and leave together
when one is answered. A call carries at most ``max_call_bytes`` (one that fills leaves at
once). Several batches go in one call to the broker actor's ``produce_batches``, each still
appended as its own raylog batch and answered with its own offsets or its own error.

Order: batches leave in the order :meth:`Appender.append` was called (each call takes the
oldest waiting ones), and the broker appends a call's batches in order before it runs
anything else, so a connection's appends reach a leader in request order as before
(raylog/kafka/gateway/produce.py); a batch the listener sends to that broker without the
Appender first sends the waiting ones (:meth:`Appender.flush`). Only batches whose append
never waits inside the broker are merged (:func:`mergeable`: acks=1, no producer id): the
broker runs a call's waits together (acks=all waits for the in-sync replicas, an idempotent
producer's batch may wait for a sequence gap to fill, and the later batches of its
partition in the call wait behind it), but the call is answered once all of them ended, so
a waiting batch would hold back the answers of the others. Those are sent alone, as
before.

Used from one event loop; no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from raylog.errors import InternalError
from raylog.records.header import NO_PRODUCER_ID, parse_header

T = TypeVar("T")  # what one batch's send carries: (topic, partition, leader epoch, batch)

DEFAULT_MAX_IN_FLIGHT = 2
# A merged call carries at most this many bytes of batches (a batch larger goes alone): below
# the 4 MiB up to which the listener's Ray calls carry their arguments inline
# (raylog/kafka/gateway/settings.py); a larger call would go through the object store.
MAX_CALL_BYTES = 3 << 20


def mergeable(batch: bytes, acks: int) -> bool:
    """Whether ``batch`` (an unstamped raylog batch) may share a call with others: acks=1
    and no producer id (see the module docstring)."""
    return acks == 1 and parse_header(batch).producer_id == NO_PRODUCER_ID


class Appender(Generic[T]):
    """A broker's mergeable appends: at most ``max_in_flight`` calls unanswered, the batches
    that came meanwhile in the next one; a call whose batches (``size`` of each) reach
    ``max_call_bytes`` leaves at once, whatever is in flight.

    ``send_one(item)`` and ``send_many(items)`` must send at once (a Ray call's
    ``.remote()``) and return what to await: one item's answer, or a list with each item's
    answer or the exception it raised, in order. A call that fails as a whole fails every
    batch it carried with its exception. ``idle`` is called when nothing is waiting or in
    flight (the owner may then forget this Appender)."""

    def __init__(self, send_one: Callable[[T], Awaitable[Any]],
                 send_many: Callable[[list[T]], Awaitable[list[Any]]],
                 size: Callable[[T], int], max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 max_call_bytes: int = MAX_CALL_BYTES,
                 idle: Callable[[], None] | None = None) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self._send_one, self._send_many, self._size = send_one, send_many, size
        self._max_in_flight, self._max_call_bytes = max_in_flight, max_call_bytes
        self._idle = idle
        self._waiting: list[tuple[T, asyncio.Future, int]] = []
        self._waiting_bytes = 0
        self._in_flight = 0
        self._soon = False  # a _send_soon is scheduled
        self._answering: set[asyncio.Task] = set()  # referenced until done
        self.calls = 0  # calls sent, and batches in them: how much merging happened
        self.batches = 0

    @property
    def busy(self) -> bool:
        return bool(self._in_flight or self._waiting or self._soon)

    def append(self, item: T) -> asyncio.Future:
        """Send ``item`` now, or with the next call; the future of its answer."""
        future = asyncio.get_running_loop().create_future()
        size = self._size(item)
        self._waiting.append((item, future, size))
        self._waiting_bytes += size
        if self._waiting_bytes >= self._max_call_bytes:
            self._send_ready()
        elif not self._soon and self._in_flight < self._max_in_flight:
            # At the end of this turn of the event loop: the batches of the other requests
            # already read (whose handlers run in this turn) leave in the same call.
            self._soon = True
            asyncio.get_running_loop().call_soon(self._send_soon)
        return future

    def flush(self) -> None:
        """Send everything waiting now, whatever is in flight (before a batch sent to the
        same broker without this Appender, so that it does not overtake them)."""
        self._send_ready(everything=True)

    def _send_soon(self) -> None:
        self._soon = False
        self._send_ready()

    def _send_ready(self, everything: bool = False) -> None:
        """Send what may leave: everything waiting while fewer than max_in_flight calls are
        unanswered, and any full call (max_call_bytes) whatever is in flight."""
        while self._waiting and (everything or self._in_flight < self._max_in_flight
                                 or self._waiting_bytes >= self._max_call_bytes):
            taken, size = 1, self._waiting[0][2]
            while taken < len(self._waiting) and \
                    size + self._waiting[taken][2] <= self._max_call_bytes:
                size += self._waiting[taken][2]
                taken += 1
            sending, self._waiting = self._waiting[:taken], self._waiting[taken:]
            self._waiting_bytes -= size
            self._send(sending)
        if not self.busy and self._idle is not None:
            self._idle()

    def _send(self, sending: list[tuple[T, asyncio.Future, int]]) -> None:
        items = [item for item, _, _ in sending]
        futures = [future for _, future, _ in sending]
        try:
            call = self._send_one(items[0]) if len(items) == 1 else self._send_many(items)
        except Exception as e:  # nothing was sent: these batches fail with it
            for future in futures:
                _settle(future, exception=e)
            return
        self._in_flight += 1
        self.calls += 1
        self.batches += len(items)
        self._answering.add(asyncio.ensure_future(self._answer(call, futures)))

    async def _answer(self, call: Awaitable[Any], futures: list[asyncio.Future]) -> None:
        try:
            answer = await call
        except asyncio.CancelledError:  # the loop is closing
            for future in futures:
                future.cancel()
            raise
        except Exception as e:  # the call failed as a whole (a dead broker, say)
            for future in futures:
                _settle(future, exception=e)
        else:
            answers = [answer] if len(futures) == 1 else answer
            if len(answers) != len(futures):
                error = InternalError(f"{len(futures)} batches sent in one call, "
                                      f"{len(answers)} answers")
                answers = [error] * len(futures)
            for future, one in zip(futures, answers, strict=True):
                if len(futures) > 1 and isinstance(one, BaseException):
                    _settle(future, exception=one)
                else:
                    _settle(future, result=one)
        finally:
            self._answering.discard(asyncio.current_task())
            self._in_flight -= 1
            self._send_ready()


def _settle(future: asyncio.Future, *, result: Any = None,
            exception: BaseException | None = None) -> None:
    """Answer ``future`` unless its waiter gave up on it (a timeout cancels it)."""
    if future.done():
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
