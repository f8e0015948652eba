"""A consumer's side of group membership, against a fake coordinator (no Ray).

What must hold (issue: two owners after a controller restart): a member whose heartbeat or
commit is refused as unknown or fenced, or whose heartbeats went unanswered for a session
timeout, calls ``on_partitions_lost`` and stops reading those partitions before it rejoins;
after a coordinator restart it rejoins claiming exactly what it owns.
"""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from raylog.client import consumer as consumer_module
from raylog.client import membership as membership_module
from raylog.client.connection import PartitionMetadata, TopicMetadata
from raylog.client.consumer import Consumer
from raylog.errors import (
    IllegalGenerationError,
    NotPartitionOwnerError,
    RejoinRequiredError,
    UnknownMemberError,
)
from raylog.replica.partition import FetchResult
from raylog.types import TopicPartition

TOPIC = "t"
PARTITIONS = [TopicPartition(TOPIC, p) for p in range(2)]


class FakeCoordinator:
    """The controller's group RPCs: grants everything to the one member; refusals on
    request."""

    def __init__(self) -> None:
        self.joins: list[list[tuple[str, int]]] = []  # the claims of each join
        self.heartbeat_error: Exception | None = None
        self.commit_errors: list[Exception] = []
        self.commits = 0
        self.generation = 1
        self.log: list = []  # shared with the listener: one order of events

    def join_group(self, group_id, member_id, client_id, topics, pattern, session_timeout_ms,
                   assignor, actor, claims, timeout=None):
        self.joins.append([tuple(c) for c in claims])
        self.log.append(("joined", sorted(claims)))
        if isinstance(self.heartbeat_error, RejoinRequiredError):
            self.heartbeat_error = None  # joined: the restarted coordinator knows it again
        self.generation += 1
        return {"member_id": member_id, "generation": self.generation, "owned": claims}

    def heartbeat(self, group_id, member_id, owned, timeout=None):
        if self.heartbeat_error is not None:
            raise self.heartbeat_error
        return {"generation": self.generation, "owned": [tuple(tp) for tp in PARTITIONS],
                "revoke": [], "pending": False}

    def leave_group(self, group_id, member_id, timeout=None):
        return None

    def commit_offsets(self, group_id, member_id, generation, entries, timeout=None):
        self.commits += 1
        if self.commit_errors:
            raise self.commit_errors.pop(0)

    def committed_offsets(self, group_id, partitions, timeout=None):
        return {tuple(tp): None for tp in partitions}


class FakeHost:
    """The process serving every partition here: its fetches find nothing."""

    class fetch_many:  # an actor method's shape
        @staticmethod
        def remote(reads, *args, **kwargs):
            future = concurrent.futures.Future()
            future.set_result([FetchResult(b"", 0, 0, 0)] * len(reads))
            return future


class FakeReplica:
    broker_id = 0  # the leader of every partition here
    leader_epoch = 0
    handle = FakeHost()

    def fetch(self, offset, max_bytes, max_wait_ms, min_bytes, client_id=None):
        future = concurrent.futures.Future()
        future.set_result(FetchResult(b"", 0, 0, 0))
        return future

    def list_offset(self, spec):
        future = concurrent.futures.Future()
        future.set_result((0, -1))
        return future


class FakeCluster:
    def __init__(self) -> None:
        self.controller = FakeCoordinator()
        self.limits = None

    def topic(self, name, refresh=False, timeout=None):
        return TopicMetadata(name, "id", tuple(
            PartitionMetadata(p, 0, 0, (0,), (0,), {0: FakeReplica()}) for p in range(2)),
            {}, time.monotonic())

    def cached(self, name):
        return self.topic(name)

    def refresh_soon(self, name, newer_than=None):
        pass


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[str, list[TopicPartition]]] = []

    def on_partitions_assigned(self, partitions):
        self.events.append(("assigned", partitions))

    def on_partitions_revoked(self, partitions):
        self.events.append(("revoked", partitions))

    def on_partitions_lost(self, partitions):
        self.events.append(("lost", partitions))


@pytest.fixture
def member(monkeypatch):
    """A subscribed consumer that owns both partitions, and its fake coordinator."""
    monkeypatch.setattr(consumer_module, "resolve", lambda ref, timeout=None: ref.result())
    monkeypatch.setattr(consumer_module, "wait_done", lambda refs, timeout: list(refs))
    cluster = FakeCluster()
    # (fetch calls, answered at once with nothing: the fetches are incidental here)
    consumer = Consumer(cluster=cluster, group_id="g", enable_auto_commit=False,
                        auto_offset_reset="earliest", stream_fetches=False)
    listener = Listener()
    cluster.controller.log = listener.events  # joins and listener calls in one order
    consumer.subscribe([TOPIC], listener=listener)
    consumer._membership.refresh()  # the heartbeat thread does not run without Ray
    poll_until(consumer, lambda: consumer.assignment() == set(PARTITIONS))
    yield consumer, cluster.controller, listener
    consumer._membership._stop.set()


def poll_until(consumer: Consumer, condition, timeout_s: float = 5.0) -> None:
    """Poll (taking granted partitions needs their committed offsets, looked up on a
    thread) until ``condition()``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        consumer.poll(timeout_ms=10)


def test_a_heartbeat_refused_as_unknown_loses_everything_before_rejoining(member):
    consumer, coordinator, listener = member
    coordinator.heartbeat_error = UnknownMemberError("the coordinator forgot this member")
    consumer._membership.refresh()
    coordinator.heartbeat_error = None
    consumer.poll(timeout_ms=0)
    consumer._membership.tick()  # the heartbeat thread's step: it rejoins
    events = listener.events
    assert ("lost", PARTITIONS) in events
    # It gave everything up, then rejoined claiming nothing.
    assert events.index(("lost", PARTITIONS)) < len(events) - 1 - events[::-1].index(
        ("joined", []))
    assert coordinator.joins[-1] == []
    assert ("revoked", PARTITIONS) not in listener.events  # lost, not revoked


def test_a_commit_refused_as_unknown_loses_everything(member):
    consumer, coordinator, listener = member
    coordinator.commit_errors = [UnknownMemberError("unknown member")]
    with pytest.raises(UnknownMemberError):
        consumer.commit({PARTITIONS[0]: 5})
    consumer._membership.latest()  # lost_all is set: the next poll gives everything up
    joins = len(coordinator.joins)
    consumer.poll(timeout_ms=0)
    consumer._membership.tick()  # the heartbeat thread's step: it rejoins
    assert ("lost", PARTITIONS) in listener.events
    assert len(coordinator.joins) == joins + 1 and coordinator.joins[-1] == []


def test_a_commit_refused_for_partitions_it_reads_loses_everything(member):
    """The coordinator says the member does not own what it reads: it may be another's."""
    consumer, coordinator, listener = member
    coordinator.commit_errors = [NotPartitionOwnerError("not the owner")]
    with pytest.raises(NotPartitionOwnerError):
        consumer.commit({PARTITIONS[0]: 5})
    consumer.poll(timeout_ms=0)
    assert ("lost", PARTITIONS) in listener.events


def test_a_commit_fenced_twice_loses_everything(member):
    """Refused for its generation, the member learns the current one and tries once more;
    refused again, it is fenced: whatever it holds may be another member's by now."""
    consumer, coordinator, listener = member
    coordinator.commit_errors = [IllegalGenerationError("stale"), IllegalGenerationError("x")]
    with pytest.raises(IllegalGenerationError):
        consumer.commit({PARTITIONS[0]: 5})
    assert coordinator.commits == 2
    consumer.poll(timeout_ms=0)
    assert ("lost", PARTITIONS) in listener.events


def test_a_commit_refused_once_for_its_generation_succeeds_after_learning_the_new_one(member):
    consumer, coordinator, listener = member
    coordinator.commit_errors = [IllegalGenerationError("stale")]
    consumer.commit({PARTITIONS[0]: 5})
    assert coordinator.commits == 2
    consumer.poll(timeout_ms=0)
    assert all(event != "lost" for event, _ in listener.events)
    assert consumer.assignment() == set(PARTITIONS)


def test_a_member_whose_session_ran_out_claims_nothing_from_a_restarted_coordinator(
        member, monkeypatch):
    """The coordinator restarted after the member's session had run out: others may own
    its partitions now, so it gives them up and rejoins owning nothing."""
    consumer, coordinator, listener = member
    coordinator.heartbeat_error = RejoinRequiredError("the coordinator restarted")
    joins = len(coordinator.joins)
    later = time.monotonic() + consumer.config.session_timeout_ms / 1000 + 1
    monkeypatch.setattr(membership_module.time, "monotonic", lambda: later)
    consumer._membership.refresh()
    assert len(coordinator.joins) == joins  # no join claiming its partitions
    consumer.poll(timeout_ms=0)
    assert ("lost", PARTITIONS) in listener.events
    consumer._membership.tick()  # the heartbeat thread's rejoin, after it gave all up
    assert coordinator.joins[joins:] == [[]]


def test_a_silent_session_loses_everything(member, monkeypatch):
    """No heartbeat answered for session_timeout_ms: the coordinator may have given the
    partitions away, so the member stops reading them even before it hears so."""
    consumer, _, listener = member
    later = time.monotonic() + consumer.config.session_timeout_ms / 1000 + 1
    monkeypatch.setattr(membership_module.time, "monotonic", lambda: later)
    consumer.poll(timeout_ms=0)
    assert ("lost", PARTITIONS) in listener.events


def test_after_a_coordinator_restart_the_member_rejoins_claiming_what_it_owns(member):
    consumer, coordinator, listener = member
    coordinator.heartbeat_error = RejoinRequiredError("the coordinator restarted")
    joins = len(coordinator.joins)
    consumer._membership.refresh()
    coordinator.heartbeat_error = None
    assert len(coordinator.joins) == joins + 1
    assert sorted(coordinator.joins[-1]) == [tuple(tp) for tp in PARTITIONS]
    consumer.poll(timeout_ms=0)
    assert all(event != "lost" for event, _ in listener.events)
    assert consumer.assignment() == set(PARTITIONS)
