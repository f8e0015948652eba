"""Offset commits on the 3-broker cluster under the race of issue 22, item 6: a member's
commit is on its way to __consumer_offsets (its leader broker paused with SIGSTOP) when the
member is fenced (its actor killed: Ray's death notice removes it at once, item 5); the
controller sends the batch again after the paused leader gave no answer. The fenced commit
must not count, the retry must not append it twice, the log must agree with memory (also
for a controller that restarts and replays it), and the next owner starts from the offset
committed before the race.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import ray

import raylog
from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.client.remote import resolve
from raylog.groups.coordinator import GroupCoordinator
from raylog.metadata.topics import CONSUMER_OFFSETS_TOPIC
from tests.integration.conftest import (
    broker_processes,
    leader_broker,
    restart_controller,
    wait_for,
)

# The controller's wait for one answer of a leader (actors/leader_calls.py, APPEND_ANSWER_S): the
# pause outlasts it, so the controller sends the batch again while the first is unanswered.
APPEND_ANSWER_S = 15.0


@ray.remote(num_cpus=0, max_restarts=0)
class Committer:
    """A group member in a Ray actor with a session long enough that only Ray's death
    notice can remove it within the test; commits what it is told to."""

    def __init__(self, group_id: str, topic: str) -> None:
        raylog.init()
        self.topic = topic
        self.consumer = Consumer(group_id=group_id, enable_auto_commit=False,
                                 heartbeat_interval_ms=100, session_timeout_ms=300_000)
        self.consumer.subscribe([topic])

    def assignment(self) -> list[tuple[str, int]]:
        self.consumer.poll(timeout_ms=0, max_records=1)
        return sorted(self.consumer.assignment())

    def commit(self, partition: int, offset: int) -> None:
        self.consumer.commit({TopicPartition(self.topic, partition): offset})


def offset_history(admin: Admin, partition: int, group_id: str, tp: TopicPartition) -> list:
    """The committed offsets of ``tp`` that __consumer_offsets-``partition`` holds for the
    group, in log order (None for a tombstone), read from its leader below the high
    watermark."""
    meta = admin._cluster.topic(CONSUMER_OFFSETS_TOPIC, refresh=True).partitions[partition]
    leader = meta.leader_client()
    replica = next(r for r in admin.describe_replicas(CONSUMER_OFFSETS_TOPIC)
                   if r["partition"] == partition and r["broker_id"] == leader.broker_id)
    table = resolve(leader.read_kafka_table(replica["log_start_offset"],
                                            replica["high_watermark"]), timeout=60)
    key = json.dumps(["offset", group_id, tp.topic, tp.partition]).encode()
    return [None if value is None else json.loads(value)["offset"]
            for k, value in zip(table.column("key").to_pylist(),
                                table.column("value").to_pylist(), strict=True) if k == key]


def held(admin: Admin, group_id: str) -> set[tuple[str, int]]:
    return {tuple(tp) for tp in admin.describe_group(group_id)["held"]}


def test_a_fenced_commit_on_its_way_is_not_applied_nor_appended_twice(ray_cluster,
                                                                      topic_name):
    admin = Admin(cluster=ray_cluster.raylog)
    group = f"g-{topic_name}"
    p0 = TopicPartition(topic_name, 0)
    admin.list_groups()  # the coordinator loads, __consumer_offsets exists
    offsets_partition = GroupCoordinator.partition_for(group)
    paused_broker = admin.describe_topic(CONSUMER_OFFSETS_TOPIC)[
        "partitions"][offsets_partition]["leader"]
    # The topic's partitions live elsewhere: only the group's offsets wait on the pause.
    elsewhere = next(b for b in ray_cluster.broker_ids if b != paused_broker)
    admin.create_topic(topic_name, partitions=2)
    admin.reassign_partitions(topic_name, {0: [elsewhere], 1: [elsewhere]})
    wait_for(lambda: all(p["leader"] == elsewhere and not p.get("target")
                         for p in admin.describe_topic(topic_name)["partitions"]),
             timeout=60, what="the topic to move off the paused broker")
    with Producer(linger_ms=2) as producer:
        for i in range(30):
            producer.send(topic_name, b"%d" % i, partition=0)

    member = Committer.remote(group, topic_name)
    wait_for(lambda: len(ray.get(member.assignment.remote())) == 2, timeout=60,
             what="the member to own both partitions")
    ray.get(member.commit.remote(0, 10))
    assert admin.describe_group(group)["offsets"] == {f"{topic_name}:0": 10}

    # The leader's node hung: its broker and replica-host processes alike (the replica may
    # be served by either).
    pids = broker_processes(leader_broker(admin, CONSUMER_OFFSETS_TOPIC, offsets_partition))
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        stale = member.commit.remote(0, 20)
        wait_for(lambda: (topic_name, 0) in held(admin, group), timeout=60,
                 what="the commit to be on its way to the paused leader")
        ray.kill(member, no_restart=True)  # the fence: Ray's death notice, not a session
        wait_for(lambda: admin.describe_group(group)["members"] == [], timeout=30,
                 what="the dead member to be removed without waiting for the paused leader")
        assert (topic_name, 0) in held(admin, group)  # granted to nobody meanwhile
        # A pause the controller's send cannot outwait: it sends the batch again.
        time.sleep(max(0.0, paused_at + APPEND_ANSWER_S + 5 - time.monotonic()))
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    wait_for(lambda: not held(admin, group), timeout=120,
             what="the stale commit's batch and the record restoring the offset")
    with pytest.raises(ray.exceptions.RayActorError):  # it died while its commit was out
        ray.get(stale, timeout=60)
    assert admin.describe_group(group)["offsets"] == {f"{topic_name}:0": 10}
    # In the log: the stale commit once (its second send was recognised as a duplicate,
    # whichever broker took it), then the committed offset again, behind it.
    assert offset_history(admin, offsets_partition, group, p0) == [10, 20, 10]

    restart_controller()
    wait_for(lambda: admin.describe_group(group)["offsets"] == {f"{topic_name}:0": 10},
             timeout=90, what="the replayed offsets")
    consumer = Consumer(group_id=group, enable_auto_commit=False)
    consumer.subscribe([topic_name])
    read: list = []

    def reading_p0() -> bool:
        read.extend(consumer.poll(timeout_ms=100))
        return any(r.partition == 0 for r in read)

    try:
        wait_for(reading_p0, timeout=60, what="the next owner to read t-0")
        # It starts where the group was before the race, not at the fenced 20.
        assert min(r.offset for r in read if r.partition == 0) == 10
        consumer.commit({p0: 15})  # lower than the fenced 20: nothing refuses it
        assert consumer.committed([p0]) == {p0: 15}
    finally:
        consumer.close()
    assert offset_history(admin, offsets_partition, group, p0)[-1] == 15
