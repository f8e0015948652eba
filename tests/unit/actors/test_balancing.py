"""The controller's balancer (actors/balancing.py) over metadata in memory, without Ray:
plans on the live brokers and replica sizes, plans carried out as reassignments that the
new replicas copy within the throttle, preferred leaders elected when done, and the
automatic mode."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from actors.balancing import PartitionBalancer
from actors.partition_moves import PartitionMoves
from raylog.errors import (
    InvalidArgumentError,
    ReassignmentInProgressError,
    StaleBalancePlanError,
    UnknownBrokerError,
)
from raylog.metadata import state as events
from raylog.metadata.balance_settings import BalanceSettings, throttled_rate
from raylog.metadata.settings import ReplicationSettings
from tests.unit.actors.test_controller_parts import FakeChannel, FakeWatch, cluster

SIX = ((1, 2, 3), (2, 3, 1), (3, 1, 2), (1, 3, 2), (2, 1, 3), (3, 2, 1))


class _Remote:
    def __init__(self, method: Any) -> None:
        self._method = method

    def remote(self, *args: Any) -> Any:
        return self._method(*args)


class FakeBroker:
    """A broker actor's handle that says the sizes of its replicas (``meanwhile`` runs
    before it answers)."""

    def __init__(self, broker: int, access) -> None:
        self.broker, self.access = broker, access
        self.describe = _Remote(self._describe)
        self.meanwhile = lambda: None

    async def _describe(self) -> list[dict[str, Any]]:
        self.meanwhile()
        return [{"topic": t.name, "partition": p.partition, "size_bytes": 1000 * (p.partition + 1)}
                for t in self.access.state.topics.values() for p in t.partitions
                if self.broker in p.replicas]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _started() -> None:
    pass


def setup(brokers=(1, 2, 3, 4), replicas=SIX, settings: BalanceSettings | None = None,
          rate: int = 0):
    access, manager, channels = cluster(brokers=brokers, replicas=replicas)
    manager.throttled_rate = rate
    for b, watch in manager.watches.items():
        watch.handle = FakeBroker(b, access)
    moves = PartitionMoves(access, manager, ReplicationSettings(), _started,
                           lambda topic: {"name": topic.name})
    clock = Clock()
    balancer = PartitionBalancer(access, manager, moves, settings or BalanceSettings(),
                                 _started, clock=clock)
    return access, manager, channels, moves, balancer, clock


def join(access, manager, channels, broker: int) -> None:
    access.commit(events.broker_registered(broker))
    manager.watches[broker] = FakeWatch(broker)
    manager.watches[broker].handle = FakeBroker(broker, access)
    channels[broker] = manager.channels[broker] = FakeChannel()


async def finish(access, moves) -> None:
    """Let every move run to its end: the new replicas join the ISR as they would."""
    for _ in range(5):
        for topic, p in access.partitions():
            if p.target is not None and set(p.isr) != set(p.replicas):
                access.commit(events.partition_changed(
                    topic.name, p.partition, leader=p.leader, leader_epoch=p.leader_epoch,
                    isr=list(p.replicas), replicas=p.replicas))
        await moves.move_reassigned()


def test_a_plan_evens_a_new_broker_in_and_executing_it_moves_then_elects_leaders():
    async def scenario() -> None:
        access, manager, channels, moves, balancer, _ = setup(
            brokers=(1, 2, 3), rate=5000)
        join(access, manager, channels, 4)
        plan = await balancer.balance_plan()
        assert plan["live"] == [1, 2, 3, 4] and plan["moves"]
        assert plan["after"]["4"]["replicas"] == 4 and plan["before"]["4"]["replicas"] == 0
        assert plan["bytes"] == sum(m["bytes"] for m in plan["moves"]) > 0
        started = await balancer.balance_execute(plan["moves"])
        assert len(started["started"]) == len(plan["moves"])
        status = await balancer.balance_status()
        assert {(m["topic"], m["partition"]) for m in status["moving"]} == \
            {(m["topic"], m["partition"]) for m in plan["moves"]}
        # The new replicas are told to copy within the cluster's rate.
        moving = access.state.topic("t").partitions[plan["moves"][0]["partition"]]
        assert manager.state_of(access.state.topic("t"), moving)["throttled_rate"] == 5000
        assert 4 in {b for b, c in channels.items() if c.told}
        await finish(access, moves)
        await balancer.step()
        assert (await balancer.balance_status()) == {"moving": [], "leaders_pending": []}
        parts = access.state.topic("t").partitions
        by_plan = {m["partition"]: m["target"] for m in plan["moves"]}
        for p in parts:
            assert p.replicas == by_plan.get(p.partition, p.replicas)
            assert p.leader == p.replicas[0]  # the preferred leader leads
            assert manager.state_of(access.state.topic("t"), p)["throttled_rate"] is None
        again = await balancer.balance_plan()
        assert again["moves"] == []

    asyncio.run(scenario())


def test_a_topics_rate_overrides_the_clusters_and_zero_unthrottles():
    assert throttled_rate({}, 100) == 100
    assert throttled_rate({"replication_throttled_rate": 7}, 100) == 7
    assert throttled_rate({"replication_throttled_rate": 0}, 100) is None
    assert throttled_rate({}, 0) is None


def test_a_stale_plan_starts_nothing():
    async def scenario() -> None:
        access, manager, channels, _, balancer, _ = setup(brokers=(1, 2, 3))
        join(access, manager, channels, 4)
        plan = await balancer.balance_plan()
        first = plan["moves"][0]
        access.commit(events.partition_changed(  # the partition changed meanwhile
            "t", first["partition"], leader=first["replicas"][0], leader_epoch=9,
            isr=first["replicas"][:2], replicas=first["replicas"][:2]))
        before = len(access.log.events)
        with pytest.raises(StaleBalancePlanError, match=f"t-{first['partition']}"):
            await balancer.balance_execute(plan["moves"])
        assert len(access.log.events) == before
        assert all(p.target is None for _, p in access.partitions())
        manager.watches[4].alive = False  # a target broker died since the plan
        with pytest.raises(StaleBalancePlanError, match="live"):
            await balancer.balance_execute(plan["moves"][1:])

    asyncio.run(scenario())


def test_a_broker_being_drained_is_given_nothing():
    async def scenario() -> None:
        access, manager, channels, _, balancer, _ = setup(brokers=(1, 2, 3))
        join(access, manager, channels, 4)
        plan = await balancer.balance_plan()
        manager.draining.add(4)  # drained since the plan (its actors still run)
        with pytest.raises(StaleBalancePlanError, match="live"):
            await balancer.balance_execute(plan["moves"])
        again = await balancer.balance_plan()
        assert again["live"] == [1, 2, 3]
        assert all(4 not in m["target"] for m in again["moves"])

    asyncio.run(scenario())


def test_bad_input_is_refused_with_typed_errors():
    async def scenario() -> None:
        _, _, _, moves, balancer, _ = setup()
        with pytest.raises(UnknownBrokerError, match=r"unknown brokers 7, 9 "):
            await balancer.balance_plan([9, 1, 7])
        with pytest.raises(UnknownBrokerError):
            await balancer.balance_execute([], remove=[5])
        with pytest.raises(InvalidArgumentError, match="no live broker"):
            await balancer.balance_plan([1, 2, 3, 4])
        with pytest.raises(InvalidArgumentError, match="topic, partition"):
            await balancer.balance_execute([{"topic": "t"}])
        await moves.reassign_partitions("t", {0: [4, 2, 3]})
        with pytest.raises(ReassignmentInProgressError, match="t-0"):
            await balancer.balance_plan()

    asyncio.run(scenario())


def test_emptying_a_broker_and_the_automatic_mode_leaving_it_empty():
    async def scenario() -> None:
        access, _, _, moves, balancer, clock = setup(
            settings=BalanceSettings(auto_balance=True, auto_balance_after_s=5))
        plan = await balancer.balance_plan([4])
        assert plan["after"]["4"]["replicas"] == 0
        await balancer.balance_execute(plan["moves"], remove=[4])
        await finish(access, moves)
        clock.now += 60
        await balancer.step()
        await balancer.step()
        assert all(4 not in p.replicas and p.target is None for _, p in access.partitions())

    asyncio.run(scenario())


def test_the_automatic_mode_balances_once_a_new_broker_has_been_up_a_while():
    async def scenario() -> None:
        access, manager, channels, moves, balancer, clock = setup(
            brokers=(1, 2, 3), settings=BalanceSettings(auto_balance=True,
                                                        auto_balance_after_s=5))
        await balancer.step()
        join(access, manager, channels, 4)
        await balancer.step()
        assert all(p.target is None for _, p in access.partitions())  # not settled yet
        clock.now += 5
        await balancer.step()
        assert any(p.target is not None for _, p in access.partitions())
        await finish(access, moves)
        await balancer.step()
        assert {b for _, p in access.partitions() for b in p.replicas} == {1, 2, 3, 4}
        held = access.state.replicas_by_broker()
        assert max(map(len, held.values())) - min(map(len, held.values())) <= 1
        clock.now += 60
        await balancer.step()  # balanced: nothing more
        assert all(p.target is None for _, p in access.partitions())

    asyncio.run(scenario())


def test_without_the_automatic_mode_a_new_broker_waits_for_an_operator():
    async def scenario() -> None:
        access, manager, channels, _, balancer, clock = setup(brokers=(1, 2, 3))
        await balancer.step()
        join(access, manager, channels, 4)
        clock.now += 3600
        await balancer.step()
        assert all(p.target is None for _, p in access.partitions())

    asyncio.run(scenario())


def test_the_automatic_mode_balances_after_a_broker_left_for_good():
    async def scenario() -> None:
        replicas = ((1, 2), (2, 3), (3, 4), (4, 1), (1, 3), (2, 4))
        access, manager, _, moves, balancer, clock = setup(
            replicas=replicas, settings=BalanceSettings(auto_balance=True,
                                                        auto_balance_after_s=5))
        await balancer.step()
        manager.watches[4].alive = False
        await manager.broker_down(4)
        clock.now += 60
        await balancer.step()
        assert all(p.target is None for _, p in access.partitions())  # only down, so far
        # Gone for good: its replicas are placed elsewhere (replace_gone_brokers), unevenly.
        for number, target in ((2, [3, 1]), (3, [1, 2]), (5, [2, 1])):
            access.commit(events.reassignment("t", number, target))
        await finish(access, moves)
        held = access.state.replicas_by_broker()
        assert 4 not in held and len(held[1]) == 5
        await balancer.step()  # it left: the live brokers changed a moment ago
        clock.now += 5
        await balancer.step()
        await finish(access, moves)
        held = access.state.replicas_by_broker()
        assert sorted(len(v) for v in held.values()) == [4, 4, 4]

    asyncio.run(scenario())


def test_the_status_of_moves_that_end_while_sizes_are_asked():
    async def scenario() -> None:
        access, manager, channels, _, balancer, _ = setup(brokers=(1, 2, 3))
        join(access, manager, channels, 4)
        plan = await balancer.balance_plan()
        await balancer.balance_execute(plan["moves"])

        def done() -> None:
            for topic, p in access.partitions():
                if p.target is not None:
                    access.commit(events.reassignment(topic.name, p.partition, None))
        manager.watches[1].handle.meanwhile = done
        status = await balancer.balance_status()
        assert len(status["moving"]) == len(plan["moves"])  # as they were when asked
        assert all(m["bytes_to_copy"] >= m["bytes_copied"] >= 0 for m in status["moving"])
        assert (await balancer.balance_status())["moving"] == []

    asyncio.run(scenario())
