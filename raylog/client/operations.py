"""A rolling restart, and the stop of a node's brokers, run by the admin client as series
of controller calls (docs/operations.md).

For each broker in turn (:func:`roll`): wait until every partition is in sync, drain the
broker (its leaderships move to other in-sync replicas, it leaves the ISRs), restart its
actors, wait until every partition is in sync again (the restarted broker caught up and
rejoined every ISR), and give the preferred replicas their leaderships back. The first
problem stops the roll (``RollStoppedError``, naming the broker, the step and the brokers
done): it never goes on to restart another broker while one is missing.

:func:`stop_brokers` drains every broker of a node (``raylog cluster stop-node``, before
``ray stop`` there), then stops them; a refused drain undoes the ones before it.

The controller decides and refuses (raylog/metadata/drain.py, actors/drains.py); this
module only sequences and waits. ``controller`` is the client's typed wrapper
(raylog/client/remote.py's ControllerClient), or a fake of it in unit tests; the clock and
the pause are injected.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from raylog.errors import RaylogError, RequestTimeoutError, RollStoppedError
from raylog.metadata.drain import named

POLL_S = 0.25  # how often a wait asks the controller


@dataclasses.dataclass(frozen=True)
class RollTimeouts:
    """Bounds of each step of a roll, in seconds."""

    drain_s: float = 60.0     # the replicas taking a drained broker's new leaders
    restart_s: float = 120.0  # a restarted broker's new process registering
    sync_s: float = 300.0     # every partition back in sync (a restarted broker catching up)


def wait_in_sync(controller: Any, timeout_s: float, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
    """Wait until no broker drains and every partition has a live leader and every replica
    in its ISR on a live broker; RequestTimeoutError naming what is not after ``timeout_s``."""
    deadline = clock() + timeout_s
    while True:
        state = controller.sync_state()
        if not state["not_in_sync"] and not state["draining"]:
            return
        if clock() >= deadline:
            lagging = state["not_in_sync"]
            raise RequestTimeoutError(
                f"not in sync after {timeout_s:g} s: "
                + (f"{len(lagging)} partitions ({named(lagging)})" if lagging else "")
                + (f"; brokers {state['draining']} still drained" if state["draining"]
                   else ""))
        sleep(POLL_S)


def roll(controller: Any, brokers: list[int] | None = None,
         timeouts: RollTimeouts = RollTimeouts(), *,
         on_step: Callable[[str, int], None] | None = None,
         clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> list[int]:
    """Restart ``brokers`` (default: every live broker) one at a time; returns them in the
    order restarted. Refused before anything happens by the controller's checks
    (UnknownBrokerError, OfflinePartitionsError, InvalidArgumentError for a broker not
    alive); RollStoppedError at the first problem after that. ``on_step(step, broker)`` is
    told each step as it begins ("wait", "drain", "restart", "catch up", "leaders")."""
    order = controller.roll_plan(brokers)["order"]
    done: list[int] = []
    for broker in order:
        step = "wait"
        try:
            for step, run in (
                    ("wait", lambda: wait_in_sync(controller, timeouts.sync_s,
                                                  clock=clock, sleep=sleep)),
                    ("drain", lambda b=broker: controller.drain_broker(b, False,
                                                                       timeouts.drain_s)),
                    ("restart", lambda b=broker: controller.restart_broker(
                        b, timeouts.restart_s)),
                    ("catch up", lambda: wait_in_sync(controller, timeouts.sync_s,
                                                      clock=clock, sleep=sleep)),
                    ("leaders", lambda: controller.elect_leaders(None))):
                if on_step is not None:
                    on_step(step, broker)
                run()
        except RaylogError as e:
            raise RollStoppedError(
                f"the roll stopped at broker {broker} ({step}): {e}; restarted: "
                f"{', '.join(map(str, done)) or 'none'}; not yet: "
                f"{', '.join(map(str, order[len(done):]))}") from e
        done.append(broker)
    return done


def stop_brokers(controller: Any, brokers: list[int], force: bool = False,
                 timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Drain each of ``brokers`` (as ``drain_broker``: its leaderships move, it leaves the
    ISRs), then stop them all; returns each drain's answer, with ``stopped`` the stop's.
    All or nothing: if a drain is refused (``LastInSyncReplicaError``, say: the brokers
    drained before it hold what it would strand), the brokers drained before it are
    resumed, none is stopped, and the refusal is raised."""
    drained: list[dict[str, Any]] = []
    try:
        for broker in brokers:
            drained.append(controller.drain_broker(broker, force, timeout_s))
    except RaylogError:
        for done in drained:
            controller.resume_broker(done["broker"])
        raise
    for answer in drained:
        answer["stopped"] = controller.stop_broker(answer["broker"])
    return drained
