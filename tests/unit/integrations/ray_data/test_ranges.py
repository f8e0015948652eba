"""Offset bounds and read-task planning (raylog.integrations.ray_data.ranges), without Ray."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raylog.errors import InvalidOffsetRangeError, OffsetOutOfRangeError
from raylog.integrations.ray_data.ranges import (
    EARLIEST,
    LATEST,
    Timestamp,
    check_range,
    plan_tasks,
    resolve,
    spec_for,
    split,
)
from raylog.types import TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_specs_follow_sparks_kafka_source_conventions():
    assert spec_for(-2, TP0, LATEST, "start") == EARLIEST
    assert spec_for(-1, TP0, EARLIEST, "end") == LATEST
    assert spec_for({"t": {"1": 5}}, TP1, EARLIEST, "start") == 5
    assert spec_for({"t": {"1": 5}}, TP0, EARLIEST, "start") == EARLIEST  # omitted: default
    assert spec_for({TP0: 7}, TP0, EARLIEST, "start") == 7
    assert spec_for({"timestamp": 1000}, TP0, EARLIEST, "start") == Timestamp(1000)


def test_bounds_take_the_forms_ray_data_read_kafka_takes():
    """An int, a datetime (naive: UTC), or {topic: {partition: offset or 'earliest'}}."""
    utc = datetime.UTC
    assert spec_for(datetime.datetime(2025, 1, 1), TP0, EARLIEST, "start") == \
        Timestamp(1735689600000)
    moment = datetime.datetime(2025, 1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    assert spec_for(moment, TP0, EARLIEST, "start") == Timestamp(1735689600000)
    assert spec_for({"t": {0: 1500, 1: "earliest"}}, TP0, EARLIEST, "start") == 1500
    assert spec_for({"t": {0: 1500, 1: "earliest"}}, TP1, LATEST, "start") == EARLIEST
    assert spec_for({"t": {0: datetime.datetime(2025, 1, 1, tzinfo=utc)}}, TP0, LATEST,
                    "end") == Timestamp(1735689600000)


@pytest.mark.parametrize("bad", [-3, "soon", 1.5, Timestamp(-1), {"t": {"0": "x"}}])
def test_bad_specs_are_refused_by_name(bad):
    with pytest.raises(InvalidOffsetRangeError, match="start"):
        spec_for(bad, TP0, EARLIEST, "start")


def test_resolve_and_check():
    assert resolve(EARLIEST, 3, 10, lambda ms: None) == 3
    assert resolve(Timestamp(5), 3, 10, lambda ms: None) == 10  # past every record
    assert resolve(Timestamp(5), 3, 10, lambda ms: 6) == 6
    check_range(TP0, 3, 10, 3, 10)
    with pytest.raises(OffsetOutOfRangeError, match="before the log start 3"):
        check_range(TP0, 2, 10, 3, 10)
    with pytest.raises(OffsetOutOfRangeError, match="past the end"):
        check_range(TP0, 3, 11, 3, 10)
    with pytest.raises(InvalidOffsetRangeError, match="before start"):
        check_range(TP0, 8, 5, 3, 10)


def test_split_cuts_into_bounded_consecutive_ranges():
    assert split(0, 10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert split(5, 5, 4) == []


def test_small_ranges_share_a_task_and_large_ones_are_cut():
    ranges = {TopicPartition("t", p): (0, 300) for p in range(6)}
    tasks = plan_tasks(ranges, max_records=1000, parallelism=1, min_records=1)
    assert [sum(e - s for _, s, e in task) for task in tasks] == [900, 900]
    tasks = plan_tasks({TP0: (0, 2500)}, max_records=1000, parallelism=1, min_records=1)
    assert tasks == [[(TP0, 0, 1000)], [(TP0, 1000, 2000)], [(TP0, 2000, 2500)]]


def test_parallelism_spreads_records_over_tasks_but_not_below_the_minimum():
    ranges = {TP0: (0, 1000), TP1: (0, 1000)}
    assert len(plan_tasks(ranges, 10_000, parallelism=4, min_records=1)) == 4
    assert len(plan_tasks(ranges, 10_000, parallelism=4, min_records=2000)) == 1
    assert plan_tasks({TP0: (5, 5)}, 100, parallelism=2) == []


def test_bad_plan_arguments_are_refused():
    with pytest.raises(ValueError, match="max_records"):
        plan_tasks({TP0: (0, 1)}, 0, 1)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 500)), min_size=1, max_size=12),
       st.integers(1, 400), st.integers(1, 8), st.integers(1, 100))
def test_every_offset_is_read_exactly_once_within_the_task_bound(spans, max_records,
                                                                  parallelism, min_records):
    ranges = {TopicPartition("t", p): (start, start + length)
              for p, (start, length) in enumerate(spans)}
    tasks = plan_tasks(ranges, max_records, parallelism, min_records)
    total = sum(length for _, length in spans)
    per_task = min(max_records, max(min_records, -(-total // parallelism)))
    read = sorted((tp, offset) for task in tasks for tp, s, e in task for offset in range(s, e))
    assert read == sorted((tp, offset) for tp, (s, e) in ranges.items() for offset in range(s, e))
    assert all(0 < sum(e - s for _, s, e in task) <= per_task for task in tasks)
    # First-fit decreasing never needs more than twice the ideal number of tasks (+1).
    assert len(tasks) <= 2 * -(-total // per_task) + 1
