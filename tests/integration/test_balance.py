"""Partition balancing on a cluster of its own (balance_scenario.py), in a process of its
own: a fourth broker node joins a cluster of three while producers write, and the automatic
mode balances it in, its new replicas copying within the topic's throttle; then the balance
plan that empties it again is executed. Nothing is lost, duplicated or failed."""

from __future__ import annotations

import pytest

from tests.integration.test_restarts import run_scenario

MODULE = "tests.integration.balance_scenario"


@pytest.mark.cluster
def test_a_node_added_is_balanced_in_and_emptied_while_producers_write(tmp_path):
    result = run_scenario("node-added", tmp_path, module=MODULE)
    assert result["acknowledged"] > 0 and result["failed"] == 0
    assert result["removal_moves"] >= 3
    assert sorted(r for r, _ in result["loads"].values()) == [4, 4, 4]
    assert result["auto_moving_s"] >= result["throttled_bytes"] / result["rate"] * 0.5
