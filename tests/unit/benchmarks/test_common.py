"""benchmarks/common.py's figures of an alternated comparison and their table."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture
def common(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import common

    return common


def test_ratios_are_best_over_best_and_median_over_median(common):
    seconds = {"ours": [2.0, 4.0, 5.0], "theirs": [1.0, 2.0, 8.0]}
    figures = common.ratio_figures(seconds, 100, {"ours_vs_theirs": (
        "ours_records_per_s", "theirs_records_per_s")})
    assert figures == {"ours_records_per_s": 50.0, "ours_records_per_s_median": 25.0,
                       "theirs_records_per_s": 100.0, "theirs_records_per_s_median": 50.0,
                       "ours_vs_theirs": 0.5, "ours_vs_theirs_median": 0.5}


def test_the_table_has_a_row_per_step_then_per_ratio_with_its_target(common):
    figures = {"a_records_per_s": 1234.4, "a_records_per_s_median": 1000.0,
               "b_records_per_s": 2000.0, "b_records_per_s_median": 2000.0,
               "a_vs_b": 0.6172, "a_vs_b_median": 0.5}
    result = {**figures, "targets": common.targets_report(figures, {"a_vs_b": 0.7})}
    lines = common.ratio_table(result, ("a", "b"), ["a_vs_b"]).splitlines()
    assert lines[0] == "| figure | best | median | target | met |"
    assert lines[2:] == ["| a | 1,234 | 1,000 | - | - |", "| b | 2,000 | 2,000 | - | - |",
                         "| a_vs_b | 0.62 | 0.50 | >= 0.70 | NOT MET |"]
