"""The chaos suite's schedule (tests/chaos/schedule.py): one seed, one schedule; every kind
of fault in the first round; targets and holds within bounds."""

from __future__ import annotations

import itertools

import pytest

from tests.chaos.schedule import FAULTS, HOLDS_S, MEMBER_FAULTS, schedule


def test_a_seed_gives_the_same_schedule_every_time_and_another_seed_another():
    assert schedule(7, 300, 3, 3) == schedule(7, 300, 3, 3)
    assert schedule(7, 300, 3, 3) != schedule(8, 300, 3, 3)


def test_the_first_round_has_every_kind_once_then_faults_fill_the_minutes():
    quick = schedule(1, 0, 3, 3)
    assert sorted(s.kind for s in quick) == sorted(FAULTS)
    soak = schedule(1, 600, 3, 3)
    assert soak[:len(quick)] == quick
    assert soak[-1].at < 600 <= soak[-1].at + soak[-1].hold + 6 + 15  # filled to the end
    assert [s.at for s in soak] == sorted(s.at for s in soak)


def test_steps_follow_one_another_and_targets_are_in_range():
    steps = schedule(3, 900, 4, 2)
    for earlier, later in itertools.pairwise(steps):
        assert later.at >= earlier.at + earlier.hold
    for s in steps:
        low, high = HOLDS_S.get(s.kind, (0, 0))
        assert low <= s.hold <= high, s
        if s.kind in MEMBER_FAULTS:
            assert 0 <= s.member < 2
        elif s.role is not None:
            assert s.role in ("leader", "follower") and 0 <= s.partition < 4
    assert all(s.role == "follower" for s in steps if s.kind == "controller_isr_kill")


def test_a_subset_of_kinds_and_unknown_kinds():
    steps = schedule(5, 120, 3, 3, kinds=["controller_pause", "broker_pause"])
    assert {s.kind for s in steps} == {"controller_pause", "broker_pause"}
    with pytest.raises(ValueError, match="unknown fault kinds"):
        schedule(5, 0, 3, 3, kinds=["meteor"])
