"""ActorNotices (actors/actor_notices.py): Ray's actor channel dispatched to the watches
listening to each actor, through a fake channel. No Ray cluster."""

from __future__ import annotations

import asyncio

from actors.actor_notices import ActorNotices


class FakeChannel:
    """The actor channel: ``publish`` queues notices; ``break_off`` ends the subscription."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.closed = False

    def publish(self, *notices: tuple[str, str]) -> None:
        self.queue.put_nowait(list(notices))

    def break_off(self) -> None:
        self.queue.put_nowait([])

    async def poll(self) -> list[tuple[str, str]]:
        return await self.queue.get()

    async def close(self) -> None:
        self.closed = True


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def drained(queue: asyncio.Queue) -> list:
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out


def test_notices_reach_the_listeners_of_their_actor_in_order_and_a_renewal_tells_all():
    async def scenario() -> None:
        channels: list[FakeChannel] = []

        async def open_channel() -> FakeChannel:
            channels.append(FakeChannel())
            return channels[-1]

        notices = ActorNotices(open_channel, resubscribe_s=0)
        a = notices.listen("a")
        await settle()
        # Listening before the subscription existed: told to look for itself.
        assert len(channels) == 1 and drained(a) == [None]

        b, gone = notices.listen("b"), notices.listen("b")
        notices.stop_listening("b", gone)  # a watch that ended
        channels[0].publish(("c", "DEAD"), ("a", "RESTARTING"), ("a", "DEAD"))
        await settle()
        assert drained(a) == ["RESTARTING", "DEAD"] and drained(b) == []
        channels[0].publish(("b", "DEAD"))
        await settle()
        assert drained(b) == ["DEAD"] and drained(gone) == []

        channels[0].break_off()  # the GCS restarted, say: a notice may be lost meanwhile
        await settle()
        assert channels[0].closed and len(channels) == 2
        assert drained(a) == [None] and drained(b) == [None]

    asyncio.run(asyncio.wait_for(scenario(), 10))
