"""A serving process's produce call of several partitions' batches (actors/serving.py,
``ReplicaHost.produce_batches``) over real leader Partitions, without Ray: each batch
answered on its own, a partition's batches in call order, and the waits of batches held
back by a sequence gap bounded for the call as a whole."""

from __future__ import annotations

import asyncio
import time

import pytest

from actors import serving
from actors.serving import ReplicaHost
from raylog.errors import NotLeaderError, OutOfOrderSequenceError
from raylog.metadata.sessions import StallGuard
from raylog.storage import AppendInfo
from tests.unit.actors.test_fetch_many import NOW, NoQuotas, leaders
from tests.unit.logutil import batch_of

PID = 42


class Host:
    """What ReplicaHost.produce_batches uses of its process: its replicas and stall guard."""

    produce_batches = ReplicaHost.produce_batches
    _begin_append = ReplicaHost._begin_append
    _finish_append = ReplicaHost._finish_append
    _produced = ReplicaHost._produced
    _hosted = ReplicaHost._hosted

    def __init__(self, replicas: dict) -> None:
        self.replicas = replicas
        self.broker_id = 1
        self.guard = StallGuard(10.0, clock=time.monotonic)
        self.client_quotas = NoQuotas()

    def _check(self) -> int:
        return self.guard.check()


@pytest.fixture
def host(tmp_path):
    yield from leaders(tmp_path, Host)


def idem(sequence: int, count: int = 2, value: bytes = b"v") -> bytes:
    return batch_of([value] * count, ts=NOW, producer_id=PID, base_sequence=sequence)


def test_each_batch_is_answered_on_its_own(host):
    answers = asyncio.run(host.produce_batches(
        [("t", 0, 0, idem(0)), ("t", 9, 0, idem(0)), ("t", 1, 0, idem(0)),
         ("t", 0, 0, idem(2))], 1))
    assert isinstance(answers[0], AppendInfo) and answers[0].base_offset == 0
    assert isinstance(answers[1], NotLeaderError)
    assert isinstance(answers[2], AppendInfo) and answers[2].base_offset == 0
    assert isinstance(answers[3], AppendInfo) and answers[3].base_offset == 2


def test_a_gap_filled_by_a_later_call_lets_the_held_batches_in_in_order(host):
    async def scenario() -> tuple[list, list]:
        ahead = asyncio.ensure_future(host.produce_batches(
            [("t", 0, 0, idem(2)), ("t", 0, 0, idem(4)), ("t", 1, 0, idem(0))], 1))
        await asyncio.sleep(0.05)
        assert not ahead.done()  # held back by the gap at sequence 0
        first = await host.produce_batches([("t", 0, 0, idem(0))], 1)
        return first, await ahead

    first, ahead = asyncio.run(scenario())
    assert [a.base_offset for a in first] == [0]
    assert [a.base_offset for a in ahead] == [2, 4, 0]


@pytest.mark.parametrize("acks", [1, "all"])
def test_batches_behind_a_gap_that_never_fills_share_one_wait(host, monkeypatch, acks):
    """A gap that does not fill fails every batch of the partition behind it in the call
    within one SEQUENCE_WAIT_S, not one after another (the call's other answers, already
    known, wait for them)."""
    monkeypatch.setattr(serving, "SEQUENCE_WAIT_S", 1.0)
    started = time.monotonic()
    answers = asyncio.run(host.produce_batches(
        [("t", 0, 0, idem(2)), ("t", 0, 0, idem(4)), ("t", 0, 0, idem(6)),
         ("t", 0, 0, idem(8)), ("t", 1, 0, idem(0))], acks))
    took = time.monotonic() - started
    assert all(isinstance(a, OutOfOrderSequenceError) for a in answers[:4]), answers
    assert isinstance(answers[4], AppendInfo)
    # (one wait is 1 s, four one after another 4 s: a bound with a wait's margin for load)
    assert took < 2.0, f"the call took {took:.2f} s: the gap was waited for per batch"
    assert host.replicas[("t", 0)].partition.log.log_end_offset == 0  # nothing appended
