"""The controller's words to each broker: one sender per broker (Kafka's controller channel
manager), so that a slow or hung broker never delays what the others are told.

A :class:`BrokerChannel` keeps what its broker has yet to be told: the partitions whose
state changed (the states themselves are read when the call is made, so they are the newest,
and a partition changed twice while a call was out is told once), whether it must be told
the full state of every replica it holds, and the replicas it must stop. It makes one call
at a time, each with its own deadline (the ``send`` it is given), so the metadata version a
broker sees never goes back (Broker.apply ignores older words anyway). A call that failed
while the broker lives (a timeout, Ray unable to reach it) is made again, with a growing
pause; a broker that is not alive (down, fenced) is told nothing: it gets the full state
when it is back.

Each :meth:`BrokerChannel.tell` returns a future that is True once a call that began after
it was answered (the broker took the words), False if they were dropped (the broker is not
alive, or went down while the call was out: :meth:`BrokerChannel.release`). Callers serving
a client await it with a deadline; the controller's own steps do not wait at all.

Plain asyncio: the controller's event loop is its only user; ``send`` does the Ray work.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable

from raylog.util.backoff import backoff_s

logger = logging.getLogger(__name__)

RETRY_S = (0.5, 5.0)  # after a failed call: first pause, then doubled up to


class Outcome(enum.Enum):
    DELIVERED = "delivered"  # the broker answered
    DROPPED = "dropped"      # the broker is not alive: it is told everything when it is back
    FAILED = "failed"        # no answer in time, or Ray could not reach it: try again


@dataclasses.dataclass(frozen=True)
class Stop:
    """Stop serving ``replicas``; with ``delete``, remove their files; ``version``: the
    metadata version when the controller decided it."""

    replicas: tuple[tuple[str, int], ...]
    delete: bool
    version: int


@dataclasses.dataclass
class Words:
    """What a broker has yet to be told."""

    partitions: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    full: bool = False
    stops: list[Stop] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.partitions or self.full or self.stops)

    def merge(self, later: Words) -> None:
        """Add ``later`` words after these (stops keep their order)."""
        self.partitions |= later.partitions
        self.full = self.full or later.full
        self.stops.extend(later.stops)


class BrokerChannel:
    """One broker's sender: its pending words and the task making its calls."""

    def __init__(self, broker_id: int, send: Callable[[int, Words], Awaitable[Outcome]],
                 retry_s: tuple[float, float] = RETRY_S) -> None:
        self.broker_id = broker_id
        self._send = send
        self._retry_s = retry_s
        self._pending = Words()
        self._waiters: list[asyncio.Future] = []
        self._calling: list[asyncio.Future] = []  # the waiters of the call that is out
        self._task: asyncio.Task | None = None

    def tell(self, partitions: Iterable[tuple[str, int]] = (), full: bool = False
             ) -> asyncio.Future:
        """Tell the broker the current state of ``partitions`` (with ``full``, of every
        replica it holds, and that it holds no other)."""
        return self._enqueue(Words(set(partitions), full))

    def stop_replicas(self, replicas: Iterable[tuple[str, int]], delete: bool,
                      version: int) -> asyncio.Future:
        return self._enqueue(Words(stops=[Stop(tuple(replicas), delete, version)]))

    def release(self) -> None:
        """The broker went down: nobody waits for it any more (a call that is out, to a hung
        broker, may take until its deadline; what it carried is told again, in full, when the
        broker is back)."""
        for waiter in [*self._calling, *self._waiters]:
            if not waiter.done():
                waiter.set_result(False)

    @property
    def idle(self) -> bool:
        return self._task is None or self._task.done()

    def _enqueue(self, words: Words) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._pending.merge(words)
        self._waiters.append(waiter)
        if self.idle:
            self._task = loop.create_task(self._run())
        return waiter

    async def _run(self) -> None:
        failures = 0
        while self._pending:
            words, waiters = self._pending, self._waiters
            self._pending, self._waiters = Words(), []
            self._calling = waiters
            try:
                outcome = await self._send(self.broker_id, words)
            except Exception:  # a bug building the words: try again, do not stop for good
                logger.exception("telling broker %d failed", self.broker_id)
                outcome = Outcome.FAILED
            self._calling = []
            if outcome is Outcome.FAILED:
                # Not taken: these words go first again, before what came meanwhile.
                words.merge(self._pending)
                self._pending = words
                self._waiters = [*(w for w in waiters if not w.done()), *self._waiters]
                await asyncio.sleep(backoff_s(failures, *self._retry_s))
                failures += 1
                continue
            failures = 0
            for waiter in waiters:
                if not waiter.done():  # its caller may have stopped waiting
                    waiter.set_result(outcome is Outcome.DELIVERED)
