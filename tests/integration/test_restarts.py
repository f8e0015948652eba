"""Restarts that change every Ray node ID: brokers keep their identity on their disks.

Each scenario runs in a process of its own with its own clusters (restart_scenario.py):
- the whole cluster stopped and started again on the same disks, brokers in another order;
  then, on that cluster, one broker's node replaced by a new node with the old disk;
- the head started again before its brokers, which then join one by one; then, on that
  cluster, a node with a copy of a live broker's disk, and one with another cluster's
  directory;
- an embedded one-node cluster started twice with the default data locations.
A scenario that two tests check runs once for the module (a fixture), and fails both if
it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_scenario(name: str, root: Path, timeout: float = 900,
                 module: str = "tests.integration.restart_scenario") -> dict:
    """Run scenario ``name`` of ``module`` in a process of its own; what it printed last."""
    env = {**os.environ, "HOME": str(root)}  # ~/.raylog of the scenario is its own
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-m", module, name, str(root)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def whole_cluster(tmp_path_factory) -> dict:
    return run_scenario("whole-cluster", tmp_path_factory.mktemp("whole-cluster"))


@pytest.fixture(scope="module")
def head_first(tmp_path_factory) -> dict:
    return run_scenario("head-first", tmp_path_factory.mktemp("head-first"))


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
def test_an_embedded_cluster_finds_its_data_in_the_default_locations(tmp_path):
    result = run_scenario("embedded", tmp_path)
    assert result["data_dir"] == str(tmp_path / ".raylog" / "brokers" / "0")
    assert result["controller_dir"] == str(tmp_path / ".raylog" / "controller")
