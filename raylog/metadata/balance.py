"""The partition balancer's planner: which replicas and leaderships to move so that the live
brokers hold even shares of replicas, leaders and bytes (docs/balancing.md).

:func:`plan_balance` takes the partitions (the metadata state's topics), the live brokers,
the bytes of each replica and the brokers to empty (gone for good, or being
decommissioned), and returns a :class:`Plan`: for each partition that changes, its replicas
now and its target, the first of which is the preferred leader. The controller carries a
plan out with the reassignments it already has (raylog/metadata/election.py's ``reassign``:
the new replicas copy the leader, join the ISR, then the old ones go), and then elects the
preferred leaders.

The plan is decided in four passes, each greedy and deterministic (ties broken by broker id,
then topic and partition), each only ever making its measure strictly better, so it ends:

1. **Evacuate**: every replica on a broker to empty goes to the live broker holding the
   fewest replicas (then the fewest bytes).
2. **Replica counts**: while two live brokers' replica counts differ by more than one, a
   replica moves from the fuller to the emptier: the smallest one that fits, unless their
   bytes differ by more than the tolerance, then the one that evens their bytes best.
3. **Bytes**: while the fullest and the emptiest broker (in bytes) differ by more than
   ``disk_tolerance`` of the mean, a move (if their counts allow it) or a swap of two
   replicas that narrows the gap; one that brings it within the tolerance with the fewest
   bytes copied, else the one that narrows it most.
4. **Leaders**: while two live brokers' preferred-leader counts differ by more than one, a
   partition whose preferred leader is the busier broker and which has a replica on the
   idler one gets that replica first (a leader move copies nothing).

Rules every plan keeps: a target holds distinct brokers, only live brokers not being
emptied are added, and never more replicas than ``max_replicas`` allows on a broker; a
partition moves only when every replica it keeps is alive and in its ISR, its ISR has at
least ``min.insync.replicas`` members, its leader is alive and no reassignment of it is
under way (so no move ever takes an ISR below ``min.insync.replicas``: the new replicas join
before the old ones leave); a new preferred leader is in the ISR or is a replica the plan
adds (in the ISR by the time the move is done). A balanced cluster gets an empty plan, and
the state a plan leads to gets an empty plan too.

Plain Python; not thread-safe (each call works on its own copies).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from raylog.errors import InvalidArgumentError
from raylog.metadata.drain import check_known
from raylog.metadata.state import PartitionState, TopicState
from raylog.metadata.topics import REPLICATION_DEFAULTS

DEFAULT_DISK_TOLERANCE = 0.1  # the bytes of the fullest and emptiest broker may differ by
                              # this share of the mean before bytes are moved to even them

TP = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class Move:
    """One partition's change: ``replicas`` now, ``target`` after (the first its preferred
    leader); ``bytes`` to copy (its size for each replica added)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...]
    bytes: int

    @property
    def added(self) -> list[int]:
        return [b for b in self.target if b not in self.replicas]

    @property
    def removed(self) -> list[int]:
        return [b for b in self.replicas if b not in self.target]

    @property
    def leader_only(self) -> bool:
        """Only the preferred leader changes: nothing is copied."""
        return set(self.target) == set(self.replicas)

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition,
                "replicas": list(self.replicas), "target": list(self.target),
                "bytes": self.bytes, "added": self.added, "removed": self.removed,
                "leader_only": self.leader_only}


@dataclasses.dataclass(frozen=True)
class Load:
    """What one broker holds: replicas, preferred leaderships, bytes."""

    replicas: int
    leaders: int
    bytes: int

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The moves, each broker's load before and after them, and the partitions that could
    not be moved although they should have (with why)."""

    moves: tuple[Move, ...]
    before: dict[int, Load]
    after: dict[int, Load]
    skipped: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(m.bytes for m in self.moves)

    def to_dict(self) -> dict[str, Any]:
        return {"moves": [m.to_dict() for m in self.moves], "bytes": self.bytes,
                "before": {str(b): load.to_dict() for b, load in sorted(self.before.items())},
                "after": {str(b): load.to_dict() for b, load in sorted(self.after.items())},
                "skipped": list(self.skipped)}


def check_brokers(what: str, brokers: Iterable[object], known: Collection[int]) -> list[int]:
    """``brokers`` as a sorted list of ids, each one of ``known``; UnknownBrokerError naming
    the others, InvalidArgumentError for what is not a broker id."""
    ids = []
    for broker in brokers:
        if type(broker) is not int:
            raise InvalidArgumentError(f"{what}: broker ids are integers, got {broker!r}")
        ids.append(broker)
    check_known(ids, known, what)
    return sorted(set(ids))


def plan_balance(topics: Iterable[TopicState], live: Collection[int],
                 sizes: Mapping[tuple[str, int, int], int] | None = None, *,
                 remove: Collection[int] = (), max_replicas: Mapping[int, int] | None = None,
                 disk_tolerance: float = DEFAULT_DISK_TOLERANCE) -> Plan:
    """The plan that evens replicas, preferred leaders and bytes over the brokers of
    ``live`` not in ``remove``, and empties the brokers of ``remove``.

    ``sizes``: bytes of each replica, ``(topic, partition, broker)`` -> bytes (a partition's
    size is the largest of its replicas'; missing ones count as 0). ``max_replicas``: the
    most replicas each broker may hold (raylog/metadata/limits.py; none: no limit).
    Raises InvalidArgumentError for a negative size or tolerance, or no broker to move to.

    >>> plan_balance([], live={0, 1}).moves
    ()
    """
    if isinstance(disk_tolerance, bool) or not isinstance(disk_tolerance, int | float) \
            or not math.isfinite(disk_tolerance) or disk_tolerance < 0:
        raise InvalidArgumentError(f"disk_tolerance must be >= 0, got {disk_tolerance!r}")
    balancer = _Balancer(list(topics), set(live), set(remove), sizes or {},
                         max_replicas or {}, disk_tolerance)
    return balancer.plan()


class _Balancer:
    """One planning: the targets so far and the loads they give."""

    def __init__(self, topics: list[TopicState], live: set[int], remove: set[int],
                 sizes: Mapping[tuple[str, int, int], int], max_replicas: Mapping[int, int],
                 disk_tolerance: float) -> None:
        self.brokers = sorted(live - remove)  # where replicas may go
        if not self.brokers:
            raise InvalidArgumentError(f"no live broker to balance over (live: {sorted(live)}, "
                                       f"to empty: {sorted(remove)})")
        self.remove = remove
        self.live = live
        self.max_replicas = max_replicas
        self.tolerance = disk_tolerance
        self.partitions: dict[TP, PartitionState] = {}
        self.topic_of: dict[TP, TopicState] = {}
        self.size: dict[TP, int] = {}
        for (topic, partition, _), value in sizes.items():
            if type(value) is not int or value < 0:
                raise InvalidArgumentError(f"{topic}-{partition}: a replica's size is a "
                                           f"number of bytes >= 0, got {value!r}")
        for topic in topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition)
                self.partitions[tp] = p
                self.topic_of[tp] = topic
                self.size[tp] = max((sizes.get((*tp, b), 0) for b in p.replicas), default=0)
        self.target: dict[TP, list[int]] = {tp: list(p.replicas)
                                            for tp, p in self.partitions.items()}
        self.movable = {tp for tp, p in self.partitions.items() if self._movable(p, tp)}
        self.skipped: list[str] = []
        self.replicas: Counter[int] = Counter()
        self.bytes: Counter[int] = Counter()
        self.leaders: Counter[int] = Counter()
        self.per_topic: Counter[tuple[str, int]] = Counter()
        self.held: dict[int, set[TP]] = {}  # broker -> the partitions planned on it
        for tp, target in self.target.items():
            self._count(tp, target, 1)

    # -- bookkeeping -----------------------------------------------------------------------------

    def _movable(self, p: PartitionState, tp: TP) -> bool:
        """Whether ``p`` may be moved: see the module's rules."""
        min_insync = self.topic_of[tp].configs.get(
            "min_insync_replicas", REPLICATION_DEFAULTS["min_insync_replicas"])
        kept = [b for b in p.replicas if b not in self.remove]
        return (p.target is None and p.leader is not None and p.leader in self.live
                and all(b in self.live and b in p.isr for b in kept)
                and len(p.isr) >= min_insync)

    def _count(self, tp: TP, target: list[int], sign: int) -> None:
        for broker in target:
            held = self.held.setdefault(broker, set())
            if sign > 0:
                held.add(tp)
            else:
                held.discard(tp)
            self.replicas[broker] += sign
            self.bytes[broker] += sign * self.size[tp]
            self.per_topic[tp[0], broker] += sign
        if target:
            self.leaders[target[0]] += sign

    def _set(self, tp: TP, target: list[int]) -> None:
        self._count(tp, self.target[tp], -1)
        self.target[tp] = target
        self._count(tp, target, 1)

    def _replace(self, tp: TP, old: int, new: int) -> None:
        self._set(tp, [new if b == old else b for b in self.target[tp]])

    def _fits(self, broker: int, tp: TP) -> bool:
        """Whether ``broker`` may take a replica of ``tp``."""
        cap = self.max_replicas.get(broker)
        return broker not in self.target[tp] and (cap is None or self.replicas[broker] < cap)

    def _on(self, broker: int) -> list[TP]:
        """The movable partitions with a replica planned on ``broker``, in order."""
        return sorted(tp for tp in self.held.get(broker, ()) if tp in self.movable)

    def _load(self, broker: int) -> Load:
        return Load(self.replicas[broker], self.leaders[broker], self.bytes[broker])

    # -- the passes ------------------------------------------------------------------------------

    def plan(self) -> Plan:
        shown = sorted(set(self.brokers) | self.remove
                       | {b for t in self.target.values() for b in t})
        before = {b: self._load(b) for b in shown}
        self._evacuate()
        self._even_counts()
        self._even_bytes()
        self._even_leaders()
        moves = []
        for tp in sorted(self.target):
            p, target = self.partitions[tp], self.target[tp]
            if target != p.replicas:
                added = len(set(target) - set(p.replicas))
                moves.append(Move(tp[0], tp[1], tuple(p.replicas), tuple(target),
                                  added * self.size[tp]))
        after = {b: self._load(b) for b in shown}
        return Plan(tuple(moves), before, after, tuple(self.skipped))

    def _evacuate(self) -> None:
        for tp in sorted(self.target):
            for broker in [b for b in self.target[tp] if b in self.remove]:
                if tp not in self.movable:
                    self.skipped.append(f"{tp[0]}-{tp[1]}: its replica on broker {broker} "
                                        f"cannot move now ({self._why(tp)})")
                    continue
                spare = min((b for b in self.brokers if self._fits(b, tp)),
                            key=lambda b: (self.replicas[b], self.bytes[b], b), default=None)
                if spare is None:
                    self.skipped.append(f"{tp[0]}-{tp[1]}: no live broker can take its "
                                        f"replica on broker {broker}")
                    continue
                self._replace(tp, broker, spare)

    def _why(self, tp: TP) -> str:
        p = self.partitions[tp]
        if p.target is not None:
            return f"a reassignment to {p.target} is under way"
        if p.leader is None or p.leader not in self.live:
            return "it has no live leader"
        return f"its replicas {p.replicas} are not all alive and in its ISR {p.isr}"

    def _gap_too_wide(self, a: int, b: int) -> bool:
        return self.bytes[a] - self.bytes[b] > self._tolerance_bytes()

    def _tolerance_bytes(self) -> float:
        return self.tolerance * sum(self.bytes[b] for b in self.brokers) / len(self.brokers)

    def _even_counts(self) -> None:
        while True:
            path = self._path(self.replicas, self._count_move)
            if path is None:
                return
            for tp, src, dst in path:
                self._replace(tp, src, dst)

    def _path(self, load: Counter[int], step: Callable[[int, int], TP | None]
              ) -> list[tuple[TP, int, int]] | None:
        """The shortest chain of steps (``step(a, b)``: the partition to move from broker a
        to broker b, or None) from a broker with the most ``load`` to one with at least two
        less: each broker between gives one and takes one, so the sum of squares of the
        loads shrinks with every chain taken. None when there is none."""
        order = sorted(self.brokers, key=lambda b: (load[b], b))
        for src in reversed(sorted(self.brokers, key=lambda b: (load[b], -b))):
            came: dict[int, tuple[int, TP] | None] = {src: None}
            queue = [src]
            while queue:
                a = queue.pop(0)
                for b in order:
                    if b in came:
                        continue
                    tp = step(a, b)
                    if tp is None:
                        continue
                    came[b] = (a, tp)
                    if load[src] - load[b] > 1:
                        path = []
                        while came[b] is not None:
                            a, tp = came[b]
                            path.append((tp, a, b))
                            b = a
                        return path[::-1]
                    queue.append(b)
        return None

    def _count_move(self, src: int, dst: int) -> TP | None:
        """The partition to move from ``src`` to ``dst`` to even their replica counts."""
        gap = self.bytes[src] - self.bytes[dst]
        wide = self._gap_too_wide(src, dst)

        def cost(tp: TP) -> tuple:
            s = self.size[tp]
            spread = self.per_topic[tp[0], dst] - self.per_topic[tp[0], src]
            return (abs(gap - 2 * s), s, spread, tp) if wide else (s, spread, tp)
        return min((tp for tp in self._on(src) if self._fits(dst, tp)), key=cost,
                   default=None)

    def _even_bytes(self) -> None:
        for _ in range(4 * len(self.target) + 1):  # each step narrows a sum of squares
            hi = max(self.brokers, key=lambda b: (self.bytes[b], -b))
            lo = min(self.brokers, key=lambda b: (self.bytes[b], b))
            if not self._gap_too_wide(hi, lo):
                return
            step = self._bytes_step(hi, lo)
            if step is None:
                return
            x, y = step
            self._replace(x, hi, lo)
            if y is not None:
                self._replace(y, lo, hi)

    def _bytes_step(self, hi: int, lo: int) -> tuple[TP, TP | None] | None:
        """A move (``(x, None)``: x from ``hi`` to ``lo``) or a swap (``(x, y)``: y back)
        narrowing the bytes between ``hi`` and ``lo`` without uneven counts."""
        gap = self.bytes[hi] - self.bytes[lo]
        tolerance = self._tolerance_bytes()
        out = [tp for tp in self._on(hi) if self._fits(lo, tp)]
        back = [tp for tp in self._on(lo) if hi not in self.target[tp]]
        candidates = []  # (delta moved from hi to lo, bytes copied, x, y)
        if self.replicas[hi] > self.replicas[lo]:
            candidates += [(self.size[x], self.size[x], x, None) for x in out]
        candidates += [(self.size[x] - self.size[y], self.size[x] + self.size[y], x, y)
                       for x in out for y in back if x != y]

        def rank(c: tuple) -> tuple:
            delta, copied, x, y = c
            left = abs(gap - 2 * delta)
            return (0, copied, left, x, y or ("", -1)) if left <= tolerance else \
                (1, left, copied, x, y or ("", -1))
        useful = [c for c in candidates if 0 < c[0] < gap]
        if not useful:
            return None
        _, _, x, y = min(useful, key=rank)
        return x, y

    def _even_leaders(self) -> None:
        while True:
            path = self._path(self.leaders, self._leader_move)
            if path is None:
                return
            for tp, _, dst in path:
                self._set(tp, [dst, *(b for b in self.target[tp] if b != dst)])

    def _leader_move(self, src: int, dst: int) -> TP | None:
        """A partition led by ``src`` whose replica on ``dst`` may lead instead: one the plan
        moves already if there is one."""
        def eligible(tp: TP) -> bool:
            target, p = self.target[tp], self.partitions[tp]
            return target[0] == src and dst in target and (dst in p.isr or
                                                           dst not in p.replicas)
        found = [tp for tp in self._on(src) if eligible(tp)]
        return min(found, key=lambda tp: (self.target[tp] == self.partitions[tp].replicas, tp),
                   default=None)
