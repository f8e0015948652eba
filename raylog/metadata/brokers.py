"""Which Ray node serves which broker right now.

A broker is a data directory with an identity (raylog/metadata/identity.py); a Ray node
serves it while it runs with that directory. The controller learns, for every live node with
the broker resource, what identity its directory holds, and this registry decides:

- no identity yet: a new broker, to be given the next id and written into the directory;
- the cluster's identity, not served by another live node: the node serves that broker from
  now on (a node that came back, possibly under a new Ray node ID, or a new node with the old
  disk);
- another cluster's identity, an id this cluster never gave out, or an id another live node
  already serves (a copied disk): refused, with the reason, and never mixed in.

Plain Python; the controller calls it from its event loop (not thread-safe). What it holds is
rebuilt from the live nodes after a restart; only the ids given out are persisted, as
metadata events.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from raylog.metadata.identity import BrokerIdentity


@dataclasses.dataclass
class BrokerInfo:
    """A broker and the node serving it (None while no live node does)."""

    broker_id: int
    node_id: str | None = None
    host: str | None = None
    data_dir: str | None = None

    @property
    def alive(self) -> bool:
        return self.node_id is not None

    def describe(self) -> dict[str, Any]:
        return {"broker_id": self.broker_id, "node_id": self.node_id, "host": self.host,
                "data_dir": self.data_dir, "alive": self.alive}


class Verdict(enum.Enum):
    NEW = "new"          # a directory without identity: give it an id
    SERVES = "serves"    # the node now serves the broker its directory names
    REFUSED = "refused"  # see the reason


@dataclasses.dataclass(frozen=True)
class Offer:
    """What a node presents: where it runs, its data directory and what identity that holds."""

    node_id: str
    host: str
    data_dir: str
    identity: BrokerIdentity | None


class BrokerRegistry:
    """Brokers by id and the nodes serving them; refused nodes with their reasons."""

    def __init__(self, cluster_id: str, known_ids: set[int]) -> None:
        self.cluster_id = cluster_id
        self.brokers: dict[int, BrokerInfo] = {i: BrokerInfo(i) for i in known_ids}
        self.refused: dict[str, str] = {}  # node id -> why
        # Nodes refused for a reason that cannot change while they run (another cluster's
        # directory, an id never given out, an unreadable directory): not asked again. A
        # node presenting a broker another live node serves is asked again each round: once
        # Ray declares the other node dead, it serves (as Kafka's registration of a broker id
        # waits for the old session to expire).
        self.final: set[str] = set()

    def broker_of(self, node_id: str) -> int | None:
        for info in self.brokers.values():
            if info.node_id == node_id:
                return info.broker_id
        return None

    def decide(self, offer: Offer) -> tuple[Verdict, str]:
        """Whether the node may serve what its directory names; (verdict, reason)."""
        identity = offer.identity
        if identity is None:
            return Verdict.NEW, "a new data directory"
        where = f"node {offer.node_id[:12]} ({offer.host}, {offer.data_dir})"
        if identity.cluster_id != self.cluster_id:
            return Verdict.REFUSED, (
                f"{where} holds broker {identity.broker_id} of cluster {identity.cluster_id}, "
                f"not of this cluster ({self.cluster_id}): its data is left untouched")
        info = self.brokers.get(identity.broker_id)
        if info is None:
            return Verdict.REFUSED, (
                f"{where} claims broker id {identity.broker_id}, which this cluster never "
                f"gave out")
        if info.alive and info.node_id != offer.node_id:
            return Verdict.REFUSED, (
                f"{where} presents broker {identity.broker_id}, which node "
                f"{info.node_id[:12]} ({info.host}, {info.data_dir}) already serves: a copied "
                f"data directory? Each broker needs its own")
        return Verdict.SERVES, f"serves broker {identity.broker_id}"

    def add(self, broker_id: int) -> None:
        """A new id was given out (and persisted)."""
        self.brokers.setdefault(broker_id, BrokerInfo(broker_id))

    def serve(self, broker_id: int, offer: Offer) -> None:
        info = self.brokers[broker_id]
        info.node_id, info.host, info.data_dir = offer.node_id, offer.host, offer.data_dir
        self.refused.pop(offer.node_id, None)
        self.final.discard(offer.node_id)

    def unserve(self, broker_id: int) -> None:
        """No node serves ``broker_id`` any more (its broker actor died for good)."""
        info = self.brokers.get(broker_id)
        if info is not None:
            info.node_id = None

    def refuse(self, node_id: str, reason: str, final: bool = True) -> None:
        self.refused[node_id] = reason
        if final:
            self.final.add(node_id)

    def release(self, node_id: str) -> None:
        """Ask the node again (an operator resumed the broker a drain stopped there)."""
        self.refused.pop(node_id, None)
        self.final.discard(node_id)

    def to_ask(self, node_id: str) -> bool:
        """Whether to ask a live broker node which broker it presents (again)."""
        return self.broker_of(node_id) is None and node_id not in self.final

    def nodes_gone(self, dead_nodes: set[str]) -> list[int]:
        """Forget the nodes Ray reports dead; return the brokers now offline. (Only a node
        reported dead counts: one missing from a listing for a moment still serves.)"""
        offline = []
        for info in self.brokers.values():
            if info.node_id is not None and info.node_id in dead_nodes:
                info.node_id = None
                offline.append(info.broker_id)
        for node_id in [n for n in self.refused if n in dead_nodes]:
            del self.refused[node_id]
            self.final.discard(node_id)
        return offline
