"""The idempotent producer against real leaders when its sequence has a gap (issue 22, items 1
and 4): nothing reported acknowledged is missing from the log, and a producer whose state a
leader lost goes on at once.

(a) After an epoch bump, batch A (sequence 0) meets UnknownLeaderEpochError and backs off
    for seconds, while batch B (sequence 3) reaches the leader and waits on the gap. The
    leader used to accept B once its wait ended and then answer A's retry at offset -1,
    which the producer took for success: A was lost. Now B fails with
    OutOfOrderSequenceError and is retried behind A; both land, at the offsets reported.
    The seam is the client's wrapper (ReplicaClient.append_batches, which every produce
    call goes through): it fails one batch for good before it is sent, as an expiry would,
    and sends A's first attempt with a leader epoch the leader does not know yet. Ray is
    real.
(b) An acks=1 producer writes to a topic with two replicas; its follower is paused
    (SIGSTOP) so that it lacks the last acknowledged batches, and the leader's broker is
    killed. The follower, elected, has no record of those batches: the producer's next batch
    is ahead of what it expects. The producer bumps its epoch and the send succeeds far
    inside its delivery timeout (it used to retry OutOfOrderSequenceError for all of it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import pyarrow as pa
import pytest
import ray

from raylog import Admin, Producer
from raylog.client.remote import ReplicaClient, resolve
from raylog.errors import ActorUnavailableError, InvalidRecordError, OutOfOrderSequenceError
from raylog.records import iter_headers, parse_header, read_records
from raylog.records.header import BatchHeader
from tests.integration.conftest import leader_broker, replica_info, wait_for
from tests.integration.test_replication import kill_and_wait_for_failover, partition_states

DELIVERY_TIMEOUT_MS = 120_000
PROMPTLY_S = 30  # well inside the delivery timeout: the producer did not wait it out


def rows(*values: bytes) -> pa.Table:
    return pa.table({"value": pa.array(values, pa.binary())})


def batch_at(admin: Admin, topic: str, offset: int) -> tuple[BatchHeader, dict[int, bytes]]:
    """The stored batch holding ``offset``: its header and {offset: value}, read from the
    leader once it is below the high watermark."""
    def read() -> tuple[BatchHeader, dict[int, bytes]] | None:
        leader = admin._cluster.topic(topic, refresh=True).partitions[0].leader_client()
        data = resolve(leader.fetch(offset, 1 << 20, 0, 1), timeout=60).data
        for position, header in iter_headers(data, verify=True):
            if header.base_offset <= offset <= header.last_offset:
                batch = data[position:position + header.size]
                return header, {r.offset: r.value for r in read_records(batch)}
        return None

    return wait_for(read, timeout=60, what=f"offset {offset} of {topic} to be readable")


class Seam:
    """Wraps ReplicaClient.append_batches (one produce call carrying batches): fails the next
    call for good before it is sent (after the test has queued more behind its batch), and
    sends the first attempt of the batch with producer epoch 1 and sequence 0 at a leader
    epoch one ahead of the leader's."""

    def __init__(self) -> None:
        self.fail_next = False
        self.entered = threading.Event()  # the batch to fail is in the seam
        self.release = threading.Event()  # ... and may fail now
        # (producer epoch, base sequence, the call, the batch's place in it) per attempt
        self.attempts: list[tuple[int, int, ray.ObjectRef | None, int]] = []
        self.lock = threading.Lock()

    def append_batches(self, client: ReplicaClient, batches: list, acks: int | str,
                       timeout_ms: int = 30_000, client_id: str | None = None,
                       socket: bool = False) -> ray.ObjectRef:
        keys = [(h.producer_epoch, h.base_sequence)
                for h in (parse_header(data) for _, data in batches)]
        with self.lock:
            fail, self.fail_next = self.fail_next, False
            first_a = [key == (1, 0) and all((e, q) != key for e, q, _, _ in self.attempts)
                       for key in keys]
        if fail:
            self.entered.set()
            self.release.wait(60)
            with self.lock:
                self.attempts.extend((*key, None, place) for place, key in enumerate(keys))
            raise InvalidRecordError("failed for good by the test before it was sent")
        # A's first attempt as a leader answers a client whose metadata is ahead of it.
        items = [(replica.topic, replica.partition,
                  replica.leader_epoch + 1 if first else replica.leader_epoch, data)
                 for (replica, data), first in zip(batches, first_a, strict=True)]
        ref = client.handle.produce_batches.remote(items, acks, timeout_ms,
                                                   client_id=client_id)
        with self.lock:
            self.attempts.extend((*key, ref, place) for place, key in enumerate(keys))
        return ref

    def answers(self, epoch: int, sequence: int) -> list[tuple[ray.ObjectRef | None, int]]:
        """The calls that carried the batch at ``(epoch, sequence)``, with its place."""
        with self.lock:
            return [(r, place) for e, s, r, place in self.attempts if (e, s) == (epoch, sequence)]


@pytest.mark.cluster
def test_a_late_retry_after_an_epoch_bump_is_never_acknowledged_without_being_written(
        ray_cluster, topic_name, monkeypatch):
    admin = Admin(cluster=ray_cluster.raylog)
    admin.create_topic(topic_name, partitions=1)
    seam = Seam()
    monkeypatch.setattr(ReplicaClient, "append_batches",
                        lambda client, *args, **kwargs: seam.append_batches(client, *args,
                                                                            **kwargs))
    # A's retry comes 3.2 to 4.8 s after its failure: long after B's wait on the gap ended
    # (0.5 s now, 2 s before the fix, when B was accepted then).
    producer = Producer(cluster=ray_cluster.raylog, acks="all", linger_ms=0,
                        retry_backoff_ms=4000, retry_backoff_max_ms=4000,
                        delivery_timeout_ms=DELIVERY_TIMEOUT_MS)
    try:
        warm = producer.send_batch(topic_name, rows(b"w0", b"w1"), partition=0)
        assert warm.result(60) == [(0, 0, 2)]  # the leader knows producer epoch 0 now
        seam.fail_next = True
        held = {}
        sender = threading.Thread(target=lambda: held.setdefault(
            "h", producer.send_batch(topic_name, rows(b"h"), partition=0)))
        sender.start()
        assert seam.entered.wait(60), "batch H never reached the seam"
        # Queued behind H while it is held in the seam: numbered again, from 0 under epoch
        # 1, when H has failed; then both go out together.
        a = producer.send_batch(topic_name, rows(b"a0", b"a1", b"a2"), partition=0)
        b = producer.send_batch(topic_name, rows(b"b0", b"b1"), partition=0)
        seam.release.set()
        sender.join(60)
        with pytest.raises(InvalidRecordError):
            held["h"].result(60)
        answers = {"a": a.result(60), "b": b.result(60)}
    finally:
        seam.release.set()
        producer.close()
    # Every acknowledgement is a real offset, and the log holds those records there, once.
    for name, values in (("a", [b"a0", b"a1", b"a2"]), ("b", [b"b0", b"b1"])):
        ((partition, offset, count),) = answers[name]
        assert partition == 0 and offset >= 0 and count == len(values), answers
        header, stored = batch_at(admin, topic_name, offset)
        assert stored == dict(enumerate(values, offset))  # the whole batch, where told
        assert (header.producer_epoch, header.base_sequence) == \
            ((1, 0) if name == "a" else (1, 3))
    a_offset, b_offset = answers["a"][0][1], answers["b"][0][1]
    assert (a_offset, b_offset) == (2, 5)  # after w0, w1; nothing else was written
    # The interleaving happened: A went first at an unknown leader epoch and was retried;
    # B's first attempt reached the leader ahead of A and was refused, not accepted.
    _, *a_retries = seam.answers(1, 0)
    assert a_retries, "A was not retried"
    (first_b, place), *b_retries = seam.answers(1, 3)
    assert isinstance(resolve(first_b, timeout=60)[place], OutOfOrderSequenceError)
    assert b_retries, "B was not retried"


def process_of(actor) -> int:
    return ray._private.state.actors(actor._actor_id.hex())["Pid"]


@contextlib.contextmanager
def paused(pid: int):
    """SIGSTOP a process for the block; SIGCONT however the block ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.cluster
@pytest.mark.parametrize("for_good", [False, True], ids=["restarted", "killed-for-good"])
def test_after_a_failover_that_lost_an_acks_1_tail_the_next_send_succeeds_promptly(
        ray_cluster, topic_name, for_good):
    """``restarted``: Ray restarts the old leader's broker, which answers the producer's next
    batch (sent at the old leader epoch) as fenced; the new leader refuses it as ahead; the
    producer bumps its epoch and the batch lands.
    ``killed-for-good``: the producer's next batch goes to the dead broker first, where it may
    have been appended before the process died: renumbered, it could land twice, so at the
    epoch bump it fails instead (at once, not at its delivery timeout); the send after it
    lands under the new epoch. A leader served by a replica host (the test cluster's first
    broker node runs one) is the second case in both: the host dies with its broker and
    comes back as another actor, so the producer's handle to it is dead for good."""
    admin = Admin(cluster=ray_cluster.raylog)
    admin.create_topic(topic_name, partitions=1, replication_factor=2)
    wait_for(lambda: len(partition_states(admin, topic_name)[0]["isr"]) == 2, timeout=60,
             what="both replicas in sync")
    leader = partition_states(admin, topic_name)[0]["leader"]
    (follower,) = [b for b in partition_states(admin, topic_name)[0]["replicas"]
                   if b != leader]
    clients = admin._cluster.topic(topic_name, refresh=True).partitions[0].clients
    follower_actor = clients[follower].handle
    on_host = clients[leader].handle._actor_id != \
        leader_broker(admin, topic_name, 0)._actor_id
    producer = Producer(cluster=ray_cluster.raylog, acks=1, linger_ms=0,
                        delivery_timeout_ms=DELIVERY_TIMEOUT_MS)
    try:
        for i in range(3):  # the follower copies these: the new leader knows the producer
            producer.send(topic_name, b"early-%d" % i, partition=0).result(60)
        wait_for(lambda: replica_info(admin, topic_name, 0, follower)["log_end_offset"] == 3,
                 timeout=60, what="the follower to copy the first records")
        with paused(process_of(follower_actor)):
            # A fetch the follower had out when it stopped is answered at most once, with
            # what the leader held then: at most this record. The tail after it is the
            # leader's alone.
            producer.send(topic_name, b"flush-the-long-poll", partition=0).result(60)
            tail = [producer.send(topic_name, b"tail-%d" % i, partition=0).result(60).offset
                    for i in range(5)]
            kill_and_wait_for_failover(admin, topic_name, 0, for_good=for_good)
        assert partition_states(admin, topic_name)[0]["leader"] == follower

        def serving() -> bool:
            return (replica_info(admin, topic_name, 0, follower)["role"],
                    replica_info(admin, topic_name, 0, leader)["role"]) == \
                ("leader", "follower")

        wait_for(serving, timeout=90, what="the new leader and the old one as its follower")
        new_end = replica_info(admin, topic_name, 0, follower)["log_end_offset"]
        assert new_end <= tail[-1], (
            f"the scenario did not lose the acks=1 tail (the new leader ends at {new_end}, "
            f"the tail was acknowledged up to {tail[-1]}): nothing to test")
        if for_good or on_host:
            unknown = producer.send(topic_name, b"sent-to-the-dead-broker", partition=0)
            assert isinstance(unknown.exception(PROMPTLY_S), ActorUnavailableError)
        after = producer.send(topic_name, b"after-failover", partition=0)
        offset = after.result(PROMPTLY_S).offset  # not after DELIVERY_TIMEOUT_MS of retries
        more = [producer.send(topic_name, b"more-%d" % i, partition=0) for i in range(3)]
        producer.flush(PROMPTLY_S)
    finally:
        producer.close()
    assert offset == new_end  # nothing else was written since the failover
    header, stored = batch_at(admin, topic_name, offset)
    early, _ = batch_at(admin, topic_name, 0)
    assert stored == {offset: b"after-failover"}
    assert header.producer_id == early.producer_id
    assert (header.producer_epoch, header.base_sequence) == (early.producer_epoch + 1, 0)
    for i, future in enumerate(more):  # everything acknowledged since is where it was told
        at = future.result(0).offset
        assert batch_at(admin, topic_name, at)[1][at] == b"more-%d" % i
