"""The metric rules and the recorder, without Ray (a fake metric factory)."""

from __future__ import annotations

from types import SimpleNamespace

from raylog.util.metrics import (
    METRICS,
    Recorder,
    partition_change_counts,
    partition_health,
    rebalances,
)


class _Fake:
    def __init__(self, name, metric, calls, fail=False):
        self.name, self.metric, self.calls, self.fail = name, metric, calls, fail

    def _call(self, method, value, tags):
        if self.fail:
            raise RuntimeError("no metrics agent")
        self.calls.append((self.name, method, value, tags))

    def inc(self, value, tags=None):
        self._call("inc", value, tags)

    def set(self, value, tags=None):
        self._call("set", value, tags)

    def observe(self, value, tags=None):
        self._call("observe", value, tags)


def test_a_change_counts_elections_and_each_replica_leaving_or_joining_the_isr():
    assert partition_change_counts(1, [1, 2, 3], 1, [1, 2]) == {
        "raylog_leader_elections": 0, "raylog_isr_shrinks": 1, "raylog_isr_expands": 0}
    assert partition_change_counts(1, [1, 2], 2, [2]) == {
        "raylog_leader_elections": 1, "raylog_isr_shrinks": 1, "raylog_isr_expands": 0}
    assert partition_change_counts(None, [], 3, [3, 1]) == {
        "raylog_leader_elections": 1, "raylog_isr_shrinks": 0, "raylog_isr_expands": 2}
    assert partition_change_counts(3, [3], None, [3])["raylog_leader_elections"] == 0


def test_health_counts_under_replicated_and_offline_partitions():
    def p(leader, isr, replicas):
        return SimpleNamespace(leader=leader, isr=isr, replicas=replicas)

    partitions = [p(1, [1, 2], [1, 2]), p(1, [1], [1, 2]), p(None, [], [3]), p(3, [3], [3])]
    assert partition_health(partitions, live={1, 2}) == (2, 2)


def test_rebalances_count_new_generations_but_not_what_was_there_at_the_first_look():
    counts, seen = rebalances(None, {"old": 7})
    assert counts == {} and seen == {"old": 7}
    counts, seen = rebalances(seen, {"old": 9, "new": 2})
    assert counts == {"old": 2, "new": 2}
    counts, seen = rebalances(seen, {"new": 2})
    assert counts == {} and seen == {"new": 2}


def test_the_recorder_makes_each_metric_once_and_never_raises():
    calls, made = [], []

    def factory(name, metric):
        made.append(name)
        return _Fake(name, metric, calls, fail=name == "raylog_offline_partitions")

    recorder = Recorder(factory)
    recorder.inc("raylog_records_in", 5, topic="t")
    recorder.inc("raylog_records_in", 0, topic="t")  # nothing to add: not sent
    recorder.observe("raylog_produce_latency_ms", 1.5, topic="t")
    recorder.set("raylog_under_replicated_partitions", 0)
    recorder.set("raylog_offline_partitions", 1)  # fails: logged, dropped
    recorder.set("raylog_offline_partitions", 2)
    recorder.set("raylog_consumer_group_lag", 4, group="g", topic="t", partition=0)
    assert calls == [
        ("raylog_records_in", "inc", 5, {"topic": "t"}),
        ("raylog_produce_latency_ms", "observe", 1.5, {"topic": "t"}),
        ("raylog_under_replicated_partitions", "set", 0, None),
        ("raylog_consumer_group_lag", "set", 4, {"group": "g", "topic": "t", "partition": "0"}),
    ]
    assert made.count("raylog_records_in") == 1 and made.count("raylog_offline_partitions") == 1
    assert all(name.startswith("raylog_") for name in METRICS)


def test_the_grafana_dashboard_shows_only_metrics_raylog_exports():
    import json
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).parents[3] / "docs/grafana/raylog.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {re.sub(r"_(total|bucket)$", "", name.removeprefix("ray_"))
            for e in exprs for name in re.findall(r"ray_raylog_\w+", e)}
    assert used == set(METRICS)  # every metric on a panel, and no panel on a missing one

