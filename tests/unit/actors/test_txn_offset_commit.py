"""Offsets committed inside a transaction, through the controller's group and transaction
services wired as the controller wires them, over fake leaders whose logs keep every batch
and every marker (no Ray): checked against the transaction, written as the producer's
transactional batch, pending until the commit marker (dropped at an abort), and replayed
as pending by a restarted group service until the marker arrives."""

from __future__ import annotations

import asyncio

import pytest

from actors.groups import GroupService
from actors.transactions import TransactionService
from raylog.errors import (
    CommitFailedError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
    UnstableOffsetCommitError,
)
from raylog.metadata import state as events
from raylog.metadata.access import MemoryLog, MetadataAccess
from raylog.records import iter_batches
from raylog.records.control import MarkerType, control_batch
from tests.unit.actors.test_transaction_service import FakeLeader, run, until


class MarkingLeader(FakeLeader):
    """Writes each marker into the partition's log too, as a leader does."""

    async def _write_txn_marker(self, topic, partition, producer_id, producer_epoch, commit,
                                coordinator_epoch, leader_epoch, timeout_ms):
        await super()._write_txn_marker(topic, partition, producer_id, producer_epoch, commit,
                                        coordinator_epoch, leader_epoch, timeout_ms)
        await self._produce(topic, partition, 0, control_batch(
            MarkerType(int(commit)), producer_id=producer_id, producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch, timestamp=0), "all", 1000)


def metadata() -> MetadataAccess:
    access = MetadataAccess(MemoryLog())
    access.commit(events.cluster_created("c"))
    access.commit(events.topic_created("in", "in", [[1]] * 2, {}))
    return access


def services(access: MetadataAccess, leader: FakeLeader,
             txns: TransactionService | None = None
             ) -> tuple[GroupService, TransactionService]:
    """A group service (a new one: a restarted controller's) and the transaction service,
    wired as the controller wires them."""
    async def ensure_topic(name, partitions, configs) -> None:
        if name not in access.state.topics:
            access.commit(events.topic_created(name, name, [[1]] * partitions, configs))

    def lead(topic, partition):
        return leader, 0

    groups = GroupService(access, lead, ensure_topic)
    txns = txns or TransactionService(access, lead, ensure_topic)
    groups.describe_transaction = txns.txn_describe
    txns.offsets_marker_written = groups.txn_marker_written
    return groups, txns


async def committed(groups: GroupService, stable: bool = False) -> int | None:
    found = (await groups.committed_offsets("g", [("in", 0)], stable))[("in", 0)]
    return found and found[0]


def test_offsets_pend_until_the_commit_marker_and_survive_a_restart_meanwhile():
    access, leader = metadata(), MarkingLeader()

    async def scenario() -> None:
        groups, txns = services(access, leader)
        pid, epoch = await txns.txn_init_producer_id("t", 60_000)
        entries = [("in", 0, 5, "m")]
        with pytest.raises(InvalidTxnStateError):  # the group's offsets are not in it
            await groups.txn_offset_commit("t", pid, epoch, "g", None, -1, entries)
        partition = await txns.txn_add_offsets("t", pid, epoch, "g")
        with pytest.raises(ProducerFencedError):
            await groups.txn_offset_commit("t", pid, epoch - 1 if epoch else epoch + 1,
                                           "g", None, -1, entries)
        with pytest.raises(InvalidProducerIdMappingError):
            await groups.txn_offset_commit("nobody", pid, epoch, "g", None, -1, entries)
        await groups.txn_offset_commit("t", pid, epoch, "g", "", -1, entries)

        batches = [h for b in leader.logs[partition] for _, h in iter_batches(b)]
        assert [(h.transactional, h.producer_id, h.producer_epoch, h.base_sequence)
                for h in batches] == [(True, pid, epoch, 0)]
        assert await committed(groups) is None
        with pytest.raises(UnstableOffsetCommitError):
            await committed(groups, stable=True)

        groups, _ = services(access, leader, txns)  # the controller restarts
        with pytest.raises(UnstableOffsetCommitError):  # replayed: still pending
            await committed(groups, stable=True)
        await txns.txn_end("t", pid, epoch, True)
        await until(lambda: txns.coordinator.transactions["t"].state.name == "COMPLETE_COMMIT")
        assert await committed(groups, stable=True) == 5

        # The next transaction of the same producer aborts: its offsets are dropped.
        await txns.txn_add_offsets("t", pid, epoch, "g")
        await groups.txn_offset_commit("t", pid, epoch, "g", None, -1, [("in", 0, 9, "")])
        last = next(iter_batches(leader.logs[partition][-1]))[1]
        assert (last.transactional, last.base_sequence) == (True, 1)
        await txns.txn_end("t", pid, epoch, False)
        await until(lambda: txns.coordinator.transactions["t"].state.name == "COMPLETE_ABORT")
        assert await committed(groups, stable=True) == 5

        replayed, _ = services(access, leader, txns)  # the log says the same
        assert await committed(replayed, stable=True) == 5
        assert replayed.coordinator.txn.next_sequence(partition[1], pid, epoch) == 2

    run(scenario())


def test_a_commit_is_checked_as_a_group_commit():
    access, leader = metadata(), MarkingLeader()

    async def scenario() -> None:
        groups, txns = services(access, leader)
        pid, epoch = await txns.txn_init_producer_id("t", 60_000)
        await txns.txn_add_offsets("t", pid, epoch, "g")
        joined = await groups.join_group("g", None, "c", ["in"], None, 10_000, "range")
        with pytest.raises(CommitFailedError):  # a stale generation
            await groups.txn_offset_commit("t", pid, epoch, "g", joined["member_id"],
                                           joined["generation"] + 1, [("in", 0, 1, "")])
        written = leader.logs.get(("__consumer_offsets", groups.coordinator.partition_for(
            "g")), [])
        assert not any(h.transactional for b in written for _, h in iter_batches(b))
        assert groups.coordinator.txn.pending == {}

    asyncio.run(asyncio.wait_for(scenario(), 30))
