"""The controller's watch on a broker (actors/supervision.py) against a fake broker handle
and a fake GCS, no Ray cluster: only Ray's word that the process died, or an expired
session, takes a broker down; an unreachable but living broker stays up."""

from __future__ import annotations

import asyncio
from typing import Any

from ray.exceptions import ActorDiedError, ActorUnavailableError

from actors.supervision import BrokerWatch, Health


class FakeBroker:
    """Answers health checks from a script: each entry an answer (a dict) or an exception;
    when the script runs out, the check hangs (a stopped process)."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.checks = 0
        self.hung_at = 0  # the latest check that found the script used up (it hangs)
        self.watch = self

    def remote(self, incarnation: str | None, timeout_s: float, session_ms: float) -> Any:
        self.checks += 1
        return self._answer(self.checks)

    async def _answer(self, check: int) -> dict[str, Any]:
        await asyncio.sleep(0.001)
        if not self.script:
            self.hung_at = check
            await asyncio.Event().wait()  # hangs
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


def answer(incarnation: str = "a", pid: int = 100) -> dict[str, Any]:
    return {"incarnation": incarnation, "pid": pid, "failed": {}}


def unavailable() -> ActorUnavailableError:
    return ActorUnavailableError("connection broke", None)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, Health]] = []
        self.answers = 0

    async def down(self, watch: BrokerWatch) -> None:
        self.events.append(("down", watch.health))

    async def up(self, watch: BrokerWatch) -> None:
        self.events.append(("up", watch.health))

    def answered(self, watch: BrokerWatch) -> None:
        self.answers += 1


def watch_of(broker: FakeBroker, gcs: tuple[str | None, int | None], recorder: Recorder
             ) -> BrokerWatch:
    async def lookup(handle: Any) -> tuple[str | None, int | None]:
        return gcs

    return BrokerWatch(1, broker, "node", "a", recorder.down, recorder.up, None,
                       recorder.answered, poll_s=0.01, session_timeout_ms=1000, pid=100,
                       lookup=lookup)


async def settle(broker: FakeBroker, timeout: float = 5.0) -> None:
    """Until the script is used up and the watch waits on the check after it, which hangs:
    the watch asks again only once it handled the last answer."""
    deadline = asyncio.get_running_loop().time() + timeout
    while broker.script or broker.hung_at != broker.checks:
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_living_broker_ray_cannot_reach_for_a_moment_stays_up():
    async def scenario() -> tuple[Recorder, BrokerWatch, FakeBroker]:
        recorder = Recorder()
        broker = FakeBroker([answer(), unavailable(), unavailable(), answer(), answer()])
        watch = watch_of(broker, ("ALIVE", 100), recorder)
        watch.start()
        await settle(broker)
        watch.stop()
        return recorder, watch, broker

    recorder, watch, broker = asyncio.run(scenario())
    assert recorder.events == [] and watch.alive
    assert recorder.answers == 3 and broker.checks == 6  # it went on asking


def test_a_broker_ray_is_restarting_goes_down_at_once_and_comes_back_as_new():
    async def scenario() -> tuple[Recorder, BrokerWatch]:
        recorder = Recorder()
        broker = FakeBroker([unavailable(), answer("b", 200)])
        watch = watch_of(broker, ("RESTARTING", 100), recorder)
        watch.start()
        await settle(broker)
        watch.stop()
        return recorder, watch

    recorder, watch = asyncio.run(scenario())
    assert recorder.events == [("down", Health.RESTARTING), ("up", Health.ALIVE)]
    assert watch.incarnation == "b" and watch.pid == 200


def test_a_broker_already_restarted_by_ray_is_down_though_ray_says_alive():
    async def scenario() -> Recorder:
        recorder = Recorder()
        broker = FakeBroker([unavailable()])
        watch = watch_of(broker, ("ALIVE", 300), recorder)  # another process
        watch.start()
        await settle(broker)
        watch.stop()
        return recorder

    assert asyncio.run(scenario()).events == [("down", Health.RESTARTING)]


def test_ray_saying_dead_ends_the_watch():
    for script, gcs in (([unavailable()], ("DEAD", 100)), ([ActorDiedError()], (None, None))):
        async def scenario(script=script, gcs=gcs) -> tuple[Recorder, BrokerWatch]:
            recorder = Recorder()
            broker = FakeBroker(script)
            watch = watch_of(broker, gcs, recorder)
            watch.start()
            await asyncio.wait_for(watch._task, 5)  # it ends by itself
            return recorder, watch

        recorder, watch = asyncio.run(scenario())
        assert recorder.events == [("down", Health.DEAD)] and watch.health is Health.DEAD


def test_a_fenced_broker_is_up_again_when_it_answers_or_asks():
    async def scenario() -> tuple[Recorder, list[bool]]:
        recorder = Recorder()
        broker = FakeBroker([])  # stopped: its check hangs
        watch = watch_of(broker, ("ALIVE", 100), recorder)
        watch.start()
        await asyncio.sleep(0.02)
        await watch.fence(9.0)
        await watch.fence(9.0)  # once is enough
        asked = [await watch.bring_up("other")]  # not the incarnation it knows: no
        asked.append(await watch.bring_up("a"))  # it resumed and asks to be confirmed
        await watch.fence(9.0)
        broker.script.append(answer())  # resumed: its check is answered
        await settle(broker)
        watch.stop()
        return recorder, asked

    recorder, asked = asyncio.run(scenario())
    assert asked == [False, True]
    assert recorder.events == [("down", Health.FENCED), ("up", Health.ALIVE),
                               ("down", Health.FENCED), ("up", Health.ALIVE)]
