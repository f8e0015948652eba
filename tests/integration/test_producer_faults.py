"""Producers under broker kills: every future resolves, nothing lands twice or out of order.

Three producer threads send with ``acks="all"``, small batches and several in flight per
partition, while the brokers leading the topic's partitions are killed one after the other,
half of the time for good (Ray restarts the others; the controller notices the dead ones and
creates them again on their node; each reopens its logs and leads at a new epoch). Then the
history is checked against the log by the history checker (tests/history.py): every future
resolved by its deadline; every send made after the cluster was healthy again was
acknowledged; each acknowledged value is in the log once, at the offset its acknowledgement
gave; no value is there twice, no offset holds two; and per producer and partition the log
holds the values in send order.
"""

from __future__ import annotations

import pytest
import ray

from raylog import Admin
from tests.history import summary
from tests.integration.conftest import leader_broker, replica_info, restarts, wait_for
from tests.integration.workload import Workload

PARTITIONS = 3
KILLS = 6
SENDS_AFTER_RECOVERY = 400


def is_alive(actor) -> bool:
    return ray._private.state.actors(actor._actor_id.hex())["State"] != "DEAD"


@pytest.mark.cluster
def test_broker_kills_leave_no_stuck_future_no_duplicate_and_no_reordering(
        ray_cluster, topic_name):
    admin = Admin(cluster=ray_cluster.raylog)
    admin.create_topic(topic_name, partitions=PARTITIONS)
    with Workload(topic_name, PARTITIONS) as load:
        for kill in range(KILLS):
            load.wait_acknowledged(300)  # traffic, with batches in flight, before each kill
            partition = kill % PARTITIONS
            actor = leader_broker(admin, topic_name, partition)

            def serving(partition=partition) -> bool:
                return replica_info(admin, topic_name, partition)["role"] == "leader"

            if kill % 2:  # for good: the controller notices and creates it again
                ray.kill(actor, no_restart=True)
                wait_for(lambda actor=actor, serving=serving: not is_alive(actor) and serving(),
                         timeout=60, what="the controller to create the broker again")
            else:  # Ray restarts it on its node
                before = restarts(actor)
                ray.kill(actor, no_restart=False)
                wait_for(lambda actor=actor, before=before, serving=serving:
                         restarts(actor) > before and serving(),
                         timeout=60, what="the killed broker to restart")
        load.healthy(SENDS_AFTER_RECOVERY)
    anomalies = load.finish()
    assert not anomalies, summary(anomalies)
    print(load.summary)
