"""Partition balancing on a cluster of its own (balance_scenario.py), in a process of its
own: a fourth broker node joins a cluster of three, and the balance plan, executed while
producers write, evens replicas and leaders over the four without losing, duplicating or
failing a record, its new replicas copying within the topic's throttle."""

from __future__ import annotations

import pytest

from tests.integration.test_restarts import run_scenario

MODULE = "tests.integration.balance_scenario"


@pytest.mark.cluster
def test_a_node_added_is_balanced_in_while_producers_write(tmp_path):
    result = run_scenario("node-added", tmp_path, module=MODULE)
    assert result["acknowledged"] > 0 and result["failed"] == 0
    assert result["copied_moves"] == 3
    assert sorted(map(tuple, result["loads"].values())) == [(3, 1)] * 4
    assert result["took_s"] >= result["throttled_bytes"] / result["rate"] * 0.5
