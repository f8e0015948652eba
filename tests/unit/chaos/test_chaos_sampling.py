"""The spans in which a partition had fewer in-sync replicas than min.insync.replicas, from
the chaos run's samples (tests/chaos/sampling.py): the stall check excuses them."""

from __future__ import annotations

from tests.chaos.sampling import spans_below


def test_spans_below_the_minimum_run_from_the_first_low_sample_to_the_next_good_one():
    samples = [(1.0, 0, 3), (1.0, 1, 3), (2.0, 0, 1), (2.0, 1, 3), (3.0, 0, 1), (3.0, 1, 0),
               (9.0, 0, 2), (9.0, 1, 1)]
    assert spans_below(samples, 2, until=12.0) == [(0, 2.0, 9.0), (1, 3.0, 12.0)]
    assert spans_below(samples, 1, until=12.0) == [(1, 3.0, 9.0)]
    assert spans_below([], 2, until=1.0) == []
