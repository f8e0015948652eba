"""Clients keep their promises while the controller or a leader's broker hangs (issue 22,
items 7 and 8): a process stopped with SIGSTOP answers nothing and is not dead to Ray.

- The controller stopped for longer than the producer's delivery timeout, and a leader's
  broker killed meanwhile (as the chaos suite's ``controller_pause_leader_kill``): sends to
  partitions whose leaders live are acknowledged and read meanwhile, each poll returns in
  time, and every future resolves by its deadline (DESIGN.md, invariant 7), those of the
  dead leader's partition too; nothing is lost or duplicated.
- A group member whose coordinator (in the controller) is stopped reads on while its
  session could be alive, gives its partitions up when it would have run out, and rejoins
  when the controller answers again.
- A leader's broker stopped past the broker session: producers and consumers made before
  it stopped move to its successor once the cluster fenced it, before it is continued
  (needs the cluster's broker sessions; skipped without them).

Every stopped process is continued in a ``finally``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Iterator

import pytest
import ray

from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.metadata.settings import ReplicationSettings
from tests import history
from tests.history import SLACK_S, summary
from tests.integration.conftest import broker_processes, consume_all, leader_broker, wait_for
from tests.integration.test_replication import create_replicated, fully_in_sync
from tests.integration.workload import FINAL_READER, Sent

PARTITIONS = 3
DELIVERY_MS = 10_000
POLL_MS = 100


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


@contextlib.contextmanager
def stopped(pid: int | list[int]) -> Iterator[float]:
    """The process ``pid`` (or each of a list) stopped (SIGSTOP) for the block, continued
    (SIGCONT) however the block ends. Yields when it was stopped."""
    pids = [pid] if isinstance(pid, int) else pid
    for each in pids:
        os.kill(each, signal.SIGSTOP)
    try:
        yield time.monotonic()
    finally:
        for each in pids:
            os.kill(each, signal.SIGCONT)


class Sends:
    """One producer's sends, each watched for when it resolves (tests/integration/workload)."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.delivery_s = producer.config.delivery_timeout_ms / 1000
        self.sent: list[Sent] = []

    def send(self, partition: int, tag: str) -> Sent:
        value = b"%s-%d-%06d" % (tag.encode(), partition, len(self.sent))
        at = time.monotonic()
        sent = Sent(0, len(self.sent), value, self.producer.send(self.topic, value,
                                                                 partition=partition),
                    False, at, at + self.delivery_s, key_partition=partition)
        sent.watch()
        self.sent.append(sent)
        return sent

    def overdue(self, now: float) -> list[Sent]:
        """Sends unresolved past their deadline and the slack, or resolved after it."""
        return [s for s in self.sent if s.deadline + SLACK_S < now and (
            s.resolved_at is None or s.resolved_at > s.deadline + SLACK_S)]

    def anomalies(self, partitions: int) -> list[history.Anomaly]:
        """What the history checker finds in these sends and a whole read of the topic."""
        records = [s.record() for s in self.sent]
        final = consume_all(self.topic, partitions, expected=sum(r.acked for r in records))
        return history.check(records, [history.Read(FINAL_READER, r.partition, r.offset,
                                                    r.value) for r in final],
                             complete_readers=[FINAL_READER])


def timed_poll(consumer: Consumer, polls: list[float]) -> list:
    """``poll``'s records; how long it took goes to ``polls``."""
    started = time.monotonic()
    records = consumer.poll(timeout_ms=POLL_MS)
    polls.append(time.monotonic() - started)
    return records


def read_until(consumer: Consumer, wanted: set[bytes], polls: list[float],
               timeout: float) -> set[bytes]:
    """Poll until every value of ``wanted`` was read; all that was read."""
    seen: set[bytes] = set()

    def done() -> bool:
        seen.update(r.value for r in timed_poll(consumer, polls))
        return wanted <= seen

    wait_for(done, timeout=timeout, what=f"{len(wanted)} records read, first "
                                         f"{sorted(wanted)[:1]}")
    return seen


@pytest.mark.cluster
def test_a_stopped_controller_stops_no_produce_or_fetch_and_every_future_ends_in_time(
        ray_cluster, admin, topic_name):
    """SIGSTOP the controller for longer than the producer's delivery timeout and kill the
    broker leading partition 0 meanwhile. Partition 0's sends cannot succeed (its leader's
    successor needs the controller) and fail by their deadline; the other partitions' sends
    are acknowledged and read while the controller is stopped; every poll returns in time."""
    admin.create_topic(topic_name, partitions=PARTITIONS, replication_factor=1)
    leaders = {p["partition"]: p["leader"] for p in admin.describe_topic(topic_name)["partitions"]}
    live = [p for p, broker in leaders.items() if broker != leaders[0]]
    assert live, f"every partition on one broker: {leaders}"
    victim = leader_broker(admin, topic_name, 0)
    with Producer(acks="all", linger_ms=1, delivery_timeout_ms=DELIVERY_MS,
                  retry_backoff_ms=50) as producer, \
            Consumer(auto_offset_reset="earliest", fetch_max_wait_ms=200) as consumer:
        consumer.assign([TopicPartition(topic_name, p) for p in range(PARTITIONS)])
        sends = Sends(producer, topic_name)
        for p in range(PARTITIONS):
            sends.send(p, "warm").future.result(timeout=60)
        polls: list[float] = []
        read_until(consumer, {s.value for s in sends.sent}, polls, timeout=60)
        read: set[bytes] = set()
        pid = ray_cluster.raylog.controller.ready()["pid"]
        with stopped(pid) as since:
            # Ray restarts it; only the controller can tell the new process what it holds.
            ray.kill(victim, no_restart=False)
            while time.monotonic() - since < DELIVERY_MS / 1000 + 2 * SLACK_S:
                for p in range(PARTITIONS):
                    sends.send(p, "stopped")
                read.update(r.value for r in timed_poll(consumer, polls))
            # Judged while the controller is still stopped:
            overdue = sends.overdue(time.monotonic())
            assert not overdue, [s.record() for s in overdue[:3]]
            during = [s for s in sends.sent if s.sent_at >= since]
            on_live = [s for s in during if s.key_partition in live]
            for s in on_live:
                s.future.result(timeout=SLACK_S)  # acknowledged, the controller stopped
            read |= read_until(consumer, {s.value for s in on_live} - read, polls,
                               timeout=SLACK_S)
            assert any(s.key_partition == 0 and s.future.done() and s.future.exception(0)
                       for s in during), "no send to the dead leader's partition failed"
        assert max(polls) < POLL_MS / 1000 + SLACK_S, max(polls)
        wait_for(lambda: sends.send(0, "after").future.result(timeout=30), timeout=120,
                 what="partition 0 served again")
        for s in sends.sent:
            s.future.exception(timeout=DELIVERY_MS / 1000 + SLACK_S)
    anomalies = [a for a in sends.anomalies(PARTITIONS) if a.kind != "late_failure"]
    assert not anomalies, summary(anomalies)


@pytest.mark.cluster
def test_a_member_cut_off_from_a_stopped_coordinator_gives_up_at_its_session_and_rejoins(
        ray_cluster, admin, topic_name):
    """A group member reads on while the controller (its coordinator) is stopped, every
    poll in time; once its session would have run out it gives its partitions up (lost) and
    reads nothing; when the controller is continued it rejoins and reads again."""
    session_ms = 6000
    admin.create_topic(topic_name, partitions=PARTITIONS, replication_factor=1)
    lost: list[tuple[float, list]] = []
    listener = type("Listener", (), {
        "on_partitions_lost": lambda self, ps: lost.append((time.monotonic(), ps))})()
    with Producer(acks="all", linger_ms=1) as producer, \
            Consumer(group_id=f"g-{topic_name}", auto_offset_reset="earliest",
                     fetch_max_wait_ms=200, session_timeout_ms=session_ms,
                     heartbeat_interval_ms=500) as consumer:
        consumer.subscribe([topic_name], listener=listener)
        polls: list[float] = []
        producer.send(topic_name, b"first", partition=0).result(timeout=60)
        read_until(consumer, {b"first"}, polls, timeout=120)
        pid = ray_cluster.raylog.controller.ready()["pid"]
        with stopped(pid) as since:
            producer.send(topic_name, b"stopped", partition=1).result(timeout=30)
            read_until(consumer, {b"stopped"}, polls, timeout=session_ms / 1000)
            while not lost and time.monotonic() - since < session_ms / 1000 + 2 * SLACK_S:
                timed_poll(consumer, polls)
            assert lost, "kept its partitions past its session"
            # Not much before: its last answered heartbeat was sent at most an interval
            # before the stop.
            assert lost[0][0] - since >= session_ms / 1000 - 1
            assert consumer.assignment() == set()
            producer.send(topic_name, b"unowned", partition=2).result(timeout=30)
            for _ in range(5):
                assert not any(r.value == b"unowned" for r in timed_poll(consumer, polls))
        assert max(polls) < POLL_MS / 1000 + SLACK_S, max(polls)
        read_until(consumer, {b"unowned"}, polls, timeout=120)  # rejoined: reading again


def cluster_fences_hung_brokers() -> bool:
    """Whether this cluster has broker sessions (broker.session.timeout.ms): a broker that
    stops answering is fenced and its leaderships move (issue 22, item 7, cluster side)."""
    return "broker_session_timeout_ms" in {f.name for f in dataclasses.fields(
        ReplicationSettings)}


@pytest.mark.cluster
@pytest.mark.skipif(not cluster_fences_hung_brokers(),
                    reason="needs broker sessions (broker.session.timeout.ms, issue 22 item 7, "
                           "branch liveness): without them a stopped leader is never "
                           "replaced")
def test_clients_made_before_a_leader_stopped_move_to_its_successor(ray_cluster, admin,
                                                                     topic_name):
    """SIGSTOP the broker leading partition 0 for longer than a broker session plus a
    failover. A producer and a consumer that were talking to it before it stopped (their
    requests to it hang) move to the new leader once the cluster fenced it: both are served
    again while it is still stopped, not after request_timeout_ms or its return. Every
    send made meanwhile lands once."""
    pause_s = ReplicationSettings.from_environ().broker_session_timeout_ms / 1000 + 11
    create_replicated(admin, topic_name, partitions=1)
    wait_for(lambda: fully_in_sync(admin, topic_name), timeout=120, what="in sync")
    tp = TopicPartition(topic_name, 0)
    with Producer(acks="all", linger_ms=1, delivery_timeout_ms=120_000) as producer, \
            Consumer(auto_offset_reset="earliest", fetch_max_wait_ms=200,
                     fetch_from_nearest=False) as consumer:
        consumer.assign([tp])
        sends = Sends(producer, topic_name)
        sends.send(0, "warm").future.result(timeout=60)
        read = read_until(consumer, {sends.sent[0].value}, [], timeout=60)
        pid = broker_processes(leader_broker(admin, topic_name, 0))  # with its hosts
        with stopped(pid) as since:
            resumed = None
            while time.monotonic() - since < pause_s:
                sends.send(0, "stopped")
                read.update(r.value for r in consumer.poll(timeout_ms=50))
                acked = [s for s in sends.sent if s.sent_at >= since and s.future.done()
                         and s.future.exception(0) is None]
                if acked and any(s.value in read for s in acked):
                    resumed = time.monotonic() - since
                    break
            assert resumed is not None, (
                f"no send made after the leader stopped was acknowledged and read within "
                f"{pause_s:.0f} s, while it stayed stopped")
        for s in sends.sent:
            s.future.result(timeout=120)
    anomalies = sends.anomalies(1)
    assert not anomalies, summary(anomalies)
