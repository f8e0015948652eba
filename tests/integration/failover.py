"""Failovers in an exact order, for the tests of what readers see (KIP-207).

:func:`lagging_new_leader` brings a partition to a state a clean failover leaves: the new
leader has records past its high watermark (appended by the old leader, not committed yet),
so the start of its leader epoch (its log end at election) is past its high watermark, and
its other in-sync follower has not fetched from it yet, so its high watermark stays there.
No timing is left to chance: the follower's broker process is stopped (SIGSTOP) and resumed
(SIGCONT) so that each step happens before the next one starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import ray

from raylog import Admin, Producer
from tests.integration.conftest import wait_for


def pid(actor: ray.actor.ActorHandle) -> int:
    """The process id of a running actor, from the GCS actor table."""
    return ray._private.state.actors(actor._actor_id.hex())["Pid"]


def replica(admin: Admin, topic: str, broker: int) -> dict[str, Any]:
    """What broker ``broker``'s replica of partition 0 says of itself (asked directly)."""
    handle = handles(admin, topic)[broker]
    return ray.get(handle.describe.remote(topic), timeout=60)[0]


def handles(admin: Admin, topic: str) -> dict[int, ray.actor.ActorHandle]:
    meta = admin._cluster.topic(topic, refresh=True).partitions[0]
    return {broker: client.handle for broker, client in meta.clients.items()}


@dataclasses.dataclass
class LaggingLeader:
    old: int             # the leader that was killed
    new: int             # the new leader, whose high watermark is below its epoch's start
    follower: int        # the in-sync follower kept from fetching from it
    resume: Callable[[], None]  # let the follower fetch: the high watermark catches up


@contextlib.contextmanager
def lagging_new_leader(admin: Admin, topic: str, before: int, after: int,
                       plan: Callable[[], object]) -> Iterator[LaggingLeader]:
    """Topic ``topic``'s partition 0 (3 replicas, all in sync) gets ``before`` records
    committed everywhere, then ``after`` more (acks=1) that its old leader and its next
    leader have but cannot commit: the third replica is stopped. ``plan()`` runs then (a
    reader plans its ranges from the old leader's high watermark, ``before``). Then the old
    leader is killed (Ray restarts it) and the next one leads: its high watermark is
    ``before``, its epoch starts at ``before + after``, and the third replica does not fetch.
    The block runs in that state; ``resume()`` (called on leaving, if the block did not)
    lets the third replica fetch.

    Values are ``b"v<i>"``, ``i`` from 0 to ``before + after - 1``."""
    state = admin.describe_topic(topic)["partitions"][0]
    old = state["leader"]
    new, follower = [b for b in state["replicas"] if b != old]  # elected in replica order
    brokers = handles(admin, topic)
    stopped: list[int] = []  # the follower's pid while it is stopped

    def resume() -> None:
        while stopped:
            os.kill(stopped.pop(), signal.SIGCONT)

    try:
        with Producer(acks="all") as producer:
            for i in range(before):
                producer.send(topic, b"v%d" % i, partition=0)
        wait_for(lambda: all(replica(admin, topic, b)["high_watermark"] == before
                             for b in state["replicas"]), timeout=60,
                 what="every replica caught up")
        stopped.append(pid(brokers[follower]))
        os.kill(stopped[0], signal.SIGSTOP)  # from now on nothing more is committed
        with Producer(acks=1) as producer:
            for i in range(before, before + after):
                producer.send(topic, b"v%d" % i, partition=0)
        wait_for(lambda: replica(admin, topic, new)["log_end_offset"] == before + after,
                 timeout=60, what="the next leader to have every record")
        plan()
        ray.kill(brokers[old], no_restart=False)
        wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] == new,
                 timeout=60, what=f"broker {new} to lead")
        wait_for(lambda: replica(admin, topic, new)["role"] == "leader", timeout=60,
                 what=f"broker {new} to know it leads")
        taken = replica(admin, topic, new)
        assert (taken["high_watermark"], taken["log_end_offset"]) == (before, before + after)
        yield LaggingLeader(old, new, follower, resume)
    finally:
        resume()
