"""A follower broker's fetcher (actors/fetcher.py) against a fake leader broker: real
Partitions on both sides, no Ray. One partition whose data does not take must not stop the
others, and a fetcher with nothing to ask must wait, never spin the event loop."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from actors.fetcher import ReplicaFetcher
from actors.hosting import HostedReplica
from raylog.errors import RaylogError
from raylog.records import Codec
from raylog.replica.partition import LeaderAndIsr, Partition
from raylog.replica.throttle import ByteRate
from raylog.storage import LogConfig, PartitionLog
from tests.unit.logutil import FakeClock, batch_of

NOW = 1_700_000_000_000
TOPIC = "t"


def partition(tmp_path, broker: int, number: int) -> Partition:
    clock = FakeClock(NOW)
    log = PartitionLog(tmp_path / f"b{broker}" / f"{TOPIC}-{number}",
                       LogConfig(retention_ms=None), clock=clock)
    return Partition(TOPIC, number, log, broker, clock=clock)


class _Remote:
    def __init__(self, method: Any) -> None:
        self._method = method

    def remote(self, *args: Any) -> Any:
        return self._method(*args)  # a coroutine: awaitable, as an ObjectRef is


class FakeLeaderBroker:
    """The leader side of replica_fetch and epoch_end_offsets, over real Partitions."""

    def __init__(self, partitions: dict[tuple[str, int], Partition]) -> None:
        self.partitions = partitions
        self.fetches = 0
        self.asked: list[int | None] = []  # each partition's limit, for a moving replica
        self.replica_fetch = _Remote(self._replica_fetch)
        self.epoch_end_offsets = _Remote(self._epoch_end_offsets)

    async def _replica_fetch(self, follower, requests, max_bytes, partition_max_bytes,
                             max_wait_ms, follower_epoch):
        self.fetches += 1
        await asyncio.sleep(0.001)
        answers = []
        for topic, number, epoch, offset, _, *limit in requests:
            p = self.partitions[(topic, number)]
            self.asked.append(limit[0] if limit else None)
            try:
                p.follower_fetched(follower, epoch, offset, follower_epoch)
                r = p.read_for_follower(offset, min([partition_max_bytes, *limit]))
                answers.append({"data": r.data, "high_watermark": r.high_watermark,
                                "log_start_offset": r.log_start_offset,
                                "log_end_offset": r.log_end_offset, "error": None})
            except RaylogError as e:
                answers.append({"data": b"", "error": e, "high_watermark": -1,
                                "log_start_offset": -1, "log_end_offset": -1})
        return answers

    async def _epoch_end_offsets(self, requests):
        return [tuple(self.partitions[(t, n)].end_offset_for_epoch(le, e))
                for t, n, le, e in requests]


class FakeFollowerBroker:
    def __init__(self, replicas: dict[tuple[str, int], HostedReplica]) -> None:
        self.broker_id = 2
        self.broker_epoch = 12
        self.replicas = replicas
        self.clock = 0.0  # the throttles' (seconds), moved by the tests
        self.throttles: dict[int, ByteRate] = {}

    def throttle(self, rate: int) -> ByteRate:
        return self.throttles.setdefault(rate, ByteRate(rate, clock=lambda: self.clock))


def state(leader: int = 1) -> LeaderAndIsr:
    return LeaderAndIsr(leader, 0, 0, (1, 2), (1, 2))


@pytest.fixture
def pair(tmp_path):
    """Leader partitions 0 and 1 on broker 1 with records, and their followers on 2."""
    leaders = {(TOPIC, n): partition(tmp_path, 1, n) for n in range(2)}
    for p in leaders.values():
        p.apply(state())
        for i in range(3):
            p.append(batch_of([b"r%d" % i], ts=NOW), leader_epoch=0)
    followers = {}
    for (topic, n) in leaders:
        f = partition(tmp_path, 2, n)
        f.apply(state())
        followers[(topic, n)] = HostedReplica(f, "topic-id", {})
    yield FakeLeaderBroker(leaders), FakeFollowerBroker(followers)
    for p in [*leaders.values(), *(h.partition for h in followers.values())]:
        p.log.close()


async def until(condition, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_followers_catch_up_with_the_leader(pair):
    leader, follower = pair

    async def scenario() -> None:
        fetcher = ReplicaFetcher(follower, 1, leader)
        for tp in follower.replicas:
            fetcher.follow(tp, 0, leader)
        await until(lambda: all(h.partition.log_end_offset == 3 and
                                h.partition.high_watermark == 3
                                for h in follower.replicas.values()))
        fetcher.stop()
        # Its fetches named the broker epoch of its broker's process (KIP-903).
        assert {p.replica_set.follower(2).broker_epoch for p in leader.partitions.values()} \
            == {12}

    asyncio.run(scenario())


def test_a_partition_whose_data_does_not_take_does_not_stop_the_others(pair, monkeypatch):
    leader, follower = pair
    bad = follower.replicas[(TOPIC, 0)].partition

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(bad, "append_replicated", refuse)

    async def scenario() -> None:
        fetcher = ReplicaFetcher(follower, 1, leader)
        for tp in follower.replicas:
            fetcher.follow(tp, 0, leader)
        good = follower.replicas[(TOPIC, 1)].partition
        await until(lambda: good.log_end_offset == 3 and good.high_watermark == 3)
        assert bad.log_end_offset == 0
        assert fetcher.partitions[(TOPIC, 0)].truncating  # it starts over when it can
        fetcher.stop()

    asyncio.run(scenario())


def test_a_fetcher_with_nothing_to_ask_waits_instead_of_spinning(pair):
    """A partition still listed as truncating whose replica stopped following (say, an apply
    made it leader) must not make the fetcher loop without ever yielding."""
    leader, follower = pair

    async def scenario() -> None:
        fetcher = ReplicaFetcher(follower, 1, leader)
        fetcher.follow((TOPIC, 0), 0, leader)
        follower.replicas[(TOPIC, 0)].partition.apply(LeaderAndIsr(2, 1, 1, (1, 2), (2,)))
        ticks = 0
        for _ in range(20):  # the loop must keep getting control back
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 20 and leader.fetches == 0
        fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_moving_replica_copies_within_its_byte_budget(tmp_path):
    """A follower out of the ISR whose replica moves (a throttled rate from the controller)
    asks the leader for no more than its budget, and stops when it is spent until time
    refills it; a replica of the same rate in the ISR copies freely."""
    leaders = {(TOPIC, n): partition(tmp_path, 1, n) for n in range(2)}
    for p in leaders.values():
        p.apply(LeaderAndIsr(1, 0, 0, (1, 2), (1,)))
        for _ in range(10):
            p.append(batch_of([os.urandom(300)], codec=Codec.NONE, ts=NOW), leader_epoch=0)
    follower = FakeFollowerBroker({})
    for (topic, n) in leaders:
        f = partition(tmp_path, 2, n)
        f.apply(LeaderAndIsr(1, 0, 0, (1, 2), (1,) if n == 0 else (1, 2)))
        follower.replicas[(topic, n)] = HostedReplica(f, "topic-id", {})
        follower.replicas[(topic, n)].throttled_rate = 2000  # half a second: 1000 bytes
    leader = FakeLeaderBroker(leaders)
    moving, in_sync = (follower.replicas[(TOPIC, n)].partition for n in range(2))
    batch_bytes = leaders[(TOPIC, 0)].log.size_bytes // 10

    async def scenario() -> None:
        fetcher = ReplicaFetcher(follower, 1, leader)
        for tp in follower.replicas:
            fetcher.follow(tp, 0, leader)
        await until(lambda: in_sync.log_end_offset == 10 and moving.log_end_offset > 0)
        for _ in range(30):  # the loop runs on; the budget's clock does not
            await asyncio.sleep(0.01)
        copied = moving.log.size_bytes
        assert 0 < copied <= 1000 + batch_bytes  # the burst, and one whole batch past it
        assert moving.log_end_offset < 10
        assert {a for a in leader.asked if a is not None} <= set(range(1, 1001))
        follower.clock += 60  # a minute later: refilled, but never more than the burst
        await until(lambda: moving.log.size_bytes > copied)
        assert moving.log.size_bytes <= copied + 1000 + batch_bytes
        deadline = asyncio.get_running_loop().time() + 20
        while moving.log_end_offset < 10:  # time goes on: it copies everything
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            follower.clock += 1
            await asyncio.sleep(0.02)
        fetcher.stop()

    try:
        asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        for p in [*leaders.values(), *(h.partition for h in follower.replicas.values())]:
            p.log.close()


class _ActorId:
    def __init__(self, name: str) -> None:
        self.name = name

    def hex(self) -> str:
        return self.name


class RedirectingLeaderBroker(FakeLeaderBroker):
    """A leader broker whose partition 1 another process of its node serves: its fetches
    of it are answered with that host's handle (actors/broker.py, BrokerActor)."""

    def __init__(self, partitions, host) -> None:
        super().__init__(partitions)
        self.host = host

    async def _replica_fetch(self, follower, requests, *rest):
        own = [r for r in requests if r[1] != 1]
        answers = iter(await super()._replica_fetch(follower, own, *rest))
        return [{"data": b"", "error": RaylogError("elsewhere"), "host": self.host,
                 "high_watermark": -1, "log_start_offset": -1, "log_end_offset": -1}
                if r[1] == 1 else next(answers) for r in requests]


class RedirectableFollower(FakeFollowerBroker):
    """The follower side with the real redirect (ReplicaHost.redirect)."""

    def __init__(self, replicas, leader) -> None:
        super().__init__(replicas)
        self.fetchers: dict = {}
        self.brokers = {1: leader}

    def redirect(self, tp, following, leader, host) -> None:
        from actors.serving import ReplicaHost

        ReplicaHost.redirect(self, tp, following, leader, host)


def test_a_follower_fetches_from_the_leader_host_its_broker_names(pair):
    leader, follower = pair
    host = FakeLeaderBroker(leader.partitions)
    host._actor_id = _ActorId("host-1")
    broker = RedirectingLeaderBroker(leader.partitions, host)
    follower = RedirectableFollower(follower.replicas, broker)

    async def scenario() -> None:
        fetcher = follower.fetchers[1, None] = ReplicaFetcher(follower, 1, broker)
        for tp in follower.replicas:
            fetcher.follow(tp, 0, broker)
        await until(lambda: all(h.partition.log_end_offset == 3
                                for h in follower.replicas.values()))
        # Partition 1 moved to a fetcher of the leader's host; partition 0 stayed.
        assert set(follower.fetchers) == {(1, None), (1, "host-1")}
        assert list(follower.fetchers[1, "host-1"].partitions) == [(TOPIC, 1)]
        assert list(follower.fetchers[1, None].partitions) == [(TOPIC, 0)]
        assert host.fetches > 0
        for f in follower.fetchers.values():
            f.stop()

    asyncio.run(scenario())
