"""raylog/util: the one clock and the one backoff every layer uses."""

from __future__ import annotations

import random
import time

from raylog.util.backoff import Backoff, backoff_s, retry_backoff
from raylog.util.clocks import wall_clock_ms


def test_backoff_doubles_up_to_its_ceiling():
    assert [backoff_s(n, 0.1, 1.0) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_backoff_jitter_spreads_within_its_fraction():
    waits = [backoff_s(3, 0.1, 10.0, 0.2, random.Random(seed)) for seed in range(50)]
    assert all(0.64 <= w <= 0.96 for w in waits) and len(set(waits)) > 1


def test_a_loops_backoff_peeks_without_counting_and_resets():
    backoff = Backoff(0.5, 2.0, jitter=0)
    assert backoff.peek() == backoff.peek() == 0.5
    assert [backoff.next() for _ in range(4)] == [0.5, 1.0, 2.0, 2.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_a_clients_retry_backoff_caps_at_a_second_unless_its_setting_is_longer():
    short = retry_backoff(100)
    assert [short.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert [retry_backoff(0).next() for _ in range(2)] == [0, 0]  # no wait at all
    long = retry_backoff(3000)
    assert [long.next() for _ in range(2)] == [3.0, 3.0]


def test_the_wall_clock_is_in_milliseconds_since_the_epoch():
    assert isinstance(wall_clock_ms(), int)
    assert abs(wall_clock_ms() / 1000 - time.time()) < 3600  # ms, not s or ns
