"""Tiered storage against a real S3-compatible server on loopback (moto's server mode,
``moto[server]``), on a cluster of its own in a process of its own
(tiered_s3_scenario.py, run once for the module): copies, reads from offset 0, the
store stopped and started again, whole-log retention, a whole-cluster restart, and Ray
Data's read of the cold part without credentials in what it sends."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def s3(tiered_s3) -> dict:
    return tiered_s3


@pytest.fixture(scope="module")
def tiered_s3(scenarios) -> dict:
    """The scenario's result (tests/integration/scenarios.py runs it)."""
    return scenarios.result("s3")


@pytest.mark.cluster
def test_segments_are_copied_to_s3_and_read_back_from_offset_0(s3):
    assert s3["store"]["uri"] == "s3://raylog-tiered/cold"
    assert s3["store"]["settings"]["endpoint_override"].startswith("127.0.0.1:")
    assert s3["copied_segments"] >= 3 and s3["folders"] >= s3["copied_segments"]
    assert s3["offsets_from_0"]


@pytest.mark.cluster
def test_a_store_that_is_down_blocks_neither_produce_nor_hot_fetch_and_copies_resume(s3):
    assert s3["hot_while_down"][:5] == [55, 56, 57, 58, 59]
    stalled, resumed = s3["resumed_past"]
    assert resumed > stalled
    assert s3["offsets_after_outage"] and s3["values_ok"]


@pytest.mark.cluster
def test_whole_log_retention_deletes_segments_in_s3(s3):
    assert s3["log_start_after_retention"] > 0
    assert s3["folders_after_retention"] == s3["remote_after_retention"]


@pytest.mark.cluster
def test_a_whole_cluster_restart_finds_the_remote_log_again(s3):
    assert s3["restart_same_remote"]
    kept, back = s3["restart_log_start"]
    assert back == kept > 0
    assert s3["restart_offsets_ok"]


@pytest.mark.cluster
def test_ray_data_reads_the_cold_part_without_sending_the_credentials(s3):
    """read_topic's cold pieces are read by the leader's node's gateway, which asks the
    controller for the store's credentials: none is in what the driver sent to Ray, nor in
    the Dataset, even with the secrets in the memory the gateway and the leader's broker
    free (their blocks come as Arrow IPC streams: a table's answer carried that memory in
    the gaps Ray leaves between its buffers); a gateway killed is replaced (a new name) and
    the read gives the same rows."""
    assert s3["dataset_cold_records"] > 0
    assert s3["dataset_rows_ok"]
    assert s3["dataset_secrets_sent"] == []
    # ...though the recorder does see what the driver sends, each way (its control).
    assert s3["recorder_sees"] == {"argument": True, "put": True, "closure": True}
    killed, replacement = s3["dataset_gateways"]
    assert replacement != killed and replacement.startswith(f"{killed}:")
