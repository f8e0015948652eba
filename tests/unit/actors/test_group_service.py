"""The controller's group service (actors/groups.py, GroupService) over metadata in memory
and a fake __consumer_offsets leader that can stop answering: every group RPC answers
within its deadline, and membership changes never wait for a hung write (issue 22, item 6).
No Ray cluster: the fakes stand where Ray calls would be.
"""

from __future__ import annotations

import asyncio

import pytest
from ray.exceptions import ActorDiedError

import actors.groups as groups_module
from actors.groups import GroupService
from raylog.errors import RequestTimeoutError
from raylog.metadata import state as events
from raylog.metadata.access import MemoryLog, MetadataAccess
from raylog.replica.partition import FetchResult
from raylog.storage import AppendInfo
from raylog.types import TopicPartition
from tests.unit.actors.test_fetcher import _Remote  # a fake actor method: .remote() is a coroutine

TOPICS = {"t": 4}
ALL = sorted(("t", p) for p in range(4))


class FakeLeader:
    """The leader of every __consumer_offsets partition: an empty log that takes appends,
    or holds them while ``gate`` is closed."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.appended = 0
        self.produce = _Remote(self._produce)
        self.fetch = _Remote(self._fetch)
        self.list_offset = _Remote(self._list_offset)

    async def _produce(self, topic, partition, epoch, batch, acks, timeout_ms) -> AppendInfo:
        await self.gate.wait()
        self.appended += 1
        return AppendInfo(self.appended, self.appended, 0, 1)

    async def _fetch(self, topic, partition, epoch, offset, max_bytes, wait_ms, min_bytes):
        return FetchResult(b"", 0, 0, 0)

    async def _list_offset(self, topic, partition, epoch, spec):
        return 0, 0


def metadata() -> MetadataAccess:
    """The state GroupService reads: topic ``t`` and __consumer_offsets, in memory."""
    access = MetadataAccess(MemoryLog())
    access.commit(events.cluster_created("c"))
    for name, partitions in {**TOPICS, "__consumer_offsets": 8}.items():
        access.commit(events.topic_created(name, name, [[1]] * partitions, {}))
    return access


def group_service(leader: FakeLeader, **kwargs) -> GroupService:
    """A GroupService over :func:`metadata`, whose every partition ``leader`` leads."""
    async def ensure_topic(name, partitions, configs) -> None:
        pass  # metadata() has it

    return GroupService(metadata(), lambda topic, partition: (leader, 0), ensure_topic,
                        **kwargs)


class FakeActor:
    """A member's actor handle and its MemberActor wrapper in one (the seam)."""

    def __init__(self, name: str) -> None:
        self._actor_id = type("Id", (), {"hex": lambda _: name})()
        self.dead = False
        self._listening: list[asyncio.Queue] = []

    def kill(self) -> None:
        """Ray's notice of its death."""
        self.dead = True
        for queue in self._listening:
            queue.put_nowait("DEAD")

    def listen(self) -> asyncio.Queue:
        self._listening.append(asyncio.Queue())
        return self._listening[-1]

    def stop_listening(self, queue: asyncio.Queue) -> None:
        self._listening.remove(queue)

    async def check(self) -> None:
        await asyncio.sleep(0)
        if self.dead:
            raise ActorDiedError()


async def until(condition, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_rpcs_answer_at_their_deadline_and_membership_never_waits_for_a_hung_write(
        monkeypatch):
    monkeypatch.setattr(groups_module, "WRITE_WAIT_S", 0.2)

    async def scenario() -> None:
        leader = FakeLeader()
        service = group_service(leader, member_actor=lambda handle: handle)
        await service.list_groups()  # loaded
        leader.gate.clear()  # __consumer_offsets stops answering
        actor = FakeActor("actor-a")
        joined = await asyncio.wait_for(service.join_group(
            "g", "a", "client", ["t"], None, 10_000, "range", actor, None), 5)
        assert joined["owned"] == []
        beat = await service.heartbeat("g", "a", [])
        assert beat["owned"] == [] and beat["pending"]  # not durable yet: nothing granted

        leader.gate.set()
        await until(lambda: service.store.idle())
        beat = await service.heartbeat("g", "a", [])
        assert beat["owned"] == ALL

        leader.gate.clear()
        with pytest.raises(RequestTimeoutError):
            await asyncio.wait_for(service.commit_offsets(
                "g", "a", beat["generation"], [("t", 0, 5, "")]), 5)
        await asyncio.wait_for(service.leave_group("g", "a"), 5)  # answers anyway
        assert "a" not in service.coordinator.group("g").members
        await until(lambda: "actor-a" not in service._watches)  # its watch ended with it
        # ... and a death is handled while the write is still hung.
        other = FakeActor("actor-b")
        await asyncio.wait_for(service.join_group(
            "g", "b", "client", ["t"], None, 10_000, "range", other, None), 5)
        other.kill()
        await until(lambda: "b" not in service.coordinator.group("g").members)
        assert not leader.gate.is_set()

        leader.gate.set()
        await until(lambda: service.store.idle())
        committed = await service.committed_offsets("g", [("t", 0)])
        assert committed[("t", 0)] is None  # a left while its commit was out: not applied
        assert TopicPartition("t", 0) not in service.coordinator.held.get("g", {})

    asyncio.run(asyncio.wait_for(scenario(), 30))
