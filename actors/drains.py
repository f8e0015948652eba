"""The controller's part for operations without downtime: draining a broker before it stops
(Kafka's controlled shutdown), stopping or restarting its actors, resuming it, and the
checks a rolling restart begins with.

raylog/metadata/drain.py decides (which leader goes where, what is refused); every change
is made through :meth:`BrokerManager.elect` (decided and committed under the metadata lock,
then told to the brokers). A drain waits, bounded, until the replicas took the new leaders;
a restart waits, bounded, until the broker's new process is registered. The roll itself is
the admin client's (raylog/client/operations.py): a series of these calls.

It also follows **Ray's node drains** (:meth:`Drains.follow_node_drains`, a step of the
controller's loop): a node Ray marks DRAINING (``ray start --block`` on SIGTERM, ``ray
drain-node``, an autoscaler's preemption: a reason and a deadline, seen through the GCS as Ray
Serve and Ray Train see them) has its broker drained, forced (the node goes whatever raylog
says), and stopped before the deadline; with its actors gone the node is idle, and Ray then
ends it at once rather than at the deadline.

Which brokers are drained, and the node each stopped one was on, is kept in Ray's GCS
(:class:`GcsValue`, as Ray Serve keeps its checkpoints) after every change, and restored by
a new controller before it registers any node (:meth:`Drains.restore`): a stopped broker is
not started again, a drained one does not lead again. Not in the metadata log: a drain is
about processes, over when the broker restarts, and the GCS lives exactly as long as they
do (a Ray cluster restarted restarts every broker).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from actors.broker_manager import NODES_TIMEOUT_S, BrokerManager
from actors.hosting import background
from raylog.errors import DrainTimeoutError, IllegalStateError, RequestTimeoutError
from raylog.metadata import drain
from raylog.metadata.access import MetadataAccess, Partition
from raylog.util.cluster_names import NAMESPACE

logger = logging.getLogger(__name__)

POLL_S = 0.1  # how often a restart looks whether the broker's new process is registered

_gcs: Any = None


def ray_draining_nodes() -> dict[str, int]:
    """Ray's draining nodes: node id -> deadline (ms since the epoch; 0 for none), from the
    GCS. Blocking: run it in a thread."""
    global _gcs
    if _gcs is None:
        from ray._raylet import GcsClient

        _gcs = GcsClient(address=ray.get_runtime_context().gcs_address)
    return _gcs.get_draining_nodes(timeout=NODES_TIMEOUT_S)


class GcsValue:
    """One value in the GCS's key-value store, in raylog's namespace: it outlives the
    controller's process, and lives as long as the Ray cluster. Blocking calls."""

    def __init__(self, key: str) -> None:
        self.key = key

    def get(self) -> bytes | None:
        from ray.experimental import internal_kv

        return internal_kv._internal_kv_get(self.key, namespace=NAMESPACE)

    def put(self, value: bytes) -> None:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_put(self.key, value, overwrite=True, namespace=NAMESPACE)


class MemoryValue:
    """A value in memory (tests; a controller whose drains need not outlive it)."""

    def __init__(self) -> None:
        self.value: bytes | None = None

    def get(self) -> bytes | None:
        return self.value

    def put(self, value: bytes) -> None:
        self.value = value


def names(partitions: list[Partition]) -> list[str]:
    return [drain.name_of(t, p) for t, p in partitions]


class Drains:
    """Drains, stops, restarts and resumes brokers over ``access``, through ``brokers``
    (whose ``draining`` set it fills). ``started`` waits for the controller's first round.
    Its event loop is the only user. ``stopped``: broker -> the node it was served by when
    :meth:`stop_broker` stopped it (that node is refused until :meth:`resume_broker` or
    until it leaves Ray). Both are written to ``record`` (a :class:`GcsValue`, or a
    :class:`MemoryValue`) after each change, and read back by :meth:`restore`.
    ``draining_nodes`` says which Ray nodes drain (blocking; :func:`ray_draining_nodes`, or a fake);
    ``node_drained``: (broker, node) -> the task draining and stopping it for its node's
    drain, so that each is done once."""

    def __init__(self, access: MetadataAccess, brokers: BrokerManager,
                 started: Callable[[], Awaitable[None]],
                 draining_nodes: Callable[[], dict[str, int]] = ray_draining_nodes,
                 record: GcsValue | MemoryValue | None = None) -> None:
        self.access = access
        self.record = record if record is not None else MemoryValue()
        self.brokers = brokers
        self._started = started
        self._draining_nodes = draining_nodes
        self.stopped: dict[int, str] = {}
        self.node_drained: dict[tuple[int, str], asyncio.Task] = {}

    async def restore(self) -> None:
        """Take back the drains a previous controller recorded (before the first
        registration: a stopped broker's node is not asked to serve it)."""
        data = await asyncio.to_thread(self.record.get)
        draining, stopped = drain.restored_drains(
            json.loads(data) if data else None, self.access.state.incarnations)
        self.brokers.draining |= draining
        for broker, node in stopped.items():
            self.stopped[broker] = node
            self._refuse(broker, node)
        if draining:
            logger.warning("drains restored: brokers %s drained, %s stopped",
                           sorted(draining), sorted(stopped))

    async def _save(self) -> None:
        """Write the drains to the record. A failure is logged, not raised: the drain goes
        on (only a controller restarted meanwhile would forget it)."""
        record = drain.drain_record(self.brokers.draining, self.stopped,
                                    self.access.state.incarnations)
        try:
            await asyncio.wait_for(
                asyncio.to_thread(self.record.put, json.dumps(record).encode()),
                NODES_TIMEOUT_S)
        except Exception:
            logger.exception("the drains could not be recorded in the GCS")

    def _refuse(self, broker: int, node: str) -> None:
        self.brokers.registry.refuse(
            node, f"broker {broker} was drained and stopped on this node "
                  f"('raylog cluster resume {broker}' serves it again)")

    async def drain_broker(self, broker: int, force: bool = False,
                           timeout_s: float = 60.0) -> dict[str, Any]:
        """Controlled shutdown of ``broker``, short of stopping it: every partition it leads
        is given to another live in-sync replica, the replicas are told (waiting up to
        ``timeout_s``), then it leaves every ISR it is in; until it is back as a new process
        (or resumed) it leads nothing and joins no ISR. Refused (UnknownBrokerError,
        LastInSyncReplicaError where it is a partition's last live in-sync replica, unless
        ``force``) before anything changes; DrainTimeoutError (nothing more done, the drain
        undone) if the replicas did not take the new leaders in time, unless ``force``.
        Answers the partitions whose leader moved, those it left the ISR of, and those it
        still leads (forced: no one could take them)."""
        await self._started()
        on_broker = self.access.replicas_on(broker)
        alone = drain.check_drain(on_broker, broker, self.access.state.broker_ids,
                                  self.brokers.serving(), force)
        self.brokers.draining.add(broker)
        await self._save()
        moved, told = await self.brokers.elect(
            lambda: self.access.replicas_on(broker),
            lambda _, p, live: drain.drained_leader(p, broker, live))
        try:
            await asyncio.wait_for(asyncio.shield(told), timeout_s)
        except TimeoutError:
            if not force:
                self.brokers.draining.discard(broker)
                await self._save()
                raise DrainTimeoutError(
                    f"the new leaders of broker {broker}'s {len(moved)} partitions were not "
                    f"taken by their replicas within {timeout_s:g} s; broker {broker} is not "
                    f"drained (it may lead again): try again, or force it") from None
            logger.warning("drain of broker %d: new leaders not taken within %.0f s; forced",
                           broker, timeout_s)
        left, told = await self.brokers.elect(
            lambda: self.access.replicas_on(broker),
            lambda _, p, live: drain.left_isr(p, broker))
        await self.brokers.delivered(told, f"the ISRs without broker {broker}", timeout_s)
        leading = [drain.name_of(t, p) for t, p in self.access.replicas_on(broker)
                   if p.leader == broker]
        logger.info("broker %d drained: %d leaderships moved, left %d ISRs, still leads %d",
                    broker, len(moved), len(left), len(leading))
        return {"broker": broker, "moved": names(moved), "left_isr": names(left),
                "still_leading": leading, "last_in_sync": alone}

    def _drained_watch(self, broker: int) -> Any:
        drain.check_known([broker], self.access.state.broker_ids)
        if broker not in self.brokers.draining:
            raise IllegalStateError(f"broker {broker} is not drained: drain it first")
        watch = self.brokers.watches.get(broker)
        if watch is None or not watch.alive:
            raise IllegalStateError(f"broker {broker} is not running")
        return watch

    async def stop_broker(self, broker: int) -> dict[str, Any]:
        """Stop a drained broker's actors (the broker actor and its replica hosts, its
        children) for good: its node is not given a broker actor again until it leaves Ray
        (``ray stop`` on it) or :meth:`resume_broker`. IllegalStateError unless drained and
        running."""
        await self._started()
        watch = self._drained_watch(broker)
        self._refuse(broker, watch.node_id)
        self.stopped[broker] = watch.node_id
        await self._save()  # before it stops: a new controller must not start it again
        ray.kill(watch.handle, no_restart=True)
        logger.warning("broker %d stopped after its drain (node %s)", broker, watch.node_id)
        return {"broker": broker, "node_id": watch.node_id}

    async def restart_broker(self, broker: int, timeout_s: float = 120.0) -> dict[str, Any]:
        """Restart a drained broker's process (Ray starts it again on its node; its replica
        hosts, its children, with it) and wait, up to ``timeout_s``, until the controller
        registered the new process (it is then told its replicas, and catches up as a
        follower). IllegalStateError unless drained and running; RequestTimeoutError if the
        new process did not register in time."""
        await self._started()
        watch = self._drained_watch(broker)
        old = watch.incarnation
        ray.kill(watch.handle, no_restart=False)
        deadline = time.monotonic() + timeout_s
        while True:
            current = self.brokers.watches.get(broker)
            if current is not None and current.alive and current.incarnation != old \
                    and self.access.state.incarnations.get(broker) == current.incarnation:
                return {"broker": broker, "incarnation": current.incarnation}
            if time.monotonic() > deadline:
                raise RequestTimeoutError(f"broker {broker} did not come back within "
                                          f"{timeout_s:g} s of its restart")
            await asyncio.sleep(POLL_S)

    async def resume_broker(self, broker: int) -> dict[str, Any]:
        """Undo a drain: the broker may lead and join ISRs again (its leaders rejoin it as
        it catches up; a preferred-leader election gives its leaderships back); a broker
        :meth:`stop_broker` stopped is served again by its node (if that node is still in
        Ray; else by whichever node presents its data directory)."""
        await self._started()
        drain.check_known([broker], self.access.state.broker_ids)
        self.brokers.draining.discard(broker)
        node = self.stopped.pop(broker, None)
        await self._save()
        if node is not None:
            self.brokers.registry.release(node)
        return {"broker": broker, "restarted_node": node}

    async def roll_plan(self, brokers: list[int] | None = None) -> dict[str, Any]:
        """The order of a rolling restart of ``brokers`` (default: every live broker), or
        its refusal (raylog/metadata/drain.py's roll_order), and what is not in sync now."""
        await self._started()
        live = self.brokers.live()
        partitions = self.access.partitions()
        order = drain.roll_order(brokers, self.access.state.broker_ids, live, partitions)
        return {"order": order, "not_in_sync": drain.not_in_sync(partitions, live),
                "draining": sorted(self.brokers.draining)}

    async def sync_state(self) -> dict[str, Any]:
        """What a roll waits for between steps: the live and draining brokers, and the
        partitions not fully in sync (a replica not a live member of the ISR, or no live
        leader)."""
        await self._started()
        live = self.brokers.live()
        return {"live": sorted(live), "draining": sorted(self.brokers.draining),
                "not_in_sync": drain.not_in_sync(self.access.partitions(), live)}

    # -- Ray's node drains ---------------------------------------------------------------------

    async def follow_node_drains(self) -> None:
        """One look at Ray's draining nodes (a step of the controller's loop, every second):
        each live broker served by a draining node is drained and stopped, in a task of its
        own, once."""
        await self._started()
        draining = await asyncio.wait_for(asyncio.to_thread(self._draining_nodes),
                                          NODES_TIMEOUT_S)
        for key in [k for k, task in self.node_drained.items()
                    if task.done() and k[1] not in draining]:
            del self.node_drained[key]  # that node is gone (or no longer draining)
        served = {b: w.node_id for b, w in self.brokers.watches.items() if w.alive}
        for broker, budget_s in drain.node_drains(draining, served, self.node_drained,
                                                   int(time.time() * 1000)):
            node = served[broker]
            logger.warning("Ray drains node %s (deadline %d): draining broker %d within "
                           "%.0f s, then stopping it", node, draining[node], broker, budget_s)
            self.node_drained[broker, node] = background(
                self._drain_for_node(broker, node, budget_s))

    async def _drain_for_node(self, broker: int, node: str, budget_s: float) -> None:
        """Drain ``broker``, forced (its node goes whatever it holds), its two waits (the new
        leaders taken, the ISRs without it taken) each within half of ``budget_s``; then
        stop it, if it is still served by ``node``."""
        try:
            drained = await self.drain_broker(broker, force=True, timeout_s=budget_s / 2)
            if drained["last_in_sync"]:
                logger.error("broker %d was the last in-sync replica of %s: offline while "
                             "its node is away", broker, drain.named(drained["last_in_sync"]))
            watch = self.brokers.watches.get(broker)
            if watch is not None and watch.alive and watch.node_id == node:
                await self.stop_broker(broker)
        except Exception:  # one broker's trouble must not stop the others' drains
            logger.exception("the drain of broker %d for its node's drain failed", broker)
