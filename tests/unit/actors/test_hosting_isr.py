"""A leader's ISR changes through the controller (actors/hosting.py's HostedReplica) against a
fake controller: real Partitions, no Ray. An answer that does not come is not a refusal: the
change stays pending, and the same request is asked again until the answer is known."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from actors.hosting import HostedReplica
from raylog.errors import StaleIsrChangeError
from raylog.replica.partition import AlterIsr, LeaderAndIsr, Partition
from raylog.storage import LogConfig, PartitionLog
from tests.unit.actors.test_fetcher import until
from tests.unit.logutil import FakeClock, batch_of

NOW = 1_700_000_000_000
BROKER_EPOCH = 33
DEADLINE_S = 0.05  # the controller call's deadline here (the broker's is ALTER_PARTITION_TIMEOUT_S)


class FakeController:
    """alter_partition as the controller answers it, with knobs: ``hang`` (calls never
    answer, as a controller stopped mid-call), ``die_after_commit`` (commits, then the call
    fails as a dead actor's does)."""

    def __init__(self, state: LeaderAndIsr) -> None:
        self.state = state
        self.requests: list[AlterIsr] = []
        self.hang = False
        self.die_after_commit = 0  # this many calls commit and do not answer
        self.refuse_with: Exception | None = None

    def _as_dict(self) -> dict[str, Any]:
        s = self.state
        return {"topic": "t", "partition": 0, "topic_id": "id", "configs": {},
                "leader": s.leader, "leader_epoch": s.leader_epoch,
                "partition_epoch": s.partition_epoch, "replicas": list(s.replicas),
                "isr": list(s.isr)}

    async def alter_partition(self, request: AlterIsr) -> dict[str, Any]:
        self.requests.append(request)
        if self.hang:
            await asyncio.Event().wait()
        if self.refuse_with is not None:
            return {"state": self._as_dict(), "error": self.refuse_with}
        s = self.state
        if request.partition_epoch == s.partition_epoch:
            self.state = LeaderAndIsr(s.leader, s.leader_epoch, s.partition_epoch + 1,
                                      s.replicas, tuple(request.isr))
        elif set(request.isr) != set(s.isr):
            return {"state": self._as_dict(),
                    "error": StaleIsrChangeError("the partition changed")}
        if self.die_after_commit:
            self.die_after_commit -= 1
            raise RuntimeError("the controller's process died")  # as Ray's RayActorError
        return {"state": self._as_dict(), "error": None}


@pytest.fixture
def leader(tmp_path):
    """Leader 1 of replicas (1, 2, 3), ISR (1, 2), 3 records, both followers at the log
    end: follower 3 is due to join."""
    clock = FakeClock(NOW)
    log = PartitionLog(tmp_path / "t-0", LogConfig(retention_ms=None), clock=clock)
    partition = Partition("t", 0, log, 1, clock=clock)
    partition.apply(LeaderAndIsr(1, 0, 0, (1, 2, 3), (1, 2)))
    for i in range(3):
        partition.append(batch_of([b"r%d" % i], ts=NOW), leader_epoch=0)
    partition.follower_fetched(2, 0, 3, BROKER_EPOCH)
    partition.follower_fetched(3, 0, 3, BROKER_EPOCH)
    hosted = HostedReplica(partition, "id", {})
    yield hosted
    log.close()


def test_a_change_committed_but_not_answered_stays_pending_and_is_asked_again(leader):
    """The controller commits the expansion and dies before answering: the leader keeps
    counting 3 for its high watermark, asks again with the same request, and the answer to
    the repeat (the partition's state, the change made) settles it."""
    controller = FakeController(LeaderAndIsr(1, 0, 0, (1, 2, 3), (1, 2)))
    controller.die_after_commit = 1
    partition = leader.partition

    async def scenario() -> None:
        leader.maybe_propose_isr(controller.alter_partition, DEADLINE_S)
        await until(lambda: len(controller.requests) >= 1)
        # Unanswered: pending, and 3 holds the high watermark while 2 moves on.
        partition.append(batch_of([b"more"], ts=NOW), leader_epoch=0)
        partition.follower_fetched(2, 0, 4, BROKER_EPOCH)
        assert partition.replica_set.pending_isr == {1, 2, 3}
        assert partition.high_watermark == 3
        await until(lambda: not leader.proposing)
        assert len(controller.requests) == 2
        first, again = controller.requests
        assert again == first  # the same request: ISR, epochs, broker epochs
        assert partition.isr == (1, 2, 3) and partition.partition_epoch == 1
        assert partition.replica_set.pending_isr is None

    asyncio.run(scenario())


def test_a_call_past_its_deadline_is_an_unknown_outcome_not_a_refusal(leader):
    controller = FakeController(LeaderAndIsr(1, 0, 0, (1, 2, 3), (1, 2)))
    controller.hang = True
    partition = leader.partition

    async def scenario() -> None:
        leader.maybe_propose_isr(controller.alter_partition, DEADLINE_S)
        await until(lambda: len(controller.requests) >= 3)  # asked again and again
        assert leader.proposing and partition.replica_set.pending_isr == {1, 2, 3}
        assert {r.isr for r in controller.requests} == {(1, 2, 3)}
        controller.hang = False
        await until(lambda: not leader.proposing)
        assert partition.isr == (1, 2, 3) and partition.replica_set.pending_isr is None

    asyncio.run(scenario())


def test_the_controllers_word_on_the_partition_ends_the_asking(leader):
    """While the call hangs, the controller (restarted) tells the broker the partition's
    state, which has the change: the leader stops asking."""
    controller = FakeController(LeaderAndIsr(1, 0, 0, (1, 2, 3), (1, 2)))
    controller.hang = True
    partition = leader.partition

    async def scenario() -> None:
        leader.maybe_propose_isr(controller.alter_partition, DEADLINE_S)
        await until(lambda: len(controller.requests) >= 1)
        partition.apply(LeaderAndIsr(1, 0, 1, (1, 2, 3), (1, 2, 3)))
        await until(lambda: not leader.proposing)  # the asking is over
        assert partition.isr == (1, 2, 3) and partition.replica_set.pending_isr is None

    asyncio.run(scenario())


def test_a_refusal_takes_the_state_it_carries_and_ends_the_change(leader):
    controller = FakeController(LeaderAndIsr(1, 0, 4, (1, 2, 3), (1,)))  # 2 left meanwhile
    controller.refuse_with = StaleIsrChangeError("the partition changed")
    partition = leader.partition

    async def scenario() -> None:
        leader.maybe_propose_isr(controller.alter_partition, DEADLINE_S)
        await until(lambda: not leader.proposing)
        assert len(controller.requests) == 1
        assert partition.isr == (1,) and partition.partition_epoch == 4
        assert partition.replica_set.pending_isr is None
        assert partition.high_watermark == partition.log_end_offset  # alone in the ISR
        leader.maybe_propose_isr(controller.alter_partition, DEADLINE_S)
        assert len(controller.requests) == 1  # not at once after a refusal

    asyncio.run(scenario())
