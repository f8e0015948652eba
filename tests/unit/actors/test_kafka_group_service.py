"""The controller's Kafka group RPCs (actors/kafka_groups.py) over the group service's fakes
(a __consumer_offsets leader that can stop answering): parked JoinGroups answered together,
SyncGroups that wait for their group record, sessions that run out in the coordinator,
commits fenced by generation. No Ray."""

from __future__ import annotations

import asyncio

import pytest

import actors.groups as groups_module
import actors.kafka_groups as kafka_module
from actors.kafka_groups import KafkaGroupService
from raylog.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberError,
)
from tests.unit.actors.test_group_service import ALL, FakeLeader, group_service, until

RANGE = [("range", ["t"], b"subscription", [])]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def kafka_service(monkeypatch, leader: FakeLeader) -> tuple[KafkaGroupService, Clock]:
    clock = Clock()
    monkeypatch.setattr(groups_module, "wall_clock_ms", clock)
    return KafkaGroupService(group_service(leader)), clock


async def new_member(kafka: KafkaGroupService, client_id: str) -> str:
    with pytest.raises(MemberIdRequiredError) as e:
        await kafka.join_group("g", "", client_id, "/127.0.0.1", "consumer", RANGE, 6_000,
                               60_000, True)
    return e.value.member_id


def join(kafka: KafkaGroupService, member_id: str, instance: str | None = None
         ) -> asyncio.Task:
    return asyncio.ensure_future(kafka.join_group(
        "g", member_id, "c", "/127.0.0.1", "consumer", RANGE, 6_000, 60_000, True, instance))


def parked(kafka: KafkaGroupService, member_id: str) -> bool:
    """Whether ``member_id``'s JoinGroup waits in group g's round."""
    state = kafka.groups.classic.rounds.get("g")
    return state is not None and member_id in state.parked


def test_joins_wait_for_each_other_and_syncs_split_the_partitions(monkeypatch):
    async def scenario() -> None:
        leader = FakeLeader()
        kafka, _ = kafka_service(monkeypatch, leader)
        a = await new_member(kafka, "a")
        first = await join(kafka, a)  # alone: answered at once
        b = await new_member(kafka, "b")
        parked_join = join(kafka, b)
        await until(lambda: parked(kafka, b))
        assert not parked_join.done()  # b waits for a to join again
        with pytest.raises(RebalanceInProgressError):
            await kafka.heartbeat("g", a, first["generation"])
        answers = await asyncio.gather(join(kafka, a), parked_join)
        generation = answers[0]["generation"]
        assert {x["generation"] for x in answers} == {generation}
        assert {x["leader"] for x in answers} == {""} and answers[0]["protocol"] == "range"
        owned = await asyncio.gather(kafka.sync_group("g", a, generation),
                                     kafka.sync_group("g", b, generation))
        assert sorted(owned[0] + owned[1]) == ALL and not set(owned[0]) & set(owned[1])
        await kafka.heartbeat("g", a, generation)
        await kafka.groups.commit_offsets("g", a, generation, [(*owned[0][0], 7, "")])
        with pytest.raises(IllegalGenerationError):
            await kafka.groups.commit_offsets("g", b, generation - 1, [(*owned[1][0], 7, "")])
        committed = await kafka.groups.committed_offsets("g", [owned[0][0]])
        assert committed[owned[0][0]][0] == 7
        listed = await kafka.list_groups()
        assert listed == [("g", "Stable")]

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_sync_waits_for_the_group_record_then_gets_everything(monkeypatch):
    async def scenario() -> None:
        leader = FakeLeader()
        kafka, _ = kafka_service(monkeypatch, leader)
        await kafka.list_groups()  # loaded
        leader.gate.clear()  # the group record cannot be written for now
        a = await new_member(kafka, "a")
        joined = await join(kafka, a)
        sync = asyncio.ensure_future(kafka.sync_group("g", a, joined["generation"]))
        await asyncio.sleep(0.1)
        assert not sync.done()  # nothing is granted before the record naming a is durable
        leader.gate.set()
        assert await asyncio.wait_for(sync, 5) == ALL

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_sync_that_cannot_get_everything_answers_by_its_deadline_and_starts_a_round(
        monkeypatch):
    monkeypatch.setattr(kafka_module, "SYNC_WAIT_S", 0.2)

    async def scenario() -> None:
        leader = FakeLeader()
        kafka, _ = kafka_service(monkeypatch, leader)
        await kafka.list_groups()
        leader.gate.clear()
        a = await new_member(kafka, "a")
        joined = await join(kafka, a)
        assert await asyncio.wait_for(kafka.sync_group("g", a, joined["generation"]), 5) == []
        with pytest.raises(RebalanceInProgressError):
            await kafka.heartbeat("g", a, joined["generation"])

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_member_that_stops_heartbeating_expires_in_the_coordinator(monkeypatch):
    async def scenario() -> None:
        leader = FakeLeader()
        kafka, clock = kafka_service(monkeypatch, leader)
        a = await new_member(kafka, "a")
        await join(kafka, a)
        b = await new_member(kafka, "b")
        answers = await asyncio.gather(join(kafka, b), join(kafka, a))
        generation = answers[0]["generation"]
        await kafka.sync_group("g", a, generation)
        await kafka.sync_group("g", b, generation)
        # b's gateway is gone: only a heartbeats, while the controller's step runs
        start = clock.now
        with pytest.raises(RebalanceInProgressError):
            while clock.now - start < 10_000:
                clock.now += 1_000
                await kafka.heartbeat("g", a, generation)
                await kafka.groups.expire_members()
        assert clock.now - start > 6_000  # b's session, not earlier
        with pytest.raises(UnknownMemberError):
            await kafka.heartbeat("g", b, generation)
        again = await join(kafka, a)
        assert await kafka.sync_group("g", a, again["generation"]) == ALL

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_round_ended_by_the_rebalance_timeout_answers_the_parked_joins(monkeypatch):
    async def scenario() -> None:
        leader = FakeLeader()
        kafka, clock = kafka_service(monkeypatch, leader)
        a = await new_member(kafka, "a")
        first = await join(kafka, a)
        b = await new_member(kafka, "b")
        parked_join = join(kafka, b)
        await until(lambda: parked(kafka, b))
        members = kafka.groups.coordinator.groups["g"].members
        start = clock.now
        while a in members:  # a heartbeats and never joins again; b's join stays open
            clock.now += 1_000
            with pytest.raises(RebalanceInProgressError):
                await kafka.heartbeat("g", a, first["generation"])
            await kafka.groups.expire_members()
        assert clock.now - start > 60_000  # the rebalance timeout (b's session is 6 s)
        answer = await asyncio.wait_for(parked_join, 5)
        assert answer["member_id"] == b
        assert set(kafka.groups.coordinator.groups["g"].members) == {b}
        await until(lambda: kafka.groups.store.idle())
        assert await kafka.sync_group("g", b, answer["generation"]) == ALL

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_leave_answers_unknown_members_and_ends_a_round(monkeypatch):
    async def scenario() -> None:
        leader = FakeLeader()
        kafka, _ = kafka_service(monkeypatch, leader)
        a = await new_member(kafka, "a")
        await join(kafka, a)
        b = await new_member(kafka, "b")
        parked_join = join(kafka, b)
        await until(lambda: parked(kafka, b))
        outcomes = await kafka.leave_group("g", [(a, None), ("nobody", None)])
        assert outcomes[0] is None and isinstance(outcomes[1], UnknownMemberError)
        answer = await asyncio.wait_for(parked_join, 5)
        assert answer["member_id"] == b
        (described,) = await kafka.describe_groups(["g"])
        assert described["state"] == "CompletingRebalance"
        assert [m["member_id"] for m in described["members"]] == [b]

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_parked_join_of_a_replaced_static_member_is_answered_fenced(monkeypatch):
    """A static member's new incarnation joins while its old one waits in a round: the old
    JoinGroup is answered FENCED_INSTANCE_ID, the new one joins the round in its place."""
    async def scenario() -> None:
        leader = FakeLeader()
        kafka, _ = kafka_service(monkeypatch, leader)
        first = await join(kafka, "", "ia")  # static: no MEMBER_ID_REQUIRED, alone
        a = first["member_id"]
        c = await new_member(kafka, "c")
        parked_c = join(kafka, c)
        await join(kafka, a, "ia")
        await asyncio.wait_for(parked_c, 5)
        b = await new_member(kafka, "b")
        parked_b = join(kafka, b)  # a round, which a joins (c has not yet)
        old = join(kafka, a, "ia")
        await until(lambda: parked(kafka, a) and parked(kafka, b))
        assert not old.done() and not parked_b.done()
        new = join(kafka, "", "ia")  # a's process restarted
        with pytest.raises(FencedInstanceIdError):
            await asyncio.wait_for(old, 5)
        parked_c = join(kafka, c)  # the last one: the round ends
        answers = [await asyncio.wait_for(t, 5) for t in (new, parked_b, parked_c)]
        a2 = answers[0]["member_id"]
        assert a2 != a and len({answer["generation"] for answer in answers}) == 1
        assert set(kafka.groups.coordinator.groups["g"].members) == {a2, b, c}
        await until(lambda: kafka.groups.store.idle())
        owned = [tp for m in (a2, b, c)
                 for tp in await kafka.sync_group("g", m, answers[0]["generation"])]
        assert sorted(owned) == ALL
        with pytest.raises(FencedInstanceIdError):
            await kafka.heartbeat("g", a, answers[0]["generation"])

    asyncio.run(asyncio.wait_for(scenario(), 30))
