"""The controller actor: owner of cluster metadata, elector of leaders, home of the groups.

One detached actor named ``raylog-controller`` in namespace ``raylog``, on the head node,
restarted by Ray after a crash. Every metadata change is an event persisted to its
metadata log (fsynced, in the head node's data directory) before it is applied and
acknowledged; a restarted controller replays the log. It learns which Ray node serves which
broker from the broker actor on each node, watches each broker (actors/broker_manager.py,
actors/supervision.py), moves leaderships when one goes (raylog/metadata/election.py), and
tells brokers which replicas they hold and who leads each. It is not on the data path:
clients ask it for metadata and then call brokers directly.

It is a shell over parts that never hold it (docs/architecture.md, "The controller's
parts"): the metadata (raylog/metadata/access.py), brokers and elections
(actors/broker_manager.py), topics (actors/topic_manager.py), partition moves
(actors/partition_moves.py), the balancer (actors/balancing.py), drains and restarts of
brokers (actors/drains.py), groups (actors/groups.py), transactions
(actors/transactions.py), client quotas (actors/quota_service.py) and the Spark
connector's calls (actors/java_api.py). Its API is
the list of what each part serves.

Its loop (every RECONCILE_INTERVAL_S): register new broker nodes, drain and stop the
brokers of nodes Ray drains (actors/drains.py), expire group members whose
session ran out, abort transactions past their timeout (loading the transaction coordinator
after a restart, so that it finishes what its predecessor decided), give leaderless
partitions a leader when one can be had, move reassigned partitions on, replace the
replicas of brokers gone for longer than ``RAYLOG_REPLACE_BROKER_AFTER_S``, and elect the
preferred leaders of balanced partitions (balancing by itself with
``RAYLOG_AUTO_BALANCE``). Each step runs as a task of its own, at most one of each at a
time, so a step that waits (member expiry
persisting to ``__consumer_offsets``, a broker node slow to identify itself) delays only
itself; no step waits for a broker to take what it is told (actors/channels.py), and no
remote call is awaited while ``lock`` is held. Brokers'
sessions are checked beside the loop (actors/broker_manager.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
import uuid
from typing import Any

import ray

from actors import log_what_matters
from actors.balancing import PartitionBalancer
from actors.broker_manager import BrokerManager
from actors.drains import Drains, GcsValue
from actors.groups import GroupService
from actors.hosting import background
from actors.java_api import JavaApi
from actors.kafka_groups import KafkaGroupService
from actors.partition_moves import PartitionMoves
from actors.quota_service import QuotaService
from actors.topic_manager import CALL_TIMEOUT_S, TopicManager
from actors.transactions import TransactionService
from raylog.metadata import MetadataStore
from raylog.metadata import state as events
from raylog.metadata.access import MetadataAccess
from raylog.metadata.balance_settings import BalanceSettings
from raylog.metadata.identity import DirectoryLock, IdentityError
from raylog.metadata.limits import PartitionLimits
from raylog.metadata.settings import ReplicationSettings
from raylog.metadata.snapshot import SnapshotPolicy
from raylog.tiered.settings import RemoteStorageSettings
from raylog.util.cluster_names import controller_data_dir
from raylog.util.interop import java_call
from raylog.util.metrics import partition_health, rebalances, recorder
from raylog.util.typecheck import checked, served_by

logger = logging.getLogger(__name__)

RECONCILE_INTERVAL_S = 1.0
GROUP_METRICS_INTERVAL_S = 5.0  # consumer-group lag and rebalances are reported this often


@ray.remote(num_cpus=0)
class ControllerActor:
    """Holds the metadata (a MetadataAccess over its MetadataStore) and the parts that
    serve its API, each given the metadata and what else it needs, never this actor:
    the brokers and their elections (BrokerManager), topics (TopicManager), partition
    moves (PartitionMoves), consumer groups (GroupService) and the Spark connector's
    calls (JavaApi).

    Its public methods are its API, each declared below with the part that serves it
    (``served_by``: the part's signature, docstring and argument checks). Metadata changes
    take ``access.lock`` so events are persisted and applied one at a time; reads of the
    state happen between awaits and see a consistent state. No remote call is awaited
    while the lock is held, and every remote call awaited has a deadline.
    """

    def __init__(self) -> None:
        log_what_matters()
        self.node_id = ray.get_runtime_context().get_node_id()
        directory = controller_data_dir()
        self._dir_lock = DirectoryLock(directory)
        if not self._dir_lock.acquire():
            raise IdentityError(f"{directory} is in use by another raylog controller on this "
                                f"machine: give each cluster its own RAYLOG_DATA_DIR")
        self.access = MetadataAccess(MetadataStore(directory / "metadata",
                                                   SnapshotPolicy.from_environ()))
        state = self.access.state
        limits = PartitionLimits.from_environ()  # a bad setting fails loudly, here
        settings = ReplicationSettings.from_environ()
        balance = BalanceSettings.from_environ()
        self.remote_storage_settings = RemoteStorageSettings.from_environ()
        if state.cluster_id is None:  # a new cluster: its id is the log's first event
            self.access.commit(events.cluster_created(uuid.uuid4().hex[:16]))
        self.limits = limits
        self.brokers = BrokerManager(self.access, settings, balance.replication_throttled_rate)
        self.topics = TopicManager(
            self.access, self.brokers, limits, self.started,
            lambda topics: self.groups.coordinator.topics_changed(topics))
        self.topics.remote_storage = self.remote_storage_settings
        self.moves = PartitionMoves(self.access, self.brokers, settings, self.started,
                                    self.topics.describe)
        self.balancer = PartitionBalancer(self.access, self.brokers, self.moves, balance,
                                          self.started, limits)
        self.drains = Drains(self.access, self.brokers, self.started,
                             record=GcsValue(f"drains-{self.access.state.cluster_id}"))
        self.groups = GroupService(self.access, self.brokers.leader,
                                   self.topics.ensure_internal_topic,
                                   expiry_every_s=RECONCILE_INTERVAL_S)
        self.kafka_groups = KafkaGroupService(self.groups)
        self.transactions = TransactionService(self.access, self.brokers.leader,
                                               self.topics.ensure_internal_topic)
        # Offsets committed in a transaction: checked against it, settled by its markers.
        self.groups.describe_transaction = self.transactions.txn_describe
        self.transactions.offsets_marker_written = self.groups.txn_marker_written
        self.java = JavaApi(self.topics, self.brokers)
        self.quotas = QuotaService(self.access)
        self._steps: dict[str, asyncio.Task] = {}  # the reconcile steps running
        self._loop: asyncio.Task | None = None
        self._first_round: asyncio.Task | None = None
        self._last_group_metrics = 0.0
        self._generations: dict[str, int] | None = None  # groups' generations, last reported
        logger.info("controller of cluster %s on %s loaded %d events from %s (snapshot at %d): "
                    "%d topics, %d brokers", state.cluster_id, self.node_id, state.applied,
                    directory, self.access.log.snapshot_position, len(state.topics),
                    len(state.broker_ids))

    # -- the API: topics ---------------------------------------------------------------------------

    create_topic = served_by("topics", TopicManager.create_topic)
    ensure_internal_topic = served_by("topics", TopicManager.ensure_internal_topic)
    delete_topic = served_by("topics", TopicManager.delete_topic)
    add_partitions = served_by("topics", TopicManager.add_partitions)
    alter_configs = served_by("topics", TopicManager.alter_configs)
    list_topics = served_by("topics", TopicManager.list_topics)
    describe_topics = served_by("topics", TopicManager.describe_topics)
    metadata = served_by("topics", TopicManager.metadata)

    async def remote_storage(self) -> dict[str, Any]:
        """The cluster's object store for tiered segments, as brokers and analytics readers
        open it: ``{"uri": str | None, "settings": dict}`` (raylog/tiered/settings.py)."""
        return self.remote_storage_settings.to_dict()

    # -- the API: leaders, ISRs and replicas -------------------------------------------------------

    alter_partition = served_by("moves", PartitionMoves.alter_partition)
    elect_leaders = served_by("moves", PartitionMoves.elect_leaders)
    reassign_partitions = served_by("moves", PartitionMoves.reassign_partitions)
    balance_plan = served_by("balancer", PartitionBalancer.balance_plan)
    balance_execute = served_by("balancer", PartitionBalancer.balance_execute)
    balance_status = served_by("balancer", PartitionBalancer.balance_status)

    # -- the API: draining, stopping and restarting brokers (docs/operations.md) -------------------

    drain_broker = served_by("drains", Drains.drain_broker)
    stop_broker = served_by("drains", Drains.stop_broker)
    restart_broker = served_by("drains", Drains.restart_broker)
    resume_broker = served_by("drains", Drains.resume_broker)
    roll_plan = served_by("drains", Drains.roll_plan)
    sync_state = served_by("drains", Drains.sync_state)

    # -- the API: consumer groups ------------------------------------------------------------------

    join_group = served_by("groups", GroupService.join_group)
    heartbeat = served_by("groups", GroupService.heartbeat)
    leave_group = served_by("groups", GroupService.leave_group)
    commit_offsets = served_by("groups", GroupService.commit_offsets)
    committed_offsets = served_by("groups", GroupService.committed_offsets)
    txn_offset_commit = served_by("groups", GroupService.txn_offset_commit)
    list_groups = served_by("groups", GroupService.list_groups)
    describe_group = served_by("groups", GroupService.describe_group)
    delete_group = served_by("groups", GroupService.delete_group)
    reset_offsets = served_by("groups", GroupService.reset_offsets)
    group_history = served_by("groups", GroupService.group_history)

    # -- the API: Kafka clients' consumer groups (the gateway's; offsets as above) ---------------

    kafka_join_group = served_by("kafka_groups", KafkaGroupService.join_group)
    kafka_sync_group = served_by("kafka_groups", KafkaGroupService.sync_group)
    kafka_heartbeat = served_by("kafka_groups", KafkaGroupService.heartbeat)
    kafka_leave_group = served_by("kafka_groups", KafkaGroupService.leave_group)
    kafka_committed = served_by("kafka_groups", KafkaGroupService.committed)
    kafka_describe_groups = served_by("kafka_groups", KafkaGroupService.describe_groups)
    kafka_list_groups = served_by("kafka_groups", KafkaGroupService.list_groups)

    # -- the API: transactions (the transaction coordinator's; docs/transactions.md) -----------

    txn_init_producer_id = served_by("transactions", TransactionService.txn_init_producer_id)
    txn_add_partitions = served_by("transactions", TransactionService.txn_add_partitions)
    txn_add_offsets = served_by("transactions", TransactionService.txn_add_offsets)
    txn_end = served_by("transactions", TransactionService.txn_end)
    txn_commit_jointly = served_by("transactions", TransactionService.txn_commit_jointly)
    txn_list = served_by("transactions", TransactionService.txn_list)
    txn_describe = served_by("transactions", TransactionService.txn_describe)
    txn_abort = served_by("transactions", TransactionService.txn_abort)

    # -- the API: client quotas (docs/quotas.md) --------------------------------------------------

    alter_quotas = served_by("quotas", QuotaService.alter_quotas)
    describe_quotas = served_by("quotas", QuotaService.describe_quotas)
    watch_quotas = served_by("quotas", QuotaService.watch_quotas)

    # -- the API: the Spark connector (JSON in and out; a RaylogError leaves as JavaCallError) --

    java_topics = java_call(served_by("java", JavaApi.java_topics))
    java_metadata = java_call(served_by("java", JavaApi.java_metadata))
    java_schema_registry = java_call(served_by("java", JavaApi.java_schema_registry))
    java_writer = java_call(served_by("java", JavaApi.java_writer))
    java_cold_reader = java_call(served_by("java", JavaApi.java_cold_reader))
    # The same node's cold-read gateway for Python callers (Ray Data's read_topic), whose
    # errors stay raylog's.
    cold_reader = served_by("java", JavaApi.java_cold_reader)

    # -- lifecycle -------------------------------------------------------------------------------

    async def ready(self) -> dict[str, Any]:
        """Start the reconcile loop (once) and report the controller's state. The first
        call waits for one reconcile round, so the live brokers are known when it returns."""
        await self.started()
        state = self.access.state
        return {"node_id": self.node_id, "cluster_id": state.cluster_id,
                "topics": len(state.topics), "events": state.applied,
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
        try:  # the drains a previous controller left: before any node is asked to serve
            await self.drains.restore()
        except Exception:  # the GCS unreachable: go on, as if there were none
            logger.exception("the drains of the previous controller could not be restored")
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
                "version": self.access.state.applied}

    async def _reconcile_forever(self) -> None:
        with contextlib.suppress(Exception):  # logged by started(); the loop goes on anyway
            await asyncio.shield(self._first_round)
        self.brokers.start_sessions()
        while True:
            # A round at once, then one every interval: after a restart, partitions the
            # previous controller left leaderless get their leaders now, not an interval later.
            self._reconcile()
            await asyncio.sleep(RECONCILE_INTERVAL_S)

    def _reconcile(self) -> None:
        """Start each step of a round that is not still running from an earlier round."""
        for name, step in (("members", self.groups.expire_members),
                           ("transactions", self.transactions.expire_transactions),
                           ("registration", self.brokers.register),
                           ("node drains", self.drains.follow_node_drains),
                           ("partitions", self._partition_steps),
                           ("balance", self.balancer.step),
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
        await self.moves.move_reassigned()
        await self.moves.replace_gone_brokers()
        await self.moves.rebalance_leaders()

    async def _report_metrics(self) -> None:
        """The cluster's health every round; groups' lag and rebalances every
        GROUP_METRICS_INTERVAL_S (the lag asks each partition's leader for its end)."""
        metrics = recorder()
        under, offline = partition_health(
            (p for _, p in self.access.partitions()), self.brokers.live())
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

    # -- the API: the cluster --------------------------------------------------------------------

    async def cluster_status(self) -> dict[str, Any]:
        """Brokers by id with the node serving each, its host, data directory, whether it is
        alive (and its health: alive, fenced, restarting, dead; how long since the controller
        last heard from it), whether it is drained (docs/operations.md), the replicas it
        holds and leads; partitions under-replicated and offline; the broker nodes refused,
        and why; how long the controller itself did not run (stalls not counted against
        brokers' sessions)."""
        await self.started()
        live = self.brokers.live()
        held = self.access.state.replicas_by_broker()
        brokers = []
        for broker_id in sorted(self.brokers.registry.brokers.keys() | held.keys()):
            info = self.brokers.registry.brokers.get(broker_id)
            replicas = held.get(broker_id, [])
            leading = [(t, i) for t, i in replicas
                       if self.access.state.topics[t].partitions[i].leader == broker_id]
            described = info.describe() if info is not None else {
                "broker_id": broker_id, "node_id": None, "host": None, "data_dir": None}
            watch = self.brokers.watches.get(broker_id)
            brokers.append({**described, "alive": broker_id in live,
                            "draining": broker_id in self.brokers.draining,
                            "health": watch.health.value if watch is not None else None,
                            "silent_s": self.brokers.sessions.silent_s(broker_id),
                            "replicas": replicas, "leaders": leading})
        partitions = [p for _, p in self.access.partitions()]
        under, offline = partition_health(partitions, live)
        return {"cluster_id": self.access.state.cluster_id, "controller_node": self.node_id,
                "controller_dir": str(controller_data_dir()), "brokers": brokers,
                "refused": [{"node_id": n, "reason": r}
                            for n, r in sorted(self.brokers.registry.refused.items())],
                "topics": len(self.access.state.topics), "partitions": len(partitions),
                "under_replicated_partitions": under, "offline_partitions": offline,
                "controller_stalled_s": self.brokers.sessions.stalled_s}

    @checked
    async def describe_replicas(self, name: str) -> list[dict[str, Any]]:
        """What each live broker holding a replica of topic ``name`` says of it: role, epochs,
        log start and end, high watermark, and for leaders their followers."""
        await self.started()
        topic = self.access.state.topic(name)
        brokers = sorted({b for p in topic.partitions for b in p.replicas})
        calls = [asyncio.wait_for(self.brokers.handle(b).describe.remote(name), CALL_TIMEOUT_S)
                 for b in brokers if self.brokers.handle(b) is not None]
        found = await asyncio.gather(*calls, return_exceptions=True)
        return [r for answer in found if not isinstance(answer, BaseException) for r in answer]
