"""The delay before a failed login's answer, and the cap on connections per address."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidConfigError
from raylog.kafka.auth.throttle import ConnectionLimit, FailureThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_delays_double_per_failure_up_to_the_maximum_per_address():
    clock = Clock()
    throttle = FailureThrottle(base_ms=100, max_ms=1000, forget_ms=60_000, clock=clock)
    assert [throttle.failed("10.0.0.1") for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert throttle.failed("10.0.0.2") == 0.1  # another address is not slowed
    assert throttle.failures("10.0.0.1") == 6


def test_an_address_quiet_for_forget_ms_starts_again():
    clock = Clock()
    throttle = FailureThrottle(base_ms=100, max_ms=5000, forget_ms=60_000, clock=clock)
    throttle.failed("a")
    clock.now += 30
    assert throttle.failed("a") == 0.2  # counted from its last failure
    clock.now += 59.9
    assert throttle.failed("a") == 0.4
    clock.now += 60
    assert throttle.failures("a") == 0
    assert throttle.failed("a") == 0.1


@pytest.mark.parametrize("args", [{"base_ms": -1}, {"base_ms": 10, "max_ms": 5},
                                  {"forget_ms": 0}])
def test_bad_delays_are_refused(args):
    with pytest.raises(InvalidConfigError):
        FailureThrottle(**args)


def test_connections_per_address_are_capped():
    limit = ConnectionLimit(2)
    assert limit.acquire("a") and limit.acquire("a")
    assert not limit.acquire("a")
    assert limit.acquire("b")
    limit.release("a")
    assert limit.open("a") == 1 and limit.acquire("a")
    unlimited = ConnectionLimit(None)
    assert all(unlimited.acquire("a") for _ in range(5000))
    with pytest.raises(InvalidConfigError, match="max_connections_per_ip"):
        ConnectionLimit(0)
