"""Reads planned before a failover complete (KIP-207, issue 22 item 9).

After a clean failover the new leader cannot tell where committed records end until its
followers have fetched from it (its high watermark is below the start of its epoch): it says
so (OffsetNotAvailableError, retriable) instead of answering with a high watermark that may be
below the one readers saw. tests/integration/failover.py makes that state without leaving
timing to chance; here a read planned from the old leader runs into it.
"""

from __future__ import annotations

import logging
import threading

import pytest

from raylog import Admin, TopicPartition
from raylog.client.remote import resolve
from raylog.errors import OffsetNotAvailableError
from raylog.integrations import ray_data
from tests.integration.conftest import wait_for
from tests.integration.failover import lagging_new_leader

BEFORE, AFTER = 300, 200


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


@pytest.mark.cluster
def test_a_ray_data_read_planned_before_a_failover_reads_every_record(admin, topic_name,
                                                                     caplog):
    caplog.set_level(logging.INFO, logger="raylog.integrations.ray_data")
    admin.create_topic(topic_name, partitions=1, replication_factor=3)
    tp = TopicPartition(topic_name, 0)
    planned: dict = {}
    result: dict = {}

    def read() -> None:
        try:
            start, end = planned[tp]
            dataset = ray_data.read_topic(topic_name, start_offset={tp: start},
                                             end_offset={tp: end})
            rows = sorted((row["offset"], row["value"]) for row in dataset.take_all())
            result["records"] = rows
        except Exception as e:  # reported below
            result["error"] = e

    with lagging_new_leader(admin, topic_name, BEFORE, AFTER,
                            lambda: planned.update(ray_data.offset_ranges(topic_name))
                            ) as failover:
        assert planned[tp] == (0, BEFORE)
        leader = admin._cluster.topic(topic_name, refresh=True).partitions[0].leader_client()
        assert leader.broker_id == failover.new
        with pytest.raises(OffsetNotAvailableError):
            resolve(leader.list_offset("latest"), timeout=60)
        reader = threading.Thread(target=read)
        reader.start()
        # The read meets the new leader before it caught up and is told to ask again
        # (OffsetNotAvailableError, whose messages name the high watermark).
        wait_for(lambda: "error" in result or any(
            "trying again" in r.getMessage() and "high watermark" in r.getMessage()
            for r in caplog.records),
            timeout=120, what="the read to be told the offsets are not available yet")
        failover.resume()  # its follower fetches: the new leader's high watermark catches up
        reader.join(300)
    assert not reader.is_alive(), "the read never ended"
    assert "error" not in result, result.get("error")
    assert result["records"] == [(i, b"v%d" % i) for i in range(BEFORE)]
    wait_for(lambda: resolve(admin._cluster.topic(topic_name, refresh=True).partitions[0]
                             .leader_client().list_offset("latest"), timeout=60)[0]
             == BEFORE + AFTER, what="the new leader's high watermark caught up")
