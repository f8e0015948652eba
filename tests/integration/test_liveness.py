"""Hung brokers, a hung controller, and brokers Ray restarts: a broker that stops answering
(SIGSTOP) is fenced after its session (``broker.session.timeout.ms``, 9 s by default) as if
it had died, and learns it was fenced before it serves anything again; a controller that
stops answering stops no produce or fetch, and fences nobody when it resumes; a broker whose
process Ray restarts is taken down at once, and its new process takes no word the controller
meant for the old one.

The topics have replication factor 3 and ``min.insync.replicas`` 2, and producers send with
``acks="all"`` throughout (tests/integration/workload.py). The history checker must find
nothing, and once the cluster is whole again every replica of a partition holds the same
records and ends at the same offset: the resumed broker kept no record the others lack.
Every stopped process is continued in a ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

import pytest
import ray

from raylog import Admin, Producer
from raylog.client.remote import resolve
from raylog.errors import BrokerStalledError, FencedEpochError, NotLeaderError
from raylog.metadata.sessions import stall_threshold_s
from raylog.metadata.settings import DEFAULT_SESSION_TIMEOUT_MS
from tests.history import summary
from tests.integration.conftest import broker_processes, leader_broker, restarts, wait_for
from tests.integration.test_replication import (
    assert_replicas_identical,
    create_replicated,
    fully_in_sync,
    partition_states,
)
from tests.integration.workload import Workload
from tests.unit.logutil import batch_of

PARTITIONS = 3
SESSION_S = DEFAULT_SESSION_TIMEOUT_MS / 1000
# A session and a third (12 s): a stopped broker is fenced within it, and a controller that
# counted its own pause against the brokers would fence them all.
PAUSE_S = SESSION_S * 4 / 3


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


@contextlib.contextmanager
def stopped(pid: int | list[int], at_least_s: float) -> Iterator[float]:
    """The process ``pid`` (or each of a list) stopped (SIGSTOP) for the block, and at least
    ``at_least_s`` in all; continued (SIGCONT) however the block ends. Yields when it was
    stopped."""
    pids = [pid] if isinstance(pid, int) else pid
    for each in pids:
        os.kill(each, signal.SIGSTOP)
    since = time.monotonic()
    try:
        yield since
        # The pause is the scenario's: it lasts this long whatever was checked meanwhile.
        time.sleep(max(0.0, since + at_least_s - time.monotonic()))
    finally:
        for each in pids:
            os.kill(each, signal.SIGCONT)


def brokers_status(admin: Admin) -> dict[int, dict]:
    return {b["broker_id"]: b for b in admin.cluster_status()["brokers"]}


def same_log_ends(admin: Admin, topic: str) -> bool:
    """Every replica of every partition ends where the others do, at the high watermark."""
    ends: dict[int, set[tuple[int, int]]] = {}
    for r in admin.describe_replicas(topic):
        ends.setdefault(r["partition"], set()).add((r["log_end_offset"], r["high_watermark"]))
    return len(ends) == PARTITIONS and all(len(e) == 1 and next(iter(e))[0] == next(iter(e))[1]
                                           for e in ends.values())


@pytest.mark.cluster
def test_a_stopped_leader_is_fenced_its_partitions_fail_over_and_it_rejoins_as_follower(
        ray_cluster, admin, topic_name):
    """SIGSTOP the broker leading partition 0 for 12 s under acks=all load. Within its
    session it is fenced and its partitions move to in-sync replicas: a producer that asks
    the controller now gets partition 0's new leader and is acknowledged while the old one is
    still stopped (the pause lasts until it is). Requests made to the stopped broker at its
    old epoch are refused when it resumes: it learns it was fenced before it serves them.
    Then it rejoins every ISR as a follower, truncating what the new leaders lack."""
    create_replicated(admin, topic_name)
    with Workload(topic_name, PARTITIONS) as load:
        load.wait_acknowledged(300)
        before = partition_states(admin, topic_name)
        victim = before[0]["leader"]
        led = [p["partition"] for p in before if p["leader"] == victim]
        # The broker and its replica hosts: the whole broker stops, as on a hung node.
        pids = broker_processes(leader_broker(admin, topic_name, 0))
        stale = admin._cluster.topic(topic_name, refresh=True).partitions[0].leader_client()
        with stopped(pids, PAUSE_S):
            # Made while it is stopped, at its old epoch: waiting in its inbox.
            queued = [stale.append(batch_of([b"queued-while-stopped"]), 1),
                      stale.fetch(0, 1 << 20, 0, 1)]

            def fenced() -> bool:
                now = partition_states(admin, topic_name)
                return not brokers_status(admin)[victim]["alive"] and all(
                    now[i]["leader"] not in (None, victim)
                    and now[i]["leader_epoch"] > before[i]["leader_epoch"] for i in led)

            wait_for(fenced, timeout=60, what=f"broker {victim} fenced and its partitions "
                                                f"{led} failed over")
            assert brokers_status(admin)[victim]["health"] == "fenced"
            # A client that asks the controller now (the metadata this process cached still
            # names the stopped broker) is acknowledged by the new leader.
            ray_cluster.raylog.topic(topic_name, refresh=True)
            with Producer(acks="all", cluster=ray_cluster.raylog) as producer:
                sent = producer.send(topic_name, b"after-the-fence", partition=0).result(60)
            assert sent.offset >= 0
            load.wait_acknowledged(200)  # the workload goes on meanwhile
        for ref in queued:
            with pytest.raises((BrokerStalledError, FencedEpochError, NotLeaderError)):
                resolve(ref, timeout=60)
        wait_for(lambda: brokers_status(admin)[victim]["alive"], timeout=60,
                 what=f"broker {victim} back")
        wait_for(lambda: fully_in_sync(admin, topic_name), timeout=120,
                 what=f"broker {victim} back in every ISR")
        load.healthy()
    anomalies = load.finish()
    assert not anomalies, summary(anomalies)
    assert_replicas_identical(admin, topic_name, PARTITIONS)
    wait_for(lambda: same_log_ends(admin, topic_name), timeout=60,
             what="every replica ending at the same offset")
    held = {r["partition"]: r for r in admin.describe_replicas(topic_name)
            if r["broker_id"] == victim}
    assert all(held[i]["role"] == "follower" for i in led), held


@pytest.mark.cluster
def test_a_broker_stalled_for_less_than_a_session_is_not_fenced(ray_cluster, admin,
                                                                  topic_name):
    """A stall longer than a third of the session, shorter than it takes to be fenced:
    the broker refuses requests until the controller confirms it, then serves on as the
    same leader; nothing moved."""
    create_replicated(admin, topic_name)
    with Workload(topic_name, PARTITIONS) as load:
        load.wait_acknowledged(300)
        before = partition_states(admin, topic_name)
        actor = leader_broker(admin, topic_name, 0)
        # Longer than the broker's stall threshold (a third of the session), well short of
        # the three quarters of a session it takes to be fenced.
        with stopped(broker_processes(actor), stall_threshold_s(SESSION_S) + 0.5):
            pass
        load.wait_acknowledged(300)
        wait_for(lambda: ray.get(actor.watch.remote(None, 0), timeout=30)["serving"],
                 timeout=60, what="the broker confirmed by the controller")
        load.healthy()
    anomalies = load.finish()
    assert not anomalies, summary(anomalies)
    assert partition_states(admin, topic_name) == before  # nobody fenced, nothing moved


@pytest.mark.cluster
def test_a_stopped_controller_stops_no_produce_or_fetch_and_fences_nobody(
        ray_cluster, admin, topic_name):
    """SIGSTOP the controller for 12 s, longer than a broker session, under acks=all load:
    producers are acknowledged and consumers read meanwhile (neither needs the controller
    while nothing fails); when it resumes it does not count its own pause against the
    brokers, and fences none."""
    create_replicated(admin, topic_name)
    with Workload(topic_name, PARTITIONS) as load:
        load.wait_acknowledged(300)
        before = partition_states(admin, topic_name)
        stalled_before = admin.cluster_status()["controller_stalled_s"]
        pid = ray_cluster.raylog.controller.ready()["pid"]
        with stopped(pid, PAUSE_S):
            reads = len(load.reads)
            load.wait_acknowledged(500, timeout=60)
            wait_for(lambda: len(load.reads) >= reads + 500, timeout=60,
                     what="records read while the controller is stopped")
        # Once the controller has checked the sessions after resuming (and credited its
        # pause), no broker was fenced: none would be later, each is heard from again.
        wait_for(lambda: admin.cluster_status()["controller_stalled_s"]
                 >= stalled_before + PAUSE_S - 2, timeout=60,
                 what="the controller's first session check after its pause")
        status = brokers_status(admin)
        assert all(b["health"] == "alive" for b in status.values()), status
        assert partition_states(admin, topic_name) == before
        load.healthy()
    anomalies = load.finish()
    assert not anomalies, summary(anomalies)


@pytest.mark.cluster
def test_a_broker_ray_restarts_fails_over_and_its_new_process_never_leads_at_the_old_epoch(
        ray_cluster, admin, topic_name):
    """Crash the leader's process (Ray restarts it) and, once it is gone, send with the
    metadata from before: the write is acknowledged by another broker at a new epoch, never
    by the new process as if it still led. (Ray's ActorUnavailableError is a death here: the
    GCS says the process was replaced; and a word the controller meant for the old process is
    refused by the new one.)"""
    create_replicated(admin, topic_name, partitions=1)
    with Producer(acks="all", retry_backoff_ms=20, linger_ms=0) as producer:
        for kill in range(3):
            wait_for(lambda: fully_in_sync(admin, topic_name), timeout=120,
                     what="in sync before the kill")
            producer.send(topic_name, b"warm-%d" % kill, partition=0).result(60)
            before = partition_states(admin, topic_name)[0]
            actor = leader_broker(admin, topic_name, 0)
            count = restarts(actor)
            ray.kill(actor, no_restart=False)
            # ray.kill is asynchronous: until the process is gone it may still answer.
            wait_for(lambda actor=actor, count=count: restarts(actor) > count, timeout=60,
                     what="the killed broker replaced by a new process")
            producer.send(topic_name, b"after-kill-%d" % kill, partition=0).result(60)
            now = partition_states(admin, topic_name)[0]
            assert now["leader"] != before["leader"], (before, now)
            assert now["leader_epoch"] > before["leader_epoch"], (before, now)
