"""The controller's transaction service (actors/transactions.py) over metadata in memory and
fake leaders for every partition (no Ray): __transaction_state created and replayed, each
step written there, markers written to every partition through leader changes, a new
service (a restarted controller) taking a new coordinator epoch and finishing what the old
one decided, and the periodic step aborting a timed-out transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from actors.transactions import TransactionService
from raylog.errors import (
    ConcurrentTransactionsError,
    NotLeaderError,
    ProducerFencedError,
    UnknownTopicError,
)
from raylog.metadata import state as events
from raylog.metadata.access import MemoryLog, MetadataAccess
from raylog.metadata.topics import TRANSACTION_STATE_TOPIC
from raylog.records import iter_batches
from raylog.records.header import stamp
from raylog.replica.partition import FetchResult
from raylog.storage import AppendInfo
from tests.unit.actors.test_fetcher import _Remote

TOPICS = {"a": 2, "b": 1}


class FakeLeader:
    """The leader of every partition: a log of stamped batches per partition, and the
    markers written (``refuse_markers`` makes the next ones fail as a moved leader's)."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[bytes]] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self.markers: list[tuple] = []
        self.refuse_markers = 0
        self.fetch_gate = asyncio.Event()
        self.fetch_gate.set()
        self.produce = _Remote(self._produce)
        self.fetch = _Remote(self._fetch)
        self.list_offset = _Remote(self._list_offset)
        self.write_txn_marker = _Remote(self._write_txn_marker)

    async def _produce(self, topic, partition, epoch, batch, acks, timeout_ms) -> AppendInfo:
        end = self.ends.get((topic, partition), 0)
        stamped = bytearray(batch)
        stamp(stamped, end, epoch)
        self.logs.setdefault((topic, partition), []).append(bytes(stamped))
        header = next(iter_batches(bytes(stamped)))[1]
        self.ends[(topic, partition)] = header.next_offset
        return AppendInfo(end, header.last_offset, 0, header.record_count)

    async def _fetch(self, topic, partition, epoch, offset, max_bytes, wait_ms, min_bytes):
        await self.fetch_gate.wait()
        end = self.ends.get((topic, partition), 0)
        data = b"".join(b for b in self.logs.get((topic, partition), [])
                        if next(iter_batches(b))[1].next_offset > offset)
        return FetchResult(data, end, 0, end)

    async def _list_offset(self, topic, partition, epoch, spec):
        return (0 if spec == "earliest" else self.ends.get((topic, partition), 0)), -1

    async def _write_txn_marker(self, topic, partition, producer_id, producer_epoch, commit,
                                coordinator_epoch, leader_epoch, timeout_ms):
        if self.refuse_markers:
            self.refuse_markers -= 1
            raise NotLeaderError(f"{topic}-{partition}: not the leader any more")
        self.markers.append((topic, partition, producer_id, producer_epoch, commit,
                             coordinator_epoch))


def metadata() -> MetadataAccess:
    access = MetadataAccess(MemoryLog())
    access.commit(events.cluster_created("c"))
    for name, partitions in TOPICS.items():
        access.commit(events.topic_created(name, name, [[1]] * partitions, {}))
    return access


def service(access: MetadataAccess, leader: FakeLeader) -> TransactionService:
    async def ensure_topic(name, partitions, configs) -> None:
        if name not in access.state.topics:
            access.commit(events.topic_created(name, name, [[1]] * partitions, configs))

    return TransactionService(access, lambda topic, partition: (leader, 0), ensure_topic)


async def until(condition, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def run(coroutine) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def test_a_commit_is_written_marked_everywhere_and_complete():
    access, leader = metadata(), FakeLeader()

    async def scenario() -> None:
        txns = service(access, leader)
        pid, epoch = await txns.txn_init_producer_id("t", 60_000)
        assert TRANSACTION_STATE_TOPIC in access.state.topics  # created on first use
        epoch_here = access.state.coordinator_epoch
        assert epoch_here > 0
        await txns.txn_add_partitions("t", pid, epoch, [("a", 0), ("a", 1), ("b", 0)])
        with pytest.raises(UnknownTopicError):
            await txns.txn_add_partitions("t", pid, epoch, [("nope", 0)])
        leader.refuse_markers = 2  # leaders move while the markers are written
        await txns.txn_end("t", pid, epoch, True)
        await until(lambda: txns.coordinator.transactions["t"].state.name == "COMPLETE_COMMIT")
        assert sorted(m[:2] for m in leader.markers) == [("a", 0), ("a", 1), ("b", 0)]
        assert {m[2:] for m in leader.markers} == {(pid, epoch, True, epoch_here)}
        assert (await txns.txn_describe("t"))["state"] == "COMPLETE_COMMIT"
        assert [t["transactional_id"] for t in await txns.txn_list(["COMPLETE_COMMIT"])] \
            == ["t"]

    run(scenario())


def test_a_new_service_takes_a_higher_epoch_and_finishes_a_decided_end():
    access, leader = metadata(), FakeLeader()

    async def scenario() -> None:
        old = service(access, leader)
        pid, epoch = await old.txn_init_producer_id("t", 60_000)
        await old.txn_add_partitions("t", pid, epoch, [("a", 0), ("b", 0)])
        old_epoch = access.state.coordinator_epoch
        old.markers.close()  # the old controller dies before writing any marker ...
        old.markers.submit = lambda work: None
        await old.txn_end("t", pid, epoch, True)  # ... after PREPARE_COMMIT was written
        await old.txn_init_producer_id("u", 60_000)
        pid_u, epoch_u = await old.txn_init_producer_id("u", 60_000)
        await old.txn_add_partitions("u", pid_u, epoch_u, [("a", 1)])  # left ONGOING
        assert leader.markers == []

        new = service(access, leader)  # the restarted controller's
        await new.expire_transactions()  # its loop's first round loads it
        assert access.state.coordinator_epoch > old_epoch
        await until(lambda: new.coordinator.transactions["t"].state.name == "COMPLETE_COMMIT")
        assert sorted(m[:2] for m in leader.markers) == [("a", 0), ("b", 0)]
        assert {m[5] for m in leader.markers} == {access.state.coordinator_epoch}
        u = await new.txn_describe("u")
        assert u["state"] == "ONGOING" and u["partitions"] == ["a:1"]  # kept
        with pytest.raises(ProducerFencedError):  # the old producer of "u" is fenced
            await new.txn_add_partitions("u", pid_u, epoch_u - 1, [("a", 0)])

    run(scenario())


def test_init_fences_an_open_transaction_and_its_abort_markers_are_written():
    access, leader = metadata(), FakeLeader()

    async def scenario() -> None:
        txns = service(access, leader)
        pid, epoch = await txns.txn_init_producer_id("t", 60_000)
        await txns.txn_add_partitions("t", pid, epoch, [("a", 0)])
        with pytest.raises(ConcurrentTransactionsError):
            await txns.txn_init_producer_id("t", 60_000)  # a new incarnation
        await until(lambda: txns.coordinator.transactions["t"].state.name == "COMPLETE_ABORT")
        assert leader.markers == [("a", 0, pid, epoch + 1, False,
                                   access.state.coordinator_epoch)]
        assert await txns.txn_init_producer_id("t", 60_000) == (pid, epoch + 2)

    run(scenario())


def test_the_periodic_step_aborts_a_transaction_past_its_timeout():
    access, leader = metadata(), FakeLeader()

    async def scenario() -> None:
        txns = service(access, leader)
        await txns.expire_transactions()  # nothing to load: __transaction_state not created
        assert TRANSACTION_STATE_TOPIC not in access.state.topics
        pid, epoch = await txns.txn_init_producer_id("t", 50)
        await txns.txn_add_partitions("t", pid, epoch, [("b", 0)])
        clock = txns.coordinator.clock
        txns.coordinator.clock = lambda: clock() + 51  # its timeout has passed
        await txns.expire_transactions()
        await until(lambda: txns.coordinator.transactions["t"].state.name == "COMPLETE_ABORT")
        assert leader.markers == [("b", 0, pid, epoch + 1, False,
                                   access.state.coordinator_epoch)]
        with pytest.raises(ProducerFencedError):
            await txns.txn_end("t", pid, epoch, True)

    run(scenario())


def test_an_operator_abort_fences_and_aborts():
    access, leader = metadata(), FakeLeader()

    async def scenario() -> None:
        txns = service(access, leader)
        pid, epoch = await txns.txn_init_producer_id("t", 60_000)
        await txns.txn_add_partitions("t", pid, epoch, [("a", 1)])
        described = await txns.txn_abort("t")
        assert described["state"] == "PREPARE_ABORT"
        await until(lambda: txns.coordinator.transactions["t"].state.name == "COMPLETE_ABORT")
        assert [m[:2] for m in leader.markers] == [("a", 1)]

    run(scenario())


def test_requests_wait_for_the_load_and_then_see_what_it_loaded():
    access, leader = metadata(), FakeLeader()

    async def scenario() -> None:
        old = service(access, leader)
        pid, epoch = await old.txn_init_producer_id("t", 60_000)
        await old.txn_add_partitions("t", pid, epoch, [("a", 0)])
        leader.fetch_gate.clear()  # the restarted controller's replay is slow
        new = service(access, leader)
        waiting = [asyncio.get_running_loop().create_task(call) for call in (
            new.txn_describe("t"), new.txn_add_partitions("t", pid, epoch, [("b", 0)]))]
        await asyncio.sleep(0.05)
        assert not any(task.done() for task in waiting) and not new.loaded
        leader.fetch_gate.set()
        described, _ = await asyncio.wait_for(asyncio.gather(*waiting), 5)
        assert described["state"] == "ONGOING" and described["partitions"] == ["a:0"]
        assert (await new.txn_describe("t"))["partitions"] == ["a:0", "b:0"]

    run(scenario())


def test_a_joint_commit_marks_every_member_and_a_new_service_finishes_one_decided():
    access, leader = metadata(), FakeLeader()

    async def begin(txns: TransactionService, tid: str, tp: tuple[str, int]
                    ) -> tuple[str, int, int]:
        pid, epoch = await txns.txn_init_producer_id(tid, 60_000)
        await txns.txn_add_partitions(tid, pid, epoch, [tp])
        return tid, pid, epoch

    async def scenario() -> None:
        txns = service(access, leader)
        members = [await begin(txns, "j-0", ("a", 0)), await begin(txns, "j-1", ("b", 0))]
        await txns.txn_commit_jointly("w", members)
        await until(lambda: all(txns.coordinator.transactions[t].state.name
                                == "COMPLETE_COMMIT" for t in ("j-0", "j-1")))
        assert sorted(m[:2] + m[4:5] for m in leader.markers) == [("a", 0, True),
                                                                 ("b", 0, True)]
        await txns.expire_transactions()  # the periodic step removes the decision
        assert txns.coordinator.decisions == {} and txns.coordinator.held == {}

        # The controller dies right after the next decision is durable: nothing prepared.
        members = [await begin(txns, "k-0", ("a", 1)), await begin(txns, "k-1", ("b", 0))]

        async def died(decision):
            return []
        txns.coordinator._finish = died
        txns.markers.close()
        await txns.txn_commit_jointly("v", members)
        assert {txns.coordinator.transactions[t].state.name for t in ("k-0", "k-1")} == {
            "ONGOING"}
        new = service(access, leader)
        await new.expire_transactions()  # loads, finishes the decision, writes markers
        await until(lambda: all(new.coordinator.transactions[t].state.name
                                == "COMPLETE_COMMIT" for t in ("k-0", "k-1")))
        await new.expire_transactions()
        assert new.coordinator.decisions == {}

    run(scenario())
