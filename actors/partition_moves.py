"""The controller's changes of partitions that leaders, operators and its own loop ask for:
ISR changes from leaders (Kafka's AlterPartition), preferred-leader elections (on request,
and every ``rebalance_leaders_s``), reassignments, and the replacement of the replicas of
brokers gone for longer than ``replace_broker_after_s``.

raylog/metadata/election.py decides each change; every one is made through
:meth:`BrokerManager.elect` (decided and committed under the metadata lock, then told to
the brokers). A client's request waits for the brokers to take it, with a deadline; the
controller's own steps do not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from actors import at
from actors.broker_manager import BrokerManager
from raylog.errors import InvalidArgumentError, RaylogError
from raylog.metadata import election
from raylog.metadata import state as events
from raylog.metadata.access import MetadataAccess, Partition
from raylog.metadata.placement import replacement
from raylog.metadata.settings import ReplicationSettings
from raylog.metadata.state import PartitionState, TopicState
from raylog.metadata.topics import check_min_insync, check_user_topic
from raylog.util import faults

logger = logging.getLogger(__name__)


class PartitionMoves:
    """ISR changes, preferred leaders, reassignments and replacements over ``access``, told
    to ``brokers``. ``started`` waits for the controller's first round; ``describe`` is
    what a reassignment answers of its topic. Its event loop is the only user.
    ``clock`` (monotonic seconds) times the rebalances and replacements."""

    def __init__(self, access: MetadataAccess, brokers: BrokerManager,
                 settings: ReplicationSettings, started: Callable[[], Awaitable[None]],
                 describe: Callable[[TopicState], dict[str, Any]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.access = access
        self.brokers = brokers
        self.settings = settings
        self._started = started
        self._describe = describe
        self._clock = clock
        self._last_rebalance = clock()

    async def alter_partition(self, topic: str, partition: int, leader: int, leader_epoch: int,
                              partition_epoch: int, isr: list[int],
                              broker_epochs: dict[int, int]) -> dict[str, Any]:
        """A leader changes its partition's ISR (Kafka's AlterPartition); ``broker_epochs``:
        the broker epoch each joining member fetched at. Answers ``{"state": the partition's
        state, "error": None}`` when its ISR is now ``isr`` (changed now, or by an earlier copy
        of this request whose answer was lost), and ``{"state": ..., "error": the refusal}``
        (FencedEpochError, StaleIsrChangeError, InvalidArgumentError,
        IneligibleReplicaError, as raylog/metadata/election.py says), the state then None if
        the partition is gone: either way the leader learns where the partition stands. The
        other replicas are told of a change too."""
        def located() -> list[Partition]:  # under the lock: it may have been deleted
            t = self.access.state.topic(topic)
            return [(t, t.partition(partition))]

        def decide(_: TopicState, p: PartitionState, live: set[int]) -> election.Change | None:
            change = election.alter_isr(
                p, leader, leader_epoch, partition_epoch, isr, live,
                member_epochs=broker_epochs, broker_epochs=self.brokers.broker_epochs())
            if change.isr == p.isr:
                return None  # an earlier copy of this request made it
            logger.info("ISR %s -> %s (leader %d)", p.isr, change.isr, leader,
                        **at(topic, partition))
            return change

        try:
            changed, _ = await self.brokers.elect(located, decide, skip=leader)
            error = None
        except RaylogError as e:  # refused, or deleted meanwhile (the leader stops soon)
            changed, error = [], e
        if changed:
            # Committed, not answered: the leader must not take a lost answer for a refusal
            # (fault tests end the process here).
            faults.point("controller.isr_committed")
        try:
            (t, p), = located()
        except RaylogError:
            return {"state": None, "error": error}
        return {"state": self.brokers.state_of(t, p), "error": error}

    # -- preferred leaders -------------------------------------------------------------------------

    async def elect_leaders(self, names: list[str] | None = None) -> dict[str, list[int]]:
        """Preferred-leader election: in every partition of the topics ``names`` (default:
        all) whose first replica is alive and in the ISR, that replica leads. Returns the
        partitions moved, per topic."""
        await self._started()
        moved, told = await self._elect_preferred(names)
        await self.brokers.delivered(told, "preferred leaders")
        return moved

    async def _elect_preferred(self, names: list[str] | None
                               ) -> tuple[dict[str, list[int]], asyncio.Future]:
        """(The partitions that changed leader, per topic; the brokers being told.)"""
        state = self.access.state

        def chosen() -> list[Partition]:
            # Every name checked before anything changes: a typo must not leave changes
            # committed and never told to the brokers.
            topics = [state.topic(name) for name in
                      (names if names is not None else sorted(state.topics))]
            return [(t, p) for t in topics for p in t.partitions]

        changed, told = await self.brokers.elect(
            chosen, lambda _, p, live: election.preferred_leader(p, live))
        moved: dict[str, list[int]] = {}
        for topic, p in changed:
            moved.setdefault(topic.name, []).append(p.partition)
        return moved, told

    async def rebalance_leaders(self) -> None:
        """Every ``rebalance_leaders_s``, give partitions back to their preferred replicas
        (Kafka's auto.leader.rebalance.enable): failovers and restarts pile leaderships on
        the brokers that stayed up (a whole-cluster restart, on the last to register)."""
        every = self.settings.rebalance_leaders_s
        now = self._clock()
        if not every or now - self._last_rebalance < every:
            return
        self._last_rebalance = now
        moved, _ = await self._elect_preferred(None)
        if moved:
            logger.info("leaders rebalanced to preferred replicas: %s", moved)

    # -- reassignments -----------------------------------------------------------------------------

    async def reassign_partitions(self, name: str,
                                  targets: dict[int, list[int]]) -> dict[str, Any]:
        """Move partitions of topic ``name`` to other brokers: ``{partition: [brokers]}``, the
        first the preferred leader. New replicas copy the leader while producers go on;
        once they are in sync, leadership moves if it must and the old replicas go."""
        check_user_topic(name)
        await self._started()
        async with self.access.lock:
            topic = self.access.state.topic(name)
            known = self.access.state.broker_ids
            for partition, target in targets.items():
                topic.partition(partition)
                if not target or len(set(target)) != len(target) or not set(target) <= known:
                    raise InvalidArgumentError(
                        f"{name}-{partition}: the target must be distinct known broker ids "
                        f"(known: {sorted(known)}), got {target}")
                check_min_insync(f"{name}-{partition}", topic.configs, len(target),
                                 InvalidArgumentError)
            for partition, target in targets.items():
                p = topic.partitions[partition]
                if p.replicas != list(target) or p.target is not None:
                    self.access.commit(events.reassignment(name, partition, list(target)))
        await self.brokers.delivered(await self.move_reassigned(), f"moves of {name}")
        return self._describe(topic)

    async def move_reassigned(self) -> asyncio.Future:
        """Take every partition being reassigned one step on (raylog/metadata/election.py's
        reassign); remove the replicas it dropped from their brokers. Returns the brokers
        being told."""
        dropped = []

        def step(topic: TopicState, p: PartitionState, live: set[int]
                 ) -> election.Change | None:
            change = election.reassign(p, p.target, live)
            if change is not None and change.replicas is not None:  # None: unchanged
                gone = set(p.replicas) - set(change.replicas)
                if gone:
                    dropped.append((topic.name, p.partition, gone))
            return change

        _, pushed = await self.brokers.elect(
            lambda: [(t, p) for t, p in self.access.partitions() if p.target is not None],
            step)
        async with self.access.lock:  # the moves that are done now
            for topic, p in self.access.partitions():
                if p.target is not None and p.replicas == p.target:
                    self.access.commit(events.reassignment(topic.name, p.partition, None))
                    logger.info("now on brokers %s", p.replicas, **at(topic.name, p.partition))
        told = [pushed]
        for name, partition, gone in dropped:
            told.append(await self.brokers.remove_replicas(name, gone, [partition]))
        return asyncio.gather(*told)

    async def replace_gone_brokers(self) -> None:
        """Reassign the replicas of brokers gone longer than the setting to live brokers."""
        after = self.settings.replace_broker_after_s
        if not after:
            return
        now = self._clock()
        down_since = self.brokers.down_since
        gone = [b for b, since in down_since.items() if now - since >= after]
        if not gone:
            return
        async with self.access.lock:
            live = sorted(self.brokers.serving())
            existing = [p.target or p.replicas for _, p in self.access.partitions()]
            for broker in gone:
                for topic, p in self.access.replicas_on(broker):
                    if p.target is not None:
                        continue
                    spare = replacement(live, p.replicas, existing)
                    if spare is None:
                        continue
                    target = [spare if b == broker else b for b in p.replicas]
                    logger.warning("broker %d gone for %.0f s: moving its replica to broker %d",
                                   broker, now - down_since[broker], spare,
                                   **at(topic.name, p.partition))
                    self.access.commit(events.reassignment(topic.name, p.partition, target))
                    existing.append(target)
