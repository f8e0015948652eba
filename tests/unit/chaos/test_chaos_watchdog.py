"""The chaos run's watch for overdue futures (tests/chaos/watchdog.py) writes every thread's
stack once per spell in which a send is unresolved past its deadline plus the slack."""

from __future__ import annotations

import time

from tests.chaos.watchdog import OverdueWatch
from tests.history import SLACK_S
from tests.integration.conftest import wait_for
from tests.integration.workload import Sent


class FakeFuture:
    def __init__(self, done: bool) -> None:
        self.resolved = done

    def done(self) -> bool:
        return self.resolved


def sent(index: int, done: bool, deadline: float) -> Sent:
    return Sent(0, index, b"v%d" % index, FakeFuture(done), False, deadline - 20, deadline)


def test_an_overdue_send_dumps_the_stacks_once_per_spell(tmp_path):
    now = time.monotonic()
    sends = [[sent(0, True, now - 100), sent(1, False, now + 100)]]
    watch = OverdueWatch(sends, tmp_path, origin=now, interval=0.02)
    try:
        sends[0].append(sent(2, False, now - SLACK_S - 1))  # overdue
        wait_for(lambda: watch.dumps, timeout=10, what="a dump")
        text = (tmp_path / watch.dumps[0].split("/")[-1]).read_text()
        assert "producer 0 send 2 unresolved" in text and "--- thread overdue-watch" in text
        time.sleep(0.2)  # more looks within the same spell write nothing more
        assert len(watch.dumps) == 1
    finally:
        watch.stop()


def test_nothing_is_dumped_while_every_future_is_in_time(tmp_path):
    now = time.monotonic()
    watch = OverdueWatch([[sent(0, False, now + 100), sent(1, True, now - 100)]], tmp_path,
                         origin=now, interval=0.02)
    time.sleep(0.2)  # a few looks, by design: there is no event to wait for
    watch.stop()
    assert watch.dumps == []
