"""A consumer's membership in a consumer group, kept alive by a heartbeat thread.

The coordinator (in the controller) decides the assignment; heartbeats carry what the
consumer owns and bring back what it may own and what it must give up. The heartbeat thread
talks to the coordinator and stores the latest answer; the consumer's own thread applies
changes inside ``poll`` (running the rebalance listener there) and reports them back, which
triggers an immediate heartbeat so released partitions move without waiting a period.

What the member says it owns is never less than what the consumer reads: a partition counts
as owned from the moment the coordinator grants it (before the consumer takes it) until the
consumer has given it up and reported so. That is what lets the member rejoin a restarted
coordinator with exact claims, from the heartbeat thread (RejoinRequiredError), and keep its
partitions.

A member *loses* its partitions (the consumer calls ``on_partitions_lost`` and stops reading
them before it rejoins) when the coordinator no longer knows it (UnknownMemberError on a
heartbeat or a commit), when a commit shows the coordinator disagrees about what it owns,
or when no heartbeat has succeeded for ``session_timeout_ms``: by then the coordinator may
have given its partitions to others. The last holds however the coordinator fails: a
heartbeat waits at most a session for its answer, and the session is counted from when the
last answered heartbeat was sent, so a controller that hangs makes the member give its
partitions up when its session would have run out, as Kafka's consumer does.

The consumer's thread never waits on the coordinator here: joining again after a loss is
the heartbeat thread's work (:meth:`Membership.rejoin` only asks for it).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable

import ray

from raylog.client.remote import ControllerClient, in_background
from raylog.errors import RaylogError, RejoinRequiredError, UnknownMemberError
from raylog.types import TopicPartition

logger = logging.getLogger(__name__)


def current_actor() -> ray.actor.ActorHandle | None:
    """The handle of the Ray actor this code runs in, if any."""
    if not ray.is_initialized():
        return None
    try:
        return ray.get_runtime_context().current_actor
    except RuntimeError:
        return None


@dataclasses.dataclass(frozen=True)
class Instructions:
    """What the consumer thread should do now."""

    owned: frozenset[TopicPartition]   # it may read these (granted)
    revoke: frozenset[TopicPartition]  # give these up, after the listener ran
    lost: frozenset[TopicPartition]    # these are no longer its own: stop at once
    lost_all: bool = False             # the group forgot it: lose everything and rejoin


NOTHING = Instructions(frozenset(), frozenset(), frozenset())


class Membership:
    """Join, heartbeat, rejoin and leave for one consumer. The consumer thread calls
    :meth:`latest`, :meth:`claim`, :meth:`report` and :meth:`rejoin`; the heartbeat thread
    only beats (and rejoins when told to). Thread-safe."""

    def __init__(self, controller: ControllerClient, group_id: str, client_id: str,
                 topics: list[str] | None, pattern: str | None, *, session_timeout_ms: int,
                 heartbeat_interval_ms: int, assignor: str,
                 join_timeout_s: float | None = None,
                 on_news: Callable[[], None] = lambda: None) -> None:
        self._controller = controller
        self.group_id = group_id
        self._client_id = client_id
        self._topics = topics
        self._pattern = pattern
        self._session_timeout_s = session_timeout_ms / 1000
        self._session_timeout_ms = session_timeout_ms
        self._interval_s = heartbeat_interval_ms / 1000
        self._join_timeout_s = join_timeout_s  # None: the controller client's
        self._assignor = assignor
        self._on_news = on_news  # called when what latest() says changes (a poll waits)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        # Chosen here, not by the coordinator: a join retried after a controller crash
        # names the same member instead of creating a second one.
        self.member_id = f"{client_id}-{uuid.uuid4().hex[:12]}"
        self.generation = -1
        self._owned: frozenset[TopicPartition] = frozenset()  # what the consumer holds
        # (may own, must revoke) from the last answer, None before the first.
        self._granted: tuple[frozenset[TopicPartition], frozenset[TopicPartition]] | None = None
        self._lost: set[TopicPartition] = set()
        self._lost_all = False
        self._rejoining = False  # lost everything; the heartbeat thread is to join again
        # Counts the losses of everything: an answer to a call made before the last one
        # (a heartbeat to a coordinator that hung, say) speaks of a membership given up.
        self._incarnation = 0
        self._last_success = time.monotonic()  # when the last answered heartbeat was sent
        self._error: BaseException | None = None
        self._join(claims=frozenset())
        self._thread = threading.Thread(target=self._beat_forever, daemon=True,
                                        name=f"raylog-heartbeat-{group_id}")
        self._thread.start()

    def _claims(self) -> frozenset[TopicPartition]:
        """What the member may be reading: held, or granted and not told to give up (lock
        held)."""
        granted, revoke = self._granted or (frozenset(), frozenset())
        return self._owned | (granted - revoke)

    def _join(self, claims: frozenset[TopicPartition]) -> None:
        with self._lock:
            incarnation = self._incarnation
        sent = time.monotonic()
        joined = self._controller.join_group(
            self.group_id, self.member_id, self._client_id, self._topics, self._pattern,
            self._session_timeout_ms, self._assignor, current_actor(), sorted(claims),
            timeout=self._join_timeout_s)
        kept = frozenset(TopicPartition(*tp) for tp in joined["owned"])
        with self._lock:
            if incarnation != self._incarnation:
                return  # everything was lost meanwhile: the next join claims nothing
            self.generation = joined["generation"]
            self._granted = (kept, frozenset())
            self._lost.update(claims - kept)
            self._on_news()
            self._lost_all = self._rejoining = False
            self._last_success = sent
        self._beat()

    def _beat(self) -> None:
        with self._lock:
            owned = sorted(self._claims())
            incarnation = self._incarnation
        sent = time.monotonic()
        try:
            # No answer within a session is as good as none: the session is gone.
            answer = self._controller.heartbeat(self.group_id, self.member_id, owned,
                                                timeout=self._session_timeout_s)
        except RejoinRequiredError:
            self.rejoin_claiming()
            return
        except UnknownMemberError:
            self.lose_all()
            return
        granted = (frozenset(TopicPartition(*tp) for tp in answer["owned"]),
                   frozenset(TopicPartition(*tp) for tp in answer["revoke"]))
        with self._lock:
            if not self._lost_all and incarnation == self._incarnation:
                if granted != self._granted:
                    self._on_news()
                self._granted = granted
                self.generation = answer["generation"]
                self._last_success = sent

    def _beat_forever(self) -> None:
        in_background()
        while not self._stop.is_set():
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stop.is_set() or not ray.is_initialized():
                return  # closed, or Ray shut down under us: never reconnect Ray from here
            try:
                self.tick()
            except RaylogError as e:  # the controller may be restarting or hung: keep trying
                logger.debug("heartbeat of group %s failed: %r", self.group_id, e)
            except Exception as e:  # surfaced to the consumer thread by latest()
                with self._lock:
                    self._error = e
                    self._on_news()

    def tick(self) -> None:
        """One step of the heartbeat thread: join again if the consumer gave everything up,
        else heartbeat (unless everything is lost and the consumer has not given it up)."""
        if self._rejoining:
            self._join(claims=frozenset())
        elif not self._lost_all:
            self._beat()

    def lose_all(self) -> None:
        """The coordinator does not know this member (any more): everything is lost."""
        with self._lock:
            self._lost_all = True
            self._on_news()

    def latest(self) -> Instructions:
        """What to do now, from the last answer. Everything is lost when the coordinator
        forgot the member, or when no heartbeat succeeded for a session timeout."""
        with self._lock:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if time.monotonic() > self._session_end() and \
                    not self._rejoining:  # (rejoining, it owns nothing to lose)
                self._lost_all = True  # the coordinator has given our partitions away
            if self._lost_all:
                return Instructions(frozenset(), frozenset(), frozenset(), lost_all=True)
            lost, self._lost = frozenset(self._lost), set()
            if self._granted is None:
                return Instructions(frozenset(), frozenset(), lost)
            owned, revoke = self._granted
            return Instructions(owned - lost, revoke, lost)

    def session_ends(self) -> float:
        """When (monotonic s) :meth:`latest` will say everything is lost unless a heartbeat
        is answered first; infinity while nothing is owned to lose."""
        with self._lock:
            if self._rejoining or self._lost_all:
                return math.inf
            return self._session_end()

    def _session_end(self) -> float:
        """When the session runs out unless a heartbeat is answered first: a session
        after the last answered heartbeat was sent (lock held)."""
        return self._last_success + self._session_timeout_s

    def report(self, owned: Iterable[TopicPartition], released: bool) -> None:
        """The consumer now holds exactly ``owned``; heartbeat at once if it released some
        (call after giving partitions up, never before taking new ones: see the module doc)."""
        with self._lock:
            self._owned = frozenset(owned)
        if released:
            self._wake.set()

    def rejoin(self) -> None:
        """Join again after losing everything (call once the consumer has given it all
        up); the member owns nothing until granted. Returns at once: the heartbeat thread
        joins, and later answers grant partitions."""
        with self._lock:
            self._owned = frozenset()
            self._granted = None
            self._lost.clear()
            self._lost_all = False
            self._rejoining = True
            self._incarnation += 1
        self._wake.set()

    def refresh(self) -> None:
        """Heartbeat now, from the caller's thread (to learn the current generation)."""
        self._beat()

    def rejoin_claiming(self) -> None:
        """Join a restarted coordinator again, keeping what the member owns (told so by a
        heartbeat, or by a commit before the heartbeat thread got to it). Unless the
        member's session ran out first: the coordinator may have given its partitions away
        before it restarted, so everything is lost (as :meth:`latest` says)."""
        with self._lock:
            if time.monotonic() > self._session_end():
                self._lost_all = True
                return
            claims = self._claims()
        logger.info("group %s: the coordinator restarted; rejoining with %d partitions",
                    self.group_id, len(claims))
        self._join(claims)

    def close(self) -> None:
        """Stop heartbeating and leave the group (its partitions move at once)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)
        try:
            # Past a session the coordinator removes the member anyway.
            self._controller.leave_group(self.group_id, self.member_id,
                                         timeout=self._session_timeout_s)
        except RaylogError as e:
            logger.warning("leaving group %s failed: %r", self.group_id, e)
