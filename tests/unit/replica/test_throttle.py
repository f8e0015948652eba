"""The byte budget of moving replicas (raylog/replica/throttle.py)."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidArgumentError
from raylog.replica.throttle import ByteRate


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_holds_half_a_second_and_refills_at_the_rate():
    clock = Clock()
    budget = ByteRate(1000, clock=clock)
    assert budget.take(300) == 300
    assert budget.take(10_000) == 200
    assert budget.take(10_000) == 0
    clock.now += 0.125
    assert budget.take(10_000) == 125
    clock.now += 60  # idle for long: never more than the burst at once
    assert budget.take(10_000) == 500


def test_a_debt_is_paid_before_the_next_fetch():
    clock = Clock()
    budget = ByteRate(1000, clock=clock)
    taken = budget.take(10_000)
    budget.settle(taken, taken + 1500)  # a whole batch, larger than the allowance
    assert budget.take(1) == 0
    assert budget.wait_s() == pytest.approx(1.501)
    clock.now += 1.5
    assert budget.take(10_000) == 0
    clock.now += 0.0625
    assert budget.take(10_000) == 62


def test_what_a_fetch_did_not_use_goes_back():
    budget = ByteRate(1000, clock=Clock())
    taken = budget.take(10_000)
    budget.settle(taken, 0)
    assert budget.take(10_000) == 500


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "10"])
def test_a_rate_that_is_not_a_positive_integer_is_refused(bad):
    with pytest.raises(InvalidArgumentError, match="bytes a second"):
        ByteRate(bad)
