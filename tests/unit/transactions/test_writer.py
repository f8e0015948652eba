"""The coordinator's ``write`` seam over __transaction_state (raylog/transactions/writer.py)
with a fake partition leader: records land in order in their partition, durable when the
write returns; a write the leader does not take within the deadline raises, saying whether
it may still land."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from raylog.errors import RequestTimeoutError
from raylog.records import read_records
from raylog.storage import AppendInfo
from raylog.transactions.coordinator import TransactionCoordinator
from raylog.transactions.log import load, partition_for
from raylog.transactions.state import TransactionState
from raylog.transactions.writer import StateWriter
from raylog.types import TopicPartition
from tests.unit.transactions.test_coordinator import Clock, run


class Leader:
    """Every partition's leader: keeps the batches it takes; ``gate`` holds appends."""

    def __init__(self) -> None:
        self.batches: dict[int, list[bytes]] = {}
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, partition: int, batch: bytes) -> AppendInfo:
        await self.gate.wait()
        log = self.batches.setdefault(partition, [])
        log.append(batch)
        return AppendInfo(len(log) - 1, len(log) - 1, 0, 1)

    def records(self) -> list[tuple[bytes, bytes | None]]:
        return [(r.key, r.value) for batches in self.batches.values() for b in batches
                for r in read_records(b)]


def writer(leader: Leader, timeout_s: float = 5.0) -> StateWriter:
    ids = itertools.count(1)
    return StateWriter(leader, lambda: next(ids), asyncio.get_running_loop().create_task,
                       timeout_s=timeout_s, backoff_s=(0.001, 0.01))


def test_a_coordinator_over_the_writer_leaves_a_log_that_replays_to_its_state():
    leader = Leader()

    async def scenario() -> TransactionCoordinator:
        state = writer(leader)
        c = TransactionCoordinator(state.write, coordinator_epoch=3, clock=Clock())
        pid, epoch = await c.init_producer_id("t", 60_000)
        await c.add_partitions("t", pid, epoch, [TopicPartition("a", 0)])
        await c.end_transaction("t", pid, epoch, True)
        await c.init_producer_id("u", 60_000)
        state.close()
        return c

    c = run(scenario())
    assert set(leader.batches) == {partition_for("t"), partition_for("u")}
    loaded = load(leader.records()).transactions
    assert loaded == c.transactions
    assert loaded["t"].state is TransactionState.PREPARE_COMMIT
    assert [tid for tid, m in loaded.items() if m.state.preparing] == ["t"]


def test_a_write_not_taken_by_its_deadline_raises_and_says_whether_it_may_land():
    leader = Leader()

    async def scenario() -> None:
        state = writer(leader, timeout_s=0.1)
        leader.gate.clear()  # the leader stops answering
        with pytest.raises(RequestTimeoutError, match="still being written"):
            await state.write(0, (b"k1", b"v1"))  # sent: it may land
        with pytest.raises(RequestTimeoutError, match="nothing was stored"):
            await state.write(0, (b"k2", b"v2"))  # queued behind it: withdrawn
        leader.gate.set()
        await state.write(0, (b"k3", b"v3"))
        state.close()

    run(scenario())
    assert leader.records() == [(b"k1", b"v1"), (b"k3", b"v3")]
