"""Consumer groups on the 3-broker cluster: ownership, death, commits, restarts, lag."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray

import raylog
from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.cli import main as cli
from raylog.errors import (
    CommitFailedError,
    IllegalGenerationError,
    IllegalStateError,
    NoOffsetForPartitionError,
    NotPartitionOwnerError,
    UnknownMemberError,
)
from raylog.util.cluster_names import CONTROLLER_NAME, NAMESPACE
from tests.children import Child
from tests.integration.conftest import restart_controller, wait_for


@ray.remote(num_cpus=0, max_restarts=0)
class Member:
    """A group member living in a Ray actor: polls, 'processes' by returning the records,
    and commits only after that."""

    def __init__(self, group_id: str, topics: list[str], **settings) -> None:
        raylog.init()
        self.consumer = Consumer(group_id=group_id, auto_offset_reset="earliest",
                                 enable_auto_commit=False, heartbeat_interval_ms=100,
                                 **settings)
        self.consumer.subscribe(topics)

    def poll(self, timeout_ms: int = 200) -> list[tuple[int, int, bytes]]:
        records = self.consumer.poll(timeout_ms=timeout_ms, max_records=2000)
        processed = [(r.partition, r.offset, r.value) for r in records]
        if processed:
            self.consumer.commit()
        return processed

    def assignment(self) -> list[tuple[str, int]]:
        self.consumer.poll(timeout_ms=0, max_records=1)  # apply pending assignment changes
        return sorted(self.consumer.assignment())

    def member_id(self) -> str:
        return self.consumer._membership.member_id

    def close(self) -> None:
        self.consumer.close()


@ray.remote(num_cpus=0, max_restarts=0)
class Witness:
    """A group member in a Ray actor that records, on the machine's monotonic clock, when
    its listener was told it gained and lost each partition and when it processed each
    record (after which it commits)."""

    def __init__(self, group_id: str, topic: str) -> None:
        raylog.init()
        self.events: list[tuple[str, int, float]] = []  # (assigned|revoked|lost, partition, t)
        self.processed: list[tuple[int, int, bytes, float]] = []
        self.consumer = Consumer(group_id=group_id, auto_offset_reset="earliest",
                                 enable_auto_commit=False, heartbeat_interval_ms=100)
        self.consumer.subscribe([topic], listener=self)

    def _note(self, kind: str, partitions) -> None:
        now = time.monotonic()
        self.events.extend((kind, tp.partition, now) for tp in partitions)

    def on_partitions_assigned(self, partitions) -> None:
        self._note("assigned", partitions)

    def on_partitions_revoked(self, partitions) -> None:
        self._note("revoked", partitions)

    def on_partitions_lost(self, partitions) -> None:
        self._note("lost", partitions)

    def step(self) -> int:
        records = self.consumer.poll(timeout_ms=100, max_records=300)
        now = time.monotonic()
        self.processed.extend((r.partition, r.offset, r.value, now) for r in records)
        if records:
            with contextlib.suppress(CommitFailedError):  # redelivered to the next owner
                self.consumer.commit()
        return len(records)

    def history(self) -> tuple[list, list]:
        return self.events, self.processed

    def close(self) -> None:
        self.consumer.close()


class Recorder:
    """A rebalance listener that records what it is told, in order."""

    def __init__(self, on_revoked: Callable[[], object] | None = None) -> None:
        self.events: list[tuple[str, list]] = []
        self._on_revoked = on_revoked

    def on_partitions_assigned(self, partitions) -> None:
        self.events.append(("assigned", partitions))

    def on_partitions_revoked(self, partitions) -> None:
        self.events.append(("revoked", partitions))
        if self._on_revoked is not None:
            self._on_revoked()

    def on_partitions_lost(self, partitions) -> None:
        self.events.append(("lost", partitions))


def controller():
    return ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)


def history(group_id: str) -> list:
    return ray.get(controller().group_history.remote(group_id))


def assert_never_two_owners(group_id: str) -> None:
    for generation, owners in history(group_id):
        counts = Counter(tuple(tp) for tps in owners.values() for tp in tps)
        doubled = [tp for tp, n in counts.items() if n > 1]
        assert not doubled, f"generation {generation}: {doubled} owned twice: {owners}"


def produce(topic: str, values: range, partitions: int | None = None) -> None:
    with Producer(linger_ms=2) as producer:
        for v in values:
            producer.send(topic, b"%d" % v, key=b"k%d" % (v % 97))


def assignments(members) -> dict:
    return dict(zip(members, ray.get([m.assignment.remote() for m in members]), strict=True))


@pytest.fixture
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


@pytest.fixture
def spawn() -> Iterator[Callable[..., Any]]:
    """Starts Member actors, and kills whatever is left of them when the test ends."""
    started: list = []

    def start(group: str, topics: list[str], **settings: Any) -> Any:
        started.append(Member.remote(group, topics, **settings))
        return started[-1]

    yield start
    for member in started:
        ray.kill(member, no_restart=True)


def test_three_actors_share_six_partitions_and_a_dead_ones_move_at_once(admin, topic_name,
                                                                          spawn):
    group = f"g-{topic_name}"
    admin.create_topic(topic_name, partitions=6)
    # A session long enough that only the coordinator's watch on the dead actor, not the
    # session timeout, can move the partitions within the wait below.
    session_ms = 300_000
    members = [spawn(group, [topic_name], session_timeout_ms=session_ms) for _ in range(3)]
    wait_for(lambda: sorted(len(a) for a in assignments(members).values()) == [2, 2, 2],
             timeout=30, what="two partitions per member")
    owned = assignments(members)
    assert sorted(tp for tps in owned.values() for tp in tps) == \
        [(topic_name, p) for p in range(6)]
    victim, survivors = members[0], members[1:]
    moved = set(owned[victim])
    ray.kill(victim, no_restart=True)
    wait_for(lambda: sorted(len(a) for a in assignments(survivors).values()) == [3, 3],
             timeout=session_ms / 1000 / 2, interval=0.05,
             what="the dead member's partitions to move before its session could expire")
    after = assignments(survivors)
    assert moved <= {tp for tps in after.values() for tp in tps}
    assert_never_two_owners(group)
    ray.get([m.close.remote() for m in survivors])


def test_stop_and_restart_resumes_from_the_committed_offset(admin, topic_name):
    group = f"g-{topic_name}"
    admin.create_topic(topic_name, partitions=2)
    produce(topic_name, range(100))
    first = Consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    first.subscribe([topic_name])
    seen = []
    wait_for(lambda: seen.extend(first.poll(timeout_ms=200, max_records=30)) or len(seen) >= 30,
             what="30 records")
    # position() resolves a partition not fetched from yet (as Kafka's does); commit() with no
    # argument commits only the positions already known, so resolve them first.
    positions = {tp: first.position(tp) for tp in first.assignment()}
    first.commit()
    first.close()
    produce(topic_name, range(100, 150))
    second = Consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    second.subscribe([topic_name])
    rest = []
    wait_for(lambda: rest.extend(second.poll(timeout_ms=200)) or
             len(seen) + len(rest) >= 150, what="the rest")
    assert sorted(int(r.value) for r in seen + rest) == list(range(150))  # no gap, no dupes
    assert second.committed(list(positions)) == positions
    second.close()


def test_committed_offsets_survive_a_controller_restart(admin, topic_name):
    group = f"g-{topic_name}"
    admin.create_topic(topic_name, partitions=3)
    produce(topic_name, range(60))
    consumer = Consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe([topic_name])
    seen = []

    def read_everything() -> bool:
        seen.extend(consumer.poll(timeout_ms=200, max_records=1000))
        return len(seen) == 60

    wait_for(read_everything, what="everything read")
    consumer.commit()
    committed = consumer.committed([TopicPartition(topic_name, p) for p in range(3)])
    assert sum(committed.values()) == 60
    consumer.close()
    restart_controller()
    wait_for(lambda: admin.describe_group(group)["offsets"] ==
             {f"{topic_name}:{p}": committed[TopicPartition(topic_name, p)] for p in range(3)},
             timeout=60, what="offsets after the controller restart")
    # A consumer joining now starts where the group left off.
    again = Consumer(group_id=group, auto_offset_reset="earliest")
    again.subscribe([topic_name])
    late: list = []
    wait_for(lambda: late.extend(again.poll(timeout_ms=200)) or len(again.assignment()) == 3,
             what="the new member to own every partition")
    assert {tp: again.position(tp) for tp in again.assignment()} == committed
    # What it reads next are the records produced now, none of those committed before.
    produce(topic_name, range(60, 66))
    wait_for(lambda: late.extend(again.poll(timeout_ms=200)) or len(late) >= 6,
             what="the records produced after the restart")
    assert sorted(int(r.value) for r in late) == list(range(60, 66))
    again.close()


@pytest.mark.parametrize("kill", [False, True], ids=["members-added", "members-killed"])
def test_records_are_consumed_through_joins_and_deaths(admin, topic_name, kill, spawn):
    """With producers running and members added (and killed), every record is consumed at
    least once; exactly once when nothing dies between processing and commit."""
    group = f"g-{topic_name}"
    admin.create_topic(topic_name, partitions=6)
    total = 6000
    producing = threading.Thread(target=lambda: [produce(topic_name, range(i, i + 500))
                                                 or time.sleep(0.2)
                                                 for i in range(0, total, 500)])
    producing.start()
    members = [spawn(group, [topic_name]) for _ in range(2)]
    seen: list[tuple[int, int, bytes]] = []
    started = time.monotonic()
    steps = {2.0: "add", 4.0: "kill" if kill else "add", 6.0: "add"}
    while True:
        elapsed = time.monotonic() - started
        for at in [t for t in steps if t <= elapsed]:
            if steps.pop(at) == "add":
                members.append(spawn(group, [topic_name]))
            else:
                ray.kill(members.pop(0), no_restart=True)
        for batch in ray.get([m.poll.remote() for m in members]):
            seen.extend(batch)
        values = Counter(int(v) for _, _, v in seen)
        if not producing.is_alive() and not steps and len(values) == total:
            break
        assert elapsed < 120, f"only {len(values)} of {total} records consumed"
    producing.join()
    assert set(values) == set(range(total))
    if not kill:
        assert max(values.values()) == 1, "a record was processed twice"
    assert_never_two_owners(group)
    ray.get([m.close.remote() for m in members])


def test_stale_and_foreign_commits_are_refused(admin, topic_name):
    group = f"g-{topic_name}"
    admin.create_topic(topic_name, partitions=2)
    a = Consumer(group_id=group, enable_auto_commit=False)
    a.subscribe([topic_name])
    wait_for(lambda: a.poll(timeout_ms=50) == [] and len(a.assignment()) == 2,
             what="a owns both partitions")
    member, generation = a._membership.member_id, a._membership.generation
    commit = admin._cluster.controller.commit_offsets
    with pytest.raises(IllegalGenerationError):
        commit(group, member, generation - 1, [(topic_name, 0, 0, "")])
    with pytest.raises(UnknownMemberError):
        commit(group, "nobody", generation, [(topic_name, 0, 0, "")])
    b = Consumer(group_id=group, enable_auto_commit=False)
    b.subscribe([topic_name])
    wait_for(lambda: [a.poll(timeout_ms=50), b.poll(timeout_ms=50)] and
             len(a.assignment()) == len(b.assignment()) == 1, what="one partition each")
    (not_a,) = b.assignment()
    with pytest.raises(NotPartitionOwnerError):
        a.commit({not_a: 0})
    with pytest.raises(UnknownMemberError):  # outside the group while it has members
        Consumer(group_id=group).commit({not_a: 0})
    assert admin.describe_group(group)["offsets"] == {}
    with pytest.raises(IllegalStateError):
        a.assign([not_a])
    a.close()
    b.close()


def test_offset_reset_policies_and_listeners(admin, topic_name):
    group = f"g-{topic_name}"
    admin.create_topic(topic_name, partitions=1)
    produce(topic_name, range(10))
    strict = Consumer(group_id=group, auto_offset_reset="none")
    strict.subscribe([topic_name])
    deadline = time.monotonic() + 10
    with pytest.raises(NoOffsetForPartitionError):
        while time.monotonic() < deadline:  # raises once the partition is assigned
            strict.poll(timeout_ms=100)
    strict.close()
    listener = Recorder(on_revoked=lambda: consumer.commit())  # commit before giving up
    events = listener.events
    consumer = Consumer(group_id=group, auto_offset_reset="latest", enable_auto_commit=False)
    consumer.subscribe([topic_name], listener=listener)
    wait_for(lambda: consumer.poll(timeout_ms=50) == [] and events, what="an assignment")
    assert events == [("assigned", [TopicPartition(topic_name, 0)])]
    assert consumer.position(TopicPartition(topic_name, 0)) == 10  # latest
    produce(topic_name, range(10, 15))
    wait_for(lambda: consumer.poll(timeout_ms=200), what="new records")
    consumer.unsubscribe()
    assert events[-1] == ("revoked", [TopicPartition(topic_name, 0)])
    assert consumer.committed([TopicPartition(topic_name, 0)]) == {
        TopicPartition(topic_name, 0): 15}
    consumer.close()


def test_a_crashed_driver_member_leaves_after_its_session_timeout(ray_cluster, admin,
                                                                   topic_name):
    group = f"g-{topic_name}"
    admin.create_topic(topic_name, partitions=4)
    script = textwrap.dedent(f"""
        import time, raylog
        raylog.init({ray_cluster.cluster.address!r})
        c = raylog.Consumer(group_id={group!r}, session_timeout_ms=2000)
        c.subscribe([{topic_name!r}])
        print("joined", flush=True)
        while True:
            c.poll(timeout_ms=200)
    """)
    with Child([sys.executable, "-c", script]) as driver:
        assert driver.next_line(timeout=120) == "joined"
        local = Consumer(group_id=group, session_timeout_ms=2000)
        local.subscribe([topic_name])
        wait_for(lambda: local.poll(timeout_ms=50) == [] and len(local.assignment()) == 2,
                 timeout=30, what="a 2/2 split")
        os.kill(driver.process.pid, signal.SIGKILL)
        started = time.monotonic()
        wait_for(lambda: local.poll(timeout_ms=50) == [] and len(local.assignment()) == 4,
                 timeout=30, what="the crashed member's partitions")
        assert time.monotonic() - started >= 1.0  # it waited for the session timeout
        assert_never_two_owners(group)
        local.close()


def test_groups_read_independently_and_lag_is_reported(admin, topic_name, capsys):
    admin.create_topic(topic_name, partitions=2)
    produce(topic_name, range(400))
    fast = Consumer(group_id=f"fast-{topic_name}", auto_offset_reset="earliest",
                    enable_auto_commit=False)
    slow = Consumer(group_id=f"slow-{topic_name}", auto_offset_reset="earliest",
                    enable_auto_commit=False, max_poll_records=10)
    fast.subscribe([topic_name])
    slow.subscribe([topic_name])
    got = []
    wait_for(lambda: got.extend(fast.poll(timeout_ms=200)) or len(got) == 400,
             what="the fast group to read everything")
    fast.commit()
    slow_got = []
    wait_for(lambda: slow_got.extend(slow.poll(timeout_ms=200)) or slow_got, what="some")
    # A partition whose position is not known yet (its offset reset still out when the
    # first poll returned another's records) is not committed, so not in the lag: as
    # Kafka's consumer, commit() takes the partitions with a position.
    for tp in slow.assignment():
        slow.position(tp)
    slow.commit()
    fast_view = admin.describe_group(f"fast-{topic_name}")
    slow_view = admin.describe_group(f"slow-{topic_name}")
    assert fast_view["lag"] == 0
    assert slow_view["lag"] == 400 - len(slow_got)
    assert sum(p["end_offset"] for p in slow_view["partitions"]) == 400
    listed = {g["group_id"]: g for g in admin.list_groups()}
    assert listed[f"slow-{topic_name}"]["members"] == 1
    assert cli(["groups", "describe", f"slow-{topic_name}"]) == 0
    assert f"total lag {400 - len(slow_got)}" in capsys.readouterr().out
    fast.close()
    slow.close()
    assert cli(["groups", "reset-offsets", f"slow-{topic_name}", topic_name,
                "--to", "earliest"]) == 0  # a dry run: the plan only
    assert admin.describe_group(f"slow-{topic_name}")["lag"] == 400 - len(slow_got)
    assert cli(["groups", "reset-offsets", f"slow-{topic_name}", topic_name,
                "--to", "earliest", "--execute"]) == 0
    assert admin.describe_group(f"slow-{topic_name}")["lag"] == 400
    assert cli(["groups", "delete", f"fast-{topic_name}"]) == 0
    assert f"fast-{topic_name}" not in {g["group_id"] for g in admin.list_groups()}


def ownership_intervals(events: list[tuple[str, int, float]], end: float
                        ) -> list[tuple[int, float, float]]:
    """(partition, from, to) for each time a listener was told it owned a partition."""
    start: dict[int, float] = {}
    out = []
    for kind, partition, at in events:
        if kind == "assigned":
            assert partition not in start, f"partition {partition} assigned twice in a row"
            start[partition] = at
        else:
            out.append((partition, start.pop(partition), at))
    out.extend((p, t, end) for p, t in start.items())
    return out


def test_controller_restarts_never_give_a_partition_two_owners(admin, topic_name):
    group = f"g-{topic_name}"
    admin.create_topic(topic_name, partitions=6)
    produced: list[int] = []
    stop_producing = threading.Event()

    def produce_until_stopped() -> None:  # load all through the restarts, not just before
        i = 0
        while not stop_producing.is_set():
            produce(topic_name, range(i, i + 300))
            produced.extend(range(i, i + 300))
            i += 300
            time.sleep(0.3)

    producing = threading.Thread(target=produce_until_stopped, daemon=True)
    producing.start()
    witnesses = [Witness.remote(group, topic_name) for _ in range(3)]
    stop = threading.Event()

    def drive() -> None:  # the members poll, process and commit all along
        while not stop.is_set():
            ray.get([w.step.remote() for w in witnesses])

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    try:
        def histories() -> list:
            return ray.get([w.history.remote() for w in witnesses])

        def processed() -> set[int]:
            return {int(v) for _, records in histories() for _, _, v, _ in records}

        wait_for(lambda: all(any(kind == "assigned" for kind, _, _ in events)
                             for events, _ in histories()),
                 timeout=60, what="every member to own partitions")
        for _ in range(2):
            before = len(processed())
            restart_controller()
            # Records produced after the restart are processed: the load went on through it.
            wait_for(lambda before=before: len(processed()) >= before + 600,
                     timeout=120, what="processing to go on after the restart")
        stop_producing.set()
        producing.join(timeout=60)
        wait_for(lambda: processed() == set(produced), timeout=180,
                 what="every record to be processed")
        stop.set()
        driver.join(timeout=60)
        final = histories()
    finally:
        stop.set()
        stop_producing.set()
        producing.join(timeout=60)
        for witness in witnesses:
            ray.kill(witness, no_restart=True)
    owners = []  # (partition, from, to, member)
    for member, (events, records) in enumerate(final):
        intervals = ownership_intervals(events, math.inf)
        owners.extend((p, start, stop, member) for p, start, stop in intervals)
        for partition, offset, _, at in records:  # processed only while owning
            assert any(p == partition and start <= at <= stop for p, start, stop in intervals), \
                f"member {member} processed {partition}@{offset} without owning it"
    for p, start, stop, member in owners:
        for q, other_start, other_stop, other in owners:
            if q == p and other != member:
                assert stop <= other_start or other_stop <= start, \
                    f"partition {p} owned by members {member} and {other} at once"


def test_a_member_the_coordinator_forgot_loses_its_partitions_before_rejoining(admin,
                                                                               topic_name):
    group = f"g-{topic_name}"
    admin.create_topic(topic_name, partitions=2)
    listener = Recorder()
    events = listener.events
    consumer = Consumer(group_id=group, enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.subscribe([topic_name], listener=listener)
    wait_for(lambda: consumer.poll(timeout_ms=50) == [] and len(consumer.assignment()) == 2,
             what="both partitions")
    member = consumer._membership.member_id
    admin._cluster.controller.leave_group(group, member)  # as if its session ran out
    with pytest.raises(UnknownMemberError):
        consumer.commit({TopicPartition(topic_name, 0): 0})
    consumer.poll(timeout_ms=0)
    lost = [TopicPartition(topic_name, p) for p in range(2)]
    assert events[1] == ("lost", lost)  # not revoked: it cannot commit them any more
    assert consumer._membership.member_id == member  # rejoined under its own id
    wait_for(lambda: consumer.poll(timeout_ms=50) == [] and len(consumer.assignment()) == 2,
             what="both partitions again")
    assert events[2] == ("assigned", lost)
    consumer.close()
