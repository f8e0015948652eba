"""Which of a broker node's replica-host processes serves each of its replicas.

A broker node runs ``RAYLOG_BROKER_PROCESSES`` processes that host replicas (the broker
actor itself is host 0; the others are replica-host actors it starts on its node), so that a
node's produce, fetch and replication use more than one core. :class:`HostPlacement` decides,
for the broker, which host serves each replica:

- a replica stays on the host that serves it for as long as the broker holds it (its files
  are in the broker's one data directory and any host may open them, but two hosts must never
  have the same replica open: only the broker assigns, one host per replica);
- a new replica goes to the least loaded host, a leader weighing more than a follower (it
  takes the produce and fetch requests; a follower only appends what it copies), ties to
  the host with fewer replicas, then the lowest index: deterministic and balanced, and hosts
  added later take the new replicas until they catch up, without moving the others;
- a replica of a topic with ``raylog.replica.dedicated=true`` gets a host of its own
  (:data:`DEDICATED`), which the broker starts and stops with it.

:class:`HostLease` is a replica host's knowledge that its broker still speaks for it: the
broker renews it every :func:`renew_interval_s`; a host not renewed for a stall threshold
(its broker stalled, and may have been fenced by the controller) or told that its broker
does not serve (it waits for the controller's confirmation) serves nothing.

Plain Python, time from an injected clock; one event loop is each object's only user.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from raylog.errors import InvalidConfigError

PROCESSES_ENV = "RAYLOG_BROKER_PROCESSES"
LEADER_WEIGHT = 2   # a leader's load against a follower's 1
DEDICATED = -1      # the host index of a replica with an actor of its own
DEDICATED_CONFIG = "raylog_replica_dedicated"

TopicPartition = tuple[str, int]


def default_processes(cpus: int | None) -> int:
    """Half the node's cores, at least one: the other half is left to the clients, Ray Data
    and Spark tasks the node also runs (a broker-bound node can set more)."""
    return max(1, (cpus or 1) // 2)


def configured_processes(environ: dict[str, str] | None = None,
                         cpus: int | None = None) -> int:
    """``$RAYLOG_BROKER_PROCESSES`` of this node, or :func:`default_processes` of its cores.
    InvalidConfigError for a value that is not a positive integer."""
    environ = os.environ if environ is None else environ
    raw = environ.get(PROCESSES_ENV, "").strip()
    if not raw:
        if cpus is None:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
                else os.cpu_count()
        return default_processes(cpus)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidConfigError(f"{PROCESSES_ENV} must be a positive integer, got {raw!r}")
    return value


def is_dedicated(configs: dict) -> bool:
    """Whether a topic's (normalized) configs ask for an actor per replica."""
    return bool(configs.get(DEDICATED_CONFIG, False))


class HostPlacement:
    """The host of each replica a broker holds, among ``hosts`` shared hosts (and
    dedicated ones)."""

    def __init__(self, hosts: int) -> None:
        if hosts < 1:
            raise ValueError(f"a broker has at least one host, got {hosts}")
        self.hosts = hosts
        self._host: dict[TopicPartition, int] = {}
        self._leads: dict[TopicPartition, bool] = {}
        self._replicas = [0] * hosts  # per shared host
        self._leaders = [0] * hosts

    def __len__(self) -> int:
        return len(self._host)

    def placed(self) -> list[TopicPartition]:
        return list(self._host)

    def host_of(self, tp: TopicPartition) -> int | None:
        return self._host.get(tp)

    def on_host(self, host: int) -> list[TopicPartition]:
        return sorted(tp for tp, h in self._host.items() if h == host)

    def load(self, host: int) -> tuple[int, int]:
        """(weighted load, replicas) of a shared host."""
        leaders, replicas = self._leaders[host], self._replicas[host]
        return leaders * LEADER_WEIGHT + (replicas - leaders), replicas

    def place(self, tp: TopicPartition, leader: bool, dedicated: bool = False) -> int:
        """The host of ``tp`` (assigned now if it has none): where it is, else DEDICATED
        or the least loaded host. ``leader``: whether this broker leads it now (kept up to
        date for the load of later placements; a replica never moves for it)."""
        host = self._host.get(tp)
        if host is not None and (host == DEDICATED) != dedicated:
            self.release(tp)
            host = None
        if host is None:
            host = DEDICATED if dedicated else min(
                range(self.hosts), key=lambda h: (*self.load(h), h))
            self._host[tp] = host
            self._leads[tp] = False
            if host != DEDICATED:
                self._replicas[host] += 1
        if host != DEDICATED and self._leads[tp] != leader:
            self._leaders[host] += 1 if leader else -1
        self._leads[tp] = leader
        return host

    def place_all(self, wanted: Iterable[tuple[TopicPartition, bool, bool]]
                  ) -> dict[TopicPartition, int]:
        """:meth:`place` for each ``(tp, leader, dedicated)``, in a deterministic order
        (leaders first, then by name), so that the same replicas land the same way."""
        ordered = sorted(wanted, key=lambda w: (not w[1], w[0]))
        return {tp: self.place(tp, leader, dedicated) for tp, leader, dedicated in ordered}

    def release(self, tp: TopicPartition) -> int | None:
        """``tp`` is no longer held; the host it was on."""
        host = self._host.pop(tp, None)
        leader = self._leads.pop(tp, False)
        if host is not None and host != DEDICATED:
            self._replicas[host] -= 1
            self._leaders[host] -= 1 if leader else 0
        return host


def renew_interval_s(threshold_s: float) -> float:
    """How often a broker renews its hosts' leases: three times per stall threshold."""
    return threshold_s / 3


class HostLease:
    """A replica host's lease from its broker (see the module's docstring)."""

    def __init__(self, threshold_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold_s = threshold_s
        self.clock = clock
        self.renewed_at = clock()
        self.broker_serving = True

    def renew(self, broker_serving: bool) -> None:
        self.renewed_at = self.clock()
        self.broker_serving = broker_serving

    def problem(self) -> str | None:
        """Why this host may not serve now, None if it may."""
        if not self.broker_serving:
            return "its broker waits for the controller to confirm its state"
        silent = self.clock() - self.renewed_at
        if silent > self.threshold_s:
            return (f"its broker has not renewed its lease for {silent:.1f} s (it may have "
                    f"been fenced)")
        return None
