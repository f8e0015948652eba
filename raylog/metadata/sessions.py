"""Broker sessions (Kafka's ``broker.session.timeout.ms``): when the controller fences a
broker it has not heard from, and how a broker knows it may have been fenced.

A broker process that stops answering (SIGSTOP, a stuck disk, a long pause) is not dead to
Ray, so Ray never says so; the controller measures instead how long it has been since it last
heard from each broker, and fences one whose session ran out as if it had died (its
leaderships move to in-sync replicas, it leaves every ISR).

- **The controller** (:class:`BrokerSessions`) counts from the answers it got: brokers answer
  its health check every :func:`heartbeat_interval_s` (a quarter of the session), so a healthy
  broker is heard from well inside its session. Time during which the controller itself did
  not run (stopped, paused) is not counted against the brokers: they may well have answered,
  and their answers wait to be read; without this a controller resuming from a pause longer
  than the session would fence every broker.
- **A broker** cannot know it was fenced without asking the controller, but it knows when it
  was itself stalled: its event loop made no progress for a while (:class:`StallGuard`). A
  stall of :func:`stall_threshold_s` (a third of the session) or more may have got it fenced:
  the controller fences after a session without an answer, and the broker's last answer was
  at most one heartbeat interval before its stall began, so only a stall longer than about
  three quarters of the session can lead to a fence; a third leaves the difference to the
  delays of Ray and of busy event loops. After such a stall the broker refuses leader and
  consumer requests (BrokerStalledError, retriable) until the controller has confirmed its
  state, and a request whose processing spanned the stall is not answered either. A brief
  stall (a slow moment, well under the session) changes nothing.
- **Ray's word** (:func:`after_unavailable`): a call that fails with ``ActorUnavailableError``
  says only that Ray cannot reach the process for now. The GCS's record of the actor tells a
  process that died (Ray restarts it, or has: a new process id) from one that is merely out of
  reach, which only its session may take down.

Plain Python; time from an injected clock. Neither class is thread-safe: each has one event
loop as its user.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from raylog.errors import BrokerStalledError

HEARTBEATS_PER_SESSION = 4  # a broker answers the controller's health check this often
STALL_FRACTION = 3          # a broker stalled for this fraction of a session may be fenced
CONTROLLER_STALL_S = 1.0    # a gap between the controller's checks longer than this is its own


def heartbeat_interval_s(session_timeout_s: float) -> float:
    """How long a broker holds the controller's health check before answering."""
    return session_timeout_s / HEARTBEATS_PER_SESSION


def stall_threshold_s(session_timeout_s: float) -> float:
    """A broker whose event loop made no progress for this long may have been fenced."""
    return session_timeout_s / STALL_FRACTION


class OwnStalls:
    """Time a periodic caller did not run: :meth:`since_last` is called every ``every_s``;
    a longer gap than ``stall_s`` since the previous call means the caller's process was
    stopped or its loop blocked, and the time beyond the expected interval is its own stall
    (to be credited to whatever it times, which may well have been on time). The first call
    credits nothing."""

    def __init__(self, every_s: float, stall_s: float = CONTROLLER_STALL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.stall_s = max(stall_s, every_s)
        self.clock = clock
        self._last: float | None = None
        self.total_s = 0.0  # every stall seen so far (for the logs)

    def since_last(self) -> float:
        """The stall since the previous call, in seconds (0.0 if none)."""
        now = self.clock()
        gap = 0.0 if self._last is None else now - self._last
        self._last = now
        if gap <= self.stall_s:
            return 0.0
        stall = gap - self.every_s
        self.total_s += stall
        return stall


class BrokerSessions:
    """When the controller last heard from each live broker, and whose session ran out.

    Only brokers being tracked can expire: :meth:`heard` starts (or renews) a session,
    :meth:`forget` ends it (the broker went down some other way), and :meth:`expired`
    reports each broker whose session ran out once, and forgets it. :meth:`expired` is
    called every ``check_s``; a longer gap since its last call than ``stall_s`` means the
    controller itself did not run, and that time is credited to every session first."""

    def __init__(self, timeout_s: float, check_s: float, stall_s: float = CONTROLLER_STALL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self.check_s = check_s
        self.clock = clock
        self._heard: dict[int, float] = {}
        self._own = OwnStalls(check_s, stall_s, clock)

    @property
    def stalled_s(self) -> float:
        """The controller's own stalls, credited so far (for the logs)."""
        return self._own.total_s

    def heard(self, broker: int) -> None:
        self._heard[broker] = self.clock()

    def forget(self, broker: int) -> None:
        self._heard.pop(broker, None)

    def tracked(self, broker: int) -> bool:
        return broker in self._heard

    def silent_s(self, broker: int) -> float | None:
        """How long the broker has not been heard from (None: not tracked)."""
        heard = self._heard.get(broker)
        return None if heard is None else self.clock() - heard

    def expired(self) -> list[int]:
        """The brokers whose session ran out since the last call (no longer tracked)."""
        credit = self._own.since_last()  # the controller did not run: nobody's fault
        now = self.clock()                # but its own
        if credit:
            for broker, heard in self._heard.items():
                self._heard[broker] = min(heard + credit, now)
        out = sorted(b for b, heard in self._heard.items() if now - heard >= self.timeout_s)
        for broker in out:
            del self._heard[broker]
        return out


class StallGuard:
    """A broker's knowledge of its own stalls: whether it may serve leader and consumer
    requests, and whether a request spanned a stall.

    Every request and a ticker :meth:`observe` the clock: a gap since the previous
    observation longer than ``threshold_s`` is a stall (the event loop did not run), which
    starts a new ``generation``. The broker serves while the controller has confirmed its
    state after its latest stall (:meth:`confirmed`); a new incarnation starts out serving
    (it holds nothing until the controller tells it). ``on_stall`` is called whenever an
    observation ends a stall: the broker then asks the controller to confirm its state."""

    def __init__(self, threshold_s: float, clock: Callable[[], float] = time.monotonic,
                 on_stall: Callable[[], None] | None = None) -> None:
        self.threshold_s = threshold_s
        self.clock = clock
        self.on_stall = on_stall  # called when an observation ends a stall
        self._last = clock()
        self.generation = 0   # stalls seen
        self._confirmed = 0   # the generation the controller confirmed
        self.last_stall_s = 0.0

    @property
    def serving(self) -> bool:
        return self._confirmed == self.generation

    def observe(self) -> bool:
        """The event loop runs now. Whether this ends a stall (a new one: confirm it)."""
        now = self.clock()
        gap = now - self._last
        self._last = max(self._last, now)
        if gap <= self.threshold_s:
            return False
        self.generation += 1
        self.last_stall_s = gap
        if self.on_stall is not None:
            self.on_stall()
        return True

    def check(self) -> int:
        """Before serving a request: raise BrokerStalledError unless serving; the generation
        to pass to :meth:`check_since` when the request is about to be answered."""
        self.observe()
        if not self.serving:
            raise BrokerStalledError(
                f"this broker stalled for {self.last_stall_s:.1f} s, long enough to have "
                f"been fenced, and waits for the controller to confirm its state")
        return self.generation

    def check_since(self, generation: int) -> None:
        """Before answering a request that :meth:`check` let in at ``generation``: raise
        BrokerStalledError if a stall happened meanwhile."""
        self.observe()
        if self.generation != generation:
            raise BrokerStalledError(
                f"this broker stalled for {self.last_stall_s:.1f} s while the request was "
                f"being processed: it is not answered (retry)")

    def confirmed(self, generation: int) -> None:
        """The controller confirmed this broker's state, having been asked after the stall
        that began ``generation``: serving again, unless a later stall came meanwhile."""
        if generation == self.generation:
            self._confirmed = generation


class ProcessFate(enum.Enum):
    """What became of a broker's process, by the GCS's record of its actor."""

    SAME = "same"            # alive, the process being watched: out of reach for a moment
    RESTARTED = "restarted"  # the process died; Ray restarts the actor or has restarted it
    DEAD = "dead"            # gone for good: Ray will not restart it
    UNKNOWN = "unknown"      # no record (the lookup failed): the session decides


def after_unavailable(state: str | None, pid: int | None, known_pid: int | None
                      ) -> ProcessFate:
    """The fate of a broker whose call failed with ActorUnavailableError, from its actor's
    ``state`` and ``pid`` in the GCS (None: no record) and the process id it last reported."""
    if state is None:
        return ProcessFate.UNKNOWN
    if state == "DEAD":
        return ProcessFate.DEAD
    if state != "ALIVE":  # RESTARTING, or a new process waiting to be placed
        return ProcessFate.RESTARTED
    if known_pid is not None and pid is not None and pid != known_pid:
        return ProcessFate.RESTARTED
    return ProcessFate.SAME
