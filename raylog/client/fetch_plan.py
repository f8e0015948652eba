"""The consumer's fetches, one per serving process (Kafka's fetch): which partitions go into
one call, and how its answer goes back to them. Plain Python, no Ray: the consumer
(raylog/client/consumer.py) sends the call through remote.py and hands the answer here.

A partition's replica is served by one process of its broker (the broker actor or one of
its replica hosts: the metadata names it); every partition a consumer reads from that
process goes into one ``fetch_many`` call (actors/serving.py), parked there until any of
them has data. The consumer keeps one such call outstanding per process. A partition
joins the next call when the one outstanding has no place for it, unless it has nothing
buffered (a new assignment, a seek, a reset, a retry after an error): then the call is
given up and made again with it, so that such a partition waits for no other's long poll
(reads are safe to ask again: an answer given up is re-read from the same offsets).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from raylog.errors import InternalError, RaylogError
from raylog.quotas.enforcer import unwrap as unwrap_throttled
from raylog.replica.fetch_stream import ends_stream
from raylog.replica.partition import FetchResult

T = TypeVar("T")


class PartitionState(Protocol):
    """What a fetch needs of a consumer's partition (consumer._Fetching)."""

    tp: Any
    fetch_offset: int | None
    fetch: Any


def by_process(wanted: Iterable[tuple[Hashable, T]]) -> dict[Hashable, list[T]]:
    """``(key of the serving process, item)`` pairs grouped by the key, in order."""
    out: dict[Hashable, list[T]] = {}
    for key, item in wanted:
        out.setdefault(key, []).append(item)
    return out


def rotated(items: Sequence[T], turn: int) -> list[T]:
    """``items`` starting at ``turn`` (modulo their number): a call's byte budget is spent
    in its order, so each call starts at another partition, as Kafka's consumer rotates."""
    if not items:
        return []
    k = turn % len(items)
    return [*items[k:], *items[:k]]


class BrokerFetch:
    """One outstanding fetch to one serving process: the partitions it reads, each from the
    offset it asked for, and per partition the (broker id, leader epoch) it was asked of.

    A partition belongs to it while ``state.fetch is self``; a partition reset, sought,
    revoked or moved meanwhile is detached (its ``fetch`` set to something else) and its
    share of the answer is dropped. Not thread-safe: the consumer's thread only."""

    __slots__ = ("from_leader", "key", "offsets", "ref", "sent_at", "sent_to", "states")

    def __init__(self, key: Hashable, ref: Any, states: list[Any], sent_to: list[tuple],
                 from_leader: list[bool], sent_at: float) -> None:
        self.key = key
        self.ref = ref
        self.states = states
        self.offsets = [s.fetch_offset for s in states]
        self.sent_to = sent_to          # (broker id, leader epoch) per partition
        self.from_leader = from_leader  # whether that replica led when asked
        self.sent_at = sent_at
        for state in states:
            state.fetch = self

    def attached(self) -> list[Any]:
        """The partitions whose answer this still is."""
        return [s for s in self.states if s.fetch is self]

    def detach(self) -> None:
        """Give it up: its partitions are free to go into the next call."""
        for state in self.attached():
            state.fetch = None

    def split(self, answer: Any) -> tuple[list[tuple[Any, FetchResult | RaylogError, bool]],
                                          int]:
        """The answer (the call's result, or the RaylogError the whole call failed with)
        split per partition still attached: ``(state, its FetchResult or error, whether
        asked of the leader)`` for each one read, and the ms the answer was held back by
        the consumer's quota. Every partition is detached if this is the last answer for
        them (:meth:`_last`: a fetch's one answer always is)."""
        answer, throttled = (answer, 0) if isinstance(answer, RaylogError) \
            else unwrap_throttled(answer)
        if isinstance(answer, RaylogError):
            answers: list[Any] = [answer] * len(self.states)
        elif isinstance(answer, list) and len(answer) == len(self.states):
            answers = answer
        else:
            answers = [InternalError(f"a fetch of {len(self.states)} partitions was answered "
                                     f"with {type(answer).__name__}")] * len(self.states)
        last = self._last(answers, throttled)
        out = []
        for state, offset, result, leader in zip(self.states, self.offsets, answers,
                                                 self.from_leader, strict=True):
            if state.fetch is not self:
                continue  # reset, revoked or moved since: not its answer any more
            if last:
                state.fetch = None
            if result is not None and state.fetch_offset == offset:
                out.append((state, result, leader))
        return out, throttled

    def _last(self, answers: list[Any], throttled: int) -> bool:
        """Whether this answer is the last its partitions get from this call."""
        return True


class BrokerStream(BrokerFetch):
    """A fetch stream to one serving process (``stream_fetches``): one streaming call whose
    answers come one after the other for the same partitions, each read, as the broker
    moves it, from where the partition's last answer ended (raylog/replica/fetch_stream.py).
    ``ref`` is the call's ObjectRefGenerator.

    Its partitions stay attached from answer to answer. An answer's share is a partition's
    while the partition is attached and its ``fetch_offset`` is where the stream reads it
    next; a partition reset, sought, revoked or moved meanwhile is detached, and the stream
    is given up to be made again without it (the broker would go on reading it). A stream
    ends with an answer that holds an error, was held back by the quota, or failed whole,
    and when the broker ends it (its lifetime): all its partitions are then detached."""

    __slots__ = ("ended",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ended = False

    def _last(self, answers: list[Any], throttled: int) -> bool:
        self.ended = bool(throttled) or ends_stream(answers)
        return self.ended

    def taken(self) -> bool:
        """After an answer was taken in: note where each partition's next answer starts;
        False if one of them is not where the broker will read it (the stream is to be
        given up)."""
        for i, state in enumerate(self.states):
            if state.fetch is self:
                if state.fetch_offset is None:
                    return False
                self.offsets[i] = state.fetch_offset
        return not self.ended

