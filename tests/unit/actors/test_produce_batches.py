"""A serving process's produce call of several partitions' batches (actors/serving.py,
``ReplicaHost.produce_batches``) over real leader Partitions, without Ray: each batch
answered on its own, a partition's batches in call order, and the waits of batches held
back by a sequence gap bounded for the call as a whole."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from actors import payload_checks, serving
from actors.payload_checks import AppendTurns, PayloadChecks
from actors.serving import ReplicaHost
from raylog.errors import CorruptRecordError, NotLeaderError, OutOfOrderSequenceError
from raylog.metadata.sessions import StallGuard
from raylog.storage import AppendInfo
from tests.unit.actors.test_fetch_many import NOW, NoQuotas, leaders
from tests.unit.logutil import batch_of
from tests.unit.records.test_append_validation import reseal

PID = 42


class Host:
    """What ReplicaHost.produce_batches uses of its process: its replicas and stall guard."""

    produce_batches = ReplicaHost.produce_batches
    produce = ReplicaHost.produce
    _append_all = ReplicaHost._append_all
    _begin_append = ReplicaHost._begin_append
    _finish_append = ReplicaHost._finish_append
    _produced = ReplicaHost._produced
    _hosted = ReplicaHost._hosted

    def __init__(self, replicas: dict) -> None:
        self.replicas = replicas
        self.broker_id = 1
        self.guard = StallGuard(10.0, clock=time.monotonic)
        self.client_quotas = NoQuotas()
        self._checks, self._turns = PayloadChecks(threads=2), AppendTurns()

    def _check(self) -> int:
        return self.guard.check()


@pytest.fixture
def host(tmp_path):
    for made in leaders(tmp_path, Host):
        yield made
        made._checks.close()


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


# -- large batches checked on threads, appended in call order ----------------------------------

def plain(count: int, value: bytes = b"v") -> bytes:
    """A batch of a producer without idempotence: nothing but the call order orders it."""
    return batch_of([value] * count, ts=NOW)


def test_large_batches_are_checked_on_threads_and_a_bad_one_fails_alone(host, monkeypatch):
    checked_on: list[str] = []
    real = payload_checks.check_ahead

    def recording(batch):
        checked_on.append(threading.current_thread().name)
        return real(batch)

    monkeypatch.setattr(payload_checks, "check_ahead", recording)
    monkeypatch.setattr(payload_checks, "CHECK_AHEAD_BYTES", 1)  # every batch is large
    lying = reseal(plain(3), first_timestamp=NOW + 1)  # CRCs right, header lies
    answers = asyncio.run(host.produce_batches(
        [("t", 0, 0, plain(2)), ("t", 0, 0, lying), ("t", 0, 0, plain(3)),
         ("t", 1, 0, plain(1))], 1))
    assert [a.base_offset for a in (answers[0], answers[2], answers[3])] == [0, 2, 0]
    assert isinstance(answers[1], CorruptRecordError)
    assert len(checked_on) == 4 and all(n.startswith("raylog-check") for n in checked_on)
    assert host.replicas[("t", 0)].partition.log.log_end_offset == 5
    assert not host._turns.busy()


def test_a_call_started_while_an_earlier_one_waits_for_its_checks_appends_after_it(
        host, monkeypatch):
    """The large batch's call waits for its check on a thread; a call of small batches and
    a single produce that start meanwhile (they would append at once) wait behind it, so
    the partition's log has the calls' batches in the order the calls started."""
    gate = threading.Event()
    real = payload_checks.check_ahead

    def slow(batch):
        assert gate.wait(10), "the test never released the check"
        return real(batch)

    big = plain(50, b"x" * 100)
    monkeypatch.setattr(payload_checks, "check_ahead", slow)
    monkeypatch.setattr(payload_checks, "CHECK_AHEAD_BYTES", len(big))

    async def scenario():
        first = asyncio.ensure_future(host.produce_batches([("t", 0, 0, big)], 1))
        deadline = time.monotonic() + 10
        while not host._turns.busy():
            assert time.monotonic() < deadline, "the large call never waited for its check"
            await asyncio.sleep(0.001)
        second = asyncio.ensure_future(host.produce_batches([("t", 0, 0, plain(2))], 1))
        third = asyncio.ensure_future(host.produce("t", 0, 0, plain(1), 1))
        for _ in range(20):  # ungated, both would be done after a few turns of the loop
            await asyncio.sleep(0)
        waited = not second.done() and not third.done()
        gate.set()
        return waited, await first, await second, await third

    waited, first, second, third = asyncio.run(scenario())
    assert waited
    assert (first[0].base_offset, second[0].base_offset, third.base_offset) == (0, 50, 52)
