"""A follower broker's fetcher for one leader broker (Kafka's ReplicaFetcherThread).

Each broker runs one :class:`ReplicaFetcher` per broker it follows partitions of: one task
that copies, for every such partition, what the leader has and it lacks, in one request per
round however many partitions there are. A partition it is given first truncates what the
leader does not have (asking the leader where its epochs ended: KIP-101, KIP-279), then
fetches from its log end; each answer brings the leader's high watermark and log start.

A replica that moves to this broker (the controller gives it a ``throttled_rate`` while its
partition is being reassigned) copies within a byte budget of that rate, shared by the moving
replicas of this process (raylog/replica/throttle.py, docs/balancing.md): it asks the leader
for no more than the budget holds, and waits while it is spent; once in the ISR it copies
freely.

Errors per partition are the leader's word that the follower's view is off: a fenced or
unknown leader epoch, or "not the leader", mean the controller is about to say something
new, so the partition waits for that (the broker moves it, or gives it back a new epoch); an
offset out of range means the follower is past the leader's log end (it truncates there) or
below its log start (it starts over there). A leader that cannot be reached is tried again
with a growing backoff until the controller says who leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Any

import ray
from ray.exceptions import ActorUnschedulableError, RayActorError

from raylog.errors import (
    FencedEpochError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RaylogError,
    UnknownLeaderEpochError,
)
from raylog.replica.partition import Role
from raylog.replica.throttle import ByteRate
from raylog.replica.truncation import Ask

logger = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 500          # the leader holds an empty fetch this long
FETCH_MAX_BYTES = 32 << 20       # per request, over all partitions
PARTITION_MAX_BYTES = 8 << 20    # per partition (at least one whole batch)
BACKOFF_S = (0.05, 1.0)          # after a failed round: first, then doubled up to
WAIT_FOR_CONTROLLER_S = 0.5      # a partition whose epoch is off waits this long


@dataclasses.dataclass
class Following:
    """One partition this fetcher copies."""

    leader_epoch: int
    truncating: bool = True
    paused_until: float = 0.0  # after an error that the controller will resolve


class ReplicaFetcher:
    """Copies the partitions this process follows from one leader broker: from its broker
    actor (``host`` None), or from one of the leader broker's replica hosts, which its
    broker actor named in an answer (a redirect: actors/replica_hosts.py)."""

    def __init__(self, broker: Any, leader_id: int, handle: ray.actor.ActorHandle,
                 host: str | None = None) -> None:
        self.broker = broker   # the ReplicaHost: its replicas, its id, its broker epoch
        self.leader_id = leader_id
        self.handle = handle
        self.host = host
        self.partitions: dict[tuple[str, int], Following] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._start = 0  # where this round's request begins (rotating)

    def follow(self, tp: tuple[str, int], leader_epoch: int,
               handle: ray.actor.ActorHandle) -> None:
        """Copy ``tp`` (again) at ``leader_epoch``: truncate first, then fetch."""
        self.handle = handle
        self.partitions[tp] = Following(leader_epoch)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def adopt(self, tp: tuple[str, int], following: Following) -> None:
        """Copy ``tp`` from here on, where another fetcher of the same leader left it."""
        following.paused_until = 0.0
        self.partitions[tp] = following
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def forget(self, tp: tuple[str, int]) -> None:
        self.partitions.pop(tp, None)

    def stop(self) -> None:
        self.partitions.clear()
        if self._task is not None:
            self._task.cancel()

    def _current(self, tp: tuple[str, int], following: Following) -> Any:
        """The hosted replica, if this fetcher still copies it at that epoch as follower."""
        if self.partitions.get(tp) is not following:
            return None
        hosted = self.broker.replicas.get(tp)
        if hosted is None or hosted.partition.role is not Role.FOLLOWER or \
                hosted.partition.leader_epoch != following.leader_epoch:
            return None
        return hosted

    async def _run(self) -> None:
        backoff = BACKOFF_S[0]
        while self.partitions:
            try:
                sent = await self._round()
                backoff = BACKOFF_S[0]
            except (RayActorError, ActorUnschedulableError) as e:
                logger.info("fetcher from broker %d: leader unreachable (%s); retrying",
                            self.leader_id, type(e).__name__)
                sent = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])
            except Exception:  # one bad round must not stop replication for good
                logger.exception("fetcher from broker %d failed a round", self.leader_id)
                sent = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])
            if not sent:  # nothing was asked of the leader: wait, never spin
                self._wake.clear()
                paused = [f.paused_until for f in self.partitions.values()]
                pause = max(min(paused, default=0) - time.monotonic(), 0.01)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(pause, BACKOFF_S[1]))
            else:
                await asyncio.sleep(0)  # the broker's other work goes between rounds

    def _pause(self, tp: tuple[str, int], following: Following, truncate: bool = False
               ) -> None:
        """Leave ``tp`` alone for a moment (the controller is about to say something, or its
        data did not take); with ``truncate``, start it over from truncation."""
        following.paused_until = time.monotonic() + WAIT_FOR_CONTROLLER_S
        following.truncating = following.truncating or truncate

    async def _round(self) -> bool:
        """One round: truncate the partitions that start following, fetch the others.
        Whether a request was sent to the leader."""
        now = time.monotonic()
        ready = {tp: f for tp, f in self.partitions.items() if f.paused_until <= now}
        truncating = {tp: f for tp, f in ready.items() if f.truncating}
        sent = bool(truncating) and await self._truncate(truncating)
        fetching = [(tp, f) for tp, f in ready.items() if not f.truncating]
        # Start at another partition each round: the byte budget of a request is spent from
        # the front, and partitions with a backlog must not starve the others every round.
        self._start = (self._start + 1) % max(len(fetching), 1)
        fetching = fetching[self._start:] + fetching[:self._start]
        requests, hosts, throttled = [], {}, {}
        for tp, following in fetching:
            hosted = self._current(tp, following)
            if hosted is None:
                continue
            partition = hosted.partition
            request = (tp[0], tp[1], following.leader_epoch, partition.log_end_offset,
                       partition.high_watermark)
            budget = self._budget(hosted)
            if budget is not None:  # a moving replica: at most what its budget allows
                allowed = budget.take(PARTITION_MAX_BYTES)
                if not allowed:
                    following.paused_until = now + budget.wait_s()
                    continue
                throttled[tp] = (budget, allowed)
                request = (*request, allowed)  # the leader's limit for this partition
            hosts[tp] = (hosted, following)
            requests.append(request)
        if not requests:
            return sent
        # With this process's broker epoch: the leader knows it from the earlier processes
        # of this broker, whatever they fetched (KIP-903).
        answers = await self.handle.replica_fetch.remote(
            self.broker.broker_id, requests, FETCH_MAX_BYTES, PARTITION_MAX_BYTES,
            FETCH_MAX_WAIT_MS, self.broker.broker_epoch)
        for (topic, partition, *_), answer in zip(requests, answers, strict=True):
            tp = (topic, partition)
            hosted, following = hosts[tp]
            if tp in throttled:
                budget, allowed = throttled[tp]
                budget.settle(allowed, len(answer.get("data") or b""))
            if self._current(tp, following) is not hosted:
                continue  # the controller moved it while the fetch was out
            try:
                self._take(tp, hosted, following, answer)
            except (RaylogError, OSError) as e:
                # This partition's bytes did not take (damaged on the way, a full disk, logs
                # that diverged): it starts over from truncation; the others go on.
                logger.warning("%s: fetched data not appended (%r); truncating again",
                               hosted.name, e)
                self._pause(tp, following, truncate=True)
        return True

    def _take(self, tp: tuple[str, int], hosted: Any, following: Following,
              answer: dict[str, Any]) -> None:
        error = answer.get("error")
        partition = hosted.partition
        if answer.get("host") is not None:  # served by another process of the leader's node
            self.broker.redirect(tp, following, self.leader_id, answer["host"])
            return
        if self.host is not None and isinstance(error, NotLeaderError):
            # That host no longer serves it (the leader's broker placed it anew): ask the
            # leader's broker where it is now.
            self.broker.redirect(tp, following, self.leader_id, None)
            return
        if error is None:
            before = (partition.log_end_offset, partition.high_watermark)
            partition.append_replicated(answer["data"], answer["high_watermark"],
                                        answer["log_start_offset"])
            if (partition.log_end_offset, partition.high_watermark) != before:
                hosted.notify()  # consumers reading here, and maintenance
            return
        if isinstance(error, OffsetOutOfRangeError):
            start, end = answer["log_start_offset"], answer["log_end_offset"]
            if partition.log_end_offset > end:
                logger.warning("%s: log end %d past the leader's %d: truncating there",
                               hosted.name, partition.log_end_offset, end)
                partition.truncate(end)
            elif partition.log_end_offset < start:
                logger.info("%s: log end %d below the leader's log start %d: starting over "
                            "there", hosted.name, partition.log_end_offset, start)
                partition.restart_at(start)
            hosted.notify()
            return
        if not isinstance(error, FencedEpochError | UnknownLeaderEpochError | NotLeaderError):
            logger.warning("%s: fetch from broker %d failed: %r", hosted.name,
                           self.leader_id, error)
        self._pause(tp, following)

    def _budget(self, hosted: Any) -> ByteRate | None:
        """The byte budget ``hosted`` copies within: its broker's for the rate the
        controller set on it while it moves and is not in the ISR yet (None: unthrottled)."""
        rate = hosted.throttled_rate
        partition = hosted.partition
        if not rate or partition.replica_id in partition.isr:
            return None
        return self.broker.throttle(rate)

    async def _truncate(self, truncating: dict[tuple[str, int], Following]) -> bool:
        """Truncate each new follower to where its log and the leader's agree, asking the
        leader about all of them together, one epoch per partition per round. Whether the
        leader was asked anything."""
        steps, asked = {}, False
        for tp, following in truncating.items():
            hosted = self._current(tp, following)
            if hosted is not None:
                steps[tp] = (hosted, following, hosted.partition.truncation_step())
        while steps:
            asks = {}
            for tp, (hosted, following, step) in steps.items():
                try:
                    if isinstance(step, Ask):
                        hosted.partition.truncate(step.truncate_to)
                        asks[tp] = (hosted, following, step)
                        continue
                    hosted.partition.truncate(step.offset)
                except (RaylogError, OSError) as e:  # this partition only
                    logger.warning("%s: truncation failed (%r)", hosted.name, e)
                    self._pause(tp, following)
                    continue
                following.truncating = False
                hosted.notify()
                logger.info("%s follows broker %d at epoch %d from offset %d",
                            hosted.name, self.leader_id, following.leader_epoch,
                            hosted.partition.log_end_offset)
            if not asks:
                return asked
            requests = [(tp[0], tp[1], f.leader_epoch, step.epoch)
                        for tp, (_, f, step) in asks.items()]
            answers = await self.handle.epoch_end_offsets.remote(requests)
            asked = True
            steps = {}
            for (tp, (hosted, following, step)), answer in zip(asks.items(), answers,
                                                               strict=True):
                if self._current(tp, following) is not hosted:
                    continue
                if isinstance(answer, RaylogError):
                    self._pause(tp, following)
                    continue
                try:
                    steps[tp] = (hosted, following,
                                 hosted.partition.truncation_step((step.epoch, tuple(answer))))
                except RaylogError as e:  # an answer no leader gives: ask again later
                    logger.warning("%s: %r", hosted.name, e)
                    self._pause(tp, following)
        return asked
