"""A broker's ``produce_batches`` as the producer uses it (Kafka's produce request: one call
carrying the ready batches of every partition a host serves), on the session's cluster.

- Each batch is answered on its own, in order: its offsets, or the error of its partition
  (not served here: NotLeaderError), and the producer's client id is charged for the call.
- acks=all waits of a call's batches run together: a batch that waits for in-sync replicas
  that do not fetch (a follower's broker stopped) holds back no other partition's batch,
  which is appended and committed while the call is still unanswered.
- The producer through it: records of several partitions of several brokers, idempotent,
  land once each, in order, at the offsets acknowledged.
"""

from __future__ import annotations

import pytest
import ray

from raylog import Admin, Producer
from raylog.errors import NotLeaderError
from raylog.storage import AppendInfo
from raylog.util.cluster_names import NAMESPACE, broker_actor_name
from tests.integration.conftest import broker_processes, consume_all, wait_for
from tests.integration.test_client_liveness import stopped
from tests.integration.test_kafka_merged_appends import batch


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


def broker_actor(node_id: str):
    return ray.get_actor(broker_actor_name(node_id), namespace=NAMESPACE)


@pytest.mark.cluster
def test_acks_all_waits_of_one_call_do_not_hold_each_other(ray_cluster, admin, topic_name):
    """Partition 0 of a topic on three brokers, and a partition of a topic on one broker
    with the same leader, in one acks=all call to that broker: with a follower of the first
    stopped, the second's record is committed (readable) while the call waits for the
    first's; once the follower fetches again, both are answered with their offsets, and
    a partition the broker does not lead with NotLeaderError."""
    wait_for(lambda: len(ray_cluster.broker_ids) >= 3, timeout=120, what="three live brokers")
    replicated, single = topic_name, topic_name + "-single"
    admin.create_topic(replicated, partitions=1, replication_factor=3)
    admin.create_topic(single, partitions=6, replication_factor=1)
    with Producer(acks="all", cluster=ray_cluster.raylog) as producer:
        producer.send(replicated, b"first", partition=0).result(timeout=60)  # all in sync
    meta = ray_cluster.raylog.topic(replicated, refresh=True).partitions[0]
    leader = meta.leader_client()
    follower = next(b for b in meta.replicas if b != meta.leader)
    singles = ray_cluster.raylog.topic(single, refresh=True).partitions
    mine = next(p for p in singles if p.leader == meta.leader).leader_client()
    other = next(p for p in singles if p.leader != meta.leader).leader_client()
    items = [(replicated, 0, leader.leader_epoch, batch(b"waits")),
             (single, mine.partition, mine.leader_epoch, batch(b"goes")),
             (single, other.partition, other.leader_epoch, batch(b"not here"))]
    # The broker actor of the leader's node: it passes on what another of its hosts serves.
    handle = broker_actor(leader.node_id)
    with stopped(broker_processes(broker_actor(meta.clients[follower].node_id))):
        call = handle.produce_batches.remote(items, "all", 60_000, "the-test")
        wait_for(lambda: ray.get(mine.list_offset("latest"), timeout=30)[0] == 1,
                 timeout=30, what="the single-replica batch committed")
        done, _ = ray.wait([call], timeout=0)
        assert not done, "the call waits for the stopped follower"
    answers = ray.get(call, timeout=90)
    assert isinstance(answers[0], AppendInfo) and answers[0].base_offset == 1
    assert isinstance(answers[1], AppendInfo) and answers[1].base_offset == 0
    assert isinstance(answers[2], NotLeaderError)
    assert [r.value for r in consume_all(replicated, 1, 2)] == [b"first", b"waits"]
    for topic in (replicated, single):
        admin.delete_topic(topic)


@pytest.mark.cluster
def test_the_producer_sends_each_host_its_partitions_batches_together(ray_cluster, admin,
                                                                       topic_name):
    """An idempotent producer over six partitions on three brokers, acks=all and acks=1:
    every record once, in send order per partition, at its acknowledged offset."""
    wait_for(lambda: len(ray_cluster.broker_ids) >= 3, timeout=120, what="three live brokers")
    admin.create_topic(topic_name, partitions=6, replication_factor=2)
    sent: dict[int, list[tuple[bytes, object]]] = {p: [] for p in range(6)}
    for acks in ("all", 1):
        with Producer(acks=acks, linger_ms=2, batch_size=64 << 10,
                      cluster=ray_cluster.raylog) as producer:
            for i in range(6000):
                value = b"%s-%05d" % (str(acks).encode(), i)
                sent[i % 6].append((value, producer.send(topic_name, value,
                                                         partition=i % 6)))
    read = consume_all(topic_name, 6, 12_000)
    for p in range(6):
        mine = sorted((r.offset, r.value) for r in read if r.partition == p)
        assert mine == [(f.result(timeout=5).offset, v) for v, f in sent[p]]
    admin.delete_topic(topic_name)
