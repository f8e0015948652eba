"""The cluster metadata as the controller's managers see it: the state to read and how to
change it.

The controller's parts (brokers and elections, topics, reassignments, groups) are given a
:class:`MetadataAccess`, never the controller: they read ``state`` and change it only
through :meth:`MetadataAccess.commit` (an event persisted to the metadata log, then
applied), or :meth:`MetadataAccess.commit_changes` (the leaderships and ISRs an election
changes, persisted together with one fsync). A change decided on a read of the state is
made under ``lock``, so a decision and its event are never separated by another part's
change.

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
        """Persist ``events`` (all or none if it raises; after a crash, whole events in
        order), then apply them to ``state``."""
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

    def commit_changes(self, changes: list[tuple[TopicState, PartitionState, election.Change]]
                       ) -> None:
        """Persist and apply changes of partitions' leaders, ISRs or replicas (lock held), at
        most one per partition, each decided on the partition's state before any of them:
        one commit, so one fsync of the metadata log for a broker's hundreds of partitions.
        Counted in the metrics, an unclean election logged."""
        if not changes:
            return
        counted = []
        for topic, p, change in changes:
            if change.unclean:
                logger.warning("unclean election of broker %s (ISR was %s): records only the "
                               "old ISR had are lost", change.leader, p.isr,
                               extra={"topic": topic.name, "partition": p.partition})
            counted.append((topic.name, partition_change_counts(p.leader, p.isr,
                                                                change.leader, change.isr)))
        self.log.commit(self.state, [events.partition_changed(
            topic.name, p.partition, leader=change.leader, leader_epoch=change.leader_epoch,
            isr=change.isr, replicas=change.replicas) for topic, p, change in changes])
        for topic_name, counts in counted:
            for name, count in counts.items():
                recorder().inc(name, count, topic=topic_name)

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
