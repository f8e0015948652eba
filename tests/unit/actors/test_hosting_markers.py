"""A hosted replica's transaction markers (actors/hosting.py, HostedReplica.write_marker)
over a real leader Partition, no Ray: a marker is answered once the ISR has it, as an
acks=all write; a retried marker is not written twice, and is answered only once the first
one is committed."""

from __future__ import annotations

import asyncio

import pytest

from raylog.errors import NotLeaderError, RequestTimeoutError
from raylog.records import iter_headers
from tests.unit.actors.test_hosting_waiters import (
    become_follower,
    leader,  # noqa: F401 (a fixture)
)
from tests.unit.txnutil import txn_batch

PID = 7


def test_a_marker_is_answered_once_the_isr_has_it_and_a_retry_once_the_first_is(leader):  # noqa: F811
    async def scenario() -> None:
        partition = leader.partition
        await asyncio.wait_for(asyncio.gather(
            leader.produce(txn_batch([b"a", b"b"], PID), 1, 0, 5)), 5)
        first = asyncio.get_running_loop().create_task(
            leader.write_marker(PID, 0, True, 3, 0, 0.05))
        with pytest.raises(RequestTimeoutError):  # the follower has not fetched it
            await asyncio.wait_for(first, 5)
        assert partition.log_end_offset == 3  # but it is in the leader's log
        retry = asyncio.get_running_loop().create_task(
            leader.write_marker(PID, 0, True, 3, 0, 5))
        await asyncio.sleep(0.05)
        assert not retry.done()  # waits for the first marker to be committed
        partition.follower_fetched(2, 0, 3)
        leader.notify()
        assert await asyncio.wait_for(retry, 5) is None  # not written again
        assert partition.log_end_offset == 3
        headers = [h for _, h in iter_headers(partition.log.read(0, 1 << 20))]
        assert [h.control for h in headers] == [False, True]

    asyncio.run(scenario())


def test_a_marker_at_a_replica_that_stopped_leading_is_refused(leader):  # noqa: F811
    async def scenario() -> None:
        task = asyncio.get_running_loop().create_task(
            leader.write_marker(PID, 0, False, 3, 0, 5))
        await asyncio.sleep(0.01)
        become_follower(leader)
        with pytest.raises(NotLeaderError):
            await asyncio.wait_for(task, 5)
        with pytest.raises(NotLeaderError):  # and a new one is not written
            await leader.write_marker(PID, 0, False, 3, 1, 5)

    asyncio.run(scenario())
