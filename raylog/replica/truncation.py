"""Where a replica that becomes follower truncates its log (KIP-101, KIP-279).

A replica's log may end with records the new leader never had: they were appended by an
old leader and never committed. Truncating to the follower's high watermark is not safe
(KIP-101: the HW a follower knows lags the leader's, so committed records are cut, and a
follower that later leads loses them; or two replicas keep different records at one offset).
Instead the follower asks the leader where the follower's latest epoch ended in the leader's
log (the leader answers with :meth:`LeaderEpochCache.end_offset_for`) and truncates there:

1. :func:`first_step`: ask about the epoch of the follower's last record (its latest epoch,
   unless it was elected in a later one and wrote nothing); a follower with no epochs at all
   truncates to its high watermark (Kafka's fallback for logs without epochs).
2. :func:`next_step` with the leader's answer ``(epoch, end_offset)``:

   - the leader knows the epoch the follower asked about, or the largest epoch below it that
     the leader has is one the follower has too: truncate to the smaller of the two end
     offsets for that epoch (the follower's own log end included). Done. An answered epoch
     below the follower's first epoch counts as one it has, ending at its first start
     (``end_offset_for``'s rule): it keeps nothing from there on.
   - the follower does not have the epoch the leader answered with (KIP-279: the logs
     diverged over several epochs): everything the follower holds from its first epoch above
     the answered one is in no log of the leader's, so truncate there, and ask again about
     the follower's latest epoch below it. Each round asks about a smaller epoch, so this
     ends.
   - the leader knows nothing of the epoch (``UNDEFINED``: its cache is empty, or the epoch is
     newer than all of its own, which a leader that assigned its epoch when elected never
     answers): truncate to the follower's high watermark, as Kafka does. If that is still
     past the leader's log end, the follower's fetch is out of range; the fetcher then
     truncates to the leader's log end (Kafka's handling of OFFSET_OUT_OF_RANGE).

The follower applies each truncation to its log and then its cache
(``cache.truncate_from_end(log.log_end_offset)``, even when the log kept everything: an epoch
it was elected in and never wrote to starts at its log end and must go) before the next
step. Pure functions; the replica does the asking.

Example::

    step = first_step(cache, log.log_end_offset, log.high_watermark)
    while isinstance(step, Ask):
        truncate(step.truncate_to)
        answer = leader.end_offset_for(step.epoch)
        step = next_step(step.epoch, answer, cache, log.log_end_offset, log.high_watermark)
    truncate(step.offset)
"""

from __future__ import annotations

from typing import NamedTuple

from raylog.errors import InvalidArgumentError
from raylog.replica.epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochEndOffset,
    LeaderEpochCache,
)


class Truncate(NamedTuple):
    """Truncate the log to ``offset`` (remove every offset at or above it), then the cache to
    the log end, then fetch from the log end. At or past the log end the log keeps every
    record, but the cache is still cut at the log end."""

    offset: int


class Ask(NamedTuple):
    """Truncate the log to ``truncate_to`` and the cache to the log end, as for Truncate,
    then ask the leader for the end offset of ``epoch``, which is then the cache's latest
    epoch. The first question, and every later round of KIP-279 (an "ask again")."""

    epoch: int
    truncate_to: int


def first_step(cache: LeaderEpochCache, log_end_offset: int,
               high_watermark: int) -> Ask | Truncate:
    """The first step of a replica that became follower: ask about the epoch of its last
    record, or, with no epochs (a log written without leader epochs), truncate to its high
    watermark."""
    return _ask(cache, log_end_offset, high_watermark)


def next_step(asked_epoch: int, answer: tuple[int, int], cache: LeaderEpochCache,
              log_end_offset: int, high_watermark: int) -> Ask | Truncate:
    """The step after the leader answered ``answer = (epoch, end_offset)`` to a question
    about ``asked_epoch`` (rules in the module docstring).

    ``asked_epoch`` must be the follower's latest epoch: the truncation of the previous step
    is applied to the log and the cache before the leader is asked. Raises
    InvalidArgumentError otherwise, and for an answer no leader gives: an epoch above the one
    asked about, or only one of epoch and end offset undefined.
    """
    if asked_epoch != cache.latest_epoch:
        raise InvalidArgumentError(
            f"asked about epoch {asked_epoch} but the latest epoch here is "
            f"{cache.latest_epoch}: apply the previous truncation before asking")
    leader = EpochEndOffset(*answer)
    if leader == (UNDEFINED_EPOCH, UNDEFINED_OFFSET):
        return Truncate(min(high_watermark, log_end_offset))
    if not 0 <= leader.epoch <= asked_epoch or leader.end_offset < 0:
        raise InvalidArgumentError(
            f"leader answered {tuple(leader)} to a question about epoch {asked_epoch}")
    # Defined: the cache holds asked_epoch, and leader.epoch <= asked_epoch. Below our first
    # epoch it is (leader.epoch, our first start): nothing of ours from there is the leader's.
    own = cache.end_offset_for(leader.epoch, log_end_offset)
    if own.epoch != leader.epoch:
        # We never had the leader's epoch: our records from our next epoch above it on are
        # of epochs the leader does not have at all.
        return _ask(cache, min(own.end_offset, log_end_offset), high_watermark)
    return Truncate(min(leader.end_offset, own.end_offset, log_end_offset))


def _ask(cache: LeaderEpochCache, truncate_to: int, high_watermark: int) -> Ask | Truncate:
    # Ask about the epoch of the last record kept, not the cache's latest epoch: that may be
    # an epoch this replica was elected in and wrote nothing, whose entry starts at the log
    # end and goes with the truncation (Kafka also cuts the cache when the log cut is a no-op).
    epoch = cache.epoch_at(truncate_to - 1) if truncate_to > 0 else UNDEFINED_EPOCH
    if epoch == UNDEFINED_EPOCH:
        return Truncate(min(high_watermark, truncate_to))
    return Ask(epoch, truncate_to)
