"""The cluster metadata as the controller's managers see it: the state to read and the one way
to change it.

The controller's parts (brokers and elections, topics, reassignments, groups) are given a
:class:`MetadataAccess`, never the controller: they read ``state`` and change it only
through :meth:`MetadataAccess.commit` (an event persisted to the metadata log, then
applied). A change decided on a read of the state is made under ``lock``, so a decision
and its event are never separated by another part's change.

Plain Python (asyncio's lock only): unit tests build one over an in-memory store.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from raylog.metadata import election
from raylog.metadata import state as events
from raylog.metadata.state import MetadataState, PartitionState, TopicState
from raylog.util.metrics import partition_change_counts, recorder

logger = logging.getLogger(__name__)

Partition = tuple[TopicState, PartitionState]


class EventLog(Protocol):
    """Where events are persisted (raylog/metadata/store.py's MetadataStore: a log with
    snapshots)."""

    def load(self) -> MetadataState:
        """The state the persisted events build (the newest snapshot, then the rest)."""
        ...

    def commit(self, state: MetadataState, events: list[dict[str, Any]]) -> None:
        """Persist ``events`` (all or none), then apply them to ``state``."""
        ...


class MemoryLog:
    """An EventLog in memory, for tests and tools: nothing survives the process."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def load(self) -> MetadataState:
        state = MetadataState()
        for event in self.events:
            state.apply(event)
        return state

    def commit(self, state: MetadataState, events: list[dict[str, Any]]) -> None:
        self.events.extend(events)
        for event in events:
            state.apply(event)


class MetadataAccess:
    """Owns the MetadataState rebuilt from an EventLog, the lock of its changes, and
    committing. Its event loop is the only user: reads between two awaits see one state;
    a change whose decision read the state holds ``lock`` from the read to the commit."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.state = log.load()
        self.lock = asyncio.Lock()

    def commit(self, event: dict[str, Any]) -> None:
        """Persist, then apply. The caller validated the event against the state first (and
        holds ``lock`` if a read of the state decided it)."""
        self.log.commit(self.state, [event])

    def commit_change(self, topic: TopicState, p: PartitionState,
                      change: election.Change) -> None:
        """Persist and apply a change of a partition's leader, ISR or replicas (lock held);
        counted in the metrics, an unclean election logged."""
        where = {"extra": {"topic": topic.name, "partition": p.partition}}
        if change.unclean:
            logger.warning("unclean election of broker %s (ISR was %s): records only the old "
                           "ISR had are lost", change.leader, p.isr, **where)
        counts = partition_change_counts(p.leader, p.isr, change.leader, change.isr)
        self.commit(events.partition_changed(
            topic.name, p.partition, leader=change.leader, leader_epoch=change.leader_epoch,
            isr=change.isr, replicas=change.replicas))
        for name, count in counts.items():
            recorder().inc(name, count, topic=topic.name)

    # -- reads -----------------------------------------------------------------------------------

    def partitions(self) -> list[Partition]:
        """Every partition of every topic (a list: changes may follow while it is walked)."""
        return [(t, p) for t in self.state.topics.values() for p in t.partitions]

    def replicas_on(self, broker: int) -> list[Partition]:
        return [(t, p) for t, p in self.partitions() if broker in p.replicas]

    def user_topics(self) -> dict[str, int]:
        """The topics clients create (not ``__``-internal ones) -> their partition counts."""
        return {name: len(t.partitions) for name, t in self.state.topics.items()
                if not name.startswith("__")}

    def is_current(self, topic: TopicState) -> bool:
        """Whether ``topic`` is still the topic of its name (not deleted, nor recreated)."""
        return self.state.topics.get(topic.name) is topic
