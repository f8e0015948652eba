"""The controller actor: owner of cluster metadata, elector of leaders, home of the groups.

One detached actor named ``raylog-controller`` in namespace ``raylog``, on the head node,
restarted by Ray after a crash. Every metadata change is an event persisted to its
metadata log (fsynced, in the head node's data directory) before it is applied and
acknowledged; a restarted controller replays the log. It learns which Ray node serves which
broker from the broker actor on each node, watches each broker (actors/broker_manager.py,
actors/supervision.py), moves leaderships when one goes (raylog/metadata/election.py), and
tells brokers which replicas they hold and who leads each. It is not on the data path:
clients ask it for metadata and then call brokers directly.

Its loop (every RECONCILE_INTERVAL_S): register new broker nodes, expire group members whose
session ran out, give leaderless partitions a leader when one can be had, move reassigned
partitions on, and replace the replicas of brokers gone for longer than
``RAYLOG_REPLACE_BROKER_AFTER_S``. Each step runs as a task of its own, at most one of each
at a time, so a step that waits (member expiry persisting to ``__consumer_offsets``, a broker
node slow to identify itself) delays only itself; no step waits for a broker to take what it
is told (actors/channels.py), and no remote call is awaited while ``lock`` is held. Brokers'
sessions are checked beside the loop (actors/broker_manager.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import time
import uuid
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors import at, log_what_matters
from actors.broker_manager import BrokerManager
from actors.groups import GroupService
from actors.hosting import background
from raylog import faults
from raylog.arguments import INT32_MAX, check_int
from raylog.cluster_names import NAMESPACE, broker_actor_name, controller_data_dir
from raylog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    LeaderNotAvailableError,
    RaylogError,
    TopicExistsError,
)
from raylog.identity import DirectoryLock, IdentityError
from raylog.interop import error_json, java_call
from raylog.metadata import MetadataState, MetadataStore, TopicState, assign_replicas, election
from raylog.metadata import state as events
from raylog.metadata.limits import PartitionLimits
from raylog.metadata.placement import replacement
from raylog.metadata.settings import ReplicationSettings
from raylog.metadata.state import PartitionState
from raylog.metrics import partition_change_counts, partition_health, rebalances, recorder
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
CALL_TIMEOUT_S = 30.0  # a broker's answer to a client's question (describe, configs)
GROUP_METRICS_INTERVAL_S = 5.0  # consumer-group lag and rebalances are reported this often
INTERNAL_REPLICATION = 3  # internal topics: min(this, brokers) replicas ...
INTERNAL_MIN_INSYNC = 2   # ... and this min.insync.replicas when there are at least 3


def _check_partitions(what: str, value: object) -> int:
    return check_int(what, value, 1, INT32_MAX, InvalidPartitionsError)


def _named_actor_exists(name: str) -> bool:
    """Whether an actor of that name is alive (or starting, or restarting) in raylog's
    namespace: a dead actor's name is free again."""
    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return False
    return True


@ray.remote(num_cpus=0)
class ControllerActor:
    """Holds a MetadataState rebuilt from its MetadataStore, the brokers (BrokerManager) and
    the consumer groups (GroupService).

    Metadata changes take ``lock`` so events are persisted and applied one at a time; reads
    of the state happen between awaits and see a consistent state. No remote call is awaited
    while ``lock`` is held, and every remote call awaited has a deadline. Every method a
    client calls checks its arguments (``@checked`` for their types) before it changes
    anything.
    """

    def __init__(self) -> None:
        log_what_matters()
        self.node_id = ray.get_runtime_context().get_node_id()
        directory = controller_data_dir()
        self._dir_lock = DirectoryLock(directory)
        if not self._dir_lock.acquire():
            raise IdentityError(f"{directory} is in use by another raylog controller on this "
                                f"machine: give each cluster its own RAYLOG_DATA_DIR")
        self.store = MetadataStore(directory / "metadata")
        self.state = MetadataState()
        self.limits = PartitionLimits.from_environ()  # a bad setting fails loudly, here
        self.settings = ReplicationSettings.from_environ()
        for event in self.store.replay():
            self.state.apply(event)
        if self.state.cluster_id is None:  # a new cluster: its id is the log's first event
            self.commit(events.cluster_created(uuid.uuid4().hex[:16]))
        self.lock = asyncio.Lock()
        self.brokers = BrokerManager(self)
        self.groups = GroupService(self, expiry_every_s=RECONCILE_INTERVAL_S)
        self._steps: dict[str, asyncio.Task] = {}  # the reconcile steps running
        self._last_rebalance = time.monotonic()
        self._loop: asyncio.Task | None = None
        self._first_round: asyncio.Task | None = None
        self._writers: dict[str, ray.actor.ActorHandle] = {}  # java_writer's actors
        self._last_group_metrics = 0.0
        self._generations: dict[str, int] | None = None  # groups' generations, last reported
        logger.info("controller of cluster %s on %s replayed %d events from %s: %d topics, "
                    "%d brokers", self.state.cluster_id, self.node_id, self.state.applied,
                    directory, len(self.state.topics), len(self.state.broker_ids))

    # -- lifecycle -------------------------------------------------------------------------------

    async def ready(self) -> dict[str, Any]:
        """Start the reconcile loop (once) and report the controller's state. The first
        call waits for one reconcile round, so the live brokers are known when it returns."""
        await self.started()
        return {"node_id": self.node_id, "cluster_id": self.state.cluster_id,
                "topics": len(self.state.topics), "events": self.state.applied,
                "pid": os.getpid(), "brokers": sorted(self.brokers.live()),
                "limits": dataclasses.asdict(self.limits)}

    async def started(self) -> None:
        """Start the reconcile loop once. Every request that needs brokers awaits this: the
        first round registers the live broker nodes, and until it has, a restarted
        controller would take every broker for offline. (It does not wait for the brokers
        to take what they are told: they are told concurrently, each on its own.)"""
        if self._loop is None:
            self._first_round = asyncio.get_running_loop().create_task(self._first())
            self._loop = asyncio.get_running_loop().create_task(self._reconcile_forever())
        try:
            await asyncio.shield(self._first_round)
        except Exception:  # the loop tries again; meanwhile serve what is known
            logger.exception("the controller's first reconcile round failed")

    async def _first(self) -> None:
        await self.brokers.register()
        # Brokers no live node presents now are down: their leaderships move.
        for broker in self.brokers.missing_after_start():
            await self.brokers.broker_down(broker)

    async def confirm_broker(self, broker_id: int, incarnation: str) -> dict[str, Any]:
        """A broker that was stalled long enough to have been fenced asks whether it may
        serve again (it refuses leader and consumer requests until then): brought up if it
        was fenced, told the full state of its replicas, then confirmed. ``confirmed`` is
        False while this controller does not know it alive as that incarnation (it asks
        again)."""
        await self.started()
        return {"confirmed": await self.brokers.confirm(broker_id, incarnation),
                "version": self.state.applied}

    def commit(self, event: dict[str, Any]) -> None:
        """Persist, then apply. Callers validated the event against the state first (and
        hold ``lock`` if a read of the state decided it)."""
        self.store.append(event)
        self.state.apply(event)

    def commit_change(self, topic: TopicState, p: PartitionState,
                      change: election.Change) -> None:
        """Persist and apply a change of a partition's leader, ISR or replicas (lock held)."""
        if change.unclean:
            logger.warning("unclean election of broker %s (ISR was %s): records only the old "
                           "ISR had are lost", change.leader, p.isr, **at(topic.name, p.partition))
        counts = partition_change_counts(p.leader, p.isr, change.leader, change.isr)
        self.commit(events.partition_changed(
            topic.name, p.partition, leader=change.leader, leader_epoch=change.leader_epoch,
            isr=change.isr, replicas=change.replicas))
        for name, count in counts.items():
            recorder().inc(name, count, topic=topic.name)

    async def _reconcile_forever(self) -> None:
        with contextlib.suppress(Exception):  # logged by started(); the loop goes on anyway
            await asyncio.shield(self._first_round)
        self.brokers.start_sessions()
        while True:
            await asyncio.sleep(RECONCILE_INTERVAL_S)
            self._reconcile()

    def _reconcile(self) -> None:
        """Start each step of a round that is not still running from an earlier round."""
        for name, step in (("members", self.groups.expire_members),
                           ("registration", self.brokers.register),
                           ("partitions", self._partition_steps),
                           ("metrics", self._report_metrics)):
            running = self._steps.get(name)
            if running is None or running.done():
                self._steps[name] = background(self._step(name, step))

    @staticmethod
    async def _step(name: str, step: Any) -> None:
        try:
            await step()
        except Exception:  # one failed step must not stop the loop for good
            logger.exception("controller reconcile step %s failed", name)

    async def _partition_steps(self) -> None:
        """Elections, reassignments and replacements: decisions on the metadata alone, told
        to the brokers without waiting for them."""
        await self.brokers.elect_leaderless()
        await self._move_reassigned()
        await self._replace_gone_brokers()
        await self._rebalance_leaders()

    async def _report_metrics(self) -> None:
        """The cluster's health every round; groups' lag and rebalances every
        GROUP_METRICS_INTERVAL_S (the lag asks each partition's leader for its end)."""
        metrics = recorder()
        under, offline = partition_health(
            (p for t in self.state.topics.values() for p in t.partitions), self.brokers.live())
        metrics.set("raylog_under_replicated_partitions", under)
        metrics.set("raylog_offline_partitions", offline)
        now = time.monotonic()
        if now - self._last_group_metrics < GROUP_METRICS_INTERVAL_S:
            return
        self._last_group_metrics = now
        try:
            lags, generations = await self.groups.lag_and_generations()
        except Exception:  # metrics never stop the reconcile loop
            logger.exception("consumer group metrics failed")
            return
        for (group, tp), lag in lags.items():
            metrics.set("raylog_consumer_group_lag", lag, group=group, topic=tp.topic,
                        partition=tp.partition)
        if generations is None:
            return
        if self._generations is None:  # the groups just loaded: count from what they had
            self._generations = dict(self.groups.generations_at_load)
        counts, self._generations = rebalances(self._generations, generations)
        for group, count in counts.items():
            metrics.inc("raylog_consumer_group_rebalances", count, group=group)

    async def _rebalance_leaders(self) -> None:
        """Every ``rebalance_leaders_s``, give partitions back to their preferred replicas
        (Kafka's auto.leader.rebalance.enable): failovers and restarts pile leaderships on
        the brokers that stayed up (a whole-cluster restart, on the last to register)."""
        every = self.settings.rebalance_leaders_s
        now = time.monotonic()
        if not every or now - self._last_rebalance < every:
            return
        self._last_rebalance = now
        moved, _ = await self._elect_preferred(None)
        if moved:
            logger.info("leaders rebalanced to preferred replicas: %s", moved)

    # -- what other parts ask ----------------------------------------------------------------------

    def replicas_on(self, broker: int) -> list[tuple[TopicState, PartitionState]]:
        return [(t, p) for t in self.state.topics.values() for p in t.partitions
                if broker in p.replicas]

    def user_topics(self) -> dict[str, int]:
        return {name: len(t.partitions) for name, t in self.state.topics.items()
                if not name.startswith("__")}

    def leader(self, topic: str, partition: int) -> tuple[ray.actor.ActorHandle, int]:
        """(the broker actor leading the partition, its leader epoch)."""
        p = self.state.topic(topic).partition(partition)
        handle = self.brokers.handle_for(p.leader, (topic, partition)) \
            if p.leader is not None else None
        if handle is None:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no live leader right now")
        return handle, p.leader_epoch

    # -- topics ----------------------------------------------------------------------------------

    @checked
    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                           configs: dict[str, Any] | None = None,
                           topic_id: str | None = None) -> dict[str, Any]:
        """Create a topic. A client that retries (the controller restarted mid-call) passes
        the same ``topic_id``; finding the topic already created with it is success."""
        check_user_topic(name)
        return await self._create(name, partitions, replication_factor, configs, topic_id)

    async def _create(self, name: str, partitions: int, replication_factor: int,
                      configs: dict[str, Any] | None, topic_id: str | None) -> dict[str, Any]:
        await self.started()
        existing = self.state.topics.get(name)
        if existing is not None and topic_id is not None and existing.topic_id == topic_id:
            await self.brokers.delivered(await self.brokers.push(
                [(existing, p) for p in existing.partitions]), f"topic {name}")
            return self._describe(existing)
        _check_partitions("partitions", partitions)
        self.limits.check_topic_size(name, partitions)
        check_int("replication factor", replication_factor, 1, INT32_MAX,
                  InvalidReplicationFactorError)
        normalized = normalize_configs(configs)
        min_insync = normalized.get("min_insync_replicas", 1)
        if min_insync > replication_factor:
            raise InvalidConfigError(
                f"min.insync.replicas={min_insync} is larger than the replication factor "
                f"{replication_factor}: no acks=all write could ever succeed")
        async with self.lock:
            if name in self.state.topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            assignment = self._place(name, partitions, replication_factor)
            self.commit(events.topic_created(name, topic_id or uuid.uuid4().hex, assignment,
                                             normalized))
        topic = self.state.topic(name)
        told = await self.brokers.push([(topic, p) for p in topic.partitions])
        await self.brokers.delivered(told, f"topic {name}")
        self.groups.coordinator.topics_changed(self.user_topics())
        return self._describe(topic)

    async def ensure_internal_topic(self, name: str, partitions: int,
                                    configs: dict[str, Any]) -> None:
        """Create an internal topic if missing, with min(3, live brokers) replicas and
        min.insync.replicas 2 when it has 3. (Every live broker node registered in the
        controller's first round, which this waits for; a cluster running with brokers down
        gets fewer replicas rather than no groups at all.) Raises LeaderNotAvailableError
        (retriable) while no broker is alive."""
        if name in self.state.topics:
            return
        validate_topic_name(name)
        await self.started()
        factor = min(INTERNAL_REPLICATION, len(self.brokers.live()))
        if factor == 0:
            raise LeaderNotAvailableError(f"{name} cannot be created: no broker is alive")
        settings = {**configs, "min_insync_replicas":
                    INTERNAL_MIN_INSYNC if factor >= INTERNAL_REPLICATION else 1}
        with contextlib.suppress(TopicExistsError):  # created meanwhile by another caller
            await self._create(name, partitions, factor, settings, None)

    def _place(self, name: str, partitions: int, replication_factor: int) -> list[list[int]]:
        """Replicas for ``partitions`` new partitions of topic ``name`` on the live brokers,
        within the limits per broker (lock held; nothing is written)."""
        existing = [p.replicas for t in self.state.topics.values() for p in t.partitions]
        memory = self.brokers.node_memory()
        assignment = assign_replicas(list(memory), partitions, replication_factor, existing)
        self.limits.check_placement(name, assignment, existing, memory)
        return assignment

    @checked
    async def delete_topic(self, name: str) -> None:
        check_user_topic(name)
        await self.started()
        async with self.lock:
            topic = self.state.topic(name)
            self.commit(events.topic_deleted(name))
        self.groups.coordinator.topics_changed(self.user_topics())
        told = await self._stop_replicas(name, {b for p in topic.partitions for b in p.replicas},
                                         [p.partition for p in topic.partitions])
        await self.brokers.delivered(told, f"the removal of {name}")

    async def _stop_replicas(self, name: str, brokers: set[int], partitions: list[int]
                             ) -> asyncio.Future:
        """Tell live brokers to remove their replicas of these partitions; an offline one
        removes them when it is back (it is told everything it holds, and removes the rest)."""
        told = []
        for broker in sorted(brokers):
            if self.brokers.handle(broker) is None:
                logger.info("broker %d is offline: it removes %s when it is back", broker, name)
                continue
            told.append(await self.brokers.stop_replicas(
                broker, [(name, i) for i in partitions], True))
        return asyncio.gather(*told)

    @checked
    async def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        check_user_topic(name)
        _check_partitions("partitions", total)
        self.limits.check_topic_size(name, total)
        await self.started()
        async with self.lock:
            topic = self.state.topic(name)
            current = len(topic.partitions)
            check_partition_growth(name, current, total)
            assignment = self._place(name, total - current, topic.replication_factor)
            self.commit(events.partitions_added(name, assignment))
        await self.brokers.delivered(await self.brokers.push(
            [(topic, p) for p in topic.partitions[current:]]), f"new partitions of {name}")
        self.groups.coordinator.topics_changed(self.user_topics())
        return self._describe(topic)

    @checked
    async def alter_configs(self, name: str, set_configs: dict[str, Any] | None = None,
                            delete_configs: list[str] | None = None) -> dict[str, Any]:
        """Set and delete topic configs. Refused, changing nothing, when a config to delete
        is not set or is also being set."""
        updates = normalize_configs(set_configs)  # stored configs are normalized
        await self.started()
        async with self.lock:
            topic = self.state.topic(name)
            deleted = configs_to_delete(name, topic.configs, delete_configs or [])
            both = sorted(set(deleted) & set(updates))
            if both:
                raise InvalidConfigError(f"cannot both set and delete {', '.join(both)}")
            merged = {k: v for k, v in topic.configs.items() if k not in deleted}
            merged.update(updates)
            if merged.get("min_insync_replicas", 1) > topic.replication_factor:
                raise InvalidConfigError(
                    f"min.insync.replicas={merged['min_insync_replicas']} is larger than the "
                    f"replication factor {topic.replication_factor} of {name!r}")
            if merged == topic.configs:
                return self._describe(topic)
            self.commit(events.configs_altered(name, merged))
        brokers = {b for p in topic.partitions for b in p.replicas}
        version = self.state.applied
        # A broker that does not take them now gets them with its next state (they travel
        # with every partition's state too).
        await asyncio.gather(*(asyncio.wait_for(
            self.brokers.handle(b).update_configs.remote(name, merged, version), CALL_TIMEOUT_S)
            for b in brokers if self.brokers.handle(b) is not None), return_exceptions=True)
        return self._describe(topic)

    @checked
    async def list_topics(self, include_internal: bool = False) -> list[str]:
        return sorted(n for n in self.state.topics if include_internal or not n.startswith("__"))

    @checked
    async def describe_topics(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        names = names if names is not None else sorted(self.state.topics)
        return [self._describe(self.state.topic(n)) for n in names]

    def _describe(self, topic: TopicState) -> dict[str, Any]:
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

    @checked
    async def metadata(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """What clients need to reach each partition's replicas: per partition the leader,
        leader epoch, replicas and ISR, and the replica hosts serving its replicas where their
        broker actors do not; per live broker among them its actor and node."""
        await self.started()
        out = {}
        live = self.brokers.live()
        for name in names:
            topic = self.state.topic(name)
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
                                         "hosts": self._hosts(name, p, live)}
                                        for p in topic.partitions],
                         "brokers": brokers}
        return out

    def _hosts(self, name: str, p: PartitionState, live: set[int]
               ) -> dict[int, ray.actor.ActorHandle]:
        """The replica hosts serving the partition's replicas on ``live`` brokers, where a
        broker's actor does not serve it itself (actors/replica_hosts.py)."""
        routes = self.brokers.routes
        return {b: routes[b][name, p.partition] for b in p.replicas
                if b in live and (name, p.partition) in routes.get(b, {})}

    async def cluster_status(self) -> dict[str, Any]:
        """Brokers by id with the node serving each, its host, data directory, whether it is
        alive (and its health: alive, fenced, restarting, dead; how long since the controller
        last heard from it), the replicas it holds and leads; partitions under-replicated and
        offline; the broker nodes refused, and why; how long the controller itself did not run
        (stalls not counted against brokers' sessions)."""
        await self.started()
        live = self.brokers.live()
        held = self.state.replicas_by_broker()
        brokers = []
        for broker_id in sorted(self.brokers.registry.brokers.keys() | held.keys()):
            info = self.brokers.registry.brokers.get(broker_id)
            replicas = held.get(broker_id, [])
            leading = [(t, i) for t, i in replicas
                       if self.state.topics[t].partitions[i].leader == broker_id]
            described = info.describe() if info is not None else {
                "broker_id": broker_id, "node_id": None, "host": None, "data_dir": None}
            watch = self.brokers.watches.get(broker_id)
            brokers.append({**described, "alive": broker_id in live,
                            "health": watch.health.value if watch is not None else None,
                            "silent_s": self.brokers.sessions.silent_s(broker_id),
                            "replicas": replicas, "leaders": leading})
        partitions = [p for t in self.state.topics.values() for p in t.partitions]
        return {"cluster_id": self.state.cluster_id, "controller_node": self.node_id,
                "controller_dir": str(controller_data_dir()), "brokers": brokers,
                "refused": [{"node_id": n, "reason": r}
                            for n, r in sorted(self.brokers.registry.refused.items())],
                "topics": len(self.state.topics), "partitions": len(partitions),
                "under_replicated_partitions": sum(len(p.isr) < len(p.replicas)
                                                   for p in partitions),
                "offline_partitions": sum(p.leader is None or p.leader not in live
                                          for p in partitions),
                "controller_stalled_s": self.brokers.sessions.stalled_s}

    @checked
    async def describe_replicas(self, name: str) -> list[dict[str, Any]]:
        """What each live broker holding a replica of topic ``name`` says of it: role, epochs,
        log start and end, high watermark, and for leaders their followers."""
        await self.started()
        topic = self.state.topic(name)
        brokers = sorted({b for p in topic.partitions for b in p.replicas})
        calls = [asyncio.wait_for(self.brokers.handle(b).describe.remote(name), CALL_TIMEOUT_S)
                 for b in brokers if self.brokers.handle(b) is not None]
        found = await asyncio.gather(*calls, return_exceptions=True)
        return [r for answer in found if not isinstance(answer, BaseException) for r in answer]

    # -- replication -------------------------------------------------------------------------------

    @checked
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
        async with self.lock:
            try:
                t = self.state.topic(topic)
                p = t.partition(partition)
            except RaylogError as e:  # deleted meanwhile: the leader stops soon
                return {"state": None, "error": e}
            try:
                change = election.alter_isr(
                    p, leader, leader_epoch, partition_epoch, isr, self.brokers.live(),
                    member_epochs=broker_epochs, broker_epochs=self.brokers.broker_epochs())
            except RaylogError as e:
                return {"state": self.brokers.state_of(t, p), "error": e}
            changed = change.isr != p.isr
            if changed:
                logger.info("ISR %s -> %s (leader %d)", p.isr, change.isr, leader,
                            **at(topic, partition))
                self.commit_change(t, p, change)
                # Committed, not answered: the leader must not take a lost answer for a
                # refusal (fault tests end the process here).
                faults.point("controller.isr_committed")
        if changed:  # the followers hear of it too (the leader gets the answer)
            await self.brokers.push([(t, p)], skip=leader)  # queued: not waited for
        return {"state": self.brokers.state_of(t, p), "error": None}

    @checked
    async def elect_leaders(self, names: list[str] | None = None) -> dict[str, list[int]]:
        """Preferred-leader election: in every partition of the topics ``names`` (default:
        all) whose first replica is alive and in the ISR, that replica leads. Returns the
        partitions moved, per topic."""
        await self.started()
        moved, told = await self._elect_preferred(names)
        await self.brokers.delivered(told, "preferred leaders")
        return moved

    async def _elect_preferred(self, names: list[str] | None
                               ) -> tuple[dict[str, list[int]], asyncio.Future]:
        """(The partitions that changed leader, per topic; the brokers being told.)"""
        moved: dict[str, list[int]] = {}
        changed = []
        async with self.lock:
            live = self.brokers.live()
            # Every name checked before anything changes: a typo must not leave changes
            # committed and never told to the brokers.
            topics = [self.state.topic(name) for name in
                      (names if names is not None else sorted(self.state.topics))]
            for topic in topics:
                name = topic.name
                for p in topic.partitions:
                    change = election.preferred_leader(p, live)
                    if change is not None:
                        self.commit_change(topic, p, change)
                        changed.append((topic, p))
                        moved.setdefault(name, []).append(p.partition)
        return moved, await self.brokers.push(changed)

    @checked
    async def reassign_partitions(self, name: str,
                                  targets: dict[int, list[int]]) -> dict[str, Any]:
        """Move partitions of topic ``name`` to other brokers: ``{partition: [brokers]}``, the
        first the preferred leader. New replicas copy the leader while producers go on;
        once they are in sync, leadership moves if it must and the old replicas go."""
        check_user_topic(name)
        await self.started()
        async with self.lock:
            topic = self.state.topic(name)
            known = self.state.broker_ids
            min_insync = topic.configs.get("min_insync_replicas", 1)
            for partition, target in targets.items():
                topic.partition(partition)
                if not target or len(set(target)) != len(target) or not set(target) <= known:
                    raise InvalidArgumentError(
                        f"{name}-{partition}: the target must be distinct known broker ids "
                        f"(known: {sorted(known)}), got {target}")
                if len(target) < min_insync:
                    raise InvalidArgumentError(
                        f"{name}-{partition}: {len(target)} replicas, fewer than its "
                        f"min.insync.replicas={min_insync}: no acks=all write could succeed")
            for partition, target in targets.items():
                p = topic.partitions[partition]
                if p.replicas != list(target) or p.target is not None:
                    self.commit(events.reassignment(name, partition, list(target)))
        await self.brokers.delivered(await self._move_reassigned(), f"moves of {name}")
        return self._describe(topic)

    async def _move_reassigned(self) -> asyncio.Future:
        """Take every partition being reassigned one step on (raylog/metadata/election.py's
        reassign); remove the replicas it dropped from their brokers. Returns the brokers
        being told."""
        changed, dropped = [], []
        async with self.lock:
            live = self.brokers.live()
            for topic in list(self.state.topics.values()):
                for p in topic.partitions:
                    if p.target is None:
                        continue
                    before = list(p.replicas)
                    change = election.reassign(p, p.target, live)
                    if change is not None:
                        self.commit_change(topic, p, change)
                        changed.append((topic, p))
                        gone = set(before) - set(p.replicas)
                        if gone:
                            dropped.append((topic.name, p.partition, gone))
                    if p.replicas == p.target:
                        self.commit(events.reassignment(topic.name, p.partition, None))
                        logger.info("now on brokers %s", p.replicas,
                                    **at(topic.name, p.partition))
        told = [await self.brokers.push(changed)]
        for name, partition, gone in dropped:
            told.append(await self._stop_replicas(name, gone, [partition]))
        return asyncio.gather(*told)

    async def _replace_gone_brokers(self) -> None:
        """Reassign the replicas of brokers gone longer than the setting to live brokers."""
        after = self.settings.replace_broker_after_s
        if not after:
            return
        now = time.monotonic()
        gone = [b for b, since in self.brokers.down_since.items() if now - since >= after]
        if not gone:
            return
        async with self.lock:
            live = sorted(self.brokers.live())
            existing = [p.target or p.replicas for t in self.state.topics.values()
                        for p in t.partitions]
            for broker in gone:
                for topic, p in self.replicas_on(broker):
                    if p.target is not None:
                        continue
                    spare = replacement(live, p.replicas, existing)
                    if spare is None:
                        continue
                    target = [spare if b == broker else b for b in p.replicas]
                    logger.warning("broker %d gone for %.0f s: moving its replica to broker %d",
                                   broker, now - self.brokers.down_since[broker], spare,
                                   **at(topic.name, p.partition))
                    self.commit(events.reassignment(topic.name, p.partition, target))
                    existing.append(target)

    # -- consumer groups (the GroupService does the work) -----------------------------------------

    @checked
    async def join_group(self, group_id: str, member_id: str | None, client_id: str,
                         topics: list[str] | None, pattern: str | None,
                         session_timeout_ms: int, assignor: str,
                         actor: ray.actor.ActorHandle | None = None,
                         claims: list[tuple[str, int]] | None = None) -> dict[str, Any]:
        return await self.groups.join_group(group_id, member_id, client_id, topics, pattern,
                                            session_timeout_ms, assignor, actor, claims)

    @checked
    async def heartbeat(self, group_id: str, member_id: str,
                        owned: list[tuple[str, int]]) -> dict[str, Any]:
        return await self.groups.heartbeat(group_id, member_id, owned)

    @checked
    async def leave_group(self, group_id: str, member_id: str) -> None:
        await self.groups.leave_group(group_id, member_id)

    @checked
    async def commit_offsets(self, group_id: str, member_id: str | None, generation: int,
                             offsets: list[tuple[str, int, int, str]]) -> None:
        await self.groups.commit_offsets(group_id, member_id, generation, offsets)

    @checked
    async def committed_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                                ) -> dict[tuple[str, int], tuple | None]:
        return await self.groups.committed_offsets(group_id, partitions)

    @checked
    async def list_groups(self) -> list[dict[str, Any]]:
        return await self.groups.list_groups()

    @checked
    async def describe_group(self, group_id: str) -> dict[str, Any]:
        return await self.groups.describe_group(group_id)

    @checked
    async def delete_group(self, group_id: str) -> None:
        await self.groups.delete_group(group_id)

    @checked
    async def reset_offsets(self, group_id: str, topic: str, spec: str | int | list[Any],
                            partitions: list[int] | None = None, dry_run: bool = False
                            ) -> dict[int, int]:
        return await self.groups.reset_offsets(group_id, topic, spec, partitions, dry_run)

    @checked
    async def group_history(self, group_id: str) -> list:
        return await self.groups.group_history(group_id)


    # -- the Java connector (raylog/interop.py: JSON in and out) ---------------------------------

    @java_call
    async def java_topics(self) -> str:
        """The user topics' names, as a JSON list (Spark's ``subscribePattern`` matches them)."""
        return json.dumps(await self.list_topics())

    @java_call
    async def java_metadata(self, names: str) -> str:
        """:meth:`metadata` of the topics named in the JSON list ``names``, as JSON a Java
        caller can use: per topic its partitions (leader, leader epoch, replicas, ISR),
        whether it is compacted (its offsets then have gaps), and per live broker among
        its replicas the name of the broker's actor, its node and host; per unknown topic
        ``{"error": ...}``."""
        await self.started()
        answer: dict[str, Any] = {}
        for name in json.loads(names):
            try:
                raw = (await self.metadata([name]))[name]
            except RaylogError as e:
                answer[name] = {"error": error_json(e)}
                continue
            brokers = {}
            for broker, where in raw["brokers"].items():
                info = self.brokers.registry.brokers.get(broker)
                brokers[str(broker)] = {"actor": broker_actor_name(where["node_id"]),
                                        "node_id": where["node_id"],
                                        "host": info.host if info is not None else None}
            policy = str(raw["configs"].get("cleanup_policy", "delete"))
            answer[name] = {"partitions": raw["partitions"], "brokers": brokers,
                            "compacted": "compact" in policy}
        return json.dumps(answer)

    @java_call
    async def java_schema_registry(self) -> str:
        """The name (in namespace ``raylog``) of the cluster's schema registry actor, started
        if there is none yet (it is detached: it outlives this call and this actor)."""
        from raylog.registry import REGISTRY_NAME, registry_handle

        registry_handle()
        return REGISTRY_NAME

    @java_call
    async def java_writer(self, node_id: str) -> str:
        """The name (in namespace ``raylog``) of the actor through which Spark tasks on
        ``node_id`` write (actors/spark_writer.py), started if there is none yet. It is
        this actor's child: a controller restart takes it down, and the next writer that
        asks starts it again."""
        from actors.spark_writer import SparkWriter

        if not isinstance(node_id, str) or not node_id:
            raise InvalidArgumentError(f"node_id must be a Ray node id, got {node_id!r}")
        name = f"spark-writer:{node_id}"
        if name in self._writers and _named_actor_exists(name):
            # Keep the handle that created it: a handle from get_if_exists or get_actor is
            # weak, and the actor would be destroyed, mid-write, once the first one went.
            return name
        self._writers[name] = SparkWriter.options(  # it lives as long as this handle does
            name=name, namespace=NAMESPACE, get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=True)).remote()
        return name
