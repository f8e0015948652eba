"""Partition balancing on a cluster of its own (balance_scenario.py), in a process of its
own: a fourth broker node joins a cluster of three while producers write, and the automatic
mode balances it in, its new replicas copying within the topic's throttle; then the balance
plan that empties it again is executed. Nothing is lost, duplicated or failed."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def node_added(scenarios) -> dict:
    """The scenario's result (tests/integration/scenarios.py runs it)."""
    return scenarios.result("node-added")


@pytest.mark.cluster
def test_a_node_added_is_balanced_in_and_emptied_while_producers_write(node_added):
    result = node_added
    assert result["acknowledged"] > 0 and result["failed"] == 0
    assert result["removal_moves"] >= 3
    assert sorted(r for r, _ in result["loads"].values()) == [4, 4, 4]
    assert result["auto_moving_s"] >= result["throttled_bytes"] / result["rate"] * 0.5
