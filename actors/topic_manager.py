"""The controller's topics: creating, growing, configuring and deleting them, and what
clients read of them (descriptions, the metadata they route by).

A :class:`TopicManager` decides on the metadata (placement within the limits per broker,
configs checked by raylog/metadata/topics.py), commits the change through its
MetadataAccess, and has the brokers told (actors/broker_manager.py); a client's request
returns once the brokers took it, or after their deadline. Internal topics
(``__consumer_offsets``, ``_schemas``) are created here too, replicated as
raylog/metadata/topics.py's ``internal_topic_configs`` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from actors.broker_manager import BrokerManager
from raylog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    LeaderNotAvailableError,
    TopicExistsError,
)
from raylog.metadata import assign_replicas
from raylog.metadata import state as events
from raylog.metadata.access import MetadataAccess
from raylog.metadata.limits import PartitionLimits
from raylog.metadata.state import TopicState
from raylog.metadata.topics import (
    check_min_insync,
    check_partition_growth,
    check_remote_storage,
    check_user_topic,
    configs_to_delete,
    internal_topic_configs,
    normalize_configs,
    validate_topic_name,
)
from raylog.tiered.settings import RemoteStorageSettings
from raylog.util.arguments import INT32_MAX, check_int

logger = logging.getLogger(__name__)

CALL_TIMEOUT_S = 30.0  # a broker's answer to a client's question (configs)


def _check_partitions(what: str, value: object) -> int:
    return check_int(what, value, 1, INT32_MAX, InvalidPartitionsError)


class TopicManager:
    """Topics of the cluster over ``access``, told to ``brokers``. ``started`` waits for
    the controller's first round (the live brokers known); ``topics_changed`` hears of every
    change of the user topics (the group coordinator's subscriptions follow them). Its event
    loop is the only user; it holds ``access.lock`` only while it decides and commits."""

    def __init__(self, access: MetadataAccess, brokers: BrokerManager,
                 limits: PartitionLimits, started: Callable[[], Awaitable[None]],
                 topics_changed: Callable[[dict[str, int]], None]) -> None:
        self.access = access
        self.brokers = brokers
        self.limits = limits
        self._started = started
        self._topics_changed = topics_changed
        # The cluster's object store (tiered topics need one); the controller sets it.
        self.remote_storage = RemoteStorageSettings()

    # -- changes ---------------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                           configs: dict[str, Any] | None = None,
                           topic_id: str | None = None) -> dict[str, Any]:
        """Create a topic. A client that retries (the controller restarted mid-call) passes
        the same ``topic_id``; finding the topic already created with it is success."""
        check_user_topic(name)
        return await self._create(name, partitions, replication_factor, configs, topic_id)

    async def _create(self, name: str, partitions: int, replication_factor: int,
                      configs: dict[str, Any] | None, topic_id: str | None) -> dict[str, Any]:
        await self._started()
        state = self.access.state
        existing = state.topics.get(name)
        if existing is not None and topic_id is not None and existing.topic_id == topic_id:
            await self.brokers.delivered(await self.brokers.push(
                [(existing, p) for p in existing.partitions]), f"topic {name}")
            return self.describe(existing)
        _check_partitions("partitions", partitions)
        self.limits.check_topic_size(name, partitions)
        check_int("replication factor", replication_factor, 1, INT32_MAX,
                  InvalidReplicationFactorError)
        normalized = normalize_configs(configs)
        check_min_insync(name, normalized, replication_factor)
        check_remote_storage(name, normalized, self.remote_storage.configured)
        async with self.access.lock:
            if name in state.topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            assignment = self._place(name, partitions, replication_factor)
            self.access.commit(events.topic_created(
                name, topic_id or uuid.uuid4().hex, assignment, normalized))
        topic = state.topic(name)
        told = await self.brokers.push([(topic, p) for p in topic.partitions])
        await self.brokers.delivered(told, f"topic {name}")
        self._topics_changed(self.access.user_topics())
        return self.describe(topic)

    async def ensure_internal_topic(self, name: str, partitions: int,
                                    configs: dict[str, Any]) -> None:
        """Create an internal topic if missing, replicated as raylog/metadata/topics.py's
        ``internal_topic_configs`` says for the live brokers. (Every live broker node
        registered in the controller's first round, which this waits for; a cluster running
        with brokers down gets fewer replicas rather than no groups at all.) Raises
        LeaderNotAvailableError (retriable) while no broker is alive."""
        await self._started()  # also what its callers then ask of its leaders needs
        if name in self.access.state.topics:
            return
        validate_topic_name(name)
        factor, settings = internal_topic_configs(configs, len(self.brokers.serving()))
        if factor == 0:
            raise LeaderNotAvailableError(f"{name} cannot be created: no broker is alive")
        with contextlib.suppress(TopicExistsError):  # created meanwhile by another caller
            await self._create(name, partitions, factor, settings, None)

    def _place(self, name: str, partitions: int, replication_factor: int) -> list[list[int]]:
        """Replicas for ``partitions`` new partitions of topic ``name`` on the live brokers
        not being drained (a drained broker is about to stop: a replica there would never
        join the ISR), within the limits per broker (lock held; nothing is written)."""
        existing = [p.replicas for _, p in self.access.partitions()]
        serving = self.brokers.serving()
        memory = {b: m for b, m in self.brokers.node_memory().items() if b in serving}
        assignment = assign_replicas(list(memory), partitions, replication_factor, existing)
        self.limits.check_placement(name, assignment, existing, memory)
        return assignment

    async def delete_topic(self, name: str) -> None:
        check_user_topic(name)
        await self._started()
        async with self.access.lock:
            topic = self.access.state.topic(name)
            self.access.commit(events.topic_deleted(name))
        self._topics_changed(self.access.user_topics())
        told = await self.brokers.remove_replicas(
            name, {b for p in topic.partitions for b in p.replicas},
            [p.partition for p in topic.partitions])
        await self.brokers.delivered(told, f"the removal of {name}")

    async def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        check_user_topic(name)
        _check_partitions("partitions", total)
        self.limits.check_topic_size(name, total)
        await self._started()
        async with self.access.lock:
            topic = self.access.state.topic(name)
            current = len(topic.partitions)
            check_partition_growth(name, current, total)
            assignment = self._place(name, total - current, topic.replication_factor)
            self.access.commit(events.partitions_added(name, assignment))
        await self.brokers.delivered(await self.brokers.push(
            [(topic, p) for p in topic.partitions[current:]]), f"new partitions of {name}")
        self._topics_changed(self.access.user_topics())
        return self.describe(topic)

    async def alter_configs(self, name: str, set_configs: dict[str, Any] | None = None,
                            delete_configs: list[str] | None = None) -> dict[str, Any]:
        """Set and delete topic configs. Refused, changing nothing, when a config to delete
        is not set or is also being set."""
        updates = normalize_configs(set_configs)  # stored configs are normalized
        await self._started()
        async with self.access.lock:
            topic = self.access.state.topic(name)
            deleted = configs_to_delete(name, topic.configs, delete_configs or [])
            both = sorted(set(deleted) & set(updates))
            if both:
                raise InvalidConfigError(f"cannot both set and delete {', '.join(both)}")
            merged = {k: v for k, v in topic.configs.items() if k not in deleted}
            merged.update(updates)
            check_min_insync(name, merged, topic.replication_factor)
            check_remote_storage(name, merged, self.remote_storage.configured, topic.configs)
            if merged == topic.configs:
                return self.describe(topic)
            self.access.commit(events.configs_altered(name, merged))
        brokers = {b for p in topic.partitions for b in p.replicas}
        version = self.access.state.applied
        # A broker that does not take them now gets them with its next state (they travel
        # with every partition's state too).
        await asyncio.gather(*(asyncio.wait_for(
            self.brokers.handle(b).update_configs.remote(name, merged, version), CALL_TIMEOUT_S)
            for b in brokers if self.brokers.handle(b) is not None), return_exceptions=True)
        return self.describe(topic)

    # -- reads -----------------------------------------------------------------------------------

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        return sorted(n for n in self.access.state.topics
                      if include_internal or not n.startswith("__"))

    async def describe_topics(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        state = self.access.state
        names = names if names is not None else sorted(state.topics)
        return [self.describe(state.topic(n)) for n in names]

    def describe(self, topic: TopicState) -> dict[str, Any]:
        live = self.brokers.live()
        return {
            "name": topic.name,
            "topic_id": topic.topic_id,
            "replication_factor": topic.replication_factor,
            "configs": dict(topic.configs),
            "partitions": [{**p.to_dict(),
                            "under_replicated": len(p.isr) < len(p.replicas),
                            "offline": p.leader is None or p.leader not in live}
                           for p in topic.partitions],
        }

    async def metadata(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """What clients need to reach each partition's replicas: per partition the leader,
        leader epoch, replicas and ISR, and the replica hosts serving its replicas where their
        broker actors do not; per live broker among them its actor and node."""
        await self._started()
        out = {}
        for name in names:
            topic = self.access.state.topic(name)
            brokers = {}
            for p in topic.partitions:
                for broker in p.replicas:
                    watch = self.brokers.watches.get(broker)
                    if watch is not None and watch.alive:
                        brokers[broker] = {"handle": watch.handle, "node_id": watch.node_id}
            out[name] = {"name": name, "topic_id": topic.topic_id, "configs": dict(topic.configs),
                         "partitions": [{"partition": p.partition, "leader": p.leader,
                                         "leader_epoch": p.leader_epoch,
                                         "replicas": list(p.replicas), "isr": list(p.isr),
                                         "hosts": self.brokers.hosts(name, p)}
                                        for p in topic.partitions],
                         "brokers": brokers}
        return out
