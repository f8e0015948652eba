"""A hosted replica's waiters (actors/hosting.py), over a real leader Partition, no Ray: an
acks=all append is woken once its records are committed, not at every append or fetch, while
a change of role still wakes every one of them."""

from __future__ import annotations

import asyncio

import pytest

from actors.hosting import HostedReplica
from raylog.errors import LeadershipLostAfterAppendError, NotLeaderError, RequestTimeoutError
from raylog.replica.partition import LeaderAndIsr, Partition
from raylog.storage import LogConfig, PartitionLog
from tests.unit.logutil import FakeClock, batch_of

NOW = 1_700_000_000_000
APPENDS = 40


@pytest.fixture
def leader(tmp_path):
    """A replica leading t-0 at epoch 0 with broker 2 in its ISR; calls of acks_all_done
    counted (one per acks=all append waking)."""
    clock = FakeClock(NOW)
    log = PartitionLog(tmp_path / "t-0", LogConfig(retention_ms=None), clock=clock)
    configs = {"min_insync_replicas": 2}
    partition = Partition("t", 0, log, 1, configs, clock=clock)
    partition.apply(LeaderAndIsr(1, 0, 0, (1, 2), (1, 2)))
    partition.follower_fetched(2, 0, 0)
    hosted = HostedReplica(partition, "topic-id", configs)
    hosted.looks = 0
    acks_all_done = partition.acks_all_done

    def counted(last_offset: int) -> bool:
        hosted.looks += 1
        return acks_all_done(last_offset)

    partition.acks_all_done = counted
    yield hosted
    log.close()


async def appends_waiting(hosted: HostedReplica, count: int, timeout_s: float = 30
                          ) -> list[asyncio.Task]:
    tasks = [asyncio.get_running_loop().create_task(
        hosted.produce(batch_of([b"v%d" % i], ts=NOW), "all", 0, timeout_s))
        for i in range(count)]
    while hosted.looks < count:  # each appended and looked once
        await asyncio.sleep(0.001)
    return tasks


def test_each_acks_all_append_is_woken_once_when_its_records_are_committed(leader):
    async def scenario() -> None:
        tasks = await appends_waiting(leader, APPENDS)
        assert leader.looks == APPENDS  # appending woke none of the others
        for offset in range(1, APPENDS + 1):  # the follower fetches one batch at a time
            leader.partition.follower_fetched(2, 0, offset)
            leader.notify()
            await asyncio.sleep(0)
            leader.notify()  # a consumer's fetch, say: nothing new for them
            await asyncio.sleep(0)
        infos = await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert [i.base_offset for i in infos] == list(range(APPENDS))
        # Woken once each: 2 looks per append, where waking all at every notify took
        # about APPENDS**2.
        assert leader.looks == 2 * APPENDS

    asyncio.run(scenario())


def become_follower(hosted: HostedReplica) -> None:
    hosted.partition.apply(LeaderAndIsr(2, 1, 1, (1, 2), (1, 2)))  # broker 2 leads now
    hosted.notify()


@pytest.mark.parametrize("change", [become_follower, HostedReplica.stop],
                         ids=["role", "stop"])
def test_a_change_of_role_or_a_stop_wakes_every_acks_all_append(leader, change):
    async def scenario() -> None:
        tasks = await appends_waiting(leader, APPENDS)
        change(leader)
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        # Appended, then no longer the leader: a NotLeaderError that says so, which a
        # producer never renumbers (the records may be in the new leader's log).
        assert all(isinstance(o, LeadershipLostAfterAppendError) for o in outcomes), outcomes
        assert all(isinstance(o, NotLeaderError) for o in outcomes)

    asyncio.run(scenario())


def test_waits_that_timed_out_do_not_pile_up(leader):
    async def scenario() -> None:
        tasks = await appends_waiting(leader, APPENDS, timeout_s=0.05)
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        assert all(isinstance(o, RequestTimeoutError) for o in outcomes), outcomes
        assert len(leader._commit_waiters) <= APPENDS // 2 + 1

    asyncio.run(scenario())
