"""The transactional Producer's state machine, over the real connection and a fake
controller whose transaction coordinator keeps only what the producer's rules need (epochs
that fence, the partitions and groups of each transaction, its outcome), and fake leaders
with the real ProducerStates (tests/unit/fake_remote.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import raylog.client.producer as producer_module
import raylog.client.transactions as transactions_module
from raylog.client.admin import Admin
from raylog.client.consumer import Consumer
from raylog.client.producer import Producer
from raylog.client.transactions import TransactionManager, TxnState
from raylog.errors import (
    ConcurrentTransactionsError,
    IllegalGenerationError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    NoClusterError,
    ProducerFencedError,
    RecordTooLargeError,
    RequestTimeoutError,
    TransactionAbortedError,
)
from raylog.records import parse_header
from raylog.records.append import PlainSend
from raylog.types import ConsumerGroupMetadata, PreparedTransaction
from tests.unit import fake_remote
from tests.unit.fake_remote import FakeController, _Method, wait_until


class TxnController(FakeController):
    """A FakeController with a transaction coordinator: one producer id per transactional
    id, its epoch bumped by each init; steps of an older epoch get ProducerFencedError."""

    def __init__(self) -> None:
        super().__init__()
        self.producers: dict[str, tuple[int, int]] = {}
        self.calls_log: list[tuple[Any, ...]] = []
        self.busy_inits = 0  # inits to answer ConcurrentTransactionsError first
        self.ended: list[tuple[str, bool, frozenset]] = []
        self.open: dict[str, set] = {}
        self.offsets: dict[str, list] = {}
        self.add_gate = threading.Event()
        self.add_gate.set()
        self.producers_made: list[Producer] = []
        self.refuse_offsets = False
        self.joint: list[tuple[str, list]] = []
        self.joint_refusals: list[BaseException] = []  # raised by the next joint commits
        for name in ("txn_init_producer_id", "txn_add_partitions", "txn_add_offsets",
                     "txn_offset_commit", "txn_end", "txn_commit_jointly"):
            setattr(self, name, _Method(self, getattr(self, "_" + name)))

    def _fence(self, tid: str, producer_id: int, epoch: int) -> None:
        if self.producers.get(tid) != (producer_id, epoch):
            raise ProducerFencedError(f"{tid}: epoch {epoch} is not the current one")

    def _txn_init_producer_id(self, tid, timeout_ms, producer_id, epoch):
        self.calls_log.append(("init", tid, producer_id, epoch))
        if self.busy_inits:
            self.busy_inits -= 1
            raise ConcurrentTransactionsError("the previous transaction is completing")
        pid, old = self.producers.get(tid, (1000 + len(self.producers), -1))
        self.producers[tid] = (pid, old + 1)
        self.open.pop(tid, None)
        return self.producers[tid]

    def _txn_add_partitions(self, tid, producer_id, epoch, partitions):
        self.add_gate.wait(10)
        self._fence(tid, producer_id, epoch)
        self.calls_log.append(("add", tid, tuple(partitions)))
        self.open.setdefault(tid, set()).update(partitions)

    def _txn_add_offsets(self, tid, producer_id, epoch, group_id):
        self._fence(tid, producer_id, epoch)
        self.calls_log.append(("add_offsets", tid, group_id))
        self.open.setdefault(tid, set()).add(("__consumer_offsets", 0))
        return "__consumer_offsets", 0

    def _txn_offset_commit(self, tid, producer_id, epoch, group_id, member_id, generation,
                           entries):
        self._fence(tid, producer_id, epoch)
        if self.refuse_offsets:
            raise IllegalGenerationError(f"generation {generation} is not the group's")
        self.offsets.setdefault(tid, []).append((group_id, member_id, generation, entries))

    def _txn_end(self, tid, producer_id, epoch, commit):
        self._fence(tid, producer_id, epoch)
        self.ended.append((tid, commit, frozenset(self.open.pop(tid, ()))))

    def _txn_commit_jointly(self, write_id, members):
        if self.joint_refusals:
            raise self.joint_refusals.pop(0)
        for tid, producer_id, epoch in members:
            self._fence(tid, producer_id, epoch)
        self.joint.append((write_id, members))
        for tid, _, _ in members:
            self.ended.append((tid, True, frozenset(self.open.pop(tid, ()))))

    def adds(self) -> list[tuple]:
        return [c for c in self.calls_log if c[0] == "add"]


@pytest.fixture
def controller(monkeypatch) -> TxnController:
    fake_remote.install(monkeypatch, producer_module)
    controller = TxnController()
    controller.add_topic("a", 2)
    controller.add_topic("b", 1)
    yield controller
    controller.add_gate.set()
    for producer in controller.producers_made:  # before the fakes are taken away
        producer._abandon(RuntimeError("the test ended"))
        producer.close()


def txn_producer(controller: TxnController, tid: str = "app", **settings) -> Producer:
    producer = Producer(cluster=fake_remote.fake_cluster(controller), transactional_id=tid,
                        **{"linger_ms": 1, "retry_backoff_ms": 10, **settings})
    controller.producers_made.append(producer)
    return producer


def batches(controller: TxnController, topic: str, partition: int):
    return [parse_header(b) for b in controller.partitions[(topic, partition)].batches]


def test_config_implies_acks_all_and_refuses_contradictions():
    assert producer_module.producer_config({"transactional_id": "x"}).acks == "all"
    with pytest.raises(InvalidConfigError, match="acks"):
        producer_module.producer_config({"transactional_id": "x", "acks": 1})
    with pytest.raises(InvalidConfigError, match="transactional_id"):
        producer_module.producer_config({"transactional_id": ""})
    assert producer_module.producer_config({}).acks == 1  # a plain producer's default stays


def test_calls_out_of_order_raise_illegal_state(controller):
    producer = txn_producer(controller)
    for call in (producer.begin_transaction, producer.commit_transaction,
                 producer.abort_transaction, lambda: producer.send("a", b"x")):
        with pytest.raises(IllegalStateError):
            call()
    producer.init_transactions()
    with pytest.raises(IllegalStateError):
        producer.init_transactions()  # once
    with pytest.raises(IllegalStateError):
        producer.send("a", b"x")  # outside a transaction
    with pytest.raises(IllegalStateError):
        producer.commit_transaction()
    producer.begin_transaction()
    with pytest.raises(IllegalStateError):
        producer.begin_transaction()  # one at a time
    producer.commit_transaction()  # an empty transaction: nothing to tell the coordinator
    assert controller.ended == []
    with pytest.raises(IllegalStateError, match="transactional_id"):
        Producer(cluster=fake_remote.fake_cluster(controller)).begin_transaction()
    producer.close()


def test_a_committed_transaction_carries_the_coordinators_producer_and_the_bit(controller):
    controller.busy_inits = 2  # the previous incarnation's transaction is still completing
    producer = txn_producer(controller)
    producer.init_transactions()
    assert producer._txn.producer_id, producer._txn.epoch == (1000, 0)
    producer.begin_transaction()
    futures = [producer.send("a", b"%d" % i, partition=i % 2) for i in range(20)]
    futures.append(producer.send("b", b"x", key=b"k"))
    producer.send_offsets_to_transaction({("in", 0): 7},
                                         ConsumerGroupMetadata("g", "m-1", 3))
    producer.commit_transaction()
    assert all(f.done() and f.exception() is None for f in futures)
    for key in (("a", 0), ("a", 1), ("b", 0)):
        for header in batches(controller, *key):
            assert header.transactional
            assert (header.producer_id, header.producer_epoch) == (1000, 0)
    assert controller.ended == [("app", True, frozenset(
        {("a", 0), ("a", 1), ("b", 0), ("__consumer_offsets", 0)}))]
    assert controller.offsets["app"] == [("g", "m-1", 3, [("in", 0, 7, "")])]
    producer.close()


def test_each_partition_is_added_once_per_transaction_before_its_first_batch(controller):
    producer = txn_producer(controller)
    producer.init_transactions()
    for _ in range(2):
        controller.add_gate.clear()  # the coordinator is slow to answer the add
        producer.begin_transaction()
        calls = controller.calls
        in_log = len(controller.partitions[("a", 0)].batches)
        first = producer.send("a", b"x", partition=0)
        wait_until(lambda c=calls: controller.calls > c, 5)  # the add is asked for
        producer.send("a", b"y", partition=0)
        assert not first.done()
        assert len(controller.partitions[("a", 0)].batches) == in_log
        controller.add_gate.set()
        for i in range(30):
            producer.send("a", b"%d" % i, partition=i % 2)
            if i % 10 == 0:
                producer.flush()
        producer.commit_transaction()
    per_txn = [e[2] for e in controller.ended]
    assert per_txn == [frozenset({("a", 0), ("a", 1)})] * 2
    counted = [tp for call in controller.adds() for tp in call[2]]
    assert sorted(counted) == sorted([("a", 0), ("a", 1)] * 2)
    producer.close()


def test_abort_fails_unsent_records_and_tells_the_coordinator(controller):
    producer = txn_producer(controller, linger_ms=60_000)
    producer.init_transactions()
    producer.begin_transaction()
    sent = producer.send("a", b"sent", partition=0)
    producer.flush()
    assert sent.result(timeout=5).offset == 0
    held = [producer.send("a", b"held", partition=1) for _ in range(3)]
    producer.abort_transaction()
    for future in held:
        with pytest.raises(TransactionAbortedError):
            future.result(timeout=5)
    assert controller.ended == [("app", False, frozenset({("a", 0)}))]
    assert batches(controller, "a", 1) == []
    # The next transaction goes on.
    producer.begin_transaction()
    producer.send("a", b"next", partition=1)
    producer.commit_transaction()
    assert [h.producer_epoch for h in batches(controller, "a", 1)] == [0]
    producer.close()


def test_a_failed_send_makes_commit_refuse_until_aborted_then_the_epoch_moves(controller):
    producer = txn_producer(controller)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("a", b"ok", partition=0).result(timeout=5)
    with pytest.raises(RecordTooLargeError):
        producer.send("a", b"x" * (9 << 20), partition=0)  # refused at once: not a failure
    leader = controller.brokers[controller.partitions[("a", 1)].leader]
    original = leader.produce

    def refuse(*args, **kwargs):
        raise RecordTooLargeError("too big for the leader")
    leader.produce = _Method(leader, refuse)
    failed = producer.send("a", b"refused", partition=1)
    with pytest.raises(RecordTooLargeError):
        failed.result(timeout=5)
    leader.produce = original
    with pytest.raises(IllegalStateError, match="abort"):
        producer.send("a", b"more", partition=0)
    with pytest.raises(IllegalStateError, match="abort") as caught:
        producer.commit_transaction()
    assert isinstance(caught.value.__cause__, RecordTooLargeError)
    assert producer._txn.state is TxnState.ABORTABLE
    producer.abort_transaction()
    assert controller.ended == [("app", False, frozenset({("a", 0), ("a", 1)}))]
    # The sequence of a-1 has a hole: the producer took a new epoch (KIP-360 init).
    assert controller.calls_log[-1] == ("init", "app", 1000, 0)
    producer.begin_transaction()
    producer.send("a", b"again", partition=1)
    producer.commit_transaction()
    assert [(h.producer_epoch, h.base_sequence) for h in batches(controller, "a", 1)] == [(1, 0)]
    producer.close()


def zombie_and_successor(controller) -> tuple[Producer, Producer]:
    """Two producers of one transactional id, each inside a transaction with a record in
    a-0 (b"zombie", then b"new"): the second's init fenced the first."""
    zombie = txn_producer(controller)
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send("a", b"zombie", partition=0).result(timeout=5)
    successor = txn_producer(controller)
    successor.init_transactions()  # epoch 1: the zombie is fenced
    successor.begin_transaction()
    successor.send("a", b"new", partition=0).result(timeout=5)  # the leader saw epoch 1
    return zombie, successor


def test_a_fenced_producer_refuses_everything_after(controller):
    zombie, successor = zombie_and_successor(controller)
    with pytest.raises(ProducerFencedError):
        zombie.send("a", b"late", partition=1).result(timeout=5)  # its add is refused
    wait_until(lambda: zombie._txn.state is TxnState.FATAL, 5)
    for call in (zombie.commit_transaction, zombie.abort_transaction,
                 zombie.begin_transaction, lambda: zombie.send("a", b"x", partition=0)):
        with pytest.raises(ProducerFencedError):
            call()
    successor.commit_transaction()
    values = controller.partitions[("a", 0)].values
    assert values == [b"zombie", b"new"]
    assert batches(controller, "a", 1) == []
    zombie.close()
    successor.close()


def test_a_batch_refused_for_its_old_epoch_makes_the_producer_fatal(controller):
    zombie, successor = zombie_and_successor(controller)
    with pytest.raises(ProducerFencedError):
        zombie.send("a", b"late", partition=0).result(timeout=5)
    assert zombie._txn.state is TxnState.FATAL
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    zombie.close()
    successor.close()


def test_keyless_sends_take_the_fast_path_only_inside_a_healthy_transaction(controller):
    producer = txn_producer(controller, linger_ms=60_000)
    if PlainSend is not None:
        assert isinstance(vars(producer)["send"], PlainSend)  # as a plain producer's
    producer.init_transactions()
    producer.begin_transaction()
    first = producer.send("b", b"1")  # opens the sticky batch (the general path)
    second = producer.send("b", b"2")  # joins it (the fast path)
    producer.commit_transaction()
    assert [first.result(timeout=5).offset, second.result(timeout=5).offset] == [0, 1]
    with pytest.raises(IllegalStateError):
        producer.send("b", b"3")  # no batch open after the commit: refused
    # A failed batch (a-1's leader refuses it) closes the fast path to b's open batch.
    producer.begin_transaction()
    producer.send("b", b"4")
    leader = controller.brokers[controller.partitions[("a", 1)].leader]

    def refuse(*args, **kwargs):
        raise RecordTooLargeError("too big for the leader")
    leader.produce = _Method(leader, refuse)
    import pyarrow as pa
    failed = producer.send_batch("a", pa.table({"value": [b"x"]}), partition=1)
    with pytest.raises(RecordTooLargeError):
        failed.result(timeout=5)
    with pytest.raises(IllegalStateError, match="abort"):
        producer.send("b", b"5")
    producer.abort_transaction()
    # So does a refused offsets commit.
    producer.begin_transaction()
    producer.send("b", b"6")
    controller.refuse_offsets = True
    with pytest.raises(IllegalGenerationError):
        producer.send_offsets_to_transaction({("in", 0): 1}, ConsumerGroupMetadata("g", "m", 1))
    with pytest.raises(IllegalStateError, match="abort"):
        producer.send("b", b"7")
    producer.abort_transaction()
    assert [v for v in controller.partitions[("b", 0)].values] == [b"1", b"2"]
    producer.close()


def test_group_metadata_is_what_the_producer_commits_with(controller):
    consumer = Consumer(cluster=fake_remote.fake_cluster(controller), group_id="g")
    assert consumer.group_metadata() == ConsumerGroupMetadata("g", None, -1)  # not joined
    consumer.close()
    with pytest.raises(IllegalStateError, match="group_id"):
        Consumer(cluster=fake_remote.fake_cluster(controller)).group_metadata()


def test_send_batch_in_a_transaction_adds_its_partitions_and_marks_its_batches(controller):
    import pyarrow as pa

    producer = txn_producer(controller)
    producer.init_transactions()
    producer.begin_transaction()
    table = pa.table({"value": [b"v%d" % i for i in range(6)],
                      "partition": pa.array([0, 1] * 3, pa.int32())})
    producer.send_batch("a", table).result(timeout=5)
    producer.commit_transaction()
    assert controller.ended == [("app", True, frozenset({("a", 0), ("a", 1)}))]
    for p in (0, 1):
        assert [(h.transactional, h.producer_id) for h in batches(controller, "a", p)] == \
            [(True, 1000)]
    with pytest.raises(IllegalStateError):
        producer.send_batch("a", table)  # outside a transaction
    producer.close()


class BusyCoordinator:
    """Answers the first ``busy`` adds with ConcurrentTransactionsError (the previous
    transaction's markers being written); ``during_busy`` runs inside each refused call."""

    def __init__(self, busy: int, during_busy=lambda: None) -> None:
        self.busy, self.during_busy = busy, during_busy
        self.adds: list[list[tuple[str, int]]] = []

    def txn_init_producer_id(self, tid, timeout_ms, timeout=None):
        return 7, 0

    def txn_add_partitions(self, tid, producer_id, epoch, partitions, timeout=None):
        self.adds.append(list(partitions))
        if self.busy:
            self.busy -= 1
            self.during_busy()
            raise ConcurrentTransactionsError("the previous transaction is completing")


def test_an_add_refused_while_the_last_transaction_completes_is_retried_soon_with_more(
        monkeypatch):
    pauses: list[float] = []
    monkeypatch.setattr(transactions_module.time, "sleep", pauses.append)
    added = threading.Event()
    coordinator = BusyCoordinator(3)
    manager = TransactionManager(coordinator, "app", 60_000, on_added=added.set)
    coordinator.during_busy = lambda: manager.ready(("a", len(coordinator.adds)))
    manager.init(time.monotonic() + 10)
    manager.begin()
    assert not manager.ready(("a", 0))
    assert added.wait(10)
    wait_until(lambda: manager.ready(("a", 3)), 10)
    # A constant short pause (not 20, 40, 80 ms), and each retry carries what was wanted
    # meanwhile: one add answered, with every partition.
    assert pauses == [transactions_module.ADD_BUSY_PAUSE_S] * 3
    assert coordinator.adds == [[("a", 0)], [("a", 0), ("a", 1)],
                                [("a", 0), ("a", 1), ("a", 2)],
                                [("a", 0), ("a", 1), ("a", 2), ("a", 3)]]
    assert all(manager.ready(("a", p)) for p in range(4))
    manager.close()


def test_an_add_that_breaks_unexpectedly_refuses_its_partitions_instead_of_holding_them():
    class Broken(BusyCoordinator):
        def txn_add_partitions(self, *args, **kwargs):
            raise TypeError("a bug in the call")

    added = threading.Event()
    manager = TransactionManager(Broken(0), "app", 60_000, on_added=added.set)
    manager.init(time.monotonic() + 10)
    manager.begin()
    assert not manager.ready(("a", 0))
    assert added.wait(10)
    assert isinstance(manager.refused[("a", 0)], TypeError)
    assert manager.state is TxnState.ABORTABLE
    assert not manager.ready(("a", 0))
    manager.close()


def test_prepare_sends_everything_stops_sending_and_names_the_transaction(controller):
    producer = txn_producer(controller)
    with pytest.raises(IllegalStateError, match="prepare_transaction"):
        producer.prepare_transaction()  # before init
    producer.init_transactions()
    producer.begin_transaction()
    assert producer.prepare_transaction() is None  # nothing sent: nothing to commit
    producer.abort_transaction()
    producer.begin_transaction()
    futures = [producer.send("a", b"%d" % i, partition=i % 2) for i in range(10)]
    prepared = producer.prepare_transaction()
    assert all(f.done() and f.exception() is None for f in futures)
    assert prepared == PreparedTransaction("app", 1000, 0)
    assert producer.prepare_transaction() == prepared  # a repeat answers alike
    with pytest.raises(IllegalStateError, match="prepared"):
        producer.send("a", b"late", partition=0)
    assert controller.ended == []  # left open for the joint commit
    producer.close()  # closing leaves it open too
    assert controller.ended == [] and controller.open["app"] == {("a", 0), ("a", 1)}


def test_a_prepared_transaction_may_still_be_aborted_or_committed_by_its_producer(controller):
    producer = txn_producer(controller)
    producer.init_transactions()
    for commit in (False, True):
        producer.begin_transaction()
        producer.send("a", b"x", partition=0)
        producer.prepare_transaction()
        (producer.commit_transaction if commit else producer.abort_transaction)()
    assert [(tid, commit) for tid, commit, _ in controller.ended] == [("app", False),
                                                                     ("app", True)]
    producer.close()


def test_a_send_failing_before_the_prepare_makes_it_abortable(controller):
    producer = txn_producer(controller)
    producer.init_transactions()
    producer.begin_transaction()
    leader = controller.brokers[controller.partitions[("a", 1)].leader]

    def refuse(*args, **kwargs):
        raise RecordTooLargeError("too big for the leader")
    leader.produce = _Method(leader, refuse)
    failed = producer.send("a", b"refused", partition=1)
    with pytest.raises(IllegalStateError, match="cannot be prepared") as caught:
        producer.prepare_transaction()
    assert isinstance(caught.value.__cause__, RecordTooLargeError) and failed.done()
    assert producer._txn.state is TxnState.ABORTABLE
    producer._abandon(RuntimeError("the test ended"))


def test_prepared_transactions_of_two_producers_commit_jointly_through_admin(controller):
    prepared = []
    for tid in ("w-0", "w-1"):
        producer = txn_producer(controller, tid)
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("a", tid.encode(), partition=int(tid[-1]))
        prepared.append(producer.prepare_transaction())
        producer.close()
    admin = Admin(cluster=fake_remote.fake_cluster(controller))
    # Retriable answers (a decision in doubt, a member busy, a controller restarting) are
    # asked again.
    controller.joint_refusals = [ConcurrentTransactionsError("busy"),
                                 RequestTimeoutError("in doubt"),
                                 NoClusterError("the controller is restarting")]
    admin.commit_transactions("w", prepared)
    assert controller.joint == [("w", [tuple(p) for p in prepared])]
    assert sorted(tid for tid, commit, _ in controller.ended if commit) == ["w-0", "w-1"]
    # A refusal is not.
    controller.joint_refusals = [ProducerFencedError("fenced")]
    with pytest.raises(ProducerFencedError):
        admin.commit_transactions("v", prepared)
    with pytest.raises(InvalidArgumentError):
        admin.commit_transactions("", prepared)
