"""Partition assignors: which member of a group owns which partition.

Each takes the members' subscriptions (member id -> topics), the partition count of every
topic and, for the sticky assignor, the current ownership, and returns member id -> sorted
partitions. All are deterministic: members and partitions are taken in sorted order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from raylog.types import TopicPartition

Subscriptions = Mapping[str, frozenset[str]]
Assignment = dict[str, list[TopicPartition]]


def _partitions(topics: Mapping[str, int], members: Subscriptions) -> list[TopicPartition]:
    wanted = set().union(*members.values()) if members else set()
    return [TopicPartition(t, p) for t in sorted(wanted) if t in topics
            for p in range(topics[t])]


def range_assign(members: Subscriptions, topics: Mapping[str, int],
                 current: Mapping[str, list[TopicPartition]] | None = None) -> Assignment:
    """Kafka's RangeAssignor: per topic, contiguous ranges; the first members get one more."""
    out: Assignment = {m: [] for m in members}
    for topic in sorted(set().union(*members.values()) if members else ()):
        if topic not in topics:
            continue
        subscribers = sorted(m for m, subs in members.items() if topic in subs)
        count = topics[topic]
        share, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            size = share + (1 if i < extra else 0)
            out[member].extend(TopicPartition(topic, p) for p in range(start, start + size))
            start += size
    return out


def round_robin_assign(members: Subscriptions, topics: Mapping[str, int],
                       current: Mapping[str, list[TopicPartition]] | None = None) -> Assignment:
    """Kafka's RoundRobinAssignor: every partition in turn to the next subscribed member."""
    out: Assignment = {m: [] for m in members}
    order = sorted(members)
    i = 0
    for tp in _partitions(topics, members):
        for _ in range(len(order)):
            member = order[i % len(order)]
            i += 1
            if tp.topic in members[member]:
                out[member].append(tp)
                break
    return out


def cooperative_sticky_assign(members: Subscriptions, topics: Mapping[str, int],
                              current: Mapping[str, list[TopicPartition]] | None = None
                              ) -> Assignment:
    """Balanced like round-robin, but moving as few partitions as possible.

    Members keep what they own (if still subscribed and the partition exists) up to their
    fair share; freed and new partitions go to the members with the fewest; then single
    partitions move from the fullest to the emptiest member until counts differ by at most
    one wherever subscriptions allow.
    """
    valid = set(_partitions(topics, members))
    out: Assignment = {m: [] for m in members}
    taken: set[TopicPartition] = set()
    total = len(valid)
    order = sorted(members)
    quota: dict[str, int] = {}
    if order:
        # The spare slots go to the members already holding more, so none of them moves.
        base, extra = divmod(total, len(order))
        held = {m: sum(1 for tp in (current or {}).get(m, ()) if tp in valid
                       and tp.topic in members[m]) for m in order}
        fullest = sorted(order, key=lambda m: (-held[m], m))[:extra]
        quota = {m: base + (1 if m in fullest else 0) for m in order}
    for member in order:
        for tp in sorted((current or {}).get(member, ())):
            if tp in valid and tp not in taken and tp.topic in members[member] and \
                    len(out[member]) < quota[member]:
                out[member].append(tp)
                taken.add(tp)
    for tp in sorted(valid - taken):
        candidates = [m for m in order if tp.topic in members[m]]
        if candidates:
            target = min(candidates, key=lambda m: (len(out[m]), m))
            out[target].append(tp)
    _rebalance(out, members)
    return {m: sorted(tps) for m, tps in out.items()}


def _rebalance(out: Assignment, members: Subscriptions) -> None:
    """Move one partition at a time from the fullest member to a member with two fewer."""
    while True:
        moved = False
        for giver in sorted(out, key=lambda m: (-len(out[m]), m)):
            for taker in sorted(out, key=lambda m: (len(out[m]), m)):
                if len(out[giver]) - len(out[taker]) < 2:
                    break
                movable = [tp for tp in sorted(out[giver]) if tp.topic in members[taker]]
                if movable:
                    out[giver].remove(movable[-1])
                    out[taker].append(movable[-1])
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


ASSIGNORS: dict[str, Callable[..., Assignment]] = {
    "range": range_assign,
    "round_robin": round_robin_assign,
    "cooperative_sticky": cooperative_sticky_assign,
}
