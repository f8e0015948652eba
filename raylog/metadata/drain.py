"""Controlled shutdown and rolling restarts: the controller's rules (Kafka's
``controlled.shutdown.enable`` and the checks of a careful rolling restart).

A broker about to stop is **drained** first, in two steps, each a set of partition changes
(:class:`~raylog.metadata.election.Change`) the controller commits and tells the replicas:

1. :func:`drained_leader`: every partition it leads gets a new leader, the first other
   member of its ISR in replica order that is alive and not draining itself, with a new
   leader epoch. Producers and consumers holding the old leader are refused
   (``NotLeaderError`` / ``FencedEpochError``, retriable), refresh and go on.
2. :func:`left_isr`: it leaves every ISR it is still in (never the last member: the ISR is
   never empty), so that once it stops no acks=all write waits for it. While it drains it
   is not "live" for elections: it leads nothing and rejoins no ISR until it is back.

Draining is refused (:func:`check_drain`, ``LastInSyncReplicaError``) where the broker is
the only live in-sync replica of a partition: no one could take over, and the partition
would go offline while it is stopped; ``force`` drains anyway (those partitions keep it as
leader until it stops, then wait for it to come back).

A broker whose **Ray node is draining** (Ray's DRAINING node state, with a deadline: ``ray
start --block`` on SIGTERM, ``ray drain-node``, an autoscaler's preemption) is drained the
same way, forced, and stopped before the deadline: :func:`node_drains` says which brokers and
how long each drain may take.

What a drain leaves behind (brokers drained, and the node each stopped one was served by)
outlives a controller restart as a **record** (:func:`drain_record`, kept in Ray's GCS by the
controller: it concerns processes, and lives as long as the Ray cluster does);
:func:`restored_drains` takes from it what still holds (the broker has not restarted since).

A **rolling restart** restarts brokers one at a time; :func:`roll_order` refuses to begin on
a cluster with offline partitions (``OfflinePartitionsError``) and names unknown brokers
(``UnknownBrokerError``); :func:`not_in_sync` says what a step still waits for.

Plain Python, no Ray: the controller (actors/drains.py) commits and tells; the admin client
(raylog/client/operations.py) runs the roll.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from raylog.errors import (
    InvalidArgumentError,
    LastInSyncReplicaError,
    OfflinePartitionsError,
    UnknownBrokerError,
)
from raylog.metadata.election import Change, choose_leader
from raylog.metadata.state import PartitionState, TopicState

Partition = tuple[TopicState, PartitionState]
SHOWN = 10  # partitions named in a message; the rest are counted
NODE_DRAIN_LONGEST_S = 60.0  # a node drain's bound when Ray gives no deadline
NODE_DRAIN_SHORTEST_S = 1.0  # ... and when its deadline is (nearly) past: still try
STOP_MARGIN_S = 3.0  # kept before a node's deadline to stop the broker's actors


def name_of(topic: TopicState, p: PartitionState) -> str:
    return f"{topic.name}-{p.partition}"


def named(names: Sequence[str]) -> str:
    """The first few of ``names``, and how many more."""
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def check_known(brokers: Iterable[int], known: Collection[int], what: str = "") -> None:
    """UnknownBrokerError naming every broker of ``brokers`` the cluster never gave out
    (the message begins with ``what``, if given: what the brokers were asked for)."""
    unknown = sorted({b for b in brokers if b not in known})
    if unknown:
        raise UnknownBrokerError(
            f"{what + ': ' if what else ''}unknown broker{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(str, unknown))} (the cluster's brokers: "
            f"{', '.join(map(str, sorted(known))) or 'none'})")


def drained_leader(p: PartitionState, broker: int, live: Collection[int]) -> Change | None:
    """If ``broker`` leads ``p``: the first other ISR member in replica order in ``live``
    leads, at a new leader epoch, the ISR unchanged. None if it does not lead, or if no
    other in-sync replica is live (then it leads until it stops)."""
    if p.leader != broker:
        return None
    others = [b for b in p.isr if b != broker]
    leader, _ = choose_leader(p.replicas, others, set(live) - {broker}, unclean=False)
    if leader is None:
        return None
    return Change(leader, p.leader_epoch + 1, list(p.isr))


def left_isr(p: PartitionState, broker: int) -> Change | None:
    """``broker`` leaves ``p``'s ISR, unless it leads it (its leadership could not move) or
    is the ISR's last member."""
    if broker not in p.isr or p.leader == broker or len(p.isr) == 1:
        return None
    return Change(p.leader, p.leader_epoch, [b for b in p.isr if b != broker])


def stranded(partitions: Iterable[Partition], broker: int,
             live: Collection[int]) -> list[str]:
    """The partitions whose only live in-sync replica is ``broker``: drained and stopped, it
    would leave them without a leader."""
    return [name_of(t, p) for t, p in partitions
            if broker in p.isr and not any(b in live for b in p.isr if b != broker)]


def check_drain(partitions: Iterable[Partition], broker: int, known: Collection[int],
                live: Collection[int], force: bool) -> list[str]:
    """Whether ``broker`` may be drained: UnknownBrokerError if the cluster does not know
    it; LastInSyncReplicaError naming the partitions it is the last live in-sync replica
    of, unless ``force``. Returns those partitions (with ``force``, they go offline while
    it is stopped)."""
    check_known([broker], known)
    alone = stranded(partitions, broker, live)
    if alone and not force:
        raise LastInSyncReplicaError(
            f"broker {broker} is the last in-sync replica of {len(alone)} "
            f"partition{'s' if len(alone) > 1 else ''} ({named(alone)}): stopped, it would "
            f"leave them without a leader; force the drain to do it anyway")
    return alone


def offline(partitions: Iterable[Partition], live: Collection[int]) -> list[str]:
    """Partitions without a live leader."""
    return [name_of(t, p) for t, p in partitions if p.leader is None or p.leader not in live]


def not_in_sync(partitions: Iterable[Partition], live: Collection[int]) -> list[str]:
    """Partitions a roll must wait for before its next step: without a live leader, or with
    a replica that is not a live member of the ISR."""
    return [name_of(t, p) for t, p in partitions
            if p.leader is None or p.leader not in live
            or any(b not in p.isr or b not in live for b in p.replicas)]


def roll_order(requested: Sequence[int] | None, known: Collection[int],
               live: Collection[int], partitions: Iterable[Partition]) -> list[int]:
    """The brokers a rolling restart restarts, in order: ``requested`` as given (each once),
    or every live broker by id. Refused before anything happens: UnknownBrokerError naming
    brokers the cluster does not know, InvalidArgumentError naming requested brokers that
    are not alive (there is nothing to restart: a roll would wait for them forever), and
    OfflinePartitionsError naming the partitions without a live leader."""
    if requested is not None:
        check_known(requested, known)
        down = sorted({b for b in requested if b not in live})
        if down:
            raise InvalidArgumentError(
                f"broker{'s' if len(down) > 1 else ''} {', '.join(map(str, down))} "
                f"{'are' if len(down) > 1 else 'is'} not alive: a roll restarts live brokers "
                f"(start the node first)")
        order = list(dict.fromkeys(requested))
    else:
        order = sorted(live)
    if not order:
        raise InvalidArgumentError("no live broker to restart")
    gone = offline(partitions, live)
    if gone:
        raise OfflinePartitionsError(
            f"{len(gone)} partition{'s have' if len(gone) > 1 else ' has'} no live leader "
            f"({named(gone)}): a roll would not begin on a cluster with offline partitions")
    return order


def node_drains(draining: Mapping[str, int], served: Mapping[int, str],
                handled: Collection[tuple[int, str]], now_ms: int,
                longest_s: float = NODE_DRAIN_LONGEST_S) -> list[tuple[int, float]]:
    """The brokers to drain because their Ray node is draining: ``draining`` is Ray's
    draining nodes (node id -> deadline, ms since the epoch; 0 for none), ``served`` the
    live brokers' nodes, ``handled`` the (broker, node) pairs already drained for that
    reason. Each with how long its drain may wait for the replicas: until the node's
    deadline less ``STOP_MARGIN_S`` (the broker is stopped before Ray takes the node), at
    most ``longest_s`` (also without a deadline), at least ``NODE_DRAIN_SHORTEST_S``.
    In broker order."""
    found = []
    for broker, node in sorted(served.items()):
        if node not in draining or (broker, node) in handled:
            continue
        deadline = draining[node]
        budget = longest_s if deadline == 0 else (deadline - now_ms) / 1000 - STOP_MARGIN_S
        found.append((broker, max(NODE_DRAIN_SHORTEST_S, min(longest_s, budget))))
    return found


def drain_record(draining: Collection[int], stopped: Mapping[int, str],
                 incarnations: Mapping[int, str]) -> dict[str, Any]:
    """The drains to keep across a controller restart, as JSON-able data: per drained
    broker, the incarnation of its process when drained (the metadata's last seen) and the
    node it was stopped on, if stopped."""
    return {"brokers": [{"broker": b, "incarnation": incarnations.get(b),
                         "stopped_node": stopped.get(b)} for b in sorted(draining)]}


def restored_drains(record: Mapping[str, Any] | None, incarnations: Mapping[int, str]
                    ) -> tuple[set[int], dict[int, str]]:
    """(the brokers still drained, broker -> the node it was stopped on) from a
    :func:`drain_record`: a broker whose process restarted since it was drained (another
    incarnation in the metadata) is no longer drained, as when the controller sees it
    come back."""
    draining, stopped = set(), {}
    for entry in (record or {}).get("brokers", []):
        broker = int(entry["broker"])
        if incarnations.get(broker) != entry["incarnation"]:
            continue
        draining.add(broker)
        if entry["stopped_node"] is not None:
            stopped[broker] = entry["stopped_node"]
    return draining, stopped
