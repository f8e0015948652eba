"""A consumer's membership in a consumer group, kept alive by a heartbeat thread.

The coordinator (in the controller) decides the assignment; heartbeats carry what the
consumer owns and bring back what it may own and what it must give up. The heartbeat thread
only talks to the coordinator and stores the latest answer; the consumer's own thread applies
changes inside ``poll`` (running the rebalance listener there) and reports them back, which
triggers an immediate heartbeat so released partitions move without waiting a period.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

import ray

from raylog.client.remote import ControllerClient
from raylog.errors import RaylogError, UnknownMemberError
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


class Membership:
    """Join, heartbeat and leave for one consumer. The consumer thread calls :meth:`latest`
    and :meth:`report`; the heartbeat thread calls nothing else. Thread-safe."""

    def __init__(self, controller: ControllerClient, group_id: str, client_id: str,
                 topics: list[str] | None, pattern: str | None, *, session_timeout_ms: int,
                 heartbeat_interval_ms: int, assignor: str) -> None:
        self._controller = controller
        self.group_id = group_id
        self._client_id = client_id
        self._topics = topics
        self._pattern = pattern
        self._session_timeout_ms = session_timeout_ms
        self._interval_s = heartbeat_interval_ms / 1000
        self._assignor = assignor
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.member_id: str | None = None
        self.generation = -1
        self._owned: frozenset[TopicPartition] = frozenset()
        # (may own, must revoke) from the last heartbeat answer, None before the first.
        self._granted: tuple[frozenset[TopicPartition], frozenset[TopicPartition]] | None = None
        self._lost = False
        self._error: BaseException | None = None
        self._join()
        self._thread = threading.Thread(target=self._beat_forever, daemon=True,
                                        name=f"raylog-heartbeat-{group_id}")
        self._thread.start()

    def _join(self) -> None:
        joined = self._controller.call(
            "join_group", self.group_id, self.member_id, self._client_id, self._topics,
            self._pattern, self._session_timeout_ms, self._assignor, current_actor())
        with self._lock:
            self.member_id = joined["member_id"]
            self.generation = joined["generation"]
            self._lost = False
        self._beat()

    def _beat(self) -> None:
        with self._lock:
            owned = sorted(self._owned)
        try:
            answer = self._controller.call("heartbeat", self.group_id, self.member_id, owned)
        except UnknownMemberError:
            with self._lock:
                self._lost = True  # the consumer thread revokes everything and rejoins
            return
        granted = (frozenset(TopicPartition(*tp) for tp in answer["owned"]),
                   frozenset(TopicPartition(*tp) for tp in answer["revoke"]))
        with self._lock:
            self._granted = granted
            self.generation = answer["generation"]

    def _beat_forever(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stop.is_set() or not ray.is_initialized():
                return  # closed, or Ray shut down under us: never reconnect Ray from here
            try:
                if not self._lost:
                    self._beat()
            except RaylogError as e:  # the controller may be restarting: keep trying
                logger.debug("heartbeat of group %s failed: %r", self.group_id, e)
            except Exception as e:  # surfaced to the consumer thread by latest()
                with self._lock:
                    self._error = e

    def latest(self) -> tuple[frozenset[TopicPartition], frozenset[TopicPartition], bool]:
        """(partitions the member may own, partitions to revoke, lost) from the last answer.
        ``lost`` means the coordinator forgot this member: give everything up and rejoin."""
        with self._lock:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self._lost:
                return frozenset(), frozenset(), True
            if self._granted is None:
                return frozenset(), frozenset(), False
            return (*self._granted, False)

    def report(self, owned: Iterable[TopicPartition], released: bool) -> None:
        """The consumer now owns exactly ``owned``; heartbeat at once if it released some."""
        with self._lock:
            self._owned = frozenset(owned)
        if released:
            self._beat()

    def rejoin(self) -> None:
        with self._lock:
            self._owned = frozenset()
            self._granted = None
        self._join()

    def close(self) -> None:
        """Stop heartbeating and leave the group (its partitions move at once)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)
        try:
            self._controller.call("leave_group", self.group_id, self.member_id)
        except RaylogError as e:
            logger.warning("leaving group %s failed: %r", self.group_id, e)
