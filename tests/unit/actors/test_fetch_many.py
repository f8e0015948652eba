"""A serving process's fetch of several partitions (actors/serving.py,
``ReplicaHost.fetch_many``) over real leader Partitions, without Ray: it parks until any
partition has data, answers each partition on its own (an error fails none of the others),
spends the answer's byte budget in order, and answers nothing past a stall."""

from __future__ import annotations

import asyncio

import pytest

from actors.hosting import HostedReplica
from actors.serving import ReplicaHost
from raylog.errors import (
    BrokerStalledError,
    NotLeaderError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from raylog.metadata.sessions import StallGuard
from raylog.records import iter_batches
from raylog.replica.partition import FetchResult, LeaderAndIsr, Partition
from raylog.storage import LogConfig, PartitionLog
from tests.unit.logutil import FakeClock, batch_of

NOW = 1_700_000_000_000


class NotTiered:
    async def fetch(self, *args: object) -> None:
        return None  # the local log serves every offset


class NoQuotas:
    async def hold(self, *args: object) -> int:
        return 0


class Host:
    """What ReplicaHost.fetch_many uses of its process: its replicas and stall guard."""

    fetch_many = ReplicaHost.fetch_many
    _read_many = ReplicaHost._read_many

    def __init__(self, replicas: dict[tuple[str, int], HostedReplica]) -> None:
        self.replicas = replicas
        self.broker_id = 1
        self.clock = [0.0]
        self.guard = StallGuard(10.0, clock=lambda: self.clock[0])
        self.tiered = NotTiered()
        self.client_quotas = NoQuotas()

    def _check(self) -> int:
        return self.guard.check()


def leaders(tmp_path, make_host):
    """A process (``make_host(replicas)``) leading t-0 and t-1 at epoch 0, alone in their
    ISRs; their logs closed when the test ends."""
    clock = FakeClock(NOW)
    replicas = {}
    for p in (0, 1):
        log = PartitionLog(tmp_path / f"t-{p}", LogConfig(retention_ms=None), clock=clock)
        partition = Partition("t", p, log, 1, {}, clock=clock)
        partition.apply(LeaderAndIsr(1, 0, 0, (1,), (1,)))
        replicas[("t", p)] = HostedReplica(partition, "topic-id", {})
    yield make_host(replicas)
    for hosted in replicas.values():
        hosted.partition.log.close()


@pytest.fixture
def host(tmp_path):
    yield from leaders(tmp_path, Host)


def append(host: Host, partition: int, *values: bytes) -> None:
    hosted = host.replicas[("t", partition)]
    hosted.partition.append(batch_of(list(values), ts=NOW), 1, 0)
    hosted.notify()


def offsets(result: FetchResult) -> list[int]:
    return [h.base_offset for _, h in iter_batches(result.data)]


def both(offset: int = 0, most: int = 1 << 20) -> list[tuple]:
    return [("t", 0, 0, offset, most), ("t", 1, 0, offset, most)]


def test_it_parks_until_any_partition_has_data_and_answers_each(host):
    async def scenario() -> list:
        fetch = asyncio.ensure_future(host.fetch_many(both(), 50 << 20, 30_000, 1))
        await asyncio.sleep(0.05)
        assert not fetch.done()  # parked: nothing to read
        append(host, 1, b"x")
        return await asyncio.wait_for(fetch, 10)

    answers = asyncio.run(scenario())
    assert answers[0].data == b"" and offsets(answers[1]) == [0]


def test_with_nothing_to_read_it_answers_empty_at_its_wait(host):
    answers = asyncio.run(host.fetch_many(both(), 50 << 20, 20, 1))
    assert [a.data for a in answers] == [b"", b""]


def test_one_partitions_error_fails_none_of_the_others_and_answers_at_once(host):
    append(host, 0, b"a")
    reads = [("t", 0, 0, 0, 1 << 20), ("t", 1, 5, 0, 1 << 20), ("t", 0, 0, 99, 1 << 20),
             ("gone", 0, 0, 0, 1 << 20)]
    answers = asyncio.run(asyncio.wait_for(host.fetch_many(reads, 50 << 20, 30_000, 1), 10))
    assert offsets(answers[0]) == [0]
    assert isinstance(answers[1], UnknownLeaderEpochError), answers[1]
    assert isinstance(answers[2], OffsetOutOfRangeError)
    assert isinstance(answers[3], NotLeaderError)


def test_an_error_alone_answers_at_once_too(host):
    answers = asyncio.run(asyncio.wait_for(
        host.fetch_many([("t", 0, 0, 99, 1 << 20), ("t", 1, 0, 0, 1 << 20)], 50 << 20,
                        30_000, 1), 10))
    assert isinstance(answers[0], OffsetOutOfRangeError) and answers[1].data == b""


def test_the_answers_bytes_are_spent_in_order_and_the_rest_left_unread(host):
    for p in (0, 1):
        append(host, p, b"v" * 200)
        append(host, p, b"w" * 200)
    answers = asyncio.run(host.fetch_many(both(), 1, 0, 1))
    assert offsets(answers[0]) == [0] and answers[1] is None  # at least one whole batch
    answers = asyncio.run(host.fetch_many(both(most=1), 50 << 20, 0, 1))
    assert offsets(answers[0]) == offsets(answers[1]) == [0]  # per partition: one batch
    answers = asyncio.run(host.fetch_many(both(), 50 << 20, 0, 1))
    assert offsets(answers[0]) == offsets(answers[1]) == [0, 1]


def test_min_bytes_keeps_it_parked_until_the_partitions_together_hold_them(host):
    async def scenario() -> list:
        append(host, 0, b"a")
        size = len(host.replicas[("t", 0)].partition.fetch(0, 1 << 20, 0).data)
        fetch = asyncio.ensure_future(host.fetch_many(both(), 50 << 20, 30_000, size + 1))
        await asyncio.sleep(0.05)
        assert not fetch.done()
        append(host, 1, b"b")
        return await asyncio.wait_for(fetch, 10)

    answers = asyncio.run(scenario())
    assert offsets(answers[0]) == offsets(answers[1]) == [0]


def test_a_stopped_replica_wakes_it_with_its_error(host):
    async def scenario() -> list:
        fetch = asyncio.ensure_future(host.fetch_many(both(), 50 << 20, 30_000, 1))
        await asyncio.sleep(0.05)
        hosted = host.replicas.pop(("t", 1))
        hosted.stop()
        return await asyncio.wait_for(fetch, 10)

    answers = asyncio.run(scenario())
    assert answers[0].data == b"" and isinstance(answers[1], NotLeaderError)


def test_a_stall_while_parked_answers_every_partition_with_it(host):
    async def scenario() -> list:
        fetch = asyncio.ensure_future(host.fetch_many(both(), 50 << 20, 30_000, 1))
        await asyncio.sleep(0.05)
        host.clock[0] += 60  # the event loop did not run for a minute
        append(host, 0, b"late")
        return await asyncio.wait_for(fetch, 10)

    answers = asyncio.run(scenario())
    assert all(isinstance(a, BrokerStalledError) for a in answers)
    # and until the controller confirms its state, it serves nothing
    answers = asyncio.run(host.fetch_many(both(), 50 << 20, 0, 1))
    assert all(isinstance(a, BrokerStalledError) for a in answers)
