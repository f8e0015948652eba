"""The listener's merged appends (raylog/kafka/gateway/appends.py), against a fake broker
whose calls the test answers by hand."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from raylog.errors import CorruptRecordError, InternalError, NotLeaderError
from raylog.kafka.gateway.appends import Appender, mergeable
from raylog.records.payload import PAYLOAD_SCHEMA, encode


class FakeBroker:
    """Records each call as sent (the items, in order) with a future the test answers."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list, asyncio.Future]] = []

    def one(self, item):
        future = asyncio.get_running_loop().create_future()
        self.calls.append(("one", [item], future))
        return future

    def many(self, items):
        future = asyncio.get_running_loop().create_future()
        self.calls.append(("many", list(items), future))
        return future

    def sent(self) -> list[tuple[str, list]]:
        return [(kind, items) for kind, items, _ in self.calls]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_batches_of_one_turn_leave_together_then_wait_while_max_in_flight_are_unanswered():
    async def scenario():
        broker = FakeBroker()
        appender = Appender(broker.one, broker.many, len, max_in_flight=2)
        first, second = appender.append("a"), appender.append("b")
        assert broker.calls == []  # at the end of this turn of the event loop
        await settle()
        assert broker.sent() == [("many", ["a", "b"])]
        third = appender.append("c")
        await settle()
        assert broker.sent()[1] == ("one", ["c"])  # one call in flight: c leaves
        waiting = [appender.append(x) for x in "def"]
        await settle()
        assert len(broker.calls) == 2  # two unanswered: d, e, f wait
        broker.calls[1][2].set_result("C")  # c answered first: the waiting leave together
        await settle()
        assert third.result() == "C" and not first.done()
        assert broker.sent()[2] == ("many", ["d", "e", "f"])
        g = appender.append("g")  # a-b and d-f in flight: g waits
        await settle()
        assert len(broker.calls) == 3
        broker.calls[0][2].set_result(["A", "B"])
        await settle()
        assert (first.result(), second.result()) == ("A", "B")
        assert broker.sent()[3] == ("one", ["g"])
        broker.calls[2][2].set_result(["D", "E", "F"])
        broker.calls[3][2].set_result("G")
        await settle()
        assert [w.result() for w in waiting] == ["D", "E", "F"] and g.result() == "G"
        assert (appender.calls, appender.batches, appender.busy) == (4, 7, False)

    asyncio.run(scenario())


async def merged_call(broker: FakeBroker, appender: Appender, items: str) -> list:
    """Make ``items`` wait behind a first call ("a", answered "A"), so that they leave
    together in the second; their futures."""
    appender.append("a")
    await settle()
    waiting = [appender.append(x) for x in items]
    broker.calls[0][2].set_result("A")
    await settle()
    assert broker.sent()[1] == ("many", list(items))
    return waiting


def test_each_merged_batch_gets_its_own_answer_or_its_own_error():
    async def scenario():
        broker = FakeBroker()
        appender = Appender(broker.one, broker.many, len, max_in_flight=1)
        merged = await merged_call(broker, appender, "bcd")
        broker.calls[1][2].set_result(["B", CorruptRecordError("c is bad"), "D"])
        await settle()
        assert merged[0].result() == "B" and merged[2].result() == "D"
        with pytest.raises(CorruptRecordError, match="c is bad"):
            merged[1].result()

    asyncio.run(scenario())


def test_a_failed_call_fails_its_own_batches_only():
    async def scenario():
        broker = FakeBroker()
        appender = Appender(broker.one, broker.many, len, max_in_flight=1)
        merged = await merged_call(broker, appender, "bc")
        later = appender.append("d")
        broker.calls[1][2].set_exception(NotLeaderError("moved"))
        await settle()
        for future in merged:
            with pytest.raises(NotLeaderError):
                future.result()
        broker.calls[2][2].set_result("D")
        await settle()
        assert later.result() == "D"

    asyncio.run(scenario())


def test_a_call_answering_the_wrong_number_of_batches_fails_them():
    async def scenario():
        broker = FakeBroker()
        appender = Appender(broker.one, broker.many, len, max_in_flight=1)
        merged = await merged_call(broker, appender, "bc")
        broker.calls[1][2].set_result(["B"])
        await settle()
        for future in merged:
            with pytest.raises(InternalError):
                future.result()

    asyncio.run(scenario())


def test_a_waiter_that_gave_up_does_not_disturb_the_others():
    async def scenario():
        broker = FakeBroker()
        appender = Appender(broker.one, broker.many, len, max_in_flight=1)
        appender.append("a")
        await settle()
        given_up, kept = appender.append("b"), appender.append("c")
        given_up.cancel()  # as asyncio.wait_for does at its timeout
        broker.calls[0][2].set_result("A")
        await settle()
        assert broker.sent()[1] == ("many", ["b", "c"])  # b was sent: it may be appended
        broker.calls[1][2].set_result(["B", "C"])
        await settle()
        assert given_up.cancelled() and kept.result() == "C"

    asyncio.run(scenario())


def test_a_send_that_raises_fails_its_batches_and_the_appender_goes_on():
    async def scenario():
        idle = []

        def broken(item):
            raise NotLeaderError("no leader")

        appender = Appender(broken, broken, len, max_in_flight=1, idle=lambda: idle.append(1))
        failed = appender.append("a")
        await settle()
        with pytest.raises(NotLeaderError):
            failed.result()
        assert idle and not appender.busy

    asyncio.run(scenario())


def test_idle_is_called_once_nothing_waits_or_is_in_flight():
    async def scenario():
        broker = FakeBroker()
        idle = []
        appender = Appender(broker.one, broker.many, len, max_in_flight=1,
                            idle=lambda: idle.append(1))
        appender.append("a")
        await settle()
        appender.append("b")
        broker.calls[0][2].set_result("A")
        await settle()
        assert idle == [] and appender.busy  # b in flight
        broker.calls[1][2].set_result("B")
        await settle()
        assert idle == [1] and not appender.busy

    asyncio.run(scenario())


def test_a_full_call_leaves_at_once_and_no_call_carries_more_than_max_call_bytes():
    async def scenario():
        broker = FakeBroker()
        appender = Appender(broker.one, broker.many, len, max_in_flight=1, max_call_bytes=10)
        appender.append("a" * 4)
        await settle()
        assert len(broker.calls) == 1
        appender.append("b" * 4)
        appender.append("c" * 4)  # 8 bytes wait: not full yet
        assert len(broker.calls) == 1
        appender.append("d" * 3)  # 11 waiting: b and c leave now (8 <= 10), d waits
        assert broker.sent()[1] == ("many", ["bbbb", "cccc"])
        appender.append("e" * 20)  # larger than a call: alone, after d
        assert broker.sent()[2:] == [("one", ["ddd"]), ("one", ["e" * 20])]
        appender.append("f")
        await settle()
        assert len(broker.calls) == 4  # four in flight: f waits for an answer
        for _, items, future in broker.calls:
            future.set_result(items if len(items) > 1 else items[0])
        await settle()
        assert broker.sent()[4] == ("one", ["f"])

    asyncio.run(scenario())


def test_flush_sends_what_waits_at_once():
    async def scenario():
        broker = FakeBroker()
        appender = Appender(broker.one, broker.many, len, max_in_flight=1)
        appender.append("a")
        await settle()
        appender.append("b")
        appender.append("c")
        appender.flush()  # before a batch sent without the Appender: they go first
        assert broker.sent() == [("one", ["a"]), ("many", ["b", "c"])]

    asyncio.run(scenario())


def test_max_in_flight_must_be_positive():
    with pytest.raises(ValueError):
        Appender(print, print, len, max_in_flight=0)


def _batch(**producer) -> bytes:
    columns = pa.record_batch([[1], [None], [b"v"], [[]]], schema=PAYLOAD_SCHEMA)
    return encode(columns, **producer)


def test_only_acks_1_batches_without_a_producer_id_are_merged():
    plain, idempotent = _batch(), _batch(producer_id=7, producer_epoch=0, base_sequence=0)
    assert mergeable(plain, 1)
    assert not mergeable(plain, -1)  # acks=all waits for the ISR inside the broker
    assert not mergeable(plain, 0)
    assert not mergeable(idempotent, 1)  # may wait for a sequence gap
