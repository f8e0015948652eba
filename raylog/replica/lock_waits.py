"""Replicas a broker waits to open because another process of its own holds their directory.

A process of a broker node holds a replica's directory lock while it has the replica open
(actors/hosting.py, raylog/metadata/identity.py's DirectoryLock). A host that Ray
restarted, or the hosts of a broker that restarted, may be told a replica while the process
being replaced (a replica host of the broker's earlier incarnation, an earlier process of
the same host) still exits and holds it. Opening it then fails with DirectoryLockedError,
at once: the process never waits on its event loop. The broker reports the replica failed
(the controller moves its leadership and takes the broker out of its ISR, as for any replica
that could not open), and tries again, with backoff, until the lock is free; then the
replica opens in the role its newest word says: a follower catches up and rejoins its ISR
as any follower does.

- Which failures are waited out (:func:`waits_out`): a held lock only. Any other failure to
  open (a directory of another topic with a damaged marker, a damaged log, a newer format)
  stands as before: reported failed, retried only when the controller tells the broker again.
- What a retry opens the replica with: the newest word the broker was told for it (words
  keep coming while it waits, each also tried at once; an older word never replaces a
  newer one; a topic's new configs are kept too). The broker epoch and
  incarnation go with each attempt as they are then, so a replica that opens late fetches,
  and is admitted to its ISR, at the broker epoch of the process serving it.
- A word that makes this broker the leader is not retried (:meth:`LockWait.retried_by`):
  only tried when it comes; the next word, which the failure report brings, is.
- When the waiting stops: the replica opened (by a retry or by a word), failed otherwise, or
  is no longer this broker's to hold (stopped, moved away, its topic deleted, left out of a
  full word, or the broker is closing): :meth:`LockWaits.forget`, :meth:`LockWaits.keep_only`,
  :meth:`LockWaits.clear`.

Plain Python; randomness injected. One event loop (the broker's) is its only user.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Mapping
from typing import Any

from raylog.metadata.identity import DirectoryLockedError
from raylog.util.backoff import Backoff

# The waits between attempts: the process being replaced is usually gone within a second or
# two (Ray kills an exited actor's children); one stuck longer is asked at most every few
# seconds, each attempt costing one failed non-blocking lock.
RETRY_INITIAL_S = 0.1
RETRY_MAX_S = 5.0
RETRY_JITTER = 0.2

TopicPartition = tuple[str, int]


def waits_out(error: BaseException) -> bool:
    """Whether a failure to open a replica is one to wait out: its directory's lock held by
    another process of this broker. Any other failure stands."""
    return isinstance(error, DirectoryLockedError)


@dataclasses.dataclass
class LockWait:
    """One replica waiting: the newest word to open it with, and its retries' waits."""

    state: dict[str, Any]  # the controller's word on it (as apply takes it)
    version: int           # the metadata version of that word
    backoff: Backoff

    @property
    def attempts(self) -> int:
        return self.backoff.attempts

    def retried_by(self, broker_id: int | None) -> bool:
        """Whether a retry may open it as its word says: not when the word makes this broker
        its leader. The process being replaced may have led at that epoch (a host that Ray
        restarted: actors/replica_hosts.py never reopens those either), and the replica is
        reported failed meanwhile, so the controller's next word on it comes (the leadership
        moved away, or given again at a new epoch), and is tried as soon as it comes."""
        return self.state.get("leader") != broker_id


class LockWaits:
    """The replicas of one broker waiting for their directory's lock, by (topic, partition).
    Not thread-safe; the broker's event loop is its only user."""

    def __init__(self, initial_s: float = RETRY_INITIAL_S, max_s: float = RETRY_MAX_S,
                 jitter: float = RETRY_JITTER, rng: random.Random | None = None) -> None:
        self._initial_s, self._max_s, self._jitter = initial_s, max_s, jitter
        self._rng = rng or random.Random()
        self._waits: dict[TopicPartition, LockWait] = {}

    def answered(self, tp: TopicPartition, state: dict[str, Any], version: int,
                 answer: Mapping[str, Any] | None) -> bool:
        """An attempt to hold ``tp`` as ``state`` (told at ``version``) was answered:
        ``{"error": ..., "locked": True}`` (its lock is held: it waits, with the newest of
        the words), anything else (opened, failed otherwise, None: not attempted, a newer
        word stopped it) ends its wait. True when it starts waiting now: the caller starts
        its retries (one loop per replica)."""
        if answer is not None and answer.get("locked"):
            return self.wait(tp, state, version)
        self.forget(tp)
        return False

    def wait(self, tp: TopicPartition, state: dict[str, Any], version: int) -> bool:
        """``tp`` waits for its lock, to be opened as ``state`` unless a newer word comes.
        True if it was not waiting yet."""
        kept = self._waits.get(tp)
        if kept is None:
            self._waits[tp] = LockWait(state, version, Backoff(
                self._initial_s, self._max_s, self._jitter, self._rng))
            return True
        if version >= kept.version:
            kept.state, kept.version = state, version
        return False

    def update_configs(self, topic: str, configs: dict[str, Any], version: int) -> None:
        """New configs of ``topic`` (told at ``version``): its replicas open with them (an
        older word than the one kept changes nothing)."""
        for (name, _), kept in self._waits.items():
            if name == topic and version >= kept.version:
                kept.state = {**kept.state, "configs": dict(configs)}
                kept.version = version

    def get(self, tp: TopicPartition) -> LockWait | None:
        return self._waits.get(tp)

    def next_wait_s(self, tp: TopicPartition) -> float | None:
        """Seconds until ``tp``'s next attempt (counted as one), None if it waits no more."""
        kept = self._waits.get(tp)
        return None if kept is None else kept.backoff.next()

    def forget(self, tp: TopicPartition) -> None:
        self._waits.pop(tp, None)

    def keep_only(self, assigned: Mapping[TopicPartition, str]) -> list[TopicPartition]:
        """A full word named every replica the broker holds (with its topic id): forget the
        others, and those of an older topic of the same name. Returns those forgotten."""
        gone = [tp for tp, w in self._waits.items()
                if assigned.get(tp) != w.state.get("topic_id")]
        for tp in gone:
            del self._waits[tp]
        return gone

    def clear(self) -> None:
        self._waits.clear()

    def __contains__(self, tp: object) -> bool:
        return tp in self._waits

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(list(self._waits))

    def __len__(self) -> int:
        return len(self._waits)
