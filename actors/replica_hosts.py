"""A broker's replica hosts: the other processes of its node that serve its replicas.

The broker actor (actors/broker.py) is the node's one broker identity and the controller's
one counterpart; it serves a share of the broker's replicas itself (host 0) and starts the
others' hosts on its node, as children (they die with it): ``RAYLOG_BROKER_PROCESSES - 1``
shared :class:`~actors.broker.ReplicaHostActor`\\ s, and one per replica of a topic with
``raylog.replica.dedicated=true``. A :class:`HostSet` places each replica on one host
(raylog/metadata/hosts.py), hands it the controller's words for its replicas, and watches
each host:

- every :func:`renew_interval_s` it renews the host's lease, saying whether the broker
  itself serves (a broker that stalled waits for the controller to confirm it, and so do
  its hosts); a host not renewed for a stall threshold serves nothing;
- a host whose process died (Ray restarts it: the same handle, a new incarnation, so the
  routes the controller knows stay right), or that has not answered for two stall
  thresholds (it is killed, and Ray restarts it), is down:
  its replicas are reported failed to the controller (the broker's health check answers at
  once), which moves their leaderships and takes this broker out of their ISRs, as for a
  replica that could not open. When the host answers again, the replicas this broker
  follows are opened on it again from their newest state; one it led in that state waits
  for the controller's next word (it is moving the leadership away), so a restarted host
  never leads at an epoch decided before it died.

Its event loop is the broker's; not thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError

from raylog.errors import NotLeaderError
from raylog.metadata.hosts import DEDICATED, HostPlacement, is_dedicated, renew_interval_s

logger = logging.getLogger(__name__)

TAKE_TIMEOUT_S = 120.0  # a host opening its replicas (as the controller's apply)
FAIL_AFTER_THRESHOLDS = 2  # a host silent this many stall thresholds is killed

TopicPartition = tuple[str, int]
HostKey = int | TopicPartition  # a shared host's index, or the replica of a dedicated one


class HostSet:
    """The broker's replica hosts, where each replica is, and their health."""

    def __init__(self, broker: Any, processes: int,
                 start: Callable[[str], ray.actor.ActorHandle]) -> None:
        self.broker = broker   # the BrokerActor: failed, _status, guard, ids, brokers
        self.placement = HostPlacement(processes)
        self._start = start    # starts a host actor of that name on this node
        self.handles: dict[HostKey, ray.actor.ActorHandle] = {}
        self.incarnations: dict[HostKey, str] = {}
        self.down: dict[HostKey, str] = {}  # hosts down, and why
        self.states: dict[TopicPartition, tuple[dict[str, Any], int]] = {}  # newest, version
        self._watches: dict[HostKey, asyncio.Task] = {}

    # -- where replicas are ----------------------------------------------------------------------

    def key_of(self, tp: TopicPartition) -> HostKey:
        """The host serving ``tp`` (0, the broker itself, for one it does not place)."""
        host = self.placement.host_of(tp)
        if host is None:
            return 0
        return tp if host == DEDICATED else host

    def elsewhere(self, tp: TopicPartition) -> ray.actor.ActorHandle | None:
        """The handle of the host serving ``tp`` if it is not the broker itself."""
        key = self.key_of(tp)
        return None if key == 0 else self.handles.get(key)

    def group(self, tps: list[TopicPartition]) -> dict[HostKey, list[int]]:
        """Indexes of ``tps`` by the host serving each."""
        out: dict[HostKey, list[int]] = {}
        for i, tp in enumerate(tps):
            key = self.key_of(tp)
            out.setdefault(key if key == 0 or key in self.handles else 0, []).append(i)
        return out

    def placed(self) -> list[TopicPartition]:
        return self.placement.placed()

    def count(self) -> int:
        """Replicas placed (on every host, the broker's own too)."""
        return len(self.placement)

    def route(self, states: list[dict[str, Any]], version: int
              ) -> tuple[dict[HostKey, list[dict[str, Any]]], list[tuple[HostKey, TopicPartition]]]:
        """Place each replica ``states`` describe and keep its newest state: (the states by
        host, the replicas to stop first on the host they leave: a topic made dedicated or
        not, taking effect with the next state its broker is told)."""
        by_host: dict[HostKey, list[dict[str, Any]]] = {}
        moves = []
        broker_id = self.broker.broker_id
        for state in sorted(states, key=lambda s: (s["leader"] != broker_id,
                                                   s["topic"], s["partition"])):
            tp = (state["topic"], state["partition"])
            before = self.placement.host_of(tp)
            host = self.placement.place(tp, state["leader"] == broker_id,
                                        is_dedicated(state["configs"]))
            key: HostKey = tp if host == DEDICATED else host
            if before is not None and before != host:
                moves.append((tp if before == DEDICATED else before, tp))
            if key != 0:  # kept to open it again if its host restarts
                kept = self.states.get(tp)
                if kept is None or kept[1] <= version:
                    self.states[tp] = (state, version)
                if key not in self.handles:
                    self._add(key)
            else:
                self.states.pop(tp, None)
            by_host.setdefault(key, []).append(state)
        return by_host, moves

    def release(self, tp: TopicPartition, version: int) -> None:
        """``tp`` is no longer held (as of ``version``); a dedicated host goes with it."""
        kept = self.states.get(tp)
        if kept is not None and kept[1] > version:
            return  # told again by a newer word
        self.states.pop(tp, None)
        if tp in self.broker.replicas:
            return  # the broker itself holds it again (a newer word)
        if self.placement.release(tp) == DEDICATED:
            self._remove(tp)

    # -- telling hosts -----------------------------------------------------------------------

    async def take(self, key: HostKey, states: list[dict[str, Any]],
                   brokers: dict[int, ray.actor.ActorHandle], full: bool, version: int,
                   assigned: dict[TopicPartition, str] | None) -> dict[str, Any]:
        """Hand host ``key`` the states of its replicas; the answers per replica, each
        naming the host (for the controller's metadata), or the error (the replica is
        reported failed: the controller moves on without it)."""
        broker = self.broker
        handle = self.handles[key]
        try:
            answers = await asyncio.wait_for(handle.take.remote(
                broker.incarnation, broker.broker_id, broker.broker_epoch, states, brokers,
                full, version, assigned), TAKE_TIMEOUT_S)
        except Exception as e:  # unavailable, or its take failed: its replicas, not the apply
            reason = f"its replica host is unavailable ({type(e).__name__})" \
                if isinstance(e, (RayActorError, TimeoutError)) \
                else f"its replica host refused them: {e!r}"
            answers = {f"{s['topic']}-{s['partition']}": {"error": reason} for s in states}
        for state in states:
            tp = (state["topic"], state["partition"])
            answer = answers.get(f"{tp[0]}-{tp[1]}")
            if answer is None:
                continue
            if "error" in answer:
                broker.failed[tp] = answer["error"]
                broker._status.set()
            else:
                broker.failed.pop(tp, None)
                answer["host"] = handle
        broker.settle_locks(states, answers, version)  # its directory held: tried again
        return answers

    # -- the hosts' lives --------------------------------------------------------------------

    def _add(self, key: HostKey) -> None:
        name = f"{key[0]}-{key[1]}" if isinstance(key, tuple) else str(key)
        handle = self.handles[key] = self._start(name)
        self._watches[key] = asyncio.get_running_loop().create_task(self._watch(key, handle))
        logger.info("broker %s started replica host %s", self.broker.broker_id, name)

    def _remove(self, key: HostKey) -> None:
        handle = self.handles.pop(key, None)
        self.incarnations.pop(key, None)
        self.down.pop(key, None)
        task = self._watches.pop(key, None)
        if task is not None:
            task.cancel()
        if handle is not None:
            ray.kill(handle, no_restart=True)

    def confirm(self, name: str, incarnation: str) -> bool:
        """Whether the host ``name``, as ``incarnation``, is up (it asks after a stall)."""
        for key, known in self.incarnations.items():
            if known == incarnation:
                return key not in self.down
        return False

    def on_host(self, key: HostKey) -> list[TopicPartition]:
        if isinstance(key, tuple):
            return [key] if self.placement.host_of(key) == DEDICATED else []
        return self.placement.on_host(key)

    async def _watch(self, key: HostKey, handle: ray.actor.ActorHandle) -> None:
        heard = time.monotonic()
        killed = False
        while self.handles.get(key) is handle:
            threshold = self.broker.guard.threshold_s
            try:
                answer = await asyncio.wait_for(
                    handle.renew.remote(self.broker.guard.serving, threshold), threshold)
            except asyncio.CancelledError:
                raise
            except (RayActorError, TimeoutError) as e:
                # Its process died (Ray starts it again: the same handle, a new incarnation;
                # a host's node is its broker's, so it never dies for good while the broker
                # lives), or it hangs: killed once it has not answered for long.
                silent = time.monotonic() - heard
                if isinstance(e, RayActorError):
                    self._mark_down(key, f"its replica host's process died ({type(e).__name__})")
                elif silent > FAIL_AFTER_THRESHOLDS * threshold and not killed \
                        and key in self.incarnations:  # not while it starts
                    self._mark_down(key, f"its replica host did not answer for {silent:.1f} s")
                    ray.kill(handle, no_restart=False)  # Ray starts it again
                    killed = True
                await asyncio.sleep(renew_interval_s(threshold))
                continue
            heard, killed = time.monotonic(), False
            known = self.incarnations.get(key)
            if known is not None and known != answer["incarnation"]:
                self._mark_down(key, "its replica host restarted")
            self.incarnations[key] = answer["incarnation"]
            if key in self.down:
                await self._back(key)
            await asyncio.sleep(renew_interval_s(threshold))

    def _mark_down(self, key: HostKey, reason: str) -> None:
        if key not in self.down:
            logger.warning("broker %s: replica host %s is down (%s)", self.broker.broker_id,
                           key, reason)
        self.down[key] = reason
        for tp in self.on_host(key):
            self.broker.failed[tp] = reason
        self.broker._status.set()  # the controller hears of it at once

    async def _back(self, key: HostKey) -> None:
        """Host ``key`` answers again, as a new process: open the replicas this broker
        follows on it again, from their newest state."""
        self.down.pop(key, None)
        broker_id = self.broker.broker_id
        again, version = [], -1
        for tp in self.on_host(key):
            kept = self.states.get(tp)
            if kept is None:
                continue  # released meanwhile: nothing to open
            state, told = kept
            if state["leader"] == broker_id:
                continue  # stays failed until the controller's next word on it
            again.append(state)
            version = max(version, told)
        logger.info("broker %s: replica host %s is back; opening %d replicas again",
                    broker_id, key, len(again))
        if again and key in self.handles:
            await self.take(key, again, self.broker.brokers, False, version, None)

    # -- forwarding ----------------------------------------------------------------------------

    def redirect_answer(self, handle: ray.actor.ActorHandle) -> dict[str, Any]:
        """A follower's fetch answer for a partition another host serves: where to ask."""
        return {"data": b"", "error": NotLeaderError(
                    f"broker {self.broker.broker_id} serves it from another process"),
                "host": handle, "high_watermark": -1, "log_start_offset": -1,
                "log_end_offset": -1}

    async def close(self) -> None:
        for task in self._watches.values():  # no lease renewed for a closed broker
            task.cancel()
        self._watches.clear()
        for key in list(self.handles):
            handle = self.handles[key]
            try:
                await asyncio.wait_for(handle.close.remote(), TAKE_TIMEOUT_S)
            except Exception as e:  # one host's trouble must not keep the others open
                logger.warning("closing replica host %s failed: %r", key, e)
