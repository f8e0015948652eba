"""The controller's sender per broker (actors/channels.py), with fake calls: one hung broker
delays nobody else, words changed while a call was out are told once with the newest
version, failed calls are made again while the broker lives, and nothing is told to a
broker that is not alive."""

from __future__ import annotations

import asyncio
import contextlib

from actors.channels import BrokerChannel, Outcome, Words


class FakeBrokers:
    """Each call is recorded with the metadata version it would carry; a broker in
    ``hung`` never answers, one in ``down`` is not alive, one in ``failing`` fails that many
    more calls."""

    def __init__(self) -> None:
        self.version = 0
        self.calls: list[tuple[int, Words, int]] = []
        self.hung: set[int] = set()
        self.down: set[int] = set()
        self.failing: dict[int, int] = {}
        self.release = asyncio.Event()

    async def send(self, broker: int, words: Words) -> Outcome:
        if broker in self.down:
            return Outcome.DROPPED
        self.calls.append((broker, words, self.version))
        if broker in self.hung:
            await self.release.wait()
        await asyncio.sleep(0.001)
        if self.failing.get(broker, 0) > 0:
            self.failing[broker] -= 1
            return Outcome.FAILED
        return Outcome.DELIVERED


def test_a_hung_broker_delays_what_the_others_are_told_by_nothing():
    async def scenario() -> None:
        brokers = FakeBrokers()
        brokers.hung.add(1)
        channels = {b: BrokerChannel(b, brokers.send) for b in (1, 2, 3)}
        told = [channels[b].tell([("t", 0)]) for b in (1, 2, 3)]
        done, pending = await asyncio.wait(told, timeout=1)
        assert {f.result() for f in done} == {True} and len(done) == 2
        assert pending == {told[0]}
        # The others go on being told while broker 1 hangs.
        assert await asyncio.wait_for(channels[2].tell([("t", 1)]), 1)
        brokers.release.set()
        assert await asyncio.wait_for(told[0], 1)

    asyncio.run(scenario())


def test_words_piling_up_behind_a_call_are_told_once_in_order_of_versions():
    async def scenario() -> None:
        brokers = FakeBrokers()
        brokers.hung.add(1)
        channel = BrokerChannel(1, brokers.send)
        first = channel.tell([("t", 0)])
        await asyncio.sleep(0.01)
        later = []
        for i in range(20):  # the metadata changes 20 times meanwhile
            brokers.version += 1
            later.append(channel.tell([("t", i % 3)]))
        later.append(channel.stop_replicas([("u", 0)], True, brokers.version))
        brokers.version += 1
        later.append(channel.tell(full=True))
        brokers.release.set()
        assert await asyncio.wait_for(asyncio.gather(first, *later), 1) == [True] * 23
        assert len(brokers.calls) == 2  # everything that came meanwhile in one call
        (_, words, version), = brokers.calls[1:]
        assert words.partitions == {("t", 0), ("t", 1), ("t", 2)} and words.full
        assert [s.replicas for s in words.stops] == [(("u", 0),)]
        assert version == brokers.version  # the states read when the call is made
        versions = [v for _, _, v in brokers.calls]
        assert versions == sorted(versions)

    asyncio.run(scenario())


def test_a_failed_call_is_made_again_with_what_came_meanwhile():
    async def scenario() -> None:
        brokers = FakeBrokers()
        brokers.failing[1] = 2
        channel = BrokerChannel(1, brokers.send, retry_s=(0.01, 0.02))
        first = channel.tell([("t", 0)])
        second = channel.tell([("t", 1)])
        assert await asyncio.wait_for(asyncio.gather(first, second), 1) == [True, True]
        assert len(brokers.calls) == 3
        assert brokers.calls[-1][1].partitions == {("t", 0), ("t", 1)}

    asyncio.run(scenario())


def test_a_broker_not_alive_is_told_nothing():
    async def scenario() -> None:
        brokers = FakeBrokers()
        brokers.down.add(1)
        channel = BrokerChannel(1, brokers.send)
        assert await asyncio.wait_for(channel.tell(full=True), 1) is False
        assert brokers.calls == []

    asyncio.run(scenario())


def test_a_caller_that_stopped_waiting_does_not_break_the_channel():
    async def scenario() -> None:
        brokers = FakeBrokers()
        brokers.hung.add(1)
        channel = BrokerChannel(1, brokers.send)
        told = channel.tell([("t", 0)])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(told, 0.01)  # cancels its future
        brokers.release.set()
        assert await asyncio.wait_for(channel.tell([("t", 1)]), 1)

    asyncio.run(scenario())


def test_nobody_waits_for_a_broker_that_went_down_while_its_call_was_out():
    async def scenario() -> None:
        brokers = FakeBrokers()
        brokers.hung.add(1)
        channel = BrokerChannel(1, brokers.send)
        out = channel.tell([("t", 0)])  # the call hangs
        await asyncio.sleep(0.01)
        queued = channel.tell([("t", 1)])
        channel.release()  # fenced
        assert await asyncio.wait_for(asyncio.gather(out, queued), 1) == [False, False]

    asyncio.run(scenario())
