"""The leader's view of its followers: the ISR, the high watermark, and acks=all (Kafka's rules).

- **Caught up** (``Replica.updateFetchState`` in Kafka): a fetch from offset ``o`` shows the
  follower had everything up to ``o``. If ``o`` reaches the leader's log end as of this
  fetch, the follower was caught up now; if it reaches the leader's log end as of the
  follower's previous fetch, it was caught up at the time of that fetch. The last such time
  is its ``last_caught_up_ms``. A follower that is behind only because the leader keeps
  appending still counts as caught up, as long as each fetch covers what the previous one
  saw.
- **Leaving the ISR**: a follower whose log end is not the leader's and that was last caught
  up more than ``replica_lag_time_max_ms`` ago (:meth:`ReplicaSet.isr_to_shrink`). When a
  leader is elected, its ISR followers count as caught up at that moment, so each has the
  lag time to fetch.
- **Joining the ISR**: a follower whose log end reached the high watermark and the start of
  this leader epoch, so it has this epoch's records (:meth:`ReplicaSet.isr_to_expand`), in
  the incarnation of its broker that it fetches from now (KIP-903).
- **Broker epochs**: every fetch carries the follower's broker epoch, which the controller
  gives each broker process when it starts (a restarted one gets a higher one). What the
  leader knows of a follower belongs to one broker epoch: a fetch with another one starts it
  over, so a follower that restarted with a shorter log (lost page cache) is as far as it
  fetches now, never as far as its former process got. An expansion names each joining
  member's broker epoch, and the controller refuses one that is not current.
- **ISR changes** are proposed to the controller and apply when it confirms them (Kafka's
  AlterPartition). Meanwhile the high watermark counts the *maximal* ISR, the current one
  plus the proposed one: a follower joining holds it back at once, one leaving holds it until
  it is gone. One change is pending at a time, and it stays pending until the controller's
  answer is known: a request whose answer was lost may have been made (the controller
  committed it and died before replying), so it is asked again, never taken as refused.
- **High watermark**: the lowest log end offset among the maximal ISR, the leader's own
  included (as far as it counts: with ``flush.messages=1`` what it synced); it never moves
  backwards, and does not move while an ISR member has not fetched in this leader epoch (its
  log end is unknown).
- **acks=all**: refused before the append when the ISR is smaller than
  ``min_insync_replicas``; complete once the high watermark passed the batch's last offset;
  if by then the maximal ISR shrank below ``min_insync_replicas``, the producer gets
  NotEnoughReplicasAfterAppendError (the records are written).

Plain Python; time comes from an injected clock (milliseconds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from raylog.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    OffsetOutOfRangeError,
)
from raylog.metadata.topics import DEFAULT_REPLICA_LAG_TIME_MAX_MS

NO_BROKER_EPOCH = -1  # a follower whose broker has not learned its broker epoch yet


@dataclasses.dataclass
class FollowerState:
    """What the leader knows of one follower in this leader epoch; None: not yet known."""

    log_end_offset: int | None = None
    last_caught_up_ms: int | None = None  # None: not caught up since this leader was elected
    last_fetch_ms: int | None = None
    last_fetch_leader_log_end: int | None = None  # the leader's log end at that fetch
    broker_epoch: int | None = None  # of the broker process the fetches came from
    # An expansion adding it was refused (say, its broker is fenced: it cannot fetch either):
    # not proposed again before its next fetch shows it is there.
    refused: bool = False


class ReplicaSet:
    """A partition leader's followers in one leader epoch: their positions, the ISR and the
    high watermark.

    Invariants: the leader is in the ISR; the ISR is a subset of the replicas; the high
    watermark never decreases, and never passes the log end of an ISR member that fetched in
    this epoch unless that member's log shrank (a follower that restarted and lost records).
    Create a new one each time this replica is elected. Not safe for concurrent use.

    Example::

        replicas = ReplicaSet(1, [1, 2, 3], [1, 2, 3], leader_epoch=4, epoch_start_offset=100,
                              high_watermark=100, clock=clock)
        replicas.follower_fetched(2, 130, leader_log_end=130)   # high watermark still 100
        replicas.follower_fetched(3, 120, leader_log_end=130)   # now 120
    """

    def __init__(self, leader_id: int, replicas: Iterable[int], isr: Iterable[int],
                 leader_epoch: int, epoch_start_offset: int, high_watermark: int, *,
                 clock: Callable[[], int],
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS) -> None:
        replicas, isr = list(replicas), frozenset(isr)
        if type(replica_lag_time_max_ms) is not int or replica_lag_time_max_ms <= 0:
            raise InvalidConfigError(
                f"replica_lag_time_max_ms must be a positive integer, got "
                f"{replica_lag_time_max_ms!r}")
        if len(set(replicas)) != len(replicas) or leader_id not in replicas:
            raise InvalidArgumentError(
                f"replicas must be distinct and include the leader {leader_id}, got {replicas}")
        if min(leader_epoch, epoch_start_offset, high_watermark) < 0:
            raise InvalidArgumentError(
                f"leader epoch, epoch start offset and high watermark must be >= 0, got "
                f"{leader_epoch}, {epoch_start_offset}, {high_watermark}")
        self.leader_id = leader_id
        self.replicas = tuple(replicas)
        self.leader_epoch = leader_epoch
        self.epoch_start_offset = epoch_start_offset
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.clock = clock
        self._check_isr(isr)
        self._isr = isr
        self._pending: frozenset[int] | None = None
        self._high_watermark = high_watermark
        now = clock()
        self._followers = {r: FollowerState(last_caught_up_ms=now if r in isr else None)
                           for r in replicas if r != leader_id}

    # -- state ---------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def isr(self) -> frozenset[int]:
        """The ISR the controller confirmed: the one ``min_insync_replicas`` is checked on."""
        return self._isr

    @property
    def pending_isr(self) -> frozenset[int] | None:
        """The ISR proposed to the controller and not yet confirmed or refused."""
        return self._pending

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR plus the proposed one: the replicas the high watermark waits for."""
        return self._isr | (self._pending or frozenset())

    def follower(self, replica_id: int) -> FollowerState:
        """A copy of what the leader knows of the follower ``replica_id``."""
        return dataclasses.replace(self._follower(replica_id))

    # -- fetches and the high watermark --------------------------------------------------------

    def follower_fetched(self, replica_id: int, fetch_offset: int, leader_log_end: int,
                         broker_epoch: int = NO_BROKER_EPOCH, *,
                         committable_end: int | None = None) -> int:
        """Record a fetch from ``fetch_offset`` (the follower's log end) by ``replica_id``
        from its broker's process at ``broker_epoch``, served when the leader's log ended at
        ``leader_log_end``; return the high watermark, advanced if it can be (the leader's own
        log counting up to ``committable_end``, default ``leader_log_end``: less when it syncs
        each append and a sync failed).

        Raises OffsetOutOfRangeError for a fetch past the leader's log end (the follower must
        truncate first) and InvalidArgumentError for a replica that is not a follower here.
        A fetch offset below the follower's previous one is taken as it is: the follower
        lost records (it restarted) and is that far behind. A fetch at another broker epoch
        than the follower's earlier ones in this leader epoch comes from another process of
        its broker: what the earlier ones showed no longer holds, and the follower is known
        from this fetch on only (Kafka resets a replica's state on a new broker epoch).
        """
        state = self._follower(replica_id)
        if not 0 <= fetch_offset <= leader_log_end:
            raise OffsetOutOfRangeError(
                f"replica {replica_id} fetched from offset {fetch_offset}, outside the "
                f"leader's log [0, {leader_log_end}]")
        if state.broker_epoch is not None and state.broker_epoch != broker_epoch:
            state = self._followers[replica_id] = FollowerState()
        state.broker_epoch = broker_epoch
        state.refused = False
        now = self.clock()
        if fetch_offset >= leader_log_end:
            state.last_caught_up_ms = now
        elif state.last_fetch_leader_log_end is not None \
                and fetch_offset >= state.last_fetch_leader_log_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms or 0, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_ms = now
        state.last_fetch_leader_log_end = leader_log_end
        return self.advance_high_watermark(
            leader_log_end if committable_end is None else committable_end)

    def advance_high_watermark(self, leader_log_end: int) -> int:
        """Move the high watermark up to the lowest log end among the maximal ISR (the
        leader's is ``leader_log_end``), if that is higher; return it. Call it after each
        append (alone in the ISR, the leader commits by itself) and each ISR change."""
        candidate = leader_log_end
        for replica_id in self.maximal_isr - {self.leader_id}:
            end = self._followers[replica_id].log_end_offset
            if end is None:
                return self._high_watermark  # a member that has not fetched holds it
            candidate = min(candidate, end)
        self._high_watermark = max(self._high_watermark, candidate)
        return self._high_watermark

    # -- the ISR -------------------------------------------------------------------------------

    def isr_to_shrink(self, leader_log_end: int) -> frozenset[int]:
        """The ISR followers out of sync: their log end is not ``leader_log_end`` and they were
        last caught up more than ``replica_lag_time_max_ms`` ago. Empty while a change is
        pending."""
        if self._pending is not None:
            return frozenset()
        now = self.clock()
        return frozenset(
            r for r in self._isr - {self.leader_id}
            if not self._caught_up(self._followers[r], leader_log_end, now))

    def isr_to_expand(self) -> frozenset[int]:
        """The followers outside the ISR whose log end reached both the high watermark and
        the start of this leader epoch, as fetches from a broker that knows its broker epoch
        show (one that does not could not prove to the controller which process caught up).
        Empty while a change is pending."""
        if self._pending is not None:
            return frozenset()
        return frozenset(
            r for r, state in self._followers.items()
            if r not in self._isr and state.log_end_offset is not None and not state.refused
            and state.broker_epoch is not None and state.broker_epoch != NO_BROKER_EPOCH
            and state.log_end_offset >= max(self._high_watermark, self.epoch_start_offset))

    def expansion_refused(self, replica_ids: Iterable[int]) -> None:
        """The controller refused to add ``replica_ids``: none is proposed again until it
        fetched again (a proposal holds the high watermark for the members of both ISRs
        while it is out: asking again and again for a broker that is fenced would hold it
        every time)."""
        for r in replica_ids:
            state = self._followers.get(r)
            if state is not None:
                state.refused = True

    def broker_epochs(self, replica_ids: Iterable[int]) -> dict[int, int]:
        """The broker epoch each of these followers fetched at (NO_BROKER_EPOCH if it has
        not fetched in this leader epoch): what an ISR expansion tells the controller about
        its joining members."""
        epochs = {}
        for r in replica_ids:
            epoch = self._follower(r).broker_epoch
            epochs[r] = NO_BROKER_EPOCH if epoch is None else epoch
        return epochs

    def propose_isr(self, isr: Iterable[int]) -> None:
        """Record that ``isr`` was sent to the controller: until it answers, the high
        watermark waits for the members of both ISRs. Raises IllegalStateError if a change
        is pending already, InvalidArgumentError for an ISR without the leader or with a
        replica not of this partition."""
        isr = frozenset(isr)
        if self._pending is not None:
            raise IllegalStateError(
                f"ISR change to {sorted(self._pending)} is pending; cannot propose "
                f"{sorted(isr)}")
        self._check_isr(isr)
        self._pending = isr

    def isr_changed(self, isr: Iterable[int], leader_log_end: int) -> int:
        """The controller confirmed the ISR ``isr`` (what it stored, which decides); the
        pending change is over. Return the high watermark, advanced if it can be."""
        isr = frozenset(isr)
        self._check_isr(isr)
        for r in isr - self._isr - {self.leader_id}:
            state = self._followers[r]
            # A member that joins counts as caught up as of now (it met the joining rule), so
            # it is not listed to leave at once for a caught-up time it never had: raylog's
            # choice, to keep the ISR from flapping.
            state.last_caught_up_ms = max(state.last_caught_up_ms or 0, self.clock())
        self._isr, self._pending = isr, None
        return self.advance_high_watermark(leader_log_end)

    def set_replicas(self, replicas: Iterable[int]) -> None:
        """The partition's replicas changed (a reassignment): a new follower starts unknown,
        not caught up; a removed one is forgotten (and leaves the ISR with it). Raises
        InvalidArgumentError for replicas that repeat or lack the leader."""
        replicas = list(replicas)
        if len(set(replicas)) != len(replicas) or self.leader_id not in replicas:
            raise InvalidArgumentError(
                f"replicas must be distinct and include the leader {self.leader_id}, got "
                f"{replicas}")
        self.replicas = tuple(replicas)
        for r in replicas:
            if r != self.leader_id:
                self._followers.setdefault(r, FollowerState())
        for r in [r for r in self._followers if r not in replicas]:
            del self._followers[r]
        self._isr = self._isr & set(replicas)
        if self._pending is not None:
            self._pending = self._pending & set(replicas)

    def isr_change_failed(self, leader_log_end: int) -> int:
        """The controller refused the pending change (e.g. this leader is stale): it was not
        made. Never call it for a change whose answer did not come (it may have been made:
        the change stays pending, and the leader asks again). Return the high watermark,
        advanced if a joining follower no longer holds it."""
        self._pending = None
        return self.advance_high_watermark(leader_log_end)

    # -- acks ----------------------------------------------------------------------------------

    def enough_replicas(self, min_insync_replicas: int) -> bool:
        """Whether an acks=all append may go ahead: the ISR has ``min_insync_replicas``."""
        return len(self._isr) >= min_insync_replicas

    def check_enough_replicas(self, min_insync_replicas: int) -> None:
        """Raise NotEnoughReplicasError unless :meth:`enough_replicas`."""
        if not self.enough_replicas(min_insync_replicas):
            raise NotEnoughReplicasError(
                f"{len(self._isr)} in-sync replicas {sorted(self._isr)}, "
                f"min_insync_replicas={min_insync_replicas}")

    def is_committed(self, last_offset: int) -> bool:
        """Whether the records up to ``last_offset`` are committed: the high watermark is
        past it."""
        return self._high_watermark >= last_offset + 1

    def acks_all_done(self, last_offset: int, min_insync_replicas: int) -> bool:
        """Whether an acks=all append ending at ``last_offset`` can be answered: False while
        it waits for the high watermark, True once committed. Raises
        NotEnoughReplicasAfterAppendError if it is committed but the maximal ISR shrank below
        ``min_insync_replicas`` meanwhile (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
        if not self.is_committed(last_offset):
            return False
        if len(self.maximal_isr) < min_insync_replicas:
            raise NotEnoughReplicasAfterAppendError(
                f"offsets up to {last_offset} are written, but only with "
                f"{len(self.maximal_isr)} in-sync replicas, min_insync_replicas="
                f"{min_insync_replicas}")
        return True

    # -- internals -----------------------------------------------------------------------------

    def _caught_up(self, state: FollowerState, leader_log_end: int, now: int) -> bool:
        return state.log_end_offset == leader_log_end or (
            state.last_caught_up_ms is not None
            and now - state.last_caught_up_ms <= self.replica_lag_time_max_ms)

    def _follower(self, replica_id: int) -> FollowerState:
        state = self._followers.get(replica_id)
        if state is None:
            raise InvalidArgumentError(
                f"replica {replica_id} is not a follower of this partition (leader "
                f"{self.leader_id}, replicas {list(self.replicas)})")
        return state

    def _check_isr(self, isr: frozenset[int]) -> None:
        if self.leader_id not in isr or not isr <= set(self.replicas):
            raise InvalidArgumentError(
                f"an ISR must hold the leader {self.leader_id} and only replicas "
                f"{list(self.replicas)}, got {sorted(isr)}")
