"""A history checker for fault tests: what producers sent and consumers read, and what of it
cannot be right. Plain Python: fault tests record the history, this finds the anomalies.

The anomalies are the ones Jepsen's Kafka workload looks for, over raylog's model (each
partition a log with dense offsets; a producer's acknowledgement names the record's partition
and offset):

- ``unresolved``: a send whose future never resolved.
- ``lost``: an acknowledged value that no read found at the partition and offset its
  acknowledgement named (or found somewhere else). An acknowledgement with offset -1 (a
  duplicate retry the leader no longer remembers the offset of) needs the value once in its
  partition.
- ``duplicate``: one value at more than one (partition, offset).
- ``inconsistent_offset``: one (partition, offset) holding different values in different
  reads.
- ``nonmonotonic_read``: a consumer's successive records of one partition whose offsets do not
  increase.
- ``reordered``: two sends of one producer to one partition whose offsets are in the other
  order than the sends (idempotent producers keep per-partition order).
- ``late_failure``: a send the test required to succeed (say, made after the cluster was
  healthy again) that failed.

Values must be unique per send (the checker finds records by value).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True)
class Send:
    """One send, in the order its producer made it (``index``)."""

    producer: int
    index: int
    value: bytes
    resolved: bool
    partition: int | None = None     # from the acknowledgement
    offset: int | None = None
    error: BaseException | None = None
    must_succeed: bool = False

    @property
    def acked(self) -> bool:
        return self.resolved and self.error is None


@dataclasses.dataclass(frozen=True)
class Read:
    """One record as one consumer (``reader``) got it, in the order it got them."""

    reader: int
    partition: int
    offset: int
    value: bytes


@dataclasses.dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str


def check(sends: Iterable[Send], reads: Iterable[Read]) -> list[Anomaly]:
    """Every anomaly in the history; an empty list when there is none."""
    sends, reads = list(sends), list(reads)
    found: list[Anomaly] = []
    found += [Anomaly("unresolved", f"producer {s.producer} send {s.index} ({s.value!r})")
              for s in sends if not s.resolved]
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
        if s.acked and s.offset is not None and s.offset < 0:
            # Acknowledged without an offset (a retry of a batch appended so long ago that
            # the leader no longer remembers where; Kafka's producers report -1 then too):
            # it must be in its partition, once.
            if [p for p, _ in where.get(s.value, ())] != [s.partition]:
                found.append(Anomaly("lost", f"{s.value!r} acknowledged in partition "
                                             f"{s.partition} (offset unknown), read at "
                                             f"{sorted(where.get(s.value, ())) or 'no offset'}"))
            continue
        if s.acked and (s.partition, s.offset) not in where.get(s.value, ()):
            seen = sorted(where.get(s.value, ()))
            found.append(Anomaly("lost", f"{s.value!r} acknowledged at partition {s.partition} "
                                         f"offset {s.offset}, read at {seen or 'no offset'}"))

    last: dict[tuple[int, int], int] = {}
    for r in reads:
        key = (r.reader, r.partition)
        if key in last and r.offset <= last[key]:
            found.append(Anomaly("nonmonotonic_read", f"reader {r.reader} read partition "
                                 f"{r.partition} offset {r.offset} after {last[key]}"))
        last[key] = max(r.offset, last.get(key, -1))

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


def summary(anomalies: list[Anomaly], limit: int = 5) -> str:
    """The anomalies by kind, with the first few of each, for an assertion message."""
    kinds: dict[str, list[str]] = defaultdict(list)
    for a in anomalies:
        kinds[a.kind].append(a.detail)
    return "; ".join(f"{len(details)} {kind}: {details[:limit]}"
                     for kind, details in sorted(kinds.items()))
