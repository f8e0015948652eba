"""Where replicas go: spread over brokers, leaders balanced."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from raylog.errors import InvalidReplicationFactorError, NoBrokersError


def assign_replicas(brokers: Sequence[int], partitions: int, replication_factor: int,
                    existing: Iterable[Sequence[int]] = ()) -> list[list[int]]:
    """Choose ``replication_factor`` distinct brokers for each of ``partitions`` partitions.

    The first broker of each list is the preferred leader. Leaders go to the brokers leading
    the fewest partitions so far (counting ``existing`` assignments, e.g. other topics'), and
    followers to those holding the fewest replicas; ties break by broker order, so the result
    is deterministic.
    """
    brokers = sorted(brokers)
    if not brokers:
        raise NoBrokersError("no live brokers (nodes with the raylog_broker resource serving "
                             "a data directory)")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the number of live "
            f"brokers ({len(brokers)}), not counting brokers being drained")
    leaders: Counter[int] = Counter()
    replicas: Counter[int] = Counter()
    for nodes in existing:
        if nodes:
            leaders[nodes[0]] += 1
        replicas.update(nodes)
    out = []
    for _ in range(partitions):
        order = {b: i for i, b in enumerate(brokers)}
        leader = min(brokers, key=lambda b: (leaders[b], replicas[b], order[b]))
        followers = sorted((b for b in brokers if b != leader),
                           key=lambda b: (replicas[b], order[b]))[: replication_factor - 1]
        chosen = [leader, *followers]
        leaders[leader] += 1
        replicas.update(chosen)
        out.append(chosen)
    return out


def replacement(brokers: Sequence[int], replicas: Sequence[int],
                existing: Iterable[Sequence[int]] = ()) -> int | None:
    """A broker of ``brokers`` to hold a replica of a partition on ``replicas`` in place of
    one that is gone: not a replica already, holding the fewest replicas (``existing``: every
    partition's replica list), ties by id. None if every broker is a replica already."""
    held: Counter[int] = Counter()
    for nodes in existing:
        held.update(nodes)
    candidates = [b for b in sorted(brokers) if b not in replicas]
    return min(candidates, key=lambda b: (held[b], b), default=None)
