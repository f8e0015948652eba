"""Brokers compact and enforce retention on their background thread: what clients and the
replicas' directories show (the cleaner's rules: tests/unit/storage/test_cleaner_passes.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raylog import Admin, Producer
from raylog.storage.handoff import DELETED_SUFFIX
from tests.integration.conftest import replica_records, wait_for

ROUNDS = 20
KEYS = 10


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    # An earlier module may have stopped or killed a broker that is still coming back: the
    # replication factor 3 below needs all three.
    wait_for(lambda: len(ray_cluster.broker_ids) == 3, timeout=120, interval=0.5,
             what="every broker alive")
    return Admin(cluster=ray_cluster.raylog)


def test_every_replica_of_a_compacted_topic_keeps_the_newest_value_of_each_key(admin,
                                                                             topic_name):
    admin.create_topic(topic_name, 1, 3, {"cleanup.policy": "compact", "segment.bytes": 4096,
                                          "min.insync.replicas": 2})
    newest: dict[bytes, bytes] = {}
    with Producer(acks="all") as producer:
        for r in range(ROUNDS):
            for k in range(KEYS):
                key = b"k%d" % k
                value = key + b":%d:" % r + b"x" * 100
                producer.send(topic_name, value, key=key, partition=0)
                newest[key] = value
            producer.flush()

    def compacted() -> bool:
        for records in replica_records(admin, topic_name, 0).values():
            last = {value.split(b":")[0]: value for _, value in records}
            if len(records) >= ROUNDS * KEYS or last != newest:
                return False
        return True

    wait_for(compacted, timeout=120, interval=1,
             what="every replica to compact, keeping each key's newest value")
    # Compaction keeps offsets: the log end stays where the producer left it.
    ends = {r["log_end_offset"] for r in admin.describe_replicas(topic_name)}
    assert ends == {ROUNDS * KEYS}


def test_retention_moves_the_log_start_and_deletes_the_retired_segments(admin, topic_name):
    admin.create_topic(topic_name, 1, 1, {"segment.bytes": 2048, "retention.bytes": 4096})
    with Producer() as producer:  # incompressible batches of 20 records: a segment each
        for i in range(400):
            producer.send(topic_name, os.urandom(100), partition=0)
            if i % 20 == 19:
                producer.flush()

    def retained() -> dict | None:
        # Down to the limit, not just moved: a pass that ran between two of the producer's
        # flushes moved the log start with most of the log still to come.
        info = admin.describe_replicas(topic_name)[0]
        leftovers = list(Path(info["directory"]).glob(f"*{DELETED_SUFFIX}"))
        return info if info["log_start_offset"] > 0 and not leftovers and \
            info["size_bytes"] < 3 * 4096 else None

    info = wait_for(retained, timeout=120, interval=1,
                    what="retention to move the log start and delete what it took")
    assert info["log_end_offset"] == 400
