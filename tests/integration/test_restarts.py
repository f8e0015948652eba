"""Restarts that change every Ray node ID: brokers keep their identity on their disks.

Each scenario runs in a process of its own with its own clusters (restart_scenario.py),
started early by tests/integration/scenarios.py:
- the whole cluster stopped and started again on the same disks, brokers in another order;
  then, on that cluster, one broker's node replaced by a new node with the old disk;
- then that cluster's head started again before its brokers, which then join one by one;
  then, on that cluster, a node with a copy of a live broker's disk, and one with another
  cluster's directory (not started, and its tests fail, if the whole-cluster one failed);
- an embedded one-node cluster started twice with the default data locations.
A scenario runs once for the session (a fixture takes its result), and fails every test
that checks it if it fails.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def whole_cluster(scenarios) -> dict:
    return scenarios.result("whole-cluster")


@pytest.fixture(scope="module")
def head_first(scenarios) -> dict:
    return scenarios.result("head-first")


@pytest.fixture(scope="module")
def embedded_restart(scenarios) -> dict:
    return {**scenarios.result("embedded"), "home": scenarios.root("embedded")}


@pytest.mark.cluster
def test_a_whole_cluster_restart_in_another_node_order_loses_nothing(whole_cluster):
    assert whole_cluster["records"] == 600 + 40 + 1 and whole_cluster["group_offsets"]


@pytest.mark.cluster
def test_the_head_restarting_before_its_brokers_finds_them_again(head_first):
    assert head_first["brokers"] == [0, 1, 2]


@pytest.mark.cluster
def test_a_copied_disk_and_another_clusters_directory_are_refused(head_first):
    assert "a copied data directory?" in head_first["refused"]["copy"]
    assert "its data is left untouched" in head_first["refused"]["foreign"]


@pytest.mark.cluster
def test_a_broker_node_replaced_by_a_new_node_with_the_old_disk_serves_it_again(
        whole_cluster):
    assert whole_cluster["replaced"]["old_node"] != whole_cluster["replaced"]["new_node"]


@pytest.mark.cluster
def test_an_embedded_cluster_finds_its_data_in_the_default_locations(embedded_restart):
    home = embedded_restart["home"]
    assert embedded_restart["data_dir"] == str(home / ".raylog" / "brokers" / "0")
    assert embedded_restart["controller_dir"] == str(home / ".raylog" / "controller")
