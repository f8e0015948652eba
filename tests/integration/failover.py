"""Failovers in an exact order, for the tests of what readers see (KIP-207).

:func:`lagging_new_leader` brings a partition to the state a clean failover can leave: the
new leader has every record the old one committed, but its high watermark is behind (it
learns the old leader's high watermark one fetch late), and its other in-sync follower has
not fetched from it yet, so its high watermark stays behind. No timing is left to chance:
broker processes are stopped (SIGSTOP) and resumed (SIGCONT) so that each step happens before
the next one starts.
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
    new: int             # the new leader, whose high watermark is behind
    follower: int        # the in-sync follower kept from fetching from it
    committed: int       # the old leader's high watermark when it died
    new_high_watermark: int
    resume: Callable[[], None]  # let the follower fetch: the high watermark catches up


@contextlib.contextmanager
def lagging_new_leader(admin: Admin, topic: str, before: int, after: int,
                       plan: Callable[[], object]) -> Iterator[LaggingLeader]:
    """Topic ``topic``'s partition 0 (3 replicas, all in sync) gets ``before`` records
    committed everywhere, then ``after`` more that its old leader commits while its next
    leader learns of only the first ``before``. ``plan()`` runs while the old leader leads,
    having committed all of them (a reader plans its ranges there). Then the old leader is
    killed (Ray restarts it) and the next one leads with its high watermark at ``before``,
    while the third replica does not fetch: the block runs in that state, and ``resume()``
    (called on leaving, if the block did not) lets the third replica fetch.

    Values are ``b"v<i>"``, ``i`` from 0 to ``before + after - 1``."""
    state = admin.describe_topic(topic)["partitions"][0]
    old = state["leader"]
    new, follower = [b for b in state["replicas"] if b != old]  # elected in replica order
    brokers = handles(admin, topic)
    stopped: dict[int, int] = {}  # broker -> the pid stopped

    def stop(broker: int) -> None:
        stopped[broker] = pid(brokers[broker])
        os.kill(stopped[broker], signal.SIGSTOP)

    def resume(broker: int) -> None:
        process = stopped.pop(broker, None)
        if process is not None:
            os.kill(process, signal.SIGCONT)

    try:
        with Producer(acks="all") as producer:
            for i in range(before):
                producer.send(topic, b"v%d" % i, partition=0)
        wait_for(lambda: all(replica(admin, topic, b)["high_watermark"] == before
                             for b in state["replicas"]), timeout=60,
                 what="every replica caught up")
        stop(follower)  # the old leader cannot commit what it appends now
        with Producer(acks=1) as producer:
            for i in range(before, before + after):
                producer.send(topic, b"v%d" % i, partition=0)
        wait_for(lambda: replica(admin, topic, new)["log_end_offset"] == before + after,
                 timeout=60, what="the next leader to have every record")
        assert replica(admin, topic, new)["high_watermark"] == before
        stop(new)  # it keeps what it knows of the high watermark
        resume(follower)  # it fetches: the old leader commits everything
        wait_for(lambda: replica(admin, topic, old)["high_watermark"] == before + after,
                 timeout=60, what="the old leader to commit every record")
        plan()
        stop(follower)
        ray.kill(brokers[old], no_restart=False)
        resume(new)
        wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] == new,
                 timeout=60, what=f"broker {new} to lead")
        wait_for(lambda: replica(admin, topic, new)["role"] == "leader", timeout=60,
                 what=f"broker {new} to know it leads")
        yield LaggingLeader(old, new, follower, before + after,
                            replica(admin, topic, new)["high_watermark"],
                            lambda: resume(follower))
    finally:
        for broker in list(stopped):
            resume(broker)
