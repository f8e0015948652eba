"""Serving replicas from one process: :class:`ReplicaHost`, the part the broker actor and
its replica hosts share (actors/broker.py). A process hosts replicas, which it opens in
the role the controller says, and serves to producers (:meth:`~ReplicaHost.produce`), the
transaction coordinator's markers (:meth:`~ReplicaHost.write_txn_marker`) and consumers
(:meth:`~ReplicaHost.fetch`, :meth:`~ReplicaHost.list_offset`,
:meth:`~ReplicaHost.read_kafka_table`) where it leads, to consumers where it follows (reads
from the nearest replica, below its high watermark), to other brokers' fetchers
(:meth:`~ReplicaHost.replica_fetch`, :meth:`~ReplicaHost.epoch_end_offsets`) where it
leads, while its own fetchers (actors/fetcher.py) copy those it follows.

Every request carries the leader epoch the caller knows. A process that finds its event
loop made no progress for long enough that the controller may have fenced it (stopped,
stuck on a disk, paused: raylog/metadata/sessions.py) serves no leader or consumer request
until its state is confirmed (the broker's by the controller, a host's by its broker:
:meth:`ReplicaHost._confirm`), and answers no request whose processing spanned such a stall.

A process holds many replicas, so a replica costs a directory, a few open files and some
memory, not a Ray worker process (about 0.4% of a core idle and 60 MB each:
benchmarks/density.py). A process's replicas run on its one event loop, one call at a time
between awaits; their slow storage work (compaction passes, ``flush.ms`` flushes,
deleting the segments retention took) runs on the process's background thread
(actors/background.py), planned and finished on the loop.
"""


from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib.abc
import json
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray

from actors import at, log_what_matters
from actors.background import StorageWorker
from actors.data_socket import DataSocket
from actors.fetcher import ReplicaFetcher
from actors.host_quotas import HostQuotas
from actors.hosting import (
    METADATA_FILE,
    SEQUENCE_WAIT_S,
    HostedReplica,
    partition_dir_owner,
    remove_partition_dir,
    wait_any,
)
from actors.payload_checks import AppendTurns, PayloadChecks
from actors.tiered import TieredHost
from raylog.errors import (
    BrokerStalledError,
    InvalidArgumentError,
    InvalidConfigError,
    NotLeaderError,
    RaylogError,
    StorageError,
)
from raylog.metadata.sessions import StallGuard, stall_threshold_s
from raylog.metadata.settings import DEFAULT_SESSION_TIMEOUT_MS
from raylog.quotas.enforcer import Throttled
from raylog.quotas.enforcer import unwrap as unwrap_throttled
from raylog.quotas.entity import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE
from raylog.records.header import batch_view, iter_headers
from raylog.records.kafka_columns import analytics_block, ipc_bytes, kafka_table, spark_table
from raylog.replica.fetch_stream import STREAM_LIFETIME_S, ends_stream, next_reads
from raylog.replica.isr import NO_BROKER_EPOCH
from raylog.replica.lock_waits import waits_out
from raylog.replica.partition import (
    EARLIEST,
    LATEST,
    READ_UNCOMMITTED,
    AlterIsr,
    FetchResult,
    LeaderAndIsr,
    Partition,
    Role,
    Transition,
)
from raylog.replica.producer_state import SequenceGap
from raylog.replica.throttle import ByteRate
from raylog.storage import AppendInfo
from raylog.util.arguments import settings_from_environ
from raylog.util.cluster_names import (
    CONTROLLER_NAME,
    NAMESPACE,
)
from raylog.util.interop import error_json, java_call
from raylog.util.metrics import recorder

logger = logging.getLogger(__name__)

MAINTENANCE_INTERVAL_S = 1.0
IDLE_MAINTENANCE_ENV = "RAYLOG_IDLE_MAINTENANCE_S"
DEFAULT_IDLE_MAINTENANCE_S = 30.0
HW_CHECKPOINT_INTERVAL_S = 5.0
MAX_CONCURRENCY = 10_000  # long polls: consumers' and followers' fetches, watches
TICK_S = 0.25             # the stall guard's ticker: the event loop's progress, when idle
CONFIRM_TIMEOUT_S = 150.0  # the controller confirming (it tells this broker its state first)
CONFIRM_RETRY_S = 0.5      # after the controller could not confirm yet


def forgo_pandas() -> None:
    """Make ``import pandas`` fail in this process, unless it is imported already.

    pyarrow imports pandas, if it can, the first time anything is converted to or from Arrow
    (to ask whether it is a Series): some 30 MB, for nothing: a broker never builds or
    returns pandas objects. pandas is an optional dependency of pyarrow, which works without
    it. Only broker processes do this (a Ray actor has its process to itself).
    """
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import finder that refuses pandas (and its submodules)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"a broker process does not import {name}", name=name)


TopicPartition = tuple[str, int]


def idle_maintenance_s(environ: Mapping[str, str] = os.environ) -> float:
    """How often a process with nothing to do looks at every replica it hosts anyway (time-based
    retention and flushes, and what became due after its last write: a compaction, the
    deletion of retired segments): ``$RAYLOG_IDLE_MAINTENANCE_S`` of its node, default 30 s.
    InvalidConfigError for a value that is not a positive number of seconds."""
    must_be = "a number of seconds > 0"
    found = settings_from_environ(environ, {"s": (IDLE_MAINTENANCE_ENV, float, must_be)})
    value = found.get("s", DEFAULT_IDLE_MAINTENANCE_S)
    if not math.isfinite(value) or value <= 0:
        raise InvalidConfigError(f"{IDLE_MAINTENANCE_ENV} must be {must_be}, got {value!r}")
    return value


class ReplicaHost:
    """Serves replicas from one process: the replicas this process hosts, the fetchers of
    those it follows, its stall guard and its maintenance. The broker actor is one
    (host 0 of its node); a :class:`~actors.broker.ReplicaHostActor` is another, started
    by the broker (actors/replica_hosts.py). A subclass says who confirms its state after a stall
    (:meth:`_ask_confirmation`) and may refuse requests for more reasons (:meth:`_check`).

    Not thread-safe and need not be: an async actor runs its calls on one event loop."""

    def __init__(self) -> None:
        forgo_pandas()
        log_what_matters()
        self.node_id = ray.get_runtime_context().get_node_id()
        # A new value every time this process starts (Ray restarts it after a crash): the
        # controller (or the broker, for its hosts) sees it lost its in-memory state.
        self.incarnation = uuid.uuid4().hex[:16]
        self.directory: Path | None = None
        self.broker_id: int | None = None  # set by the controller's first apply
        # This broker's broker epoch, from the controller (who records every start of a
        # broker's process): it goes with every fetch, so a leader tells this process from
        # an earlier one of the same broker (KIP-903). Unknown until the controller says.
        self.broker_epoch = NO_BROKER_EPOCH
        self.replicas: dict[TopicPartition, HostedReplica] = {}
        self.failed: dict[TopicPartition, str] = {}  # replicas that could not open
        # Consumers' fetch streams running here (fetch_stream), by their client id.
        self.open_streams: collections.Counter[str | None] = collections.Counter()
        # By (leader broker id, the leader's host: None for its broker actor, else the
        # host actor's id): a leader broker's replicas may live on several hosts.
        self.fetchers: dict[tuple[int, str | None], ReplicaFetcher] = {}
        self.brokers: dict[int, ray.actor.ActorHandle] = {}  # live brokers, from the controller
        # The byte budgets of the moving replicas it copies, by rate (actors/fetcher.py).
        self.throttles: dict[int, ByteRate] = {}
        # The controller's metadata version of each word it sends: calls can arrive out of
        # order, and an older word never undoes a newer one (a stale full push must not
        # remove a replica added since, nor configs go back).
        self.version = -1          # the newest seen
        self._gone: dict[TopicPartition, int] = {}  # replicas stopped, at that version
        self._controller: ray.actor.ActorHandle | None = None
        self._status = asyncio.Event()
        self._wake_maintenance = asyncio.Event()
        self._idle_maintenance_s = idle_maintenance_s()
        # Its own stalls (the controller tells the session timeout with its health checks).
        self.guard = StallGuard(stall_threshold_s(DEFAULT_SESSION_TIMEOUT_MS / 1000),
                                on_stall=self._stalled)
        self._confirming: asyncio.Task | None = None
        # An async actor's __init__ runs on its event loop: maintenance starts with every
        # incarnation, including the ones Ray restarts without the controller asking.
        self._storage = StorageWorker()  # compaction, flushes, deletions: off this loop
        # Large produce batches' payload checks, on threads, appended in call order.
        self._checks, self._turns = PayloadChecks(), AppendTurns()
        # Producers' calls and consumers' fetch streams over TCP, beside Ray's
        # (actors/data_socket.py).
        self.data_socket = DataSocket(self.produce_batches, self.fetch_stream)
        self._listening = asyncio.get_event_loop().create_task(
            self.data_socket.start(ray.util.get_node_ip_address()))
        # Tiered replicas' uploads, remote reads and remote-log metadata (actors/tiered.py).
        self.tiered = TieredHost(lambda: self.broker_id, self._controller_handle,
                                 self._tiered_job_done)
        self._maintenance = asyncio.get_event_loop().create_task(self._maintain())
        self._ticker = asyncio.get_event_loop().create_task(self._tick())
        # client quotas (actors/host_quotas.py), following the controller's from now on
        self.client_quotas = HostQuotas()
        self.client_quotas.start(self._controller_handle, self._controller_lost)

    def _check(self) -> int:
        """Before serving a leader or consumer request: the stall guard's check."""
        return self.guard.check()

    # -- its own stalls ------------------------------------------------------------------------

    async def _tick(self) -> None:
        """Keep the stall guard's view of the event loop fresh while no request comes."""
        while True:
            await asyncio.sleep(TICK_S)
            self.guard.observe()

    def _stalled(self) -> None:
        """The event loop did not run for long enough that the controller may have fenced
        this broker: from now on it serves nothing until its state is confirmed."""
        logger.warning("broker %s stalled for %.1f s: serving nothing until its state is "
                       "confirmed", self.broker_id, self.guard.last_stall_s)
        if self._confirming is None or self._confirming.done():
            self._confirming = asyncio.get_running_loop().create_task(self._confirm())

    async def _confirm(self) -> None:
        """Ask until this process's state is confirmed after its latest stall."""
        while not self.guard.serving:
            generation = self.guard.generation
            if self.broker_id is None:  # told nothing yet: it serves nothing anyway
                self.guard.confirmed(generation)
                break
            try:
                confirmed = await asyncio.wait_for(self._ask_confirmation(), CONFIRM_TIMEOUT_S)
            except Exception as e:  # unreachable, restarting, slow: ask again
                if isinstance(e, ray.exceptions.RayActorError):
                    self._controller = None  # created again: look it up anew
                logger.info("broker %s: its state is not confirmed yet: %r", self.broker_id, e)
                await asyncio.sleep(CONFIRM_RETRY_S)
                continue
            if confirmed:
                self.guard.confirmed(generation)
                if self.guard.serving:
                    logger.info("broker %s: state confirmed, serving again", self.broker_id)
            else:
                await asyncio.sleep(CONFIRM_RETRY_S)

    async def _ask_confirmation(self) -> bool:
        """Whether this process's state is confirmed after a stall (a subclass asks)."""
        raise NotImplementedError

    # -- what the controller says (through the broker) ----------------------------------------

    def _take(self, states: list[dict[str, Any]], brokers: dict[int, ray.actor.ActorHandle],
              full: bool, version: int, assigned: dict[TopicPartition, str] | None
              ) -> dict[str, Any]:
        """Hold the replicas ``states`` describe (opening those not open yet) in the role
        each says. ``brokers``: the live brokers' actors, for following leaders. With
        ``full``, ``assigned`` is every replica of this broker (its topic id): any other
        this process holds is stopped and its files removed. ``version``: the controller's
        metadata version when it sent this; anything older than what this process has seen
        is not allowed to undo it. Answers per replica its state, or the error."""
        newest = version >= self.version
        self.version = max(self.version, version)
        self.brokers = dict(brokers) if full and newest else {**self.brokers, **brokers}
        for (leader, host), fetcher in self.fetchers.items():  # a broker created again
            if host is None and leader in self.brokers:
                fetcher.handle = self.brokers[leader]
        answers = {}
        for state in states:
            tp = (state["topic"], state["partition"])
            if self._gone.get(tp, -1) > version:
                continue  # stopped by a newer word than this one
            try:
                answers[f"{tp[0]}-{tp[1]}"] = self._apply_one(tp, state, version)
            except (RaylogError, OSError) as e:
                answer = {"error": repr(e)}
                if waits_out(e):  # the broker tries again once that process is gone
                    logger.warning("the replica waits for its directory: %s", e, **at(*tp))
                    answer["locked"] = True
                else:
                    logger.exception("the replica could not be served", **at(*tp))
                self.failed[tp] = repr(e)
                self._status.set()
                answers[f"{tp[0]}-{tp[1]}"] = answer
        if full and newest and assigned is not None:
            self._remove_strays(assigned, version)
        return answers

    def _apply_one(self, tp: TopicPartition, state: dict[str, Any],
                   version: int) -> dict[str, Any]:
        hosted = self.replicas.get(tp)
        if hosted is not None and hosted.topic_id != state["topic_id"]:
            self._stop(tp, delete=False)  # a new topic of that name: the old one is gone
            hosted = None
        if hosted is None:
            hosted = HostedReplica.open(self.directory, tp[0], tp[1], state["topic_id"],
                                        self.broker_id, state["configs"])
            self.replicas[tp] = hosted
            self.failed.pop(tp, None)
        partition = hosted.partition
        try:
            if version >= hosted.version:
                hosted.version = version
                hosted.update_configs(state["configs"])
                hosted.throttled_rate = state.get("throttled_rate")  # while it moves
            transition = partition.apply(LeaderAndIsr.from_dict(state))
            self._react(tp, hosted, transition)
        finally:
            # Whatever happened, the fetchers copy exactly what this replica follows now.
            self._fetch_as_told(tp, partition)
        return {"role": partition.role.value, "leader_epoch": partition.leader_epoch,
                "log_end_offset": partition.log_end_offset,
                "high_watermark": partition.high_watermark}

    def _react(self, tp: TopicPartition, hosted: HostedReplica, transition: Transition) -> None:
        """After the controller spoke: log a change of role and wake the replica's waiters
        (an acks=all append of a former leader fails)."""
        partition = hosted.partition
        if transition not in (Transition.STALE, Transition.UNCHANGED, Transition.UPDATED):
            logger.info("%s: %s at leader epoch %d (leader %s, ISR %s)", hosted.name,
                        transition.value, partition.leader_epoch, partition.leader_id,
                        list(partition.isr))
        if transition is not Transition.UNCHANGED:
            hosted.notify()

    def _fetch_as_told(self, tp: TopicPartition, partition: Any) -> None:
        """Follow ``tp`` from its leader's broker at its leader epoch, and from no other.
        Idempotent: a partition already followed at that epoch goes on where it is (from
        the leader's broker actor, or from the leader's host it was sent to); one whose
        leader's broker is not known yet starts when a later apply brings its handle."""
        wanted = partition.leader_id if partition.role is Role.FOLLOWER else None
        followed = False
        for (leader, _), fetcher in self.fetchers.items():
            following = fetcher.partitions.get(tp)
            if following is not None and (leader != wanted or
                                          following.leader_epoch != partition.leader_epoch):
                fetcher.forget(tp)
            elif following is not None:
                followed = True
        if wanted is None or followed:
            return
        handle = self.brokers.get(wanted)
        if handle is None:
            logger.info("leader broker %s is not reachable yet", wanted, **at(*tp))
            return
        fetcher = self.fetchers.get((wanted, None))
        if fetcher is None:
            fetcher = self.fetchers[wanted, None] = ReplicaFetcher(self, wanted, handle)
        fetcher.follow(tp, partition.leader_epoch, handle)

    def throttle(self, rate: int) -> ByteRate:
        """The byte budget that the moving replicas copied at ``rate`` bytes a second
        share: one per rate in this process."""
        budget = self.throttles.get(rate)
        if budget is None:
            budget = self.throttles[rate] = ByteRate(rate)
        return budget

    def redirect(self, tp: TopicPartition, following: Any, leader: int,
                 host: ray.actor.ActorHandle | None) -> None:
        """The leader's broker says another process of its node serves ``tp`` (``host``),
        or its host no longer does (None: ask the broker again): copy it from there, going
        on where it was."""
        for fetcher in self.fetchers.values():
            fetcher.forget(tp)
        key = (leader, None if host is None else host._actor_id.hex())
        handle = host if host is not None else self.brokers.get(leader)
        if handle is None:
            return  # the leader's broker is not known now: the controller's next word says
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = self.fetchers[key] = ReplicaFetcher(self, leader, handle, key[1])
        fetcher.adopt(tp, following)

    async def stop_replicas(self, replicas: list[tuple[str, int]], delete: bool = False,
                            version: int = 0) -> None:
        """Stop serving these replicas; with ``delete``, remove their files (the topic was
        deleted, or the replica moved to another broker). ``version`` as for apply."""
        self.version = max(self.version, version)
        for topic, partition in replicas:
            hosted = self.replicas.get((topic, partition))
            if hosted is not None and hosted.version > version:
                continue  # re-created by a newer word
            self._gone[(topic, partition)] = version
            try:
                self._stop((topic, partition), delete)
            except OSError:  # one replica's files must not keep the others
                logger.exception("stopping the replica failed", **at(topic, partition))

    def _stop(self, tp: TopicPartition, delete: bool) -> None:
        for fetcher in self.fetchers.values():
            fetcher.forget(tp)
        hosted = self.replicas.pop(tp, None)
        self.failed.pop(tp, None)
        directory = self.directory / f"{tp[0]}-{tp[1]}"
        if hosted is not None:
            hosted.stop()
            try:
                if delete:
                    hosted.partition.log.delete()
                else:
                    hosted.partition.close()
            finally:
                hosted.release()
        if delete:
            remove_partition_dir(directory)
            logger.info("removed %s", directory)

    def _remove_strays(self, assigned: dict[TopicPartition, str], version: int) -> None:
        """Remove replicas this process holds but the broker is not assigned (any more)."""
        for tp in [tp for tp, h in self.replicas.items()
                   if assigned.get(tp) != h.topic_id and h.version <= version]:
            self._gone[tp] = version
            try:
                self._stop(tp, delete=True)
            except OSError:
                logger.exception("removing the replica failed", **at(*tp))

    def _remove_stray_dirs(self, assigned: dict[TopicPartition, str]) -> None:
        """Remove the partition directories of the broker's data directory that are not
        assigned to it (the broker only: its hosts' replicas are all assigned)."""
        for marker in self.directory.glob(f"*/{METADATA_FILE}"):
            directory = marker.parent
            name, _, number = directory.name.rpartition("-")
            if not number.isdigit() or (name, int(number)) in self.replicas:
                continue
            try:
                owner = partition_dir_owner(directory)
            except StorageError:
                continue  # never guess whose data it is
            if assigned.get((name, int(number))) != owner:
                logger.warning("%s is not assigned to broker %s: removing it", directory,
                               self.broker_id)
                remove_partition_dir(directory)

    async def update_configs(self, topic: str, configs: dict[str, Any],
                             version: int = 0) -> None:
        """New configs of ``topic`` (``version`` as for apply: an older word is ignored)."""
        self.version = max(self.version, version)
        for (name, _), hosted in self.replicas.items():
            if name == topic and version >= hosted.version:
                hosted.version = version
                hosted.update_configs(configs)
        self._wake_maintenance.set()

    async def describe(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Every replica this broker holds (of ``topic``), as its Partition describes it,
        with its remote log if its topic is tiered."""
        return [{**h.partition.describe(), **self.tiered.describe(h.topic_id, h.partition),
                 "broker_id": self.broker_id, "node_id": self.node_id}
                for (name, _), h in sorted(self.replicas.items())
                if topic is None or name == topic]

    async def close(self) -> None:
        """Close every replica cleanly (producer snapshots, clean-shutdown markers)."""
        self.client_quotas.stop()
        for tp in list(self.replicas):
            self._stop(tp, delete=False)
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.tiered.close()
        self._checks.close()
        self.data_socket.close()

    # -- producers and consumers ---------------------------------------------------------------

    def _hosted(self, topic: str, partition: int) -> HostedReplica:
        """The replica a leader or consumer request is for (BrokerStalledError while this
        broker waits for the controller to confirm it after a stall)."""
        self._check()
        hosted = self.replicas.get((topic, partition))
        if hosted is None:
            raise NotLeaderError(f"broker {self.broker_id} holds no replica of "
                                 f"{topic}-{partition}")
        return hosted

    async def produce(self, topic: str, partition: int, leader_epoch: int,
                      batch: bytes | pa.Buffer, acks: int | str = 1, timeout_ms: int = 30_000,
                      client_id: str | None = None) -> AppendInfo | Throttled:
        """Append a producer's batch to a partition this broker leads (see
        HostedReplica.produce). ``client_id``: the producer's, whose quota the answer may be
        held back by (actors/host_quotas.py; then it comes as Throttled). ``batch``: bytes,
        or a buffer (a large batch comes as a view of Ray's object store, read in place)."""
        started = time.monotonic()
        batch = batch_view(batch)
        await self._turns.wait_for_earlier()  # appends after the calls started before it
        hosted = self._hosted(topic, partition)  # checks the stall guard
        since = self.guard.generation
        info = await hosted.produce(batch, acks, leader_epoch, timeout_ms / 1000)
        self._produced(topic, batch, info, started, since)
        throttled = await self.client_quotas.hold(PRODUCER_BYTE_RATE, client_id, len(batch),
                                                  time.monotonic() - started)
        return Throttled(info, throttled) if throttled else info

    async def socket_address(self) -> tuple[str, int, bytes]:
        """Where this process's data socket listens, and the token a connection's hello
        carries: producers' calls and consumers' streams go there once they know
        (raylog/client/host_socket.py). Given over Ray only, which authenticates its
        callers."""
        await asyncio.shield(self._listening)
        return (*self.data_socket.address(), self.data_socket.token)

    def _produced(self, topic: str, batch: pa.Buffer, info: AppendInfo, started: float,
                  since: int) -> AppendInfo:
        """An append answered: BrokerStalledError if this process stalled since the guard's
        generation ``since`` (it may have been fenced meanwhile), else counted."""
        self.guard.check_since(since)
        metrics = recorder()
        metrics.observe("raylog_produce_latency_ms", (time.monotonic() - started) * 1000,
                        topic=topic)
        metrics.inc("raylog_bytes_in", len(batch), topic=topic)
        metrics.inc("raylog_records_in", info.record_count, topic=topic)
        return info

    async def write_txn_marker(self, topic: str, partition: int, producer_id: int,
                               producer_epoch: int, commit: bool, coordinator_epoch: int,
                               leader_epoch: int, timeout_ms: int = 30_000
                               ) -> AppendInfo | None:
        """A transaction coordinator's commit (or abort) marker of ``producer_id``'s
        transaction, appended to a partition this broker leads and answered once the ISR
        has it (see HostedReplica.write_marker; None: it was there already)."""
        hosted = self._hosted(topic, partition)  # checks the stall guard
        since = self.guard.generation
        info = await hosted.write_marker(producer_id, producer_epoch, commit,
                                         coordinator_epoch, leader_epoch, timeout_ms / 1000)
        self.guard.check_since(since)  # stalled meanwhile: it may have been fenced
        return info

    async def produce_batches(self, batches: list[tuple[str, int, int, bytes | pa.Buffer]],
                              acks: int | str = 1, timeout_ms: int = 30_000,
                              client_id: str | None = None
                              ) -> list[AppendInfo | RaylogError] | Throttled:
        """Several partitions' batches, ``(topic, partition, leader_epoch, batch)`` each, in
        one call (Kafka's produce request: the producer sends a host every ready batch of
        the partitions it serves together; the Kafka listener merges its acks=1 appends):
        each appended and answered as :meth:`produce` would, with its own AppendInfo or the
        RaylogError it raised, in order, so one partition's refusal (not the leader, a
        sequence error, a fenced epoch) fails no other. ``client_id``: the producer's, whose
        quota the whole call is charged to (then the list comes as Throttled).

        Order: every batch is appended before the call first waits, in the call's order,
        so a call's batches reach their logs in order and before those of any call that
        starts after it. Only a batch ahead of its producer's sequence waits for its
        append (for the batches before it, HostedReplica.append), and the batches of its
        partition after it in the call wait behind it; the other partitions' do not. The
        waits for the in-sync replicas (acks=all) run together, not one after another.
        Large batches are checked on threads first (actors/payload_checks.py); a call that
        waits for that, or behind one that does, appends in its turn, so the order above
        holds."""
        started = time.monotonic()
        items = [(topic, partition, leader_epoch, batch_view(data))
                 for topic, partition, leader_epoch, data in batches]
        datas = [item[3] for item in items]
        checks = self._checks.start(datas)
        if checks is None and not self._turns.busy():
            answers, later = self._append_all(items, acks, timeout_ms, started, None)
        else:
            async with self._turns.turn():
                checked = await self._checks.outcomes(checks, len(items))
                answers, later = self._append_all(items, acks, timeout_ms, started, checked)
        if later:
            for place, answer in zip(later, await asyncio.gather(*later.values()),
                                     strict=True):
                answers[place] = answer
        size = sum(map(len, datas))
        throttled = await self.client_quotas.hold(PRODUCER_BYTE_RATE, client_id, size,
                                                  time.monotonic() - started)
        return Throttled(answers, throttled) if throttled else answers

    def _append_all(self, items: list[tuple[str, int, int, pa.Buffer]], acks: int | str,
                    timeout_ms: int, started: float,
                    checked: list[pa.Table | Exception | None] | None
                    ) -> tuple[list[Any], dict[int, Any]]:
        """produce_batches' appends, in order, without yielding: the answers known at once,
        and for each place whose answer waits (acks=all, a sequence gap, a batch behind
        one) the coroutine that gives it."""
        answers: list[Any] = []
        later: dict[int, Any] = {}  # the place of each batch whose answer waits: its wait
        held: dict[TopicPartition, asyncio.Future] = {}  # a partition's batch not yet appended
        for i, item in enumerate(items):
            topic, partition, _, data = item
            check = None if checked is None else checked[i]
            before = held.get((topic, partition))
            begun = None
            if before is None:
                try:
                    begun = self._begin_append(item, acks, check)
                    if isinstance(begun[2], AppendInfo) and acks not in ("all", -1):
                        answers.append(self._produced(topic, data, begun[2], started,
                                                      begun[1]))
                        continue
                except RaylogError as e:
                    answers.append(e)
                    continue
            appended = None
            if before is not None or isinstance(begun[2], SequenceGap):
                appended = held[(topic, partition)] = asyncio.get_running_loop().create_future()
            later[len(answers)] = self._finish_append(item, acks, timeout_ms / 1000, started,
                                                      begun, before, appended, check)
            answers.append(None)
        return answers, later

    def _begin_append(self, item: tuple[str, int, int, pa.Buffer], acks: int | str,
                      checked: pa.Table | Exception | None = None
                      ) -> tuple[HostedReplica, int, AppendInfo | SequenceGap]:
        """Try a batch of produce_batches' at once: its replica, the stall guard's
        generation before it, and where it landed (or the gap that holds it back)."""
        topic, partition, leader_epoch, data = item
        hosted = self._hosted(topic, partition)  # checks the stall guard
        return hosted, self.guard.generation, hosted.append_now(data, acks, leader_epoch,
                                                                checked)

    async def _finish_append(self, item: tuple[str, int, int, pa.Buffer], acks: int | str,
                             timeout_s: float, started: float,
                             begun: tuple[HostedReplica, int, AppendInfo | SequenceGap] | None,
                             before: asyncio.Future | None,
                             appended: asyncio.Future | None,
                             checked: pa.Table | Exception | None = None
                             ) -> AppendInfo | RaylogError:
        """The rest of a batch of produce_batches' whose answer waits: its append, begun
        (``begun``) or after the batch ``before`` it of its partition in the call was
        appended or failed; the wait for the in-sync replicas (acks=all). Sets ``appended``
        once its own append is done or failed (the next batch of its partition waits on
        it)."""
        topic, _, leader_epoch, data = item
        try:
            try:
                if before is not None:
                    await before
                    begun = self._begin_append(item, acks, checked)
                hosted, since, first = begun
                # One wait for a gap per call: the batches of a partition behind one that
                # waited in vain fail at once (were each to wait its own SEQUENCE_WAIT_S,
                # after the one before it, the call's other answers would wait for all).
                info = await hosted.append(data, acks, leader_epoch, first,
                                           started + SEQUENCE_WAIT_S, checked)
            finally:
                if appended is not None:
                    appended.set_result(None)
            if acks in ("all", -1):
                await hosted.committed(info.last_offset, timeout_s)
            return self._produced(topic, data, info, started, since)
        except RaylogError as e:
            return e

    async def fetch(self, topic: str, partition: int, leader_epoch: int, offset: int,
                    max_bytes: int = 8 << 20, max_wait_ms: int = 0, min_bytes: int = 1,
                    isolation: str = READ_UNCOMMITTED,
                    client_id: str | None = None) -> FetchResult | Throttled:
        """Batches from ``offset`` below the high watermark (``read_committed``: below the
        last stable offset, with the aborted transactions; Partition.fetch); waits up to
        ``max_wait_ms`` for at least ``min_bytes`` to be there. ``client_id``: the
        consumer's, whose quota the answer may be held back by (actors/host_quotas.py; then
        it comes as Throttled)."""
        started = time.monotonic()
        hosted = self._hosted(topic, partition)  # checks the stall guard
        since = self.guard.generation
        remote = await self.tiered.fetch(hosted.topic_id, hosted.partition, leader_epoch,
                                         offset, max_bytes, isolation)
        if remote is not None:  # below the local log start of a tiered log
            self.guard.check_since(since)
            _count_out(topic, remote.data)
            return remote
        result = hosted.partition.fetch(offset, max_bytes, leader_epoch, isolation)
        took = time.monotonic() - started  # the request's time here, its waits not counted
        deadline = started + max_wait_ms / 1000
        while len(result.data) < min_bytes:
            if not await hosted.wait(deadline - time.monotonic()):
                break
            hosted = self._hosted(topic, partition)
            again = time.monotonic()
            result = hosted.partition.fetch(offset, max_bytes, leader_epoch, isolation)
            took += time.monotonic() - again
        self.guard.check_since(since)
        recorder().observe("raylog_fetch_latency_ms", (time.monotonic() - started) * 1000,
                           topic=topic)
        _count_out(topic, result.data)
        if client_id is not None:
            throttled = await self.client_quotas.hold(CONSUMER_BYTE_RATE, client_id,
                                                      len(result.data), took)
            if throttled:
                return Throttled(result, throttled)
        return result

    async def fetch_many(self, reads: list[tuple[str, int, int, int, int]],
                         max_bytes: int = 50 << 20, max_wait_ms: int = 0, min_bytes: int = 1,
                         isolation: str = READ_UNCOMMITTED, client_id: str | None = None
                         ) -> list[FetchResult | RaylogError | None] | Throttled:
        """Kafka's fetch: several partitions this process serves in one call, each read as
        :meth:`fetch` reads one. ``reads``: ``(topic, partition, leader epoch, offset, most
        bytes for it)`` each (Kafka's max.partition.fetch.bytes); ``max_bytes`` bounds the
        whole answer (fetch.max.bytes), each partition's read being at least one whole batch
        as :meth:`fetch`'s is. Answers per read, in order: its FetchResult, the RaylogError
        it met (one partition's error fails none of the others), or None when it was not
        read: the answer's bytes were spent on the reads before it (the caller rotates
        their order, as Kafka's consumer does, so that none starves).

        Parks up to ``max_wait_ms`` until the answer holds ``min_bytes``, woken by an append
        to (or any other change of) any of the partitions; a partition's error, or a read
        of a tiered log below its local start, answers at once. ``client_id`` as for
        :meth:`fetch`: the whole answer's bytes count against the consumer's quota."""
        started = time.monotonic()
        try:
            since = self._check()
        except BrokerStalledError as e:  # per partition, as the consumer reads them
            return [e] * len(reads)
        deadline = started + max_wait_ms / 1000
        took = 0.0  # the request's time here, its waits not counted
        while True:
            began = time.monotonic()
            answers, hosts, ready = await self._read_many(reads, max_bytes, isolation)
            took += time.monotonic() - began
            size = sum(len(a.data) for a in answers if isinstance(a, FetchResult))
            if ready or size >= min_bytes or not hosts or \
                    not await wait_any(hosts, deadline - time.monotonic()):
                break
        try:
            self._check()  # (a host's lease may have lapsed meanwhile)
            self.guard.check_since(since)
        except BrokerStalledError as e:
            return [e] * len(reads)
        latency_ms = (time.monotonic() - started) * 1000
        metrics = recorder()
        for topic in {read[0] for read in reads}:
            metrics.observe("raylog_fetch_latency_ms", latency_ms, topic=topic)
        for read, answer in zip(reads, answers, strict=True):
            if isinstance(answer, FetchResult) and answer.data:
                _count_out(read[0], answer.data)
        if client_id is not None:
            throttled = await self.client_quotas.hold(CONSUMER_BYTE_RATE, client_id, size, took)
            if throttled:
                return Throttled(answers, throttled)
        return answers

    async def fetch_stream(self, reads: list[tuple[str, int, int, int, int]],
                           max_bytes: int = 50 << 20, max_wait_ms: int = 500,
                           min_bytes: int = 1, isolation: str = READ_UNCOMMITTED,
                           client_id: str | None = None):
        """:meth:`fetch_many` again and again in one streaming call (a Ray generator): each
        answer is yielded as soon as the fetch gives it, and the next fetch reads each
        partition from where its answer's batches ended (raylog/replica/fetch_stream.py).
        Ends after an answer holding an error or held back by the quota, and after
        STREAM_LIFETIME_S; the consumer's backpressure (answers not taken yet) pauses it."""
        if max_wait_ms <= 0:
            raise InvalidArgumentError("a fetch stream parks each fetch: max_wait_ms must "
                                       "be > 0")
        ends = time.monotonic() + STREAM_LIFETIME_S
        self.open_streams[client_id] += 1
        recorder().set("raylog_open_fetch_streams", self.open_streams.total())
        try:
            while True:
                answer = await self.fetch_many(reads, max_bytes, max_wait_ms, min_bytes,
                                               isolation, client_id)
                yield answer
                answers, throttled = unwrap_throttled(answer)
                if throttled or ends_stream(answers) or time.monotonic() >= ends:
                    return
                reads = next_reads(reads, answers)
        finally:
            self.open_streams[client_id] -= 1
            recorder().set("raylog_open_fetch_streams", self.open_streams.total())

    async def _read_many(self, reads: list[tuple[str, int, int, int, int]], max_bytes: int,
                         isolation: str
                         ) -> tuple[list[FetchResult | RaylogError | None],
                                    list[HostedReplica], bool]:
        """One pass of :meth:`fetch_many` over its reads: the answers, the replicas to wait
        on, and whether to answer now (a partition failed, or was read from the store)."""
        answers: list[FetchResult | RaylogError | None] = [None] * len(reads)
        hosts: list[HostedReplica] = []
        budget, ready = max_bytes, False
        for i, (topic, partition, leader_epoch, offset, most) in enumerate(reads):
            hosted = self.replicas.get((topic, partition))
            if hosted is None:
                answers[i], ready = NotLeaderError(f"broker {self.broker_id} holds no replica "
                                                   f"of {topic}-{partition}"), True
                continue
            hosts.append(hosted)
            if budget <= 0:
                continue  # not read: None
            try:
                result = await self.tiered.fetch(hosted.topic_id, hosted.partition,
                                                 leader_epoch, offset, min(most, budget),
                                                 isolation)
                if result is not None:  # below a tiered log's local start: no wait
                    ready = True
                else:
                    result = hosted.partition.fetch(offset, min(most, budget), leader_epoch,
                                                    isolation)
            except RaylogError as e:
                answers[i], ready = e, True
                continue
            answers[i] = result
            budget -= len(result.data)
        return answers, hosts, ready

    async def delete_records(self, topic: str, partition: int, leader_epoch: int,
                             offset: int) -> int:
        return self._hosted(topic, partition).partition.delete_records(offset, leader_epoch)

    async def list_offset(self, topic: str, partition: int, leader_epoch: int,
                          spec: str | int) -> tuple[int, int] | None:
        """As Partition.list_offset; the earliest offset of a tiered log is its remote
        log's start (consumers see one log; RemoteStorageUnavailableError, retriable, while
        this process has not loaded the remote log's metadata)."""
        hosted = self._hosted(topic, partition)
        found = hosted.partition.list_offset(spec, leader_epoch)
        if spec == EARLIEST:
            self.tiered.check_loaded(hosted.partition)
            return self.tiered.remote_start(hosted.topic_id, hosted.partition), -1
        return found

    async def tiered_view(self, topic: str, partition: int) -> dict[str, Any]:
        """What a reader of a tiered partition without brokers needs (the analytics path):
        ``{"remote": [RemoteSegment.to_json() bytes, ...]`` (readable, sorted by base
        offset; empty when the topic is not tiered), ``"log_start"`` (the whole log's),
        ``"local_log_start"``, ``"high_watermark"``, ``"store": {"uri", "settings"}}``.
        Any replica answers (a follower's view may lag its leader's); for a tiered topic,
        RemoteStorageUnavailableError (retriable) while its remote log is not loaded."""
        hosted = self._hosted(topic, partition)
        p = hosted.partition
        self.tiered.check_loaded(p)
        remote = self.tiered.readable(hosted.topic_id, partition) \
            if p.log.config.remote_storage_enable else []
        return {"remote": [s.to_json() for s in remote],
                "log_start": self.tiered.remote_start(hosted.topic_id, p),
                "local_log_start": p.log.log_start_offset,
                "high_watermark": p.high_watermark,
                "store": await self.tiered.store_settings()}

    async def read_kafka_table(self, topic: str, partition: int, leader_epoch: int,
                               start: int, end: int, max_wait_ms: int = 10_000,
                               isolation: str = READ_UNCOMMITTED, block: bool = False
                               ) -> pa.Table | bytes:
        """Records [start, end) with the columns of Spark's Kafka source (KAFKA_SCHEMA). A
        follower whose high watermark is still short of ``end`` (the range was planned from
        the leader's) waits for it, up to ``max_wait_ms``. ``read_committed``: without the
        aborted transactions' records (Partition.read_table). Of a tiered partition, offsets
        below the local log start come from the object store (TieredHost.read_below).

        ``block``: answered as the analytics readers take it (a Ray Data block, a Spark
        worker's range), an Arrow IPC stream in ``bytes`` when small
        (raylog.records.kafka_columns.analytics_block: a small table's answer carries bytes
        of this process's freed memory, which holds its signed S3 requests, the access key
        and the session token, when it uploads to a tiered store)."""
        p = await self._reading(topic, partition, leader_epoch, start, end, max_wait_ms,
                                isolation)
        if isinstance(p, ray.actor.ActorHandle):
            return await p.read_kafka_table.remote(topic, partition, leader_epoch, start, end, 0,
                                                   isolation, block)
        p, remote = p
        table = kafka_table(p.read_table(start, end, leader_epoch, isolation, remote), topic,
                            partition)
        metrics = recorder()
        metrics.inc("raylog_bytes_out", table.nbytes, topic=topic)
        metrics.inc("raylog_records_out", table.num_rows, topic=topic)
        return analytics_block(table) if block else table

    async def _reading(self, topic: str, partition: int, leader_epoch: int, start: int,
                       end: int, max_wait_ms: int, isolation: str) -> Any:
        """The partition to read a range [start, end) from, with what the object store holds
        of it below a tiered replica's local log start (TieredHost.read_below; None if
        nothing), or the leader's broker to ask instead. The caller reads the local part
        before it awaits anything (the local log start it was read up to still holds).

        A replica whose high watermark is short of ``end`` waits for it up to
        ``max_wait_ms``: a follower (it may lag up to replica.lag.time.max.ms), or a new
        leader that has those records but does not know yet that they are committed (the
        range was planned from the old leader's high watermark, KIP-207; past the wait, the
        read fails with the retriable OffsetNotAvailableError). A follower still short of
        ``end``, or out of sync, hands the range to its leader, from whose high watermark it
        was planned. A caller never sees the detour."""
        hosted = self._hosted(topic, partition)  # checks the stall guard
        since = self.guard.generation
        deadline = time.monotonic() + max_wait_ms / 1000
        while hosted.partition.awaits_high_watermark(end):
            if not await hosted.wait(deadline - time.monotonic()):
                break
            hosted = self._hosted(topic, partition)
        self.guard.check_since(since)  # the read that follows does not wait
        p = hosted.partition
        if p.role is Role.FOLLOWER and (p.high_watermark < end or p.replica_id not in p.isr) \
                and p.leader_epoch == leader_epoch and p.leader_id in self.brokers:
            return self.brokers[p.leader_id]
        remote = await self.tiered.read_below(hosted.topic_id, p, leader_epoch, start, end,
                                              isolation)
        if remote is not None:
            self.guard.check_since(since)
            if self.replicas.get((topic, partition)) is not hosted:
                raise NotLeaderError(f"{p.name} left broker {self.broker_id} while read")
        return p, remote

    # -- the Java connector (raylog/util/interop.py: JSON and Arrow IPC in and out) ----------------

    @java_call
    async def java_offsets(self, requests: str) -> str:
        """Offsets of partitions this broker leads, for Spark's planning: ``requests`` is a
        JSON list of ``[topic, partition, leader epoch (-1: any), timestamp or null]``; the
        answer a JSON list of ``{"log_start", "high_watermark", "timestamp_offset"}`` (the
        first offset at or after the timestamp, null if none, and the log's size in bytes,
        which sizes Spark's tasks, and ``last_stable``: the end of a read_committed read) or
        ``{"error": ...}`` each."""
        answers = []
        for topic, partition, epoch, timestamp in json.loads(requests):
            try:
                p = self._hosted(topic, partition).partition
                epoch = None if epoch < 0 else epoch
                start, _ = p.list_offset(EARLIEST, epoch)
                high, _ = p.list_offset(LATEST, epoch)
                found = None if timestamp is None else p.list_offset(int(timestamp), epoch)
                answers.append({"log_start": start, "high_watermark": high,
                                "timestamp_offset": None if found is None else found[0],
                                "size_bytes": p.log.size_bytes,
                                "last_stable": p.last_stable_offset})
            except RaylogError as e:
                answers.append({"error": error_json(e)})
        return json.dumps(answers)

    @java_call
    async def java_read(self, topic: str, partition: int, span: list[int], columns: str,
                        isolation: str = READ_UNCOMMITTED) -> bytes:
        """Records [start, end) as an Arrow IPC stream in Spark's layout, holding only
        ``columns`` (comma-separated names of Spark's Kafka source columns), where ``span``
        is ``[leader epoch, start, end]`` (a Java call takes at most five arguments): a Spark
        task's columnar reader builds its ColumnarBatches straight from it.
        ``read_committed``: without aborted transactions' records (Partition.read_table)."""
        leader_epoch, start, end = (int(v) for v in span)
        names = [c for c in columns.split(",") if c]
        p = await self._reading(topic, partition, leader_epoch, start, end, 10_000, isolation)
        if isinstance(p, ray.actor.ActorHandle):
            return await p.java_read.remote(topic, partition, span, columns, isolation)
        p, remote = p
        try:
            table = spark_table(p.read_table(start, end, leader_epoch, isolation, remote),
                                topic, partition, names)
        except ValueError as e:
            raise InvalidArgumentError(str(e)) from e
        data = ipc_bytes(table)
        metrics = recorder()
        metrics.inc("raylog_bytes_out", len(data), topic=topic)
        metrics.inc("raylog_records_out", table.num_rows, topic=topic)
        return data

    @java_call
    async def java_read_batches(self, topic: str, partition: int, span: list[int],
                                isolation: str = READ_UNCOMMITTED) -> bytes:
        """The stored batches holding records [start, end) of a partition, as they are on
        disk, where ``span`` is ``[leader epoch, start, end]``: a Spark task's reader checks
        their CRCs and decodes them itself (io.raylog.spark.BatchDecoder), so the broker only
        reads the file and the bytes cross compressed. ``read_committed``: without aborted
        transactions' batches (Partition.read_batches)."""
        leader_epoch, start, end = (int(v) for v in span)
        p = await self._reading(topic, partition, leader_epoch, start, end, 10_000, isolation)
        if isinstance(p, ray.actor.ActorHandle):
            return await p.java_read_batches.remote(topic, partition, span, isolation)
        p, remote = p
        data = p.read_batches(start, end, leader_epoch, isolation, remote)
        _count_out(topic, data)
        return data

    # -- other brokers' fetchers -----------------------------------------------------------------

    async def replica_fetch(self, follower: int, requests: list[tuple[Any, ...]],
                            max_bytes: int, partition_max_bytes: int, max_wait_ms: int,
                            follower_epoch: int = NO_BROKER_EPOCH) -> list[dict[str, Any]]:
        """A follower broker, in its process at broker epoch ``follower_epoch``, fetches
        ``(topic, partition, leader epoch, its log end, its high watermark)`` for each
        partition it follows from this broker, with a sixth element, the most bytes to
        answer for it, when it copies a moving replica within its throttle. Each fetch
        counts for the ISR and the high watermark; the answer holds batches from that log
        end (up to this log's end) and this high watermark, or the error. Waits up to
        ``max_wait_ms`` while there is neither data nor a high watermark the follower
        lacks."""
        try:
            since = self._check()
        except BrokerStalledError as e:  # per partition, as the follower's fetcher reads them
            return [_error_answer(e, self.replicas.get((t, p))) for t, p, *_ in requests]
        answers: list[dict[str, Any] | None] = [None] * len(requests)
        serving = []
        for i, (topic, partition, epoch, offset, known_hw, *limit) in enumerate(requests):
            hosted = self.replicas.get((topic, partition))
            try:
                if hosted is None:
                    raise NotLeaderError(f"broker {self.broker_id} holds no replica of "
                                         f"{topic}-{partition}")
                before = hosted.partition.high_watermark
                hosted.partition.follower_fetched(follower, epoch, offset, follower_epoch)
                hosted.maybe_propose_isr(self._propose_isr)
                if hosted.partition.high_watermark != before:
                    hosted.notify()  # acks=all appends and consumers waiting for it
                # (a moving replica's follower may ask for less: its throttle's allowance)
                serving.append((i, hosted, epoch, offset, known_hw,
                                min(limit[0], partition_max_bytes) if limit
                                else partition_max_bytes))
            except RaylogError as e:
                answers[i] = _error_answer(e, hosted)
        deadline = time.monotonic() + max_wait_ms / 1000
        failed_early = any(a is not None for a in answers)
        while True:
            budget, ready = max_bytes, failed_early
            for i, hosted, epoch, offset, known_hw, most in serving:
                partition = hosted.partition
                try:
                    partition.check_leader(epoch)
                    if budget > 0:
                        result = partition.read_for_follower(offset, min(most, budget))
                        data = result.data
                    else:  # the request's bytes are spent: the positions only, no read
                        data = b""
                except RaylogError as e:
                    answers[i] = _error_answer(e, hosted)
                    ready = True
                    continue
                budget -= len(data)
                log = partition.log
                answers[i] = {"data": data, "high_watermark": log.high_watermark,
                              "log_start_offset": log.log_start_offset,
                              "log_end_offset": log.log_end_offset, "error": None}
                ready = ready or bool(data) or log.high_watermark > known_hw
            if ready or not await wait_any([s[1] for s in serving],
                                           deadline - time.monotonic()):
                try:
                    self.guard.check_since(since)
                except BrokerStalledError as e:
                    return [_error_answer(e, self.replicas.get((t, p)))
                            for t, p, *_ in requests]
                return answers

    async def epoch_end_offsets(self, requests: list[tuple[str, int, int, int]]
                                ) -> list[tuple[int, int] | RaylogError]:
        """For a follower's truncation, per ``(topic, partition, leader epoch, epoch)``: where
        ``epoch`` ended in this leader's log (Kafka's OffsetForLeaderEpoch), or the error."""
        out: list[tuple[int, int] | RaylogError] = []
        for topic, partition, leader_epoch, epoch in requests:
            try:
                out.append(tuple(self._hosted(topic, partition).partition.end_offset_for_epoch(
                    leader_epoch, epoch)))
            except RaylogError as e:
                out.append(e)
        return out

    # -- the ISR, maintenance --------------------------------------------------------------------

    def _controller_lost(self) -> None:
        self._controller = None

    def _controller_handle(self) -> ray.actor.ActorHandle:
        if self._controller is None:
            self._controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        return self._controller

    async def _propose_isr(self, request: AlterIsr) -> dict[str, Any]:
        """Ask the controller for an ISR change (HostedReplica puts the deadline on it)."""
        try:
            return await self._controller_handle().alter_partition.remote(
                request.topic, request.partition, request.leader, request.leader_epoch,
                request.partition_epoch, list(request.isr), request.broker_epochs)
        except ray.exceptions.RayActorError:
            self._controller = None  # killed for good and created again: look it up anew
            raise

    async def _maintain(self) -> None:
        """Flush by time, enforce retention, compact (the three handed to the background
        thread), checkpoint high watermarks and let leaders shrink their ISR. Replicas with
        nothing to do are skipped; an idle broker wakes every ``$RAYLOG_IDLE_MAINTENANCE_S``
        (:func:`idle_maintenance_s`: time-based retention, and what became due since)."""
        last_full = time.monotonic()
        while True:
            busy = any(h.active or h.partition.log.time_work_pending()
                       for h in self.replicas.values())
            if busy:
                await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            else:
                self._wake_maintenance.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake_maintenance.wait(),
                                           self._idle_maintenance_s)
            full = time.monotonic() - last_full >= self._idle_maintenance_s
            if full:
                last_full = time.monotonic()
            for hosted in list(self.replicas.values()):
                if full or hosted.active or hosted.partition.log.time_work_pending():
                    try:
                        self._upkeep(hosted)
                    except Exception:  # one replica's failure must not stop the others'
                        logger.exception("maintenance of %s failed", hosted.name)
                await asyncio.sleep(0)  # let requests in between replicas

    def _upkeep(self, hosted: HostedReplica) -> None:
        partition = hosted.partition
        log = partition.log
        hosted.active = hosted.behind()
        self._storage.flush(log)
        if partition.enforce_retention(self.tiered.copied_below(hosted.topic_id, partition)):
            hosted.notify()
        self.tiered.upkeep(hosted.topic_id, partition)
        self._storage.delete_retired(log)
        if log.config.compact and partition.role is not Role.OFFLINE:
            self._storage.compact(log, log.high_watermark)
        if time.monotonic() - hosted.last_hw_checkpoint >= HW_CHECKPOINT_INTERVAL_S:
            log.checkpoint_high_watermark()
            hosted.last_hw_checkpoint = time.monotonic()
        hosted.maybe_propose_isr(self._propose_isr)


    def _tiered_job_done(self, tp: TopicPartition) -> tuple[str, Partition] | None:
        """A tiered job of ``tp`` ended: its replica's maintenance looks again now (local
        retention may delete what was copied). The replica's topic id and partition, for
        its next job, while it is hosted here."""
        hosted = self.replicas.get(tp)
        if hosted is None:
            return None
        hosted.active = True
        self._wake_maintenance.set()
        return hosted.topic_id, hosted.partition


def _count_out(topic: str, data: bytes) -> None:
    """Bytes and records of the stored batches a reader is sent (whole batches: a read from
    the middle of one still carries all of it)."""
    metrics = recorder()
    metrics.inc("raylog_bytes_out", len(data), topic=topic)
    if data:
        try:
            records = sum(h.record_count for _, h in iter_headers(data, verify=False))
        except RaylogError:  # the reader is told of a damaged batch; nothing to count
            return
        metrics.inc("raylog_records_out", records, topic=topic)


def _error_answer(error: RaylogError, hosted: HostedReplica | None) -> dict[str, Any]:
    log = hosted.partition.log if hosted is not None else None
    return {"data": b"", "error": error,
            "high_watermark": log.high_watermark if log else -1,
            "log_start_offset": log.log_start_offset if log else -1,
            "log_end_offset": log.log_end_offset if log else -1}

