"""The controller actor: owner of cluster metadata, creator and watcher of replicas.

One detached actor named ``raylog-controller`` in namespace ``raylog``, on the head node,
restarted by Ray after a crash. Every metadata change is an event persisted to its
metadata log (fsynced) before it is applied and acknowledged; a restarted controller replays
the log and finds its live replica actors again by name. It is not on the data path:
clients ask it for metadata and then call replicas directly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import uuid
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.groups import GroupService
from actors.replica import ReplicaActor
from actors.supervision import Health, ReplicaWatch
from raylog.arguments import INT32_MAX, check_int
from raylog.cluster_names import (
    BROKER_RESOURCE,
    NAMESPACE,
    node_data_dir,
    replica_name,
)
from raylog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicExistsError,
)
from raylog.metadata import MetadataState, MetadataStore, TopicState, assign_replicas
from raylog.metadata import state as events
from raylog.metadata.limits import PartitionLimits
from raylog.topics import (
    check_partition_growth,
    check_user_topic,
    configs_to_delete,
    normalize_configs,
    validate_topic_name,
)
from raylog.typecheck import checked

logger = logging.getLogger(__name__)

RECONCILE_INTERVAL_S = 1.0
REPLICA_READY_TIMEOUT_S = 60.0

ReplicaKey = tuple[str, int, str]  # topic, partition, node id


def broker_memory() -> dict[str, float | None]:
    """The live nodes that carry the broker resource: node id -> memory (bytes) Ray gives
    their tasks and actors, None if it does not say."""
    return {n["NodeID"]: n["Resources"].get("memory") for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get(BROKER_RESOURCE, 0) > 0}


def live_brokers() -> list[str]:
    """Node ids of the live nodes that carry the broker resource."""
    return sorted(broker_memory())


def _check_partitions(what: str, value: object) -> int:
    return check_int(what, value, 1, INT32_MAX, InvalidPartitionsError)


@ray.remote(num_cpus=0)
class ControllerActor(GroupService):
    """Holds a MetadataState rebuilt from its MetadataStore, and handles to replica actors.

    Metadata changes take ``_lock`` so events are persisted and applied one at a time; reads
    of the state happen between awaits and see a consistent state. Every method a client
    calls checks its arguments (``@checked`` for their types) before it changes anything.
    """

    def __init__(self) -> None:
        self.node_id = ray.get_runtime_context().get_node_id()
        self.store = MetadataStore(node_data_dir(self.node_id) / "__controller" / "metadata")
        self.state = MetadataState()
        self.limits = PartitionLimits.from_environ()  # a bad setting fails loudly, here
        for event in self.store.replay():
            self.state.apply(event)
        self.replicas: dict[ReplicaKey, ReplicaWatch] = {}
        self._lock = asyncio.Lock()
        self._loop: asyncio.Task | None = None
        self._init_groups()
        logger.info("controller on %s replayed %d events, %d topics", self.node_id,
                    self.state.applied, len(self.state.topics))

    # -- lifecycle -------------------------------------------------------------------------------

    async def ready(self) -> dict[str, Any]:
        """Start the reconcile loop (once) and report the controller's state."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop().create_task(self._reconcile_forever())
        return {"node_id": self.node_id, "topics": len(self.state.topics),
                "events": self.state.applied, "pid": os.getpid(),
                "limits": dataclasses.asdict(self.limits)}

    async def _commit(self, event: dict[str, Any]) -> None:
        """Persist, then apply. Callers validated the event against the state first."""
        self.store.append(event)
        self.state.apply(event)

    async def _reconcile_forever(self) -> None:
        while True:
            try:
                await self._reconcile()
            except Exception:  # one failed round must not stop the loop for good
                logger.exception("controller reconcile round failed")
            await asyncio.sleep(RECONCILE_INTERVAL_S)

    async def _reconcile(self) -> None:
        """Make sure every assigned replica on a live node has an actor; expire members of
        consumer groups whose session timed out."""
        if self._groups_loaded is not None and self._groups_loaded.done():
            await self._expire_members()
        for key, watch in list(self.replicas.items()):
            if watch.poll() is Health.DEAD:
                logger.warning("replica %s-%d on %s died for good: creating it again",
                               *key)
                del self.replicas[key]  # created again below if its node lives
        alive = set(live_brokers())
        for topic in list(self.state.topics.values()):
            for p in topic.partitions:
                for node in p.replicas:
                    if node in alive:
                        self._replica(topic, p.partition, node)

    # -- replicas --------------------------------------------------------------------------------

    def _replica(self, topic: TopicState, partition: int, node: str) -> ray.actor.ActorHandle:
        """The handle of a replica actor: cached, found by name, or created on its node."""
        key = (topic.name, partition, node)
        watch = self.replicas.get(key)
        if watch is not None:
            return watch.handle
        name = replica_name(topic.name, partition, node, topic.topic_id)
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            handle = ReplicaActor.options(
                name=name,
                namespace=NAMESPACE,
                lifetime="detached",
                max_restarts=-1,
                max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            ).remote(topic.name, partition, topic.topic_id, node, dict(topic.configs))
        self.replicas[key] = ReplicaWatch(handle)
        return handle

    async def _start_replicas(self, topic: TopicState, partitions: range) -> None:
        handles = [self._replica(topic, i, node)
                   for i in partitions for node in topic.partitions[i].replicas]
        await asyncio.wait_for(asyncio.gather(*(h.ready.remote() for h in handles)),
                               REPLICA_READY_TIMEOUT_S)

    # -- topics ----------------------------------------------------------------------------------

    @checked
    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                           configs: dict[str, Any] | None = None,
                           internal: bool = False, topic_id: str | None = None
                           ) -> dict[str, Any]:
        """Create a topic. A client that retries (the controller restarted mid-call) passes
        the same ``topic_id``; finding the topic already created with it is success."""
        existing = self.state.topics.get(name)
        if existing is not None and topic_id is not None and existing.topic_id == topic_id:
            await self._start_replicas(existing, range(len(existing.partitions)))
            return self._describe(existing)
        if internal:
            validate_topic_name(name)
        else:
            check_user_topic(name)
        _check_partitions("partitions", partitions)
        self.limits.check_topic_size(name, partitions)
        check_int("replication factor", replication_factor, 1, INT32_MAX,
                  InvalidReplicationFactorError)
        brokers = live_brokers()
        if replication_factor > len(brokers):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the number of live "
                f"broker nodes ({len(brokers)})")
        if replication_factor > 1:
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor}: followers do not replicate yet, "
                f"so only 1 is accepted until replication lands")
        normalized = normalize_configs(configs)
        async with self._lock:
            if name in self.state.topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            assignment = self._place(name, partitions, replication_factor)
            await self._commit(events.topic_created(name, topic_id or uuid.uuid4().hex, assignment,
                                                    normalized))
        topic = self.state.topic(name)
        await self._start_replicas(topic, range(partitions))
        self.groups.topics_changed(self._existing_topics())
        return self._describe(topic)

    def _place(self, name: str, partitions: int, replication_factor: int) -> list[list[str]]:
        """Replicas for ``partitions`` new partitions of topic ``name``, within the limits
        per broker (lock held; nothing is written)."""
        existing = [p.replicas for t in self.state.topics.values() for p in t.partitions]
        memory = broker_memory()
        assignment = assign_replicas(list(memory), partitions, replication_factor, existing)
        self.limits.check_placement(name, assignment, existing, memory)
        return assignment

    @checked
    async def delete_topic(self, name: str) -> None:
        check_user_topic(name)
        async with self._lock:
            topic = self.state.topic(name)
            await self._commit(events.topic_deleted(name))
        self.groups.topics_changed(self._existing_topics())
        for p in topic.partitions:
            for node in p.replicas:
                watch = self.replicas.pop((name, p.partition, node), None)
                handle = watch.handle if watch is not None else None
                if handle is None:
                    try:
                        handle = ray.get_actor(
                            replica_name(name, p.partition, node, topic.topic_id),
                            namespace=NAMESPACE)
                    except ValueError:
                        continue
                try:
                    await asyncio.wait_for(handle.delete.remote(), 30)
                except (ray.exceptions.RayActorError, TimeoutError):
                    logger.warning("could not delete the files of %s-%d on %s",
                                   name, p.partition, node)
                ray.kill(handle, no_restart=True)

    @checked
    async def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        check_user_topic(name)
        _check_partitions("partitions", total)
        self.limits.check_topic_size(name, total)
        async with self._lock:
            topic = self.state.topic(name)
            current = len(topic.partitions)
            check_partition_growth(name, current, total)
            assignment = self._place(name, total - current, topic.replication_factor)
            await self._commit(events.partitions_added(name, assignment))
        await self._start_replicas(topic, range(current, total))
        self.groups.topics_changed(self._existing_topics())
        return self._describe(topic)

    @checked
    async def alter_configs(self, name: str, set_configs: dict[str, Any] | None = None,
                            delete_configs: list[str] | None = None) -> dict[str, Any]:
        """Set and delete topic configs. Refused, changing nothing, when a config to delete
        is not set or is also being set."""
        updates = normalize_configs(set_configs)  # stored configs are normalized
        async with self._lock:
            topic = self.state.topic(name)
            deleted = configs_to_delete(name, topic.configs, delete_configs or [])
            both = sorted(set(deleted) & set(updates))
            if both:
                raise InvalidConfigError(f"cannot both set and delete {', '.join(both)}")
            merged = {k: v for k, v in topic.configs.items() if k not in deleted}
            merged.update(updates)
            if merged == topic.configs:
                return self._describe(topic)
            await self._commit(events.configs_altered(name, merged))
        alive = set(live_brokers())
        await asyncio.gather(*(
            self._replica(topic, p.partition, node).update_configs.remote(merged)
            for p in topic.partitions for node in p.replicas if node in alive
        ), return_exceptions=True)
        return self._describe(topic)

    @checked
    async def list_topics(self, include_internal: bool = False) -> list[str]:
        return sorted(n for n in self.state.topics if include_internal or not n.startswith("__"))

    @checked
    async def describe_topics(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        names = names if names is not None else sorted(self.state.topics)
        return [self._describe(self.state.topic(n)) for n in names]

    def _describe(self, topic: TopicState) -> dict[str, Any]:
        return {
            "name": topic.name,
            "topic_id": topic.topic_id,
            "replication_factor": topic.replication_factor,
            "configs": dict(topic.configs),
            "partitions": [p.to_dict() for p in topic.partitions],
        }

    @checked
    async def metadata(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """What clients need to reach each partition's leader: node, epoch and actor handle."""
        out = {}
        for name in names:
            topic = self.state.topic(name)
            partitions = []
            for p in topic.partitions:
                leader = self._replica(topic, p.partition, p.leader) if p.leader else None
                partitions.append({"partition": p.partition, "leader": p.leader,
                                   "leader_epoch": p.leader_epoch, "handle": leader,
                                   "replicas": list(p.replicas), "isr": list(p.isr)})
            out[name] = {"name": name, "topic_id": topic.topic_id, "partitions": partitions,
                         "configs": dict(topic.configs)}
        return out

    async def cluster_status(self) -> dict[str, Any]:
        """Broker nodes, which replicas each holds, and which of them lead."""
        alive = set(live_brokers())
        by_node = self.state.replicas_by_node()
        nodes = []
        for node in sorted(alive | set(by_node)):
            held = by_node.get(node, [])
            leading = [(t, i) for t, i in held
                       if self.state.topics[t].partitions[i].leader == node]
            nodes.append({"node_id": node, "alive": node in alive, "replicas": held,
                          "leaders": leading})
        return {"controller_node": self.node_id, "brokers": nodes,
                "topics": len(self.state.topics)}
