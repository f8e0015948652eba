"""A history checker for fault tests: what producers sent, what consumers read and what the
members of a consumer group owned, and what of it cannot be right. Plain Python: fault tests
(tests/integration/workload.py, tests/chaos/) record the history, this finds the anomalies.

The anomalies are the ones Jepsen's Kafka workload looks for, over raylog's model (each
partition a log with dense offsets; a producer's acknowledgement names the record's partition
and offset). :func:`check`, over sends and reads:

- ``unresolved``: a send whose future never resolved.
- ``late_resolution``: a send whose future resolved (either way) later than its delivery
  deadline plus the slack: a future resolves, with an error at the latest, by its deadline.
- ``negative_ack``: a send acknowledged as a success at a negative offset (or none): an
  acknowledgement names where the record is, never "somewhere" (invariant 8).
- ``lost``: an acknowledged value that no read found.
- ``misplaced``: an acknowledged value found, but not at the partition and offset its
  acknowledgement named; or acknowledged in another partition than its key's.
- ``duplicate``: one value at more than one (partition, offset).
- ``inconsistent_offset``: one (partition, offset) holding different values in different
  reads.
- ``nonmonotonic_read``: a reader's successive records of one partition whose offsets do not
  increase (a consumer going back, or a log whose offsets do not increase).
- ``log_gap``: a complete read (every partition from its start to its end) missing offsets
  in between: offsets of a topic without compaction are dense.
- ``reordered``: two sends of one producer to one partition whose offsets are in the other
  order than the sends (idempotent producers keep per-partition order).
- ``late_failure``: a send the test required to succeed (say, made after the cluster was
  healthy again) that failed.

:func:`stalls`, over sends: ``stalled``, a partition without an acknowledgement for longer
than a limit while producers sent to it (a hung leader must be failed over in time).
:func:`regressions`, over samples of a position: ``end_offset_regressed``, a partition's end
offset (its high watermark, as ``end_offsets`` and ``list_offset("latest")`` give it) going
back, which readers planned on it cannot survive (issue 22, item 9).

:func:`check_group`, over a consumer group's members (each a Ray actor writing what its
rebalance listener was told and what it processed, stamped with the machine's monotonic
clock, which every process of one machine shares):

- ``two_owners``: two members owning one partition at the same time.
- ``unowned_read``: a member processing a record of a partition it did not own then.
- ``listener_order``: a listener told it gained a partition it already had.
- ``commit_regressed``: a group's committed offset of a partition going back.
- ``group_skipped``: a record below the group's final committed offset that no member
  processed (a commit ran ahead of what was processed).

Values must be unique per send (the checker finds records by value).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Hashable, Iterable

SLACK_S = 5.0  # how much later than its deadline a future may resolve (threads, a busy host)


@dataclasses.dataclass(frozen=True)
class Send:
    """One send, in the order its producer made it (``index``). Times are monotonic seconds
    (``time.monotonic()``): when it was sent, when its future resolved, and the deadline by
    which it had to (its send time plus the producer's delivery timeout)."""

    producer: int
    index: int
    value: bytes
    resolved: bool
    partition: int | None = None     # from the acknowledgement
    offset: int | None = None
    error: BaseException | None = None
    must_succeed: bool = False
    sent_at: float | None = None
    resolved_at: float | None = None
    deadline: float | None = None
    key_partition: int | None = None  # where its key puts it (None: keyless)

    @property
    def acked(self) -> bool:
        return self.resolved and self.error is None


@dataclasses.dataclass(frozen=True)
class Read:
    """One record as one consumer (``reader``) got it, in the order it got them."""

    reader: Hashable
    partition: int
    offset: int
    value: bytes


@dataclasses.dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str


def check(sends: Iterable[Send], reads: Iterable[Read], *,
          complete_readers: Iterable[Hashable] = (), slack_s: float = SLACK_S,
          origin: float = 0.0) -> list[Anomaly]:
    """Every anomaly in the history; an empty list when there is none. The reads of
    ``complete_readers`` are each one whole pass over every partition, start to end. Times
    are printed in seconds after ``origin``."""
    sends, reads = list(sends), list(reads)
    found: list[Anomaly] = []
    found += [Anomaly("unresolved", f"producer {s.producer} send {s.index} ({s.value!r})")
              for s in sends if not s.resolved]
    for s in sends:
        if s.resolved and s.resolved_at is not None and s.deadline is not None and \
                s.resolved_at > s.deadline + slack_s:
            how = f"failed with {s.error!r}" if s.error else "acknowledged"
            found.append(Anomaly("late_resolution", f"producer {s.producer} send {s.index} "
                                 f"({s.value!r}) resolved {s.resolved_at - s.deadline:.1f} s "
                                 f"after its deadline (t+{s.deadline - origin:.1f} s): {how}"))
    found += [Anomaly("late_failure", f"producer {s.producer} send {s.index}: {s.error!r}")
              for s in sends if s.must_succeed and s.resolved and s.error is not None]

    at: dict[tuple[int, int], set[bytes]] = defaultdict(set)
    where: dict[bytes, set[tuple[int, int]]] = defaultdict(set)
    for r in reads:
        at[(r.partition, r.offset)].add(r.value)
        where[r.value].add((r.partition, r.offset))
    found += [Anomaly("inconsistent_offset", f"partition {p} offset {o} holds {sorted(values)}")
              for (p, o), values in sorted(at.items()) if len(values) > 1]
    found += [Anomaly("duplicate", f"{value!r} at {sorted(places)}")
              for value, places in where.items() if len(places) > 1]
    for s in sends:
        if s.acked:
            found += _placement(s, sorted(where.get(s.value, ())))

    found += _monotonic(reads)
    found += _gaps(r for r in reads if r.reader in set(complete_readers))

    by_source: dict[tuple[int, int], list[Send]] = defaultdict(list)
    for s in sends:
        if s.acked and s.offset is not None and s.offset >= 0:  # order of known offsets
            by_source[(s.producer, s.partition)].append(s)
    for (producer, partition), mine in by_source.items():
        mine.sort(key=lambda s: s.index)
        for earlier, later in itertools.pairwise(mine):
            if later.offset <= earlier.offset:
                found.append(Anomaly("reordered", f"producer {producer} partition {partition}: "
                                     f"send {later.index} at offset {later.offset}, before "
                                     f"send {earlier.index} at {earlier.offset}"))
    return found


def stalls(sends: Iterable[Send], limit_s: float, origin: float = 0.0,
           excused: Iterable[tuple[int, float, float]] = ()) -> list[Anomaly]:
    """``stalled``: a partition without any acknowledgement for longer than ``limit_s``
    while producers kept sending to it (the gap between two acknowledgements; times are
    printed in seconds after ``origin``). ``excused`` are (partition, from, to) spans in
    which a partition could not be served (a broker of its ISR died while the controller,
    which takes it out and elects leaders, hung): they do not count towards a gap."""
    times: dict[int, list[float]] = defaultdict(list)
    for s in sends:
        if s.acked and s.resolved_at is not None and s.partition is not None:
            times[s.partition].append(s.resolved_at)
    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for partition, start, end in excused:
        spans[partition].append((start, end))
    out = []
    for partition, mine in sorted(times.items()):
        for a, b in itertools.pairwise(sorted(mine)):
            free = sum(max(0.0, min(b, end) - max(a, start))
                       for start, end in spans.get(partition, ()))
            if b - a - free > limit_s:
                why = f", {free:.1f} s of it excused" if free else ""
                out.append(Anomaly("stalled", f"partition {partition}: no acknowledgement for "
                                   f"{b - a:.1f} s (limit {limit_s:.0f} s{why}), from t+"
                                   f"{a - origin:.1f} to t+{b - origin:.1f} s"))
    return out


def _placement(s: Send, seen: list[tuple[int, int]]) -> list[Anomaly]:
    """What is wrong with where an acknowledged send is (``seen``: where reads found it)."""
    name = f"producer {s.producer} send {s.index} ({s.value!r})"
    out = []
    if s.offset is None or s.offset < 0:
        # Kafka's producers report -1 for a duplicate whose offset the leader forgot; raylog
        # must not (issue 22, item 1: such a batch was never written).
        out.append(Anomaly("negative_ack", f"{name} acknowledged in partition {s.partition} "
                                           f"at offset {s.offset}, read at {seen or 'no offset'}"))
    if not seen:
        out.append(Anomaly("lost", f"{name} acknowledged at partition {s.partition} offset "
                                   f"{s.offset}, read nowhere"))
    elif s.offset is not None and s.offset >= 0 and (s.partition, s.offset) not in seen:
        out.append(Anomaly("misplaced", f"{name} acknowledged at partition {s.partition} "
                                        f"offset {s.offset}, read at {seen}"))
    if s.key_partition is not None and s.partition != s.key_partition:
        out.append(Anomaly("misplaced", f"{name} acknowledged in partition {s.partition}, its "
                                        f"key's is {s.key_partition}"))
    return out


def _monotonic(reads: list[Read]) -> list[Anomaly]:
    out = []
    last: dict[tuple[Hashable, int], int] = {}
    for r in reads:
        key = (r.reader, r.partition)
        if key in last and r.offset <= last[key]:
            out.append(Anomaly("nonmonotonic_read", f"reader {r.reader} read partition "
                               f"{r.partition} offset {r.offset} after {last[key]}"))
        last[key] = max(r.offset, last.get(key, -1))
    return out


def _gaps(complete: Iterable[Read]) -> list[Anomaly]:
    offsets: dict[tuple[Hashable, int], list[int]] = defaultdict(list)
    for r in complete:
        offsets[(r.reader, r.partition)].append(r.offset)
    out = []
    for (reader, partition), mine in sorted(offsets.items(), key=repr):
        held = set(mine)
        first, last = min(held), max(held)
        missing = [o for o in range(first, last + 1) if o not in held]
        if missing:
            out.append(Anomaly("log_gap", f"reader {reader} read partition {partition} "
                               f"{first}..{last} without offsets {missing[:10]}"
                               f"{' ...' if len(missing) > 10 else ''}"))
    return out


def regressions(kind: str, what: str, samples: Iterable[tuple[float, int, int]]
                ) -> list[Anomaly]:
    """``kind`` for each sample (at, partition, value) of a per-partition position that must
    never go back (a committed offset, a high watermark) lower than one seen before it."""
    best: dict[int, tuple[float, int]] = {}
    out = []
    for at, partition, value in sorted(samples):
        if partition in best and value < best[partition][1]:
            out.append(Anomaly(kind, f"partition {partition}: {what} {value} at {at:.3f} "
                                     f"after {best[partition][1]} at {best[partition][0]:.3f}"))
        if partition not in best or value >= best[partition][1]:
            best[partition] = (at, value)
    return out


# -- consumer groups -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Owned:
    """What one member's rebalance listener was told about one partition, at ``at``
    (monotonic seconds). ``kind`` is ``assigned``, ``revoked`` or ``lost``; for ``lost``,
    ``since`` is when the member's poll before the one in which it learned it returned: the
    last moment it delivered records (the consumer drops a lost partition's records before
    the poll that learned it returns any)."""

    member: str
    partition: int
    kind: str
    at: float
    since: float | None = None


@dataclasses.dataclass(frozen=True)
class Processed:
    """A record a member processed (its poll returned it) at ``at``."""

    member: str
    partition: int
    offset: int
    value: bytes
    at: float


@dataclasses.dataclass(frozen=True)
class Interval:
    member: str
    partition: int
    start: float
    end: float
    how: str  # what ended it: revoked, lost, last seen alive


def ownership(events: Iterable[Owned], last_seen: dict[str, float]
              ) -> tuple[list[Interval], list[Anomaly]]:
    """Each member's ownership intervals of each partition, and listener events out of order.

    The hand-off order makes the recorded intervals lie inside the real ones: a member's
    listener hears ``assigned`` after it took the partition and ``revoked`` before it lets
    go, and the coordinator grants a partition only after its owner reported letting go. So
    a correct hand-off always shows the old owner's ``revoked`` before the new owner's
    ``assigned``, and two recorded intervals that overlap overlap for real. A ``lost``
    partition is heard after the member stopped reading it, and a member that lost its
    session may not have polled for a while (say, blocked in a commit while the coordinator
    hung): its interval ends when it last delivered records (``since``). A member that died
    (or is still up) without a word owns its partitions until the last time it was seen
    alive (``last_seen``), no later.
    """
    out, wrong = [], []
    open_: dict[tuple[str, int], float] = {}
    for e in sorted(events, key=lambda e: e.at):
        key = (e.member, e.partition)
        if e.kind == "assigned":
            if key in open_:
                wrong.append(Anomaly("listener_order", f"member {e.member} told it gained "
                                     f"partition {e.partition} at {e.at:.3f}, which it owned "
                                     f"since {open_[key]:.3f}"))
                continue
            open_[key] = e.at
        elif key in open_:
            start = open_.pop(key)
            end = e.since if e.kind == "lost" and e.since is not None else e.at
            out.append(Interval(e.member, e.partition, start, max(start, end), e.kind))
    for (member, partition), start in open_.items():
        end = last_seen.get(member, start)
        out.append(Interval(member, partition, start, max(start, end), "last seen alive"))
    return out, wrong


def interval_reads(processed: Iterable[Processed], intervals: Iterable[Interval]
                   ) -> list[Read]:
    """The records members processed as reads for :func:`check`, one reader per ownership
    interval: a member that gets a partition (back) starts at the committed offset, so its
    offsets increase within an interval, not across them."""
    owned: dict[tuple[str, int], list[Interval]] = defaultdict(list)
    for i in intervals:
        owned[(i.member, i.partition)].append(i)
    out = []
    for r in processed:
        spans = [i for i in owned.get((r.member, r.partition), ()) if i.start <= r.at <= i.end]
        start = spans[0].start if spans else None
        out.append(Read((r.member, r.partition, start), r.partition, r.offset, r.value))
    return out


def check_group(events: Iterable[Owned], processed: Iterable[Processed],
                last_seen: dict[str, float], *,
                committed: Iterable[tuple[float, int, int]] = (),
                log: Iterable[Read] = (), final_committed: dict[int, int] | None = None
                ) -> list[Anomaly]:
    """Anomalies of a consumer group's history: ownership from the listeners' ``events``,
    records ``processed`` by members, the group's ``committed`` offsets as seen over time
    ((at, partition, offset)), and, with the whole ``log`` (a complete read) and the
    group's ``final_committed`` offsets, the records the group skipped."""
    processed = list(processed)
    intervals, found = ownership(events, last_seen)
    by_partition: dict[int, list[Interval]] = defaultdict(list)
    for i in intervals:
        by_partition[i.partition].append(i)
    for partition, mine in sorted(by_partition.items()):
        mine.sort(key=lambda i: i.start)
        for a, b in itertools.combinations(mine, 2):
            if a.member != b.member and b.start < a.end and a.start < b.end:
                found.append(Anomaly("two_owners", f"partition {partition}: member {a.member} "
                                     f"owned it {a.start:.3f}-{a.end:.3f} (until {a.how}), "
                                     f"member {b.member} {b.start:.3f}-{b.end:.3f}: "
                                     f"{min(a.end, b.end) - b.start:.3f} s together"))
    owned: dict[tuple[str, int], list[Interval]] = defaultdict(list)
    for i in intervals:
        owned[(i.member, i.partition)].append(i)
    for r in processed:
        if not any(i.start <= r.at <= i.end for i in owned.get((r.member, r.partition), ())):
            found.append(Anomaly("unowned_read", f"member {r.member} processed partition "
                                 f"{r.partition} offset {r.offset} at {r.at:.3f} without "
                                 f"owning it"))
    found += regressions("commit_regressed", "committed offset", committed)
    if final_committed is not None:
        done = {(r.partition, r.offset, r.value) for r in processed}
        skipped: dict[int, list[int]] = defaultdict(list)
        for r in log:
            if r.offset < final_committed.get(r.partition, 0) and \
                    (r.partition, r.offset, r.value) not in done:
                skipped[r.partition].append(r.offset)
        found += [Anomaly("group_skipped", f"partition {p}: {len(offsets)} records below the "
                          f"committed offset {final_committed[p]} never processed, offsets "
                          f"{sorted(offsets)[:10]}") for p, offsets in sorted(skipped.items())]
    return found


def summary(anomalies: list[Anomaly], limit: int = 5) -> str:
    """The anomalies by kind, with the first few of each, for an assertion message."""
    kinds: dict[str, list[str]] = defaultdict(list)
    for a in anomalies:
        kinds[a.kind].append(a.detail)
    return "; ".join(f"{len(details)} {kind}: {details[:limit]}"
                     for kind, details in sorted(kinds.items()))
