"""Transactions through the clients, on the session's 3-broker cluster: the transactional
Producer (init, begin, send, commit, abort) and read_committed consumers. A transaction over
two topics is seen whole by read_committed once committed, never once aborted, and both by
read_uncommitted; a zombie (an older producer of the same transactional id) is fenced and
writes nothing more; a transaction its producer abandons is aborted at its timeout and
read_committed consumers go past it; a read-process-write application writes each input
record once while it is killed and restarted under the same transactional id, and an output
leader, the controller (the coordinator's host: from outside, and right after a commit was
decided) and the leader of the id's __transaction_state partition are killed.
"""

from __future__ import annotations

import collections
import os
import threading
import uuid

import pytest
import ray

from raylog import Admin, Consumer, Producer
from raylog.errors import IllegalStateError, ProducerFencedError, RecordTooLargeError
from raylog.metadata.topics import TRANSACTION_STATE_TOPIC
from raylog.transactions.log import partition_for
from raylog.types import TopicPartition
from raylog.util.cluster_names import CONTROLLER_NAME, NAMESPACE
from tests.integration.conftest import (
    leader_broker,
    read_to_ends,
    replica_info,
    restart_controller,
    wait_for,
)

PARTITIONS = 2


def new_id(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def two_topics(ray_cluster, topic) -> tuple[str, str]:
    other = f"{topic}-b"
    Admin().create_topic(other, partitions=PARTITIONS, replication_factor=3)
    return topic, other


def transactional(tid: str, **settings) -> Producer:
    producer = Producer(transactional_id=tid, linger_ms=5, **settings)
    producer.init_transactions()
    return producer


def read(topics: tuple[str, ...], isolation: str, until: int = 0,
         timeout_s: float = 60) -> list[tuple[str, bytes]]:
    """(topic, value) of every record of ``topics``, from the start to each partition's end
    (its last stable offset for read_committed) once those ends are at least ``until``
    records in all (a read_committed end stays behind an open transaction)."""
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    got = read_to_ends(tps, until, timeout_s, isolation_level=isolation, fetch_max_wait_ms=100)
    return [(r.topic, r.value) for r in got]


def test_read_committed_sees_a_committed_transaction_whole_and_an_aborted_one_never(
        ray_cluster, two_topics):
    a, b = two_topics
    producer = transactional(new_id("app"))
    producer.begin_transaction()
    for i in range(10):
        producer.send(a, b"c-a%d" % i, key=b"%d" % i)
        producer.send(b, b"c-b%d" % i, key=b"%d" % i)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(10):
        producer.send(a, b"x-a%d" % i, key=b"%d" % i)
        producer.send(b, b"x-b%d" % i, key=b"%d" % i)
    producer.flush()  # in the log, then aborted
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(a, b"c-last", partition=0)
    producer.commit_transaction()
    producer.close()
    # 41 records and 8 + 2 markers at most: wait until every end is past the last commit.
    committed = read((a, b), "read_committed", until=41)
    assert sorted(v for _, v in committed) == sorted(
        [b"c-a%d" % i for i in range(10)] + [b"c-b%d" % i for i in range(10)] + [b"c-last"])
    assert len(committed) == 21  # each once
    everything = read((a, b), "read_uncommitted", until=41)
    assert sorted(v for _, v in everything) == sorted(
        [b"%s-%s%d" % (kind, t, i) for kind in (b"c", b"x") for t in (b"a", b"b")
         for i in range(10)] + [b"c-last"])


def test_read_topic_read_committed_leaves_aborted_transactions_out(ray_cluster, topic):
    from raylog.integrations.ray_data import read_topic

    producer = transactional(new_id("data"))
    for commit in (True, False, True):
        producer.begin_transaction()
        for p in range(PARTITIONS):
            producer.send(topic, b"%s-%d" % (b"kept" if commit else b"dropped", p),
                          partition=p)
        producer.flush()
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()
    # Each transaction: a record and a marker per partition; wait for the last markers.
    read((topic,), "read_committed", until=3 * 2 * PARTITIONS)

    def values(isolation: str) -> list[bytes]:
        rows = read_topic(topic, isolation_level=isolation).take_all()
        return sorted(row["value"] for row in rows)

    assert values("read_committed") == sorted([b"kept-0", b"kept-1"] * 2)
    assert values("read_uncommitted") == sorted([b"kept-0", b"kept-1"] * 2 +
                                                [b"dropped-0", b"dropped-1"])


def test_an_open_transaction_holds_read_committed_back_until_it_commits(ray_cluster, topic):
    producer = transactional(new_id("open"))
    producer.begin_transaction()
    producer.send(topic, b"pending", partition=0)
    producer.flush()
    with Consumer(isolation_level="read_committed") as consumer:
        tp = TopicPartition(topic, 0)
        assert consumer.end_offsets([tp]) == {tp: 0}  # the last stable offset
        producer.commit_transaction()
        wait_for(lambda: consumer.end_offsets([tp])[tp] == 2, timeout=60,
                 what="the commit marker to move the last stable offset")
    assert read((topic,), "read_committed") == [(topic, b"pending")]
    producer.close()


def test_a_refused_send_forces_an_abort_and_the_producer_goes_on_at_a_new_epoch(
        ray_cluster, topic_name):
    """A leader refuses a batch (too large for the topic): the transaction can only abort;
    the abort leaves a hole in the partition's sequence, so the producer takes a new epoch
    from the coordinator (a recovering init) and its next transaction commits."""
    Admin().create_topic(topic_name, partitions=PARTITIONS, replication_factor=3,
                         configs={"max.message.bytes": 4096})
    tid = new_id("refused")
    producer = transactional(tid)
    producer.begin_transaction()
    producer.send(topic_name, b"in-doomed", partition=0).result(timeout=60)
    with pytest.raises(RecordTooLargeError):
        producer.send(topic_name, os.urandom(10_000), partition=0).result(timeout=60)
    with pytest.raises(IllegalStateError):
        producer.commit_transaction()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic_name, b"after", partition=0)
    producer.commit_transaction()
    assert producer._txn.epoch == 1  # the recovering init's
    producer.close()
    assert read((topic_name,), "read_committed", until=4) == [(topic_name, b"after")]


def test_a_zombie_is_fenced_and_writes_nothing_more(ray_cluster, topic):
    tid = new_id("zombie")
    zombie = transactional(tid)
    zombie.begin_transaction()
    zombie.send(topic, b"zombie-1", partition=0).result(timeout=60)
    successor = transactional(tid)  # fences the zombie; its open transaction is aborted
    successor.begin_transaction()
    successor.send(topic, b"successor", partition=0)
    successor.send(topic, b"successor", partition=1)
    successor.commit_transaction()
    late = zombie.send(topic, b"zombie-2", partition=0)  # partition 0 is in its transaction
    with pytest.raises(ProducerFencedError):
        late.result(timeout=60)
    for step in (zombie.commit_transaction, zombie.abort_transaction,
                 lambda: zombie.send(topic, b"zombie-3", partition=1)):
        with pytest.raises(ProducerFencedError):
            step()
    zombie.close()
    successor.close()
    assert sorted(read((topic,), "read_committed", until=2)) == [(topic, b"successor")] * 2
    values = [v for _, v in read((topic,), "read_uncommitted", until=2)]
    assert b"zombie-2" not in values and b"zombie-3" not in values


def test_an_abandoned_transaction_is_aborted_at_its_timeout_and_read_past(ray_cluster, topic):
    admin = Admin()
    abandoned = transactional(new_id("abandoned"), transaction_timeout_ms=2_000)
    abandoned.begin_transaction()
    abandoned.send(topic, b"abandoned", partition=1).result(timeout=60)
    other = transactional(new_id("other"))
    other.begin_transaction()
    other.send(topic, b"committed", partition=1)
    other.commit_transaction()
    # The abandoned transaction holds partition 1's last stable offset back until the
    # coordinator aborts it; then read_committed reads past it to the commit after it.
    wait_for(lambda: replica_info(admin, topic, 1)["last_stable_offset"] ==
             replica_info(admin, topic, 1)["high_watermark"], timeout=90,
             what="the abandoned transaction to be aborted")
    assert read((topic,), "read_committed", until=1) == [(topic, b"committed")]
    with pytest.raises(ProducerFencedError):
        abandoned.commit_transaction()
    abandoned.close()
    other.close()


# -- read-process-write, exactly once ------------------------------------------------------------

@ray.remote(num_cpus=0, max_restarts=0)
class ReadProcessWrite:
    """An application in a Ray actor: consumes ``source`` in a group (read_committed),
    writes each record to both ``outputs`` and commits its input offsets, one transaction
    per poll, on a thread of its own. Any error ends the thread (the test then restarts the
    application, as an operator would): what it had not committed is aborted by the next
    incarnation's init_transactions. Told to ``pause``, it stops inside its next
    transaction once that transaction's records are in the log, for the test to kill it
    there."""

    def __init__(self, tid: str, group: str, source: str, outputs: list[str]) -> None:
        self.committed = 0  # records whose transaction committed in this incarnation
        self.error: str | None = None
        self._pause = threading.Event()
        self.paused = False
        self._thread = threading.Thread(target=self._run, args=(tid, group, source, outputs),
                                        daemon=True)
        self._thread.start()

    def _run(self, tid: str, group: str, source: str, outputs: list[str]) -> None:
        try:
            consumer = Consumer(group_id=group, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
            consumer.subscribe([source])
            producer = Producer(transactional_id=tid, linger_ms=2)
            producer.init_transactions()
            while True:
                records = consumer.poll(timeout_ms=200, max_records=15)
                if not records:
                    continue
                producer.begin_transaction()
                offsets = {}
                for r in records:
                    for out in outputs:
                        producer.send(out, r.value, key=r.key)
                    offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1
                producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                if self._pause.is_set():
                    producer.flush()
                    self.paused = True
                    threading.Event().wait()  # until the test kills this process
                producer.commit_transaction()
                self.committed += len(records)
        except Exception as e:  # reported to the test, which restarts the application
            self.error = repr(e)

    def pause(self) -> None:
        self._pause.set()

    def progress(self) -> tuple[int, str | None, bool]:
        return self.committed, self.error, self.paused


def test_read_process_write_is_exactly_once_through_application_coordinator_and_leader_kills(
        ray_cluster, topic, tmp_path):
    """Input records are processed by an application while, one after another: the
    application is killed inside a transaction (its records written, its offsets sent) and
    restarted with the same transactional id (three times); a leader of an output partition
    is killed just after such a restart (the new incarnation's init aborts the open
    transaction, whose marker must reach the new leader); the controller, which hosts the
    transaction coordinator and the group coordinator, is killed from outside while the
    application runs; the controller dies (a fail point) right after one of the
    application's commits is decided, before any marker; and the leader of the
    __transaction_state partition holding the application's id is killed. Every input
    record is in each committed output exactly once, and nothing aborted is read."""
    admin = Admin()
    outputs = [f"{topic}-out-a", f"{topic}-out-b"]
    for name in outputs:
        admin.create_topic(name, partitions=PARTITIONS, replication_factor=3)
    n = 1000
    with Producer(acks="all") as producer:
        for i in range(n):
            producer.send(topic, b"%d" % i, key=b"%d" % i)
    tid, group = new_id("rpw"), new_id("rpw-group")
    app = Application(tid, group, topic, outputs)

    def kill_application() -> None:
        ray.get(app.actor.pause.remote())
        wait_for(lambda: ray.get(app.actor.progress.remote())[2], timeout=60,
                 what="the application to pause inside a transaction")
        app.restart()

    def kill_output_leader() -> None:
        kill_application()
        kill_leader(ray_cluster, admin, outputs[0], 0)

    def kill_decided_commit() -> None:
        marker = tmp_path / "prepared"
        with ray_cluster.failpoints({"controller.txn_prepared": f"exit-once:{marker}"}):
            wait_for(marker.exists, timeout=120,
                     what="the controller to die after a commit was decided")
        wait_for(lambda: ray.get(controller_actor().ready.remote(), timeout=10), timeout=90,
                 what="the controller to restart")

    def kill_state_leader() -> None:
        kill_leader(ray_cluster, admin, TRANSACTION_STATE_TOPIC, partition_for(tid))

    steps = [kill_output_leader, restart_controller, kill_application, kill_decided_commit,
             kill_state_leader, kill_application]
    for i, step in enumerate(steps):
        target = (i + 1) * n // (len(steps) + 1)  # committed records before the step
        wait_for(lambda t=target: app.committed() >= t, timeout=180,
                 what=f"{target} records processed before {step.__name__}")
        step()
    # Every record in both outputs, each once, however often the application restarted.

    def finished() -> bool:
        app.committed()  # restarts an application whose thread an error ended
        return len(read(tuple(outputs), "read_committed", timeout_s=60)) >= 2 * n

    wait_for(finished, timeout=240, interval=1, what="every input record in the outputs")
    # No output partition's last stable offset is held back: what the killed incarnations
    # left open was aborted (the idle application opens no transaction).
    wait_for(lambda: all(replica_info(admin, name, p)["last_stable_offset"] ==
                         replica_info(admin, name, p)["high_watermark"]
                         for name in outputs for p in range(PARTITIONS)),
             timeout=90, what="every output partition stable to its end")
    app.stop()
    found = read(tuple(outputs), "read_committed", timeout_s=60)
    for name in outputs:
        counts = collections.Counter(v for t, v in found if t == name)
        assert set(counts) == {b"%d" % i for i in range(n)}, name
        assert [v for v, c in counts.items() if c > 1] == [], f"duplicated in {name}"
    assert app.kills >= 3
    # The killed incarnations' open transactions are in the log, aborted, and never read
    # as committed (each value at most once above).
    aborted = len(read(tuple(outputs), "read_uncommitted", timeout_s=60)) - len(found)
    assert aborted >= 3 * 2
    print(f"{app.kills} application kills, errors: {app.errors}; {aborted} records of "
          f"aborted transactions in the outputs")


def controller_actor():
    return ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)


def kill_leader(cluster, admin: Admin, topic: str, partition: int) -> None:
    """Kill the broker leading a partition (Ray restarts it) once all three are up, and wait
    for a leader again."""
    wait_for(lambda: len(cluster.broker_ids) == 3, timeout=90, what="three live brokers")
    ray.kill(leader_broker(admin, topic, partition), no_restart=False)
    wait_for(lambda: replica_info(admin, topic, partition)["role"] == "leader",
             timeout=60, what=f"a leader of {topic}-{partition}")


class Application:
    """The test's side of the application: one ReadProcessWrite actor at a time, the same
    transactional id and group for each."""

    def __init__(self, *args: object) -> None:
        self.args = args
        self.actor = ReadProcessWrite.remote(*args)
        self.done = 0  # records committed by the incarnations before this one
        self.kills = 0
        self.errors: list[str] = []

    def restart(self) -> None:
        committed, _, _ = ray.get(self.actor.progress.remote())
        ray.kill(self.actor, no_restart=True)
        self.done += committed
        self.kills += 1
        self.actor = ReadProcessWrite.remote(*self.args)

    def committed(self) -> int:
        """Records committed so far, all incarnations; an application whose thread failed
        is restarted."""
        committed, error, _ = ray.get(self.actor.progress.remote())
        if error is not None:
            self.errors.append(error)
            self.restart()
            self.kills -= 1  # not one of the test's kills
            return self.done
        return self.done + committed

    def stop(self) -> None:
        ray.kill(self.actor, no_restart=True)
