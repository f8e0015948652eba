"""The broker actor, one per broker node, and the replica hosts it starts: the processes of
a node that serve its broker's partition replicas (as a Kafka broker's process does). Both
serve through :class:`~actors.serving.ReplicaHost` (actors/serving.py).

- :class:`BrokerActor` takes the node's data directory (``$RAYLOG_DATA_DIR``, or a free slot
  under ``~/.raylog/brokers``) under an advisory lock for as long as it lives, tells the
  controller which broker identity the directory holds, writes a new identity when the
  controller adopts the directory, and takes the controller's word on its replicas
  (:meth:`BrokerActor.apply`). It serves some of them itself (host 0) and places the
  others on the replica hosts it starts (actors/replica_hosts.py): the node's
  ``RAYLOG_BROKER_PROCESSES`` processes, and one per replica of a dedicated topic. A
  request that reaches it for a replica a host serves is passed on. A replica that could
  not open because another process of the broker (one being replaced, still exiting) holds
  its directory is opened again, with backoff, once that process is gone
  (raylog/replica/lock_waits.py).
- :class:`ReplicaHostActor` is such a host: told its replicas by its broker only, serving
  while its broker renews its lease.
"""


from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.hosting import background
from actors.replica_hosts import HostSet
from actors.serving import CONFIRM_TIMEOUT_S, MAX_CONCURRENCY, ReplicaHost, TopicPartition
from raylog.errors import (
    ActorUnavailableError,
    BrokerRestartedError,
    BrokerStalledError,
    InternalError,
    NotLeaderError,
    RaylogError,
    UnsupportedFormatVersionError,
)
from raylog.metadata.hosts import HostLease, configured_processes
from raylog.metadata.identity import (
    BrokerIdentity,
    IdentityError,
    claim_data_dir,
    read_identity,
    write_identity,
)
from raylog.metadata.sessions import stall_threshold_s
from raylog.quotas.enforcer import Throttled
from raylog.quotas.enforcer import unwrap as unwrap_throttled
from raylog.replica.isr import NO_BROKER_EPOCH
from raylog.replica.lock_waits import LockWaits
from raylog.replica.partition import READ_UNCOMMITTED, FetchResult
from raylog.storage import AppendInfo
from raylog.util.cluster_names import (
    ACTOR_RUNTIME_ENV,
    configured_data_dir,
    default_broker_root,
)
from raylog.util.interop import JavaCallError

logger = logging.getLogger(__name__)


@ray.remote(num_cpus=0, max_concurrency=MAX_CONCURRENCY)
class BrokerActor(ReplicaHost):
    """(It calls ReplicaHost's methods by name, never through ``super()``: Ray's actor class
    is not the class the methods were defined in, once Ray restarted the process.)

    One node's broker: its data directory (locked), its identity, the controller's one
    counterpart (identify, adopt, watch, apply, confirm), and host 0 of its replicas; the
    node's other replica hosts are its children (actors/replica_hosts.py), and a request
    for a replica one of them serves is passed on to it (clients call the host directly:
    the controller's metadata names it)."""

    def __init__(self, node_id: str) -> None:
        ReplicaHost.__init__(self)
        self.host = ray.util.get_node_ip_address()
        self.error: str | None = None
        processes = 1
        if self.node_id != node_id:
            self.error = f"broker actor for {node_id} placed on {self.node_id}"
        else:
            try:
                processes = configured_processes()
                self.directory, self._lock = claim_data_dir(configured_data_dir(),
                                                            default_broker_root())
            except (IdentityError, OSError, RaylogError) as e:
                self.error = str(e)
        self.hosts = HostSet(self, processes, self._start_host)
        # Replicas whose directory another process of this broker still holds: opened
        # again, with backoff, once it is free (raylog/replica/lock_waits.py).
        self.lock_waits = LockWaits()

    def _start_host(self, name: str) -> ray.actor.ActorHandle:
        """A replica host on this node, as this actor's child (it dies with this process),
        restarted by Ray when its process dies."""
        return ReplicaHostActor.options(
            max_restarts=-1, max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_id, soft=False),
            runtime_env=ACTOR_RUNTIME_ENV,
        ).remote(ray.get_runtime_context().current_actor, name, str(self.directory),
                 self.incarnation, self.guard.threshold_s)

    # -- identity ----------------------------------------------------------------------------

    def identify(self) -> dict[str, Any]:
        """Where this node runs, its data directory and the identity that holds (or the
        error that keeps it from serving), and this process's incarnation."""
        answer: dict[str, Any] = {"node_id": self.node_id, "host": self.host,
                                  "data_dir": str(self.directory), "error": self.error,
                                  "identity": None, "incarnation": self.incarnation,
                                  "pid": os.getpid()}
        if self.error is None:
            try:
                identity = read_identity(self.directory)
            except (IdentityError, UnsupportedFormatVersionError) as e:
                answer["error"] = str(e)  # not served: the controller reports it
                return answer
            if identity is not None:
                answer["identity"] = [identity.broker_id, identity.cluster_id]
        return answer

    def adopt(self, broker_id: int, cluster_id: str) -> None:
        """Write the identity of a new broker into a directory that has none."""
        existing = read_identity(self.directory)
        wanted = BrokerIdentity(broker_id, cluster_id)
        if existing is not None and existing != wanted:
            raise IdentityError(f"{self.directory} already holds {existing}")
        if existing is None:
            write_identity(self.directory, wanted)
            logger.info("%s is broker %d of cluster %s", self.directory, broker_id, cluster_id)

    async def watch(self, incarnation: str | None, timeout_s: float,
                    session_timeout_ms: float | None = None) -> dict[str, Any]:
        """The controller's health check: answers at once if the controller knows another
        incarnation (this process restarted), else after ``timeout_s`` or when a replica
        failed (or a replica host went down). Its failing is how the controller learns this
        broker is gone; its answers renew this broker's session. ``session_timeout_ms``: the
        cluster's broker session timeout, from which this broker tells a stall that may
        have got it fenced."""
        if session_timeout_ms is not None:
            self.guard.threshold_s = stall_threshold_s(session_timeout_ms / 1000)
        if incarnation == self.incarnation:
            self._status.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._status.wait(), timeout_s)
        return {"incarnation": self.incarnation, "broker_id": self.broker_id,
                "replicas": self.hosts.count(), "failed": dict(self.failed), "pid": os.getpid(),
                "serving": self.guard.serving}

    async def _ask_confirmation(self) -> bool:
        """Ask the controller to confirm this broker's state after its latest stall. (It
        brings the broker up if it had fenced it, telling it its replicas' states first:
        those another broker leads now are followers, and truncate.)"""
        try:
            answer = await self._controller_handle().confirm_broker.remote(
                self.broker_id, self.incarnation)
        except ray.exceptions.RayActorError:
            self._controller = None  # created again: look it up anew
            raise
        return bool(answer["confirmed"])

    def confirm_host(self, name: str, incarnation: str) -> bool:
        """A replica host asks after a stall of its own whether it may serve: while this
        broker knows it up as that incarnation, and serves itself."""
        return self.hosts.confirm(name, incarnation) and self.guard.serving

    # -- what the controller says ----------------------------------------------------------------

    async def apply(self, broker_id: int, cluster_id: str, states: list[dict[str, Any]],
                    brokers: dict[int, ray.actor.ActorHandle], full: bool = False,
                    version: int = 0, broker_epoch: int = NO_BROKER_EPOCH,
                    incarnation: str | None = None) -> dict[str, Any]:
        """Hold the replicas ``states`` describe (opening those not open yet) in the role
        each says, each on the host that serves it. ``brokers``: the live brokers' actors,
        for following leaders. With ``full``, ``states`` are every replica of this broker:
        others are stopped and their files removed (topics deleted or moved away while it
        was down). ``version``: the controller's metadata version when it sent this;
        anything older than what this broker has seen is not allowed to undo it.
        ``incarnation``: the process the controller addresses; a word meant for an earlier
        one (this process replaced it before the controller noticed) is refused with
        BrokerRestartedError, as Kafka's brokers refuse a LeaderAndIsr of another broker
        epoch: it was decided while the earlier process led, and would make this one lead
        at an epoch it does not own (its hosts, children of this process, take words from
        it only). ``broker_epoch``: the one the controller recorded for that incarnation (it
        grows with every start of the broker's process); followers send it with their
        fetches. Answers per replica its state (and the host serving it, if not this
        process), or the error."""
        if incarnation is not None and incarnation != self.incarnation:
            raise BrokerRestartedError(
                f"a word for incarnation {incarnation} of broker {broker_id}; this process is "
                f"{self.incarnation}")
        if self.error is not None:
            raise IdentityError(self.error)
        identity = read_identity(self.directory)
        if identity != BrokerIdentity(broker_id, cluster_id):
            raise IdentityError(f"{self.directory} holds {identity}, not broker {broker_id} of "
                                f"cluster {cluster_id}: refusing to serve it as that broker")
        self.broker_id = broker_id
        if incarnation == self.incarnation and broker_epoch > self.broker_epoch:
            self.broker_epoch = broker_epoch
        newest = version >= self.version
        states = [s for s in states
                  if self._gone.get((s["topic"], s["partition"]), -1) <= version]
        assigned = {(s["topic"], s["partition"]): s["topic_id"] for s in states} \
            if full else None
        routed, moves = self.hosts.route(states, version)
        for key, tp in moves:  # stopped where they were before they open elsewhere
            await self._stop_on(key, [tp], False, version)
        if full:
            for key in self.hosts.handles:
                routed.setdefault(key, [])
        own = routed.pop(0, [])
        answers = self._take(own, brokers, full, version, assigned)
        self.settle_locks(own, answers, version)
        told = [self.hosts.take(key, group, brokers, full, version, assigned)
                for key, group in routed.items()]
        for answer in await asyncio.gather(*told):
            answers.update(answer)
        if full and newest:
            for tp in [tp for tp in self.hosts.placed() if tp not in assigned]:
                self.hosts.release(tp, version)
            self.lock_waits.keep_only(assigned)
            self._remove_stray_dirs(assigned)
        return answers

    def settle_locks(self, states: list[dict[str, Any]], answers: dict[str, Any],
                     version: int) -> None:
        """After an attempt to hold the replicas ``states`` describe (told at ``version``),
        on whichever process: those whose directory another process of this broker holds
        wait, and are tried again in the background (:meth:`_open_when_free`); the others'
        waits end. A replica this broker no longer holds (stopped, moved away while the
        attempt was under way) does not wait."""
        for state in states:
            tp = (state["topic"], state["partition"])
            answer = answers.get(f"{tp[0]}-{tp[1]}")
            if self._gone.get(tp, -1) > version or self.hosts.placement.host_of(tp) is None:
                answer = None
            if self.lock_waits.answered(tp, state, version, answer):
                background(self._open_when_free(tp))

    async def _open_when_free(self, tp: TopicPartition) -> None:
        """Try ``tp`` again, with backoff, on the process it is placed on, as the newest word
        on it says (with this broker's incarnation and broker epoch as they are now), until
        it opens, fails otherwise, or is no longer this broker's to hold. An attempt while
        its host is down is skipped: the host opens it when back (actors/replica_hosts.py)."""
        waits = self.lock_waits
        while (wait_s := waits.next_wait_s(tp)) is not None:
            await asyncio.sleep(wait_s)
            kept = waits.get(tp)
            if kept is None:
                return
            if not kept.retried_by(self.broker_id):
                continue  # its next word, which comes, is tried when it comes
            key = self.hosts.key_of(tp)
            name = f"{tp[0]}-{tp[1]}"
            if key == 0:
                answers = self._take([kept.state], self.brokers, False, kept.version, None)
                self.settle_locks([kept.state], answers, kept.version)
            elif key in self.hosts.handles and key not in self.hosts.down:
                answers = await self.hosts.take(key, [kept.state], self.brokers, False,
                                                kept.version, None)  # settles them too
            else:
                continue
            answer = answers.get(name) or {}
            if tp not in waits and "error" not in answer and answer:
                logger.info("broker %s opened %s once the process holding it was gone "
                            "(attempt %d)", self.broker_id, name, kept.attempts)
                self._status.set()  # the controller hears at once that it serves

    async def _stop_on(self, key: Any, replicas: list[TopicPartition], delete: bool,
                       version: int) -> None:
        if key == 0:
            await ReplicaHost.stop_replicas(self, replicas, delete, version)
            return
        handle = self.hosts.handles.get(key)
        if handle is None:
            return
        try:
            await asyncio.wait_for(handle.stop_replicas.remote(replicas, delete, version),
                                   CONFIRM_TIMEOUT_S)
        except Exception as e:  # it is down: it holds nothing then, and strays go later
            logger.warning("replica host %s did not stop %s: %r", key, replicas, e)

    async def stop_replicas(self, replicas: list[tuple[str, int]], delete: bool = False,
                            version: int = 0) -> None:
        """Stop serving these replicas; with ``delete``, remove their files (the topic was
        deleted, or the replica moved to another broker). ``version`` as for apply."""
        tps = [tuple(r) for r in replicas]
        for key, indexes in self.hosts.group(tps).items():
            await self._stop_on(key, [tps[i] for i in indexes], delete, version)
        for tp in tps:
            self._gone[tp] = max(self._gone.get(tp, -1), version)
            self.failed.pop(tp, None)
            self.lock_waits.forget(tp)
            self.hosts.release(tp, version)

    async def update_configs(self, topic: str, configs: dict[str, Any],
                             version: int = 0) -> None:
        await ReplicaHost.update_configs(self, topic, configs, version)
        self.lock_waits.update_configs(topic, configs, version)  # opened with them
        keys = {self.hosts.key_of(tp) for tp in self.hosts.states if tp[0] == topic} - {0}
        await asyncio.gather(*(self.hosts.handles[k].update_configs.remote(
            topic, configs, version) for k in keys if k in self.hosts.handles),
            return_exceptions=True)

    async def describe(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Every replica this broker holds (of ``topic``), on whichever host serves it."""
        described = await ReplicaHost.describe(self, topic)
        others = await asyncio.gather(*(h.describe.remote(topic)
                                        for h in self.hosts.handles.values()),
                                      return_exceptions=True)
        for answer in others:
            if isinstance(answer, list):
                described.extend({**d, "node_id": self.node_id} for d in answer)
        return sorted(described, key=lambda d: (d["topic"], d["partition"]))

    async def close(self) -> None:
        self.lock_waits.clear()  # a closing broker opens nothing more
        await self.hosts.close()
        await ReplicaHost.close(self)

    # -- requests for replicas another host serves -------------------------------------------

    async def produce(self, topic: str, partition: int, leader_epoch: int,
                      batch: bytes | pa.Buffer, acks: int | str = 1, timeout_ms: int = 30_000,
                      client_id: str | None = None) -> AppendInfo | Throttled:
        host = self.hosts.elsewhere((topic, partition))
        if host is None:
            return await ReplicaHost.produce(self, topic, partition, leader_epoch, batch,
                                             acks, timeout_ms, client_id)
        try:
            return await _forward(host.produce.remote(topic, partition, leader_epoch, batch,
                                                      acks, timeout_ms, client_id))
        except RayActorError as e:  # its outcome unknown, as produce_batches answers it
            raise _host_failure(e) from e

    async def write_txn_marker(self, topic: str, partition: int, producer_id: int,
                               producer_epoch: int, commit: bool, coordinator_epoch: int,
                               leader_epoch: int, timeout_ms: int = 30_000
                               ) -> AppendInfo | None:
        host = self.hosts.elsewhere((topic, partition))
        if host is None:
            return await ReplicaHost.write_txn_marker(
                self, topic, partition, producer_id, producer_epoch, commit, coordinator_epoch,
                leader_epoch, timeout_ms)
        return await _forward(host.write_txn_marker.remote(
            topic, partition, producer_id, producer_epoch, commit, coordinator_epoch,
            leader_epoch, timeout_ms))

    async def produce_batches(self, batches: list[tuple[str, int, int, bytes | pa.Buffer]],
                              acks: int | str = 1, timeout_ms: int = 30_000,
                              client_id: str | None = None
                              ) -> list[AppendInfo | RaylogError] | Throttled:
        """As ReplicaHost.produce_batches; the batches for replicas another host of this
        node serves are passed on to it, one call per host carrying its batches in the
        call's order, sent before this host appends its own (a partition's batches all go
        to the one host serving it, so each keeps its order). A host that fails answers its
        own batches alone; the answer is held back as long as the longest of the hosts'
        throttles."""
        mine: list[int] = []
        theirs: dict[Any, tuple[Any, list[int]]] = {}  # by host: (its handle, the places)
        for place, item in enumerate(batches):
            host = self.hosts.elsewhere((item[0], item[1]))
            if host is None:
                mine.append(place)
            else:
                theirs.setdefault(host, (host, []))[1].append(place)
        passed = [(places, host.produce_batches.remote([batches[p] for p in places], acks,
                                                       timeout_ms, client_id))
                  for host, places in theirs.values()]
        answers: list[Any] = [None] * len(batches)
        throttled = 0
        if mine:
            own, throttled = unwrap_throttled(await ReplicaHost.produce_batches(
                self, [batches[p] for p in mine], acks, timeout_ms, client_id))
            for place, answer in zip(mine, own, strict=True):
                answers[place] = answer
        for places, call in passed:
            try:
                their, held = unwrap_throttled(await _forward(call))
                throttled = max(throttled, held)
            except (RaylogError, RayError) as e:  # that host's failure answers its batches alone
                their = [_host_failure(e)] * len(places)
            for place, answer in zip(places, their, strict=True):
                answers[place] = answer
        return Throttled(answers, throttled) if throttled else answers

    async def fetch(self, topic: str, partition: int, leader_epoch: int, offset: int,
                    max_bytes: int = 8 << 20, max_wait_ms: int = 0, min_bytes: int = 1,
                    isolation: str = READ_UNCOMMITTED,
                    client_id: str | None = None) -> FetchResult | Throttled:
        host = self.hosts.elsewhere((topic, partition))
        if host is None:
            return await ReplicaHost.fetch(self, topic, partition, leader_epoch, offset,
                                           max_bytes, max_wait_ms, min_bytes, isolation,
                                           client_id)
        return await _forward(host.fetch.remote(topic, partition, leader_epoch, offset,
                                                max_bytes, max_wait_ms, min_bytes, isolation,
                                                client_id))

    async def fetch_many(self, reads: list[tuple[str, int, int, int, int]],
                         max_bytes: int = 50 << 20, max_wait_ms: int = 0, min_bytes: int = 1,
                         isolation: str = READ_UNCOMMITTED, client_id: str | None = None
                         ) -> list[FetchResult | RaylogError | None] | Throttled:
        """As ReplicaHost.fetch_many; the reads of partitions other hosts serve are passed
        on to them (a client whose metadata is older than a replica's move), each host's
        share answered by it, or with the error its failure stands for. Such a call
        answers once every host has: it parks until a partition of each has data, at most
        ``max_wait_ms`` (clients call the hosts themselves, which the metadata names)."""
        groups = self.hosts.group([(r[0], r[1]) for r in reads])
        own = groups.pop(0, [])
        if not groups:
            return await ReplicaHost.fetch_many(self, reads, max_bytes, max_wait_ms,
                                                min_bytes, isolation, client_id)
        shares: list[tuple[list[int], Any]] = []
        if own:
            shares.append((own, ReplicaHost.fetch_many(
                self, [reads[i] for i in own], max_bytes, max_wait_ms, min_bytes, isolation,
                client_id)))
        for key, indexes in groups.items():
            shares.append((indexes, _forward(self.hosts.handles[key].fetch_many.remote(
                [reads[i] for i in indexes], max_bytes, max_wait_ms, min_bytes, isolation,
                client_id))))
        got = await asyncio.gather(*(call for _, call in shares), return_exceptions=True)
        answers: list[Any] = [None] * len(reads)
        throttled = 0
        for (indexes, _), share in zip(shares, got, strict=True):
            if isinstance(share, BaseException):
                share = [_host_failure(share)] * len(indexes)
            share, held = unwrap_throttled(share)
            throttled = max(throttled, held)
            for i, answer in zip(indexes, share, strict=True):
                answers[i] = answer
        return Throttled(answers, throttled) if throttled else answers

    async def delete_records(self, topic: str, partition: int, leader_epoch: int,
                             offset: int) -> int:
        host = self.hosts.elsewhere((topic, partition))
        if host is None:
            return await ReplicaHost.delete_records(self, topic, partition, leader_epoch, offset)
        return await _forward(host.delete_records.remote(topic, partition, leader_epoch,
                                                         offset))

    async def list_offset(self, topic: str, partition: int, leader_epoch: int,
                          spec: str | int) -> tuple[int, int] | None:
        host = self.hosts.elsewhere((topic, partition))
        if host is None:
            return await ReplicaHost.list_offset(self, topic, partition, leader_epoch, spec)
        return await _forward(host.list_offset.remote(topic, partition, leader_epoch, spec))

    async def tiered_view(self, topic: str, partition: int) -> dict[str, Any]:
        host = self.hosts.elsewhere((topic, partition))
        if host is None:
            return await ReplicaHost.tiered_view(self, topic, partition)
        return await _forward(host.tiered_view.remote(topic, partition))

    async def read_kafka_table(self, topic: str, partition: int, leader_epoch: int,
                               start: int, end: int, max_wait_ms: int = 10_000,
                               isolation: str = READ_UNCOMMITTED, block: bool = False
                               ) -> pa.Table | bytes:
        host = self.hosts.elsewhere((topic, partition))
        if host is None:
            return await ReplicaHost.read_kafka_table(self, topic, partition, leader_epoch,
                                                      start, end, max_wait_ms, isolation, block)
        return await _forward(host.read_kafka_table.remote(topic, partition, leader_epoch,
                                                           start, end, max_wait_ms,
                                                           isolation, block))

    async def java_offsets(self, requests: str) -> str:
        parsed = json.loads(requests)
        groups = self.hosts.group([(r[0], r[1]) for r in parsed])
        answers: list[Any] = [None] * len(parsed)
        for key, indexes in groups.items():
            part = json.dumps([parsed[i] for i in indexes])
            if key == 0:
                got = await ReplicaHost.java_offsets(self, part)
            else:
                got = await _forward(self.hosts.handles[key].java_offsets.remote(part))
            for i, answer in zip(indexes, json.loads(got), strict=True):
                answers[i] = answer
        return json.dumps(answers)

    async def java_read(self, topic: str, partition: int, span: list[int], columns: str,
                        isolation: str = READ_UNCOMMITTED) -> bytes:
        host = self.hosts.elsewhere((topic, partition))
        if host is None:
            return await ReplicaHost.java_read(self, topic, partition, span, columns, isolation)
        return await _forward(host.java_read.remote(topic, partition, span, columns, isolation))

    async def java_read_batches(self, topic: str, partition: int, span: list[int],
                                isolation: str = READ_UNCOMMITTED) -> bytes:
        host = self.hosts.elsewhere((topic, partition))
        if host is None:
            return await ReplicaHost.java_read_batches(self, topic, partition, span, isolation)
        return await _forward(host.java_read_batches.remote(topic, partition, span, isolation))

    async def replica_fetch(self, follower: int, requests: list[tuple[Any, ...]],
                            max_bytes: int, partition_max_bytes: int, max_wait_ms: int,
                            follower_epoch: int = NO_BROKER_EPOCH) -> list[dict[str, Any]]:
        """As a host's, but a partition another host serves is answered with that host's
        handle, which the follower's fetcher asks from then on (actors/fetcher.py)."""
        groups = self.hosts.group([(r[0], r[1]) for r in requests])
        own = groups.pop(0, [])
        if not groups:
            return await ReplicaHost.replica_fetch(self, follower, requests, max_bytes,
                                                   partition_max_bytes, max_wait_ms,
                                                   follower_epoch)
        answers: list[dict[str, Any] | None] = [None] * len(requests)
        for key, indexes in groups.items():
            for i in indexes:
                answers[i] = self.hosts.redirect_answer(self.hosts.handles[key])
        if own:  # no wait: the redirected partitions are answered now
            got = await ReplicaHost.replica_fetch(self, follower, [requests[i] for i in own],
                                                  max_bytes, partition_max_bytes, 0,
                                                  follower_epoch)
            for i, answer in zip(own, got, strict=True):
                answers[i] = answer
        return answers

    async def epoch_end_offsets(self, requests: list[tuple[str, int, int, int]]
                                ) -> list[tuple[int, int] | RaylogError]:
        groups = self.hosts.group([(r[0], r[1]) for r in requests])
        out: list[Any] = [None] * len(requests)
        for key, indexes in groups.items():
            part = [requests[i] for i in indexes]
            if key == 0:
                got = await ReplicaHost.epoch_end_offsets(self, part)
            else:
                try:
                    got = await self.hosts.handles[key].epoch_end_offsets.remote(part)
                except ray.exceptions.RayActorError as e:
                    got = [NotLeaderError(f"its replica host is unavailable: {e}")] * len(part)
            for i, answer in zip(indexes, got, strict=True):
                out[i] = answer
        return out


@ray.remote(num_cpus=0, max_concurrency=MAX_CONCURRENCY)
class ReplicaHostActor(ReplicaHost):
    """A process of a broker node, besides the broker actor, that serves some of the
    broker's replicas (or one replica, for a dedicated topic): started by the broker, a
    child of it, told its replicas' states by it only. It serves while its broker renews
    its lease (raylog/metadata/hosts.py) and its own stalls are confirmed by the broker."""

    def __init__(self, broker: ray.actor.ActorHandle, name: str, directory: str,
                 broker_incarnation: str, threshold_s: float) -> None:
        ReplicaHost.__init__(self)
        self.broker = broker
        self.name = name
        self.directory = Path(directory)
        self.broker_incarnation = broker_incarnation
        self.guard.threshold_s = threshold_s
        self.lease = HostLease(threshold_s)

    def _check(self) -> int:
        problem = self.lease.problem()
        if problem is not None:
            raise BrokerStalledError(f"replica host {self.name} of broker {self.broker_id} "
                                     f"serves nothing now: {problem}")
        return ReplicaHost._check(self)

    async def _ask_confirmation(self) -> bool:
        return await self.broker.confirm_host.remote(self.name, self.incarnation)

    def renew(self, broker_serving: bool, threshold_s: float) -> dict[str, Any]:
        """The broker's word that it still speaks for this host (see HostLease)."""
        self.lease.threshold_s = self.guard.threshold_s = threshold_s
        self.lease.renew(broker_serving)
        return {"incarnation": self.incarnation, "pid": os.getpid(),
                "replicas": len(self.replicas)}

    async def take(self, broker_incarnation: str, broker_id: int, broker_epoch: int,
                   states: list[dict[str, Any]], brokers: dict[int, ray.actor.ActorHandle],
                   full: bool, version: int, assigned: dict[TopicPartition, str] | None
                   ) -> dict[str, Any]:
        """The broker's :meth:`BrokerActor.apply` for the replicas this host serves."""
        if broker_incarnation != self.broker_incarnation:
            raise BrokerRestartedError(f"a word of incarnation {broker_incarnation} of broker "
                                       f"{broker_id}; this host's is {self.broker_incarnation}")
        self.broker_id = broker_id
        self.broker_epoch = max(self.broker_epoch, broker_epoch)
        return self._take(states, brokers, full, version, assigned)


def _host_failure(error: BaseException) -> RaylogError:
    """The error a replica host's failed call answers its partitions with (a bug in this
    process is raised, not answered). A host that died or could not be reached mid-call
    answers ActorUnavailableError, as a client calling it itself would see
    (remote.unwrap): its outcome is unknown, a produce call's batches may have been
    appended (the producer then never renumbers them)."""
    if isinstance(error, RaylogError):
        return error
    if isinstance(error, RayActorError):
        return ActorUnavailableError(f"a replica host is unavailable: {error}")
    if isinstance(error, RayError):
        return InternalError(f"{type(error).__name__} inside the cluster: {error}")
    raise error


async def _forward(call: Any) -> Any:
    """The answer of a request passed on to a replica host, its error as the host raised it
    (not wrapped in Ray's)."""
    try:
        return await call
    except RayTaskError as e:
        cause: BaseException = e
        while isinstance(cause, RayTaskError) and cause.cause is not None:
            cause = cause.cause
        if isinstance(cause, RaylogError | JavaCallError):
            raise cause from None
        raise
