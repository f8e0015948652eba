"""The controller actor: owner of cluster metadata, creator and watcher of replicas.

One detached actor named ``raylog-controller`` in namespace ``raylog``, on the head node,
restarted by Ray after a crash. Every metadata change is an event persisted to its
metadata log (fsynced, in the head node's data directory) before it is applied and
acknowledged; a restarted controller replays the log and finds its live replica actors
again by name. It learns which Ray node serves which broker from a broker agent on each
node (actors/broker.py) and places replicas on brokers, never on Ray node IDs, which change
at every start. It is not on the data path: clients ask it for metadata and then call
replicas directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import uuid
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.broker import BrokerAgent
from actors.groups import GroupService
from actors.replica import ReplicaActor
from actors.supervision import Health, ReplicaWatch
from raylog.arguments import INT32_MAX, check_int
from raylog.cluster_names import (
    BROKER_RESOURCE,
    NAMESPACE,
    agent_name,
    controller_data_dir,
    replica_name,
)
from raylog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    LeaderNotAvailableError,
    TopicExistsError,
)
from raylog.identity import BrokerIdentity, DirectoryLock, IdentityError
from raylog.metadata import MetadataState, MetadataStore, TopicState, assign_replicas
from raylog.metadata import state as events
from raylog.metadata.brokers import BrokerRegistry, Offer, Verdict
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
AGENT_TIMEOUT_S = 30.0

ReplicaKey = tuple[str, int, int]  # topic, partition, broker id


def broker_nodes() -> tuple[dict[str, float | None], set[str]]:
    """(the live nodes that carry the broker resource: node id -> memory (bytes) Ray gives
    their tasks and actors, None if it does not say; the nodes Ray reports dead)."""
    live, dead = {}, set()
    for n in ray.nodes():
        if not n.get("Alive"):
            dead.add(n["NodeID"])
        elif n.get("Resources", {}).get(BROKER_RESOURCE, 0) > 0:
            live[n["NodeID"]] = n["Resources"].get("memory")
    return live, dead


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
        for name in ("actors", "raylog"):  # what the controller does is worth an operator's eye
            logging.getLogger(name).setLevel(logging.INFO)
        self.node_id = ray.get_runtime_context().get_node_id()
        directory = controller_data_dir()
        self._dir_lock = DirectoryLock(directory)
        if not self._dir_lock.acquire():
            raise IdentityError(f"{directory} is in use by another raylog controller on this "
                                f"machine: give each cluster its own RAYLOG_DATA_DIR")
        self.store = MetadataStore(directory / "metadata")
        self.state = MetadataState()
        self.limits = PartitionLimits.from_environ()  # a bad setting fails loudly, here
        for event in self.store.replay():
            self.state.apply(event)
        if self.state.cluster_id is None:  # a new cluster: its id is the log's first event
            self._commit_now(events.cluster_created(uuid.uuid4().hex[:16]))
        self.registry = BrokerRegistry(self.state.cluster_id, set(self.state.broker_ids))
        self.replicas: dict[ReplicaKey, ReplicaWatch] = {}
        self._lock = asyncio.Lock()
        self._reconciling = asyncio.Lock()
        self._loop: asyncio.Task | None = None
        self._first_round: asyncio.Task | None = None
        self._init_groups()
        logger.info("controller of cluster %s on %s replayed %d events from %s: %d topics, "
                    "%d brokers", self.state.cluster_id, self.node_id, self.state.applied,
                    directory, len(self.state.topics), len(self.state.broker_ids))

    # -- lifecycle -------------------------------------------------------------------------------

    async def ready(self) -> dict[str, Any]:
        """Start the reconcile loop (once) and report the controller's state. The first
        call waits for one reconcile round, so the live brokers are known when it returns."""
        await self._started()
        return {"node_id": self.node_id, "cluster_id": self.state.cluster_id,
                "topics": len(self.state.topics), "events": self.state.applied,
                "pid": os.getpid(), "brokers": sorted(self.registry.live()),
                "limits": dataclasses.asdict(self.limits)}

    async def _started(self) -> None:
        """Start the reconcile loop once. Every request that needs brokers awaits this: the
        first round registers the live broker nodes, and until it has, a restarted
        controller would take every broker for offline."""
        if self._loop is None:
            self._first_round = asyncio.get_running_loop().create_task(self._reconcile())
            self._loop = asyncio.get_running_loop().create_task(self._reconcile_forever())
        try:
            await asyncio.shield(self._first_round)
        except Exception:  # the loop tries again; meanwhile serve what is known
            logger.exception("the controller's first reconcile round failed")

    def _commit_now(self, event: dict[str, Any]) -> None:
        self.store.append(event)
        self.state.apply(event)

    async def _commit(self, event: dict[str, Any]) -> None:
        """Persist, then apply. Callers validated the event against the state first."""
        self._commit_now(event)

    async def _reconcile_forever(self) -> None:
        while True:  # the first round is _started's
            await asyncio.sleep(RECONCILE_INTERVAL_S)
            try:
                await self._reconcile()
            except Exception:  # one failed round must not stop the loop for good
                logger.exception("controller reconcile round failed")

    async def _reconcile(self) -> None:
        """Learn which nodes serve which brokers; make sure every replica of a broker that a
        live node serves has an actor there; expire group members whose session ran out."""
        async with self._reconciling:
            loaded = self._groups_loaded
            if loaded is not None and loaded.done() and not loaded.cancelled() and \
                    loaded.exception() is None:
                await self._expire_members()
            await self._register_brokers()
            for key, watch in list(self.replicas.items()):
                info = self.registry.brokers.get(key[2])
                if await watch.poll() is Health.DEAD:
                    logger.warning("replica %s-%d on broker %d died for good: creating it "
                                   "again", *key)
                    ray.kill(watch.handle, no_restart=True)  # frees an unschedulable one
                    del self.replicas[key]  # created again below if its broker is served
                elif info is not None and info.alive and info.node_id != watch.node_id:
                    # Its broker's disk is served by another node now: the actor on the old
                    # node is left behind (and cannot run there: that node is gone).
                    ray.kill(watch.handle, no_restart=True)
                    del self.replicas[key]
            for topic in list(self.state.topics.values()):
                for p in topic.partitions:
                    for broker in p.replicas:
                        self._replica(topic, p.partition, broker)

    # -- brokers ---------------------------------------------------------------------------------

    def _agent(self, node_id: str) -> ray.actor.ActorHandle:
        return BrokerAgent.options(
            name=agent_name(node_id), namespace=NAMESPACE, get_if_exists=True,
            lifetime="detached", max_restarts=-1, max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(node_id)

    async def _register_brokers(self) -> None:
        """Ask the agent of every live broker node not yet known which broker its data
        directory holds, and decide (raylog/metadata/brokers.py): a new directory gets the
        next broker id, written into it; a known one is served by this node from now on."""
        nodes, dead = broker_nodes()
        for broker in self.registry.nodes_gone(dead):
            logger.warning("broker %d is offline: Ray reports its node dead", broker)
        unknown = [n for n in nodes if self.registry.broker_of(n) is None]
        if not unknown:
            return
        agents = [self._agent(n) for n in unknown]
        try:
            answers = await asyncio.wait_for(asyncio.gather(
                *(a.identify.remote() for a in agents), return_exceptions=True),
                AGENT_TIMEOUT_S)
        except TimeoutError:
            logger.warning("broker agents of %d nodes did not answer in time", len(unknown))
            return
        for node_id, agent, answer in zip(unknown, agents, answers, strict=True):
            if isinstance(answer, BaseException):
                logger.warning("the broker agent of node %s failed: %r", node_id, answer)
                continue
            if answer["error"] is not None:
                self._refuse(node_id, answer["error"])
                continue
            identity = BrokerIdentity(*answer["identity"]) if answer["identity"] else None
            offer = Offer(node_id, answer["host"], answer["data_dir"], identity)
            verdict, reason = self.registry.decide(offer)
            if verdict is Verdict.REFUSED:
                self._refuse(node_id, reason)
                continue
            if verdict is Verdict.NEW:
                async with self._lock:
                    broker_id = self.state.next_broker_id
                    await self._commit(events.broker_registered(broker_id))
                self.registry.add(broker_id)
                await agent.adopt.remote(broker_id, self.state.cluster_id)
            else:
                broker_id = identity.broker_id
            self.registry.serve(broker_id, offer)
            logger.info("node %s (%s) serves broker %d from %s", node_id, offer.host,
                        broker_id, offer.data_dir)

    def _refuse(self, node_id: str, reason: str) -> None:
        if self.registry.refused.get(node_id) != reason:
            logger.error("refusing broker node %s: %s", node_id, reason)
        self.registry.refuse(node_id, reason)

    def _broker_memory(self) -> dict[int, float | None]:
        """Live brokers -> the memory Ray gives their node's tasks and actors."""
        memory, _ = broker_nodes()
        return {broker: memory.get(info.node_id)
                for broker, info in self.registry.live().items()}

    # -- replicas --------------------------------------------------------------------------------

    def _replica(self, topic: TopicState, partition: int, broker: int
                 ) -> ray.actor.ActorHandle | None:
        """The handle of a replica actor: cached, found by name, or created on the node that
        serves its broker; None while no live node serves the broker."""
        key = (topic.name, partition, broker)
        watch = self.replicas.get(key)
        if watch is not None:
            return watch.handle
        info = self.registry.brokers.get(broker)
        if info is None or not info.alive:
            return None
        name = replica_name(topic.name, partition, broker, info.node_id, topic.topic_id)
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            handle = ReplicaActor.options(
                name=name,
                namespace=NAMESPACE,
                lifetime="detached",
                max_restarts=-1,
                max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(info.node_id, soft=False),
            ).remote(topic.name, partition, topic.topic_id, broker, info.node_id,
                     info.data_dir, dict(topic.configs))
        self.replicas[key] = ReplicaWatch(handle, info.node_id)
        return handle

    def _serving_replica(self, topic: TopicState, partition: int, broker: int
                         ) -> ray.actor.ActorHandle:
        handle = self._replica(topic, partition, broker)
        if handle is None:
            raise LeaderNotAvailableError(
                f"{topic.name}-{partition}: broker {broker} is offline (no live node serves "
                f"its data directory)")
        return handle

    async def _start_replicas(self, topic: TopicState, partitions: range) -> None:
        handles = [self._serving_replica(topic, i, broker)
                   for i in partitions for broker in topic.partitions[i].replicas]
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
        await self._started()
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
        brokers = self.registry.live()
        if replication_factor > len(brokers):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the number of live "
                f"brokers ({len(brokers)})")
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

    def _place(self, name: str, partitions: int, replication_factor: int) -> list[list[int]]:
        """Replicas for ``partitions`` new partitions of topic ``name`` on the live brokers,
        within the limits per broker (lock held; nothing is written)."""
        existing = [p.replicas for t in self.state.topics.values() for p in t.partitions]
        memory = self._broker_memory()
        assignment = assign_replicas(list(memory), partitions, replication_factor, existing)
        self.limits.check_placement(name, assignment, existing, memory)
        return assignment

    @checked
    async def delete_topic(self, name: str) -> None:
        check_user_topic(name)
        await self._started()
        async with self._lock:
            topic = self.state.topic(name)
            await self._commit(events.topic_deleted(name))
        self.groups.topics_changed(self._existing_topics())
        for p in topic.partitions:
            for broker in p.replicas:
                watch = self.replicas.pop((name, p.partition, broker), None)
                handle = watch.handle if watch is not None else None
                info = self.registry.brokers.get(broker)
                if handle is None and info is not None and info.alive:
                    with contextlib.suppress(ValueError):  # no such actor
                        handle = ray.get_actor(replica_name(
                            name, p.partition, broker, info.node_id, topic.topic_id),
                            namespace=NAMESPACE)
                if handle is None:
                    # Its files go when a topic of that name reuses the directory.
                    logger.warning("broker %d is offline: the files of %s-%d stay there",
                                   broker, name, p.partition)
                    continue
                try:
                    await asyncio.wait_for(handle.delete.remote(), 30)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError,
                        TimeoutError):
                    logger.warning("could not delete the files of %s-%d on broker %d",
                                   name, p.partition, broker)
                ray.kill(handle, no_restart=True)

    @checked
    async def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        check_user_topic(name)
        _check_partitions("partitions", total)
        self.limits.check_topic_size(name, total)
        await self._started()
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
        await self._started()
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
        handles = [self._replica(topic, p.partition, broker)
                   for p in topic.partitions for broker in p.replicas]
        await asyncio.gather(*(h.update_configs.remote(merged) for h in handles
                               if h is not None), return_exceptions=True)
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
        """What clients need to reach each partition's leader: broker, epoch and actor
        handle (None while the leader's broker is offline)."""
        await self._started()
        out = {}
        for name in names:
            topic = self.state.topic(name)
            partitions = []
            for p in topic.partitions:
                leader = self._replica(topic, p.partition, p.leader) \
                    if p.leader is not None else None
                partitions.append({"partition": p.partition, "leader": p.leader,
                                   "leader_epoch": p.leader_epoch, "handle": leader,
                                   "replicas": list(p.replicas), "isr": list(p.isr)})
            out[name] = {"name": name, "topic_id": topic.topic_id, "partitions": partitions,
                         "configs": dict(topic.configs)}
        return out

    async def cluster_status(self) -> dict[str, Any]:
        """Brokers by id with the node serving each, its host, data directory and the
        replicas it holds and leads; the broker nodes refused, and why."""
        await self._started()
        held = self.state.replicas_by_broker()
        brokers = []
        for broker_id in sorted(self.registry.brokers.keys() | held.keys()):
            info = self.registry.brokers.get(broker_id)
            replicas = held.get(broker_id, [])
            leading = [(t, i) for t, i in replicas
                       if self.state.topics[t].partitions[i].leader == broker_id]
            described = info.describe() if info is not None else {
                "broker_id": broker_id, "node_id": None, "host": None, "data_dir": None,
                "alive": False}
            brokers.append({**described, "replicas": replicas, "leaders": leading})
        return {"cluster_id": self.state.cluster_id, "controller_node": self.node_id,
                "controller_dir": str(controller_data_dir()), "brokers": brokers,
                "refused": [{"node_id": n, "reason": r}
                            for n, r in sorted(self.registry.refused.items())],
                "topics": len(self.state.topics)}
