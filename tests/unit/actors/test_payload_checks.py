"""Large batches' payload checks ahead of their appends (actors/payload_checks.py), without
Ray: the turns that keep appends in call order, and the log taking a check's outcome in
place of checking again (raylog/storage/log.py's ``checked``)."""

from __future__ import annotations

import asyncio
import os

import pytest

from actors.payload_checks import CHECK_AHEAD_BYTES, AppendTurns, PayloadChecks
from raylog.errors import CorruptRecordError
from raylog.records.payload import check_ahead
from raylog.storage import LogConfig, PartitionLog
from raylog.storage import log as log_module
from tests.unit.logutil import FakeClock, batch_of, files_snapshot
from tests.unit.records.test_append_validation import reseal

NOW = 1_700_000_000_000
COUNT = CHECK_AHEAD_BYTES // 1000 + 1  # random values of 1,000 bytes: a large batch


def test_turns_are_taken_in_order_and_a_cancelled_waiter_holds_no_one_up():
    async def scenario() -> list[str]:
        turns, entered = AppendTurns(), []

        async def call(name: str, hold: asyncio.Event | None = None) -> None:
            async with turns.turn():
                entered.append(name)
                if hold is not None:
                    await hold.wait()

        release = asyncio.Event()
        first = asyncio.ensure_future(call("first", release))
        await asyncio.sleep(0)
        assert turns.busy() and entered == ["first"]
        cancelled = asyncio.ensure_future(call("cancelled"))
        third = asyncio.ensure_future(call("third"))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        assert not first.done() and entered == ["first"]  # the first's turn is not cancelled
        release.set()
        await asyncio.wait_for(asyncio.gather(first, third), 5)
        assert not turns.busy()
        await turns.wait_for_earlier()  # nothing to wait for: returns at once
        return entered

    assert asyncio.run(scenario()) == ["first", "third"]


def test_only_large_batches_go_to_the_threads():
    async def scenario() -> list:
        checks = PayloadChecks(threads=1)
        try:
            small = batch_of([b"v"], ts=NOW)
            assert checks.start([small, small]) is None
            large = batch_of([os.urandom(1000) for _ in range(COUNT)], ts=NOW)
            assert len(large) >= CHECK_AHEAD_BYTES
            started = checks.start([small, large])
            return await PayloadChecks.outcomes(started, 2)
        finally:
            checks.close()

    small_outcome, large_outcome = asyncio.run(scenario())
    assert small_outcome is None  # checked inline by its append
    assert large_outcome.num_rows == COUNT


@pytest.fixture
def log(tmp_path):
    opened = PartitionLog(tmp_path / "t-0", LogConfig(retention_ms=None), clock=FakeClock(NOW))
    yield opened
    opened.close()


def test_the_log_takes_a_checked_payload_in_place_of_checking_again(log, monkeypatch):
    batch = batch_of([b"a", b"b"], ts=NOW)
    checked = check_ahead(batch)

    def never(*_):
        raise AssertionError("checked twice")

    monkeypatch.setattr(log_module, "check_payload", never)
    assert log.append(batch, checked=checked).record_count == 2
    assert log.log_end_offset == 2


def test_an_error_the_check_found_is_raised_by_the_append_and_nothing_is_written(log):
    log.append(batch_of([b"a"], ts=NOW))
    before = files_snapshot(log.directory)
    lying = reseal(batch_of([b"a", b"b"], ts=NOW), first_timestamp=NOW + 1)
    outcome = check_ahead(lying)
    assert isinstance(outcome, CorruptRecordError)
    with pytest.raises(CorruptRecordError, match="header says first timestamp"):
        log.append(lying, checked=outcome)
    assert log.log_end_offset == 1 and files_snapshot(log.directory) == before


def test_a_bad_header_is_the_checks_error_too():
    outcome = check_ahead(b"\x00" * 10)
    assert isinstance(outcome, CorruptRecordError)
