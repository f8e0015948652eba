"""Replication when whole broker machines go, on clusters of their own
(replication_scenario.py), each in a process of its own: a dead broker machine on one; two
replicas gone, then a divergent follower, on another (a fixture runs that scenario once for
the module; both of its tests fail if it fails)."""

from __future__ import annotations

import pytest

from tests.integration.test_restarts import run_scenario

MODULE = "tests.integration.replication_scenario"


@pytest.mark.cluster
def test_a_dead_broker_machine_fails_over_and_its_replicas_are_rebuilt_elsewhere(tmp_path):
    """(b) A leading broker's node is removed while producers write with acks=all."""
    result = run_scenario("node-removed", tmp_path, module=MODULE)
    assert result["acknowledged"] > 0
    assert all(result["gone"] not in replicas for replicas in result["replicas"])


@pytest.fixture(scope="module")
def two_down_divergent(tmp_path_factory) -> dict:
    return run_scenario("two-down-divergent", tmp_path_factory.mktemp("two-down-divergent"),
                        module=MODULE)


@pytest.mark.cluster
def test_two_replicas_gone_refuse_acks_all_until_one_is_back(two_down_divergent):
    """(d) min.insync.replicas=2 and one replica left: refused, appending nothing; accepted
    again (the waiting sends land, in order) once a replica is back in sync."""
    result = two_down_divergent["two-down"]
    assert "min_insync_replicas=2" in result["refused"]
    # The command line showed it meanwhile: the partition under-replicated, 2 brokers down.
    assert "Partition: 0" in result["described"] and "UnderReplicated" in result["described"]
    assert "1 under-replicated, 0 offline" in result["status"]
    assert result["status"].count(" no ") == 2  # the two brokers not alive
    # One replica back: two in sync of three, still under-replicated, nothing unavailable.
    assert result["after"].count(",") >= 3 and "UnderReplicated" in result["after"]
    assert result["unavailable_after"] == ""


@pytest.mark.cluster
def test_a_follower_with_divergent_records_truncates_to_the_right_point(two_down_divergent):
    """(e) The old leader's records that no other replica had are cut, exactly them."""
    result = two_down_divergent["divergent"]
    assert result["old_leader"] != result["new_leader"]
