"""Replication when whole broker machines go, on a cluster of their own
(replication_scenario.py), in a process of its own started early by
tests/integration/scenarios.py: two replicas gone, then a divergent follower, then a dead
broker machine with a spare broker added (the scenario runs once for the session; every
test fails if it fails)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def machines_gone(scenarios) -> dict:
    return scenarios.result("machines-gone")


@pytest.mark.cluster
def test_a_dead_broker_machine_fails_over_and_its_replicas_are_rebuilt_elsewhere(
        machines_gone):
    """(b) A leading broker's node is removed while producers write with acks=all."""
    result = machines_gone["node-removed"]
    assert result["acknowledged"] > 0
    assert all(result["gone"] not in replicas for replicas in result["replicas"])


@pytest.mark.cluster
def test_two_replicas_gone_refuse_acks_all_until_one_is_back(machines_gone):
    """(d) min.insync.replicas=2 and one replica left: refused, appending nothing; accepted
    again (the waiting sends land, in order) once a replica is back in sync."""
    result = machines_gone["two-down"]
    assert "min_insync_replicas=2" in result["refused"]
    # The command line showed it meanwhile: the partition under-replicated, 2 brokers down.
    assert "Partition: 0" in result["described"] and "UnderReplicated" in result["described"]
    assert "1 under-replicated, 0 offline" in result["status"]
    assert result["status"].count(" no ") == 2  # the two brokers not alive
    # One replica back: two in sync of three, still under-replicated, nothing unavailable.
    assert result["after"].count(",") >= 3 and "UnderReplicated" in result["after"]
    assert result["unavailable_after"] == ""


@pytest.mark.cluster
def test_a_follower_with_divergent_records_truncates_to_the_right_point(machines_gone):
    """(e) The old leader's records that no other replica had are cut, exactly them."""
    result = machines_gone["divergent"]
    assert result["old_leader"] != result["new_leader"]
