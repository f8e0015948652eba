"""The windowed rate, as Kafka's Rate over samples, with an injected clock."""

import pytest

from raylog.quotas import WindowedRate


def test_a_new_rate_is_measured_over_all_but_one_sample():
    rate = WindowedRate(samples=11, sample_s=1.0, now=0.0)
    rate.record(1000, 0.0)
    assert rate.window_s(0.0) == pytest.approx(10.0)
    assert rate.rate(0.0) == pytest.approx(100.0)


def test_a_steady_rate_is_measured_as_it_is():
    rate = WindowedRate(samples=4, sample_s=0.5, now=0.0)
    t = 0.0
    while t < 10:
        rate.record(100, t)  # 100 units every 0.1 s: 1000/s
        t = round(t + 0.1, 3)
    assert rate.rate(t) == pytest.approx(1000, rel=0.15)


def test_old_samples_count_no_more():
    rate = WindowedRate(samples=3, sample_s=1.0, now=0.0)
    rate.record(3000, 0.0)
    assert rate.rate(0.5) == pytest.approx(1200)  # 0.5 s and the 2 samples missing
    assert rate.rate(3.0) == 0  # the whole window later: forgotten
    rate.record(10, 3.0)
    assert rate.rate(3.0) == pytest.approx(5)


def test_a_rate_rolls_to_a_new_sample_per_sample_length():
    rate = WindowedRate(samples=3, sample_s=1.0, now=0.0)
    rate.record(100, 0.0)
    rate.record(100, 1.0)
    rate.record(100, 2.0)
    assert rate.rate(2.0) == pytest.approx(150)  # 300 over 2 s
    rate.record(100, 3.0)  # the first sample is reused: 300 over 2 s again
    assert rate.rate(3.0) == pytest.approx(150)
