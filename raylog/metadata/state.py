"""Cluster metadata as a state machine over events.

The controller never edits its state directly: it builds an event, persists it to its
metadata log, then applies it. Replaying the log from the start rebuilds the same state,
which is how a restarted controller loses nothing. Events are JSON-able dicts with a
``type``; :func:`apply` is the one place that interprets them.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from raylog.errors import TopicExistsError, UnknownPartitionError, UnknownTopicError
from raylog.quotas.entity import QuotaEntity, from_wire, to_wire


@dataclasses.dataclass
class PartitionState:
    """Assignment and leadership of one partition.

    ``replicas`` are broker ids, the first being the preferred leader. ``leader`` is None while
    no replica can lead. ``leader_epoch`` grows by one at every leader change (to None
    included) and fences requests from older leaders. ``isr`` is a subset of ``replicas``
    and holds the leader; it is never empty (with no leader it keeps its last members, the
    only replicas a clean election may choose). ``partition_epoch`` grows by one at every
    change of leader, ISR or replicas: a leader's ISR change based on an older one is
    refused (Kafka's partition epoch).
    """

    partition: int
    replicas: list[int]
    leader: int | None
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0
    target: list[int] | None = None  # replicas a reassignment moves it to, until done

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class TopicState:
    name: str
    topic_id: str
    partitions: list[PartitionState]
    configs: dict[str, Any]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    def partition(self, partition: int) -> PartitionState:
        if type(partition) is not int or not 0 <= partition < len(self.partitions):
            raise UnknownPartitionError(
                f"topic {self.name!r} has partitions 0..{len(self.partitions) - 1}, "
                f"not {partition!r}")
        return self.partitions[partition]


class MetadataState:
    """Topics, their partitions' replicas, leaders, epochs and ISR, and their configs.

    Plain data; deterministic under :meth:`apply`. Not safe for concurrent use: the
    controller applies events one at a time.
    """

    def __init__(self) -> None:
        self.cluster_id: str | None = None  # set by the first event of every metadata log
        self.broker_ids: set[int] = set()   # every broker id ever given out
        # The incarnation of each broker's process the controller last saw start: a broker
        # that comes back as another incarnation lost its in-memory state (fencing, ISR).
        self.incarnations: dict[int, str] = {}
        # Each broker's broker epoch: the position in the metadata log of the event that
        # recorded its process's start (as Kafka's is the offset of the broker's
        # registration record), so it grows with every start and a replay gives it again.
        # Fetches carry it; an ISR expansion must name the current one (KIP-903).
        self.broker_epochs: dict[int, int] = {}
        self.topics: dict[str, TopicState] = {}
        self.applied = 0  # events applied so far
        # The transaction coordinator's epoch: the position in the log of the event that
        # recorded the last start of the controller's transaction coordinator, so it grows
        # with every one that takes over (0: none yet). Its markers carry it, and partitions
        # refuse markers of a smaller one (docs/transactions.md).
        self.coordinator_epoch = 0
        # Client quotas (docs/quotas.md): entity -> quota key -> value, and the position in
        # the log of the event that last changed them (followers compare it to theirs).
        self.quotas: dict[QuotaEntity, dict[str, float]] = {}
        self.quotas_version = 0

    @property
    def next_broker_id(self) -> int:
        return max(self.broker_ids, default=-1) + 1

    def topic(self, name: str) -> TopicState:
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopicError(f"unknown topic {name!r}") from None

    def replicas_by_broker(self) -> dict[int, list[tuple[str, int]]]:
        out: dict[int, list[tuple[str, int]]] = {}
        for topic in self.topics.values():
            for p in topic.partitions:
                for broker in p.replicas:
                    out.setdefault(broker, []).append((topic.name, p.partition))
        return out

    def apply(self, event: dict[str, Any]) -> None:
        """Apply one event. Raises for an event that does not fit the state."""
        handler = _HANDLERS.get(event.get("type"))
        if handler is None:
            raise ValueError(f"unknown metadata event {event!r}")
        if self.cluster_id is None and handler is not _apply_cluster_created:
            raise ValueError(f"a metadata log must begin with cluster_created, not {event!r}: "
                             f"it was written by an older raylog")
        handler(self, event)
        self.applied += 1

    def snapshot(self) -> dict[str, TopicState]:
        return copy.deepcopy(self.topics)

    # -- the state as JSON-able data (the metadata log's snapshots) ---------------------------

    def to_data(self) -> dict[str, Any]:
        """Everything the state holds, as JSON-able data; :meth:`from_data` gives it back
        equal (maps keyed by broker id are lists of pairs: JSON keys would be strings)."""
        return {
            "cluster_id": self.cluster_id,
            "applied": self.applied,
            "broker_ids": sorted(self.broker_ids),
            "incarnations": list(self.incarnations.items()),
            "broker_epochs": list(self.broker_epochs.items()),
            "coordinator_epoch": self.coordinator_epoch,
            "quotas": to_wire(self.quotas),
            "quotas_version": self.quotas_version,
            "topics": [{"name": t.name, "topic_id": t.topic_id, "configs": t.configs,
                        "partitions": [p.to_dict() for p in t.partitions]}
                       for t in self.topics.values()],
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> MetadataState:
        """The state :meth:`to_data` described: it goes on counting events from ``applied``
        (so broker epochs, positions in the log, keep growing). Raises KeyError, TypeError
        or ValueError for data of another shape."""
        state = cls()
        state.cluster_id = data["cluster_id"]
        state.applied = int(data["applied"])
        state.broker_ids = set(data["broker_ids"])
        state.incarnations = {broker: incarnation for broker, incarnation in data["incarnations"]}
        state.broker_epochs = {broker: int(epoch) for broker, epoch in data["broker_epochs"]}
        # (snapshots written before transactions have none)
        state.coordinator_epoch = int(data.get("coordinator_epoch", 0))
        # (snapshots written before quotas have none)
        state.quotas = from_wire(data.get("quotas", []))
        state.quotas_version = int(data.get("quotas_version", 0))
        state.topics = {
            t["name"]: TopicState(t["name"], t["topic_id"],
                                  [PartitionState(**p) for p in t["partitions"]],
                                  dict(t["configs"]))
            for t in data["topics"]}
        return state


# -- events ------------------------------------------------------------------------------------

def cluster_created(cluster_id: str) -> dict[str, Any]:
    return {"type": "cluster_created", "cluster_id": cluster_id}


def broker_registered(broker_id: int) -> dict[str, Any]:
    return {"type": "broker_registered", "broker_id": broker_id}


def broker_started(broker_id: int, incarnation: str) -> dict[str, Any]:
    return {"type": "broker_started", "broker_id": broker_id, "incarnation": incarnation}


def coordinator_started() -> dict[str, Any]:
    """The controller's transaction coordinator takes over: a new coordinator epoch."""
    return {"type": "coordinator_started"}


def topic_created(name: str, topic_id: str, replicas: list[list[int]],
                  configs: dict[str, Any]) -> dict[str, Any]:
    return {"type": "topic_created", "name": name, "topic_id": topic_id,
            "replicas": replicas, "configs": configs}


def topic_deleted(name: str) -> dict[str, Any]:
    return {"type": "topic_deleted", "name": name}


def partitions_added(name: str, replicas: list[list[int]]) -> dict[str, Any]:
    return {"type": "partitions_added", "name": name, "replicas": replicas}


def configs_altered(name: str, configs: dict[str, Any]) -> dict[str, Any]:
    return {"type": "configs_altered", "name": name, "configs": configs}


def quotas_altered(entity: QuotaEntity, quotas: dict[str, float]) -> dict[str, Any]:
    """The quotas of ``entity`` are ``quotas`` from now on (none: it has none)."""
    return {"type": "quotas_altered", "entity": entity.to_dict(), "quotas": quotas}


def partition_changed(name: str, partition: int, *, leader: int | None, leader_epoch: int,
                      isr: list[int], replicas: list[int] | None = None) -> dict[str, Any]:
    event = {"type": "partition_changed", "name": name, "partition": partition,
             "leader": leader, "leader_epoch": leader_epoch, "isr": isr}
    if replicas is not None:
        event["replicas"] = replicas
    return event


def reassignment(name: str, partition: int, target: list[int] | None) -> dict[str, Any]:
    """Start moving a partition to the replicas ``target`` (None: the move is over)."""
    return {"type": "reassignment", "name": name, "partition": partition, "target": target}


def _new_partitions(first: int, replicas: list[list[int]]) -> list[PartitionState]:
    return [
        PartitionState(partition=first + i, replicas=list(brokers), leader=brokers[0],
                       leader_epoch=0, isr=list(brokers))
        for i, brokers in enumerate(replicas)
    ]


def _apply_cluster_created(state: MetadataState, event: dict[str, Any]) -> None:
    if state.cluster_id is not None:
        raise ValueError(f"cluster {state.cluster_id} created a second time: {event!r}")
    state.cluster_id = event["cluster_id"]


def _apply_broker_registered(state: MetadataState, event: dict[str, Any]) -> None:
    if event["broker_id"] in state.broker_ids:
        raise ValueError(f"broker id {event['broker_id']} given out twice")
    state.broker_ids.add(event["broker_id"])


def _apply_broker_started(state: MetadataState, event: dict[str, Any]) -> None:
    if event["broker_id"] not in state.broker_ids:
        raise ValueError(f"broker {event['broker_id']} started before it was registered")
    state.incarnations[event["broker_id"]] = event["incarnation"]
    state.broker_epochs[event["broker_id"]] = state.applied  # this event's place in the log


def _apply_coordinator_started(state: MetadataState, event: dict[str, Any]) -> None:
    state.coordinator_epoch = state.applied  # this event's place in the log


def _apply_topic_created(state: MetadataState, event: dict[str, Any]) -> None:
    name = event["name"]
    if name in state.topics:
        raise TopicExistsError(f"topic {name!r} already exists")
    state.topics[name] = TopicState(name, event["topic_id"],
                                    _new_partitions(0, event["replicas"]),
                                    dict(event["configs"]))


def _apply_topic_deleted(state: MetadataState, event: dict[str, Any]) -> None:
    state.topic(event["name"])
    del state.topics[event["name"]]


def _apply_partitions_added(state: MetadataState, event: dict[str, Any]) -> None:
    topic = state.topic(event["name"])
    topic.partitions.extend(_new_partitions(len(topic.partitions), event["replicas"]))


def _apply_configs_altered(state: MetadataState, event: dict[str, Any]) -> None:
    state.topic(event["name"]).configs = dict(event["configs"])


def _apply_quotas_altered(state: MetadataState, event: dict[str, Any]) -> None:
    entity = QuotaEntity.from_dict(event["entity"])
    if event["quotas"]:
        state.quotas[entity] = dict(event["quotas"])
    else:
        state.quotas.pop(entity, None)
    state.quotas_version = state.applied  # this event's place in the log


def _apply_partition_changed(state: MetadataState, event: dict[str, Any]) -> None:
    p = state.topic(event["name"]).partition(event["partition"])
    p.leader = event["leader"]
    p.leader_epoch = event["leader_epoch"]
    p.isr = list(event["isr"])
    if "replicas" in event:
        p.replicas = list(event["replicas"])
    p.partition_epoch += 1


def _apply_reassignment(state: MetadataState, event: dict[str, Any]) -> None:
    p = state.topic(event["name"]).partition(event["partition"])
    p.target = None if event["target"] is None else list(event["target"])


_HANDLERS = {
    "cluster_created": _apply_cluster_created,
    "broker_registered": _apply_broker_registered,
    "broker_started": _apply_broker_started,
    "coordinator_started": _apply_coordinator_started,
    "topic_created": _apply_topic_created,
    "topic_deleted": _apply_topic_deleted,
    "partitions_added": _apply_partitions_added,
    "configs_altered": _apply_configs_altered,
    "quotas_altered": _apply_quotas_altered,
    "partition_changed": _apply_partition_changed,
    "reassignment": _apply_reassignment,
}
