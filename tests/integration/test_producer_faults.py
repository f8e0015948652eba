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

import contextlib
import dataclasses
import threading
import time
from collections import Counter

import pytest
import ray

from raylog import Admin, Producer
from raylog.client.futures import RecordFuture
from raylog.errors import ProduceFailedError
from tests import history
from tests.history import Read, check, summary
from tests.integration.conftest import (
    consume_all,
    leader_broker,
    replica_info,
    restarts,
    wait_for,
)

PRODUCERS = 3
PARTITIONS = 3
KILLS = 6
DELIVERY_TIMEOUT_MS = 20_000
SENDS_AFTER_RECOVERY = 400


@dataclasses.dataclass
class Send:
    producer: int
    index: int
    value: bytes
    future: RecordFuture
    after_recovery: bool


def produce_until(stop: threading.Event, recovered: threading.Event, producer: int,
                  topic: str, sends: list[Send], errors: list[BaseException]) -> None:
    try:
        send_until(stop, recovered, producer, topic, sends)
    except BaseException as e:  # the test's waits look at this list and stop at once
        errors.append(e)
        raise


def send_until(stop: threading.Event, recovered: threading.Event, producer: int,
               topic: str, sends: list[Send]) -> None:
    settings = {"acks": "all", "linger_ms": 1, "batch_size": 8192,
                "delivery_timeout_ms": DELIVERY_TIMEOUT_MS}  # default retry backoff
    producer_client = Producer(**settings)
    try:
        index = 0
        while not stop.is_set():
            after = recovered.is_set()
            value = b"p%d-%07d" % (producer, index)
            future = producer_client.send(topic, value, key=b"key-%d" % (index % 17))
            sends.append(Send(producer, index, value, future, after))
            index += 1
            if index % 10 == 0:
                # Pacing: about 2,000 sends a second each, well below what the cluster takes,
                # so that failures come from the kills and not from a growing backlog.
                time.sleep(0.005)
    finally:
        # Sends made while replicas were down may fail; they are checked one by one below.
        with contextlib.suppress(ProduceFailedError):
            producer_client.close()


def record_of(send: Send) -> history.Send:
    """The checker's view of a send: resolved or not, and how."""
    future = send.future
    if not future.done():
        return history.Send(send.producer, send.index, send.value, False)
    error = future.exception(0)
    if error is not None:
        return history.Send(send.producer, send.index, send.value, True, error=error,
                            must_succeed=send.after_recovery)
    meta = future.result(0)
    return history.Send(send.producer, send.index, send.value, True, meta.partition,
                        meta.offset, must_succeed=send.after_recovery)


def is_alive(actor) -> bool:
    return ray._private.state.actors(actor._actor_id.hex())["State"] != "DEAD"


@pytest.mark.cluster
def test_replica_kills_leave_no_stuck_future_no_duplicate_and_no_reordering(
        ray_cluster, topic_name):
    admin = Admin(cluster=ray_cluster.raylog)
    admin.create_topic(topic_name, partitions=PARTITIONS)
    stop, recovered = threading.Event(), threading.Event()
    sends: list[list[Send]] = [[] for _ in range(PRODUCERS)]
    errors: list[BaseException] = []
    threads = [threading.Thread(target=produce_until, daemon=True,
                                args=(stop, recovered, i, topic_name, sends[i], errors))
               for i in range(PRODUCERS)]

    def sent(condition) -> bool:
        if errors:
            pytest.fail(f"a producer thread failed: {errors[0]!r}")
        return condition()

    for thread in threads:
        thread.start()
    try:
        for kill in range(KILLS):
            # Let traffic build up, with batches in flight, before each kill.
            acked = sum(s.future.done() for mine in sends for s in mine)
            wait_for(lambda acked=acked: sent(lambda: sum(
                         s.future.done() for mine in sends for s in mine) > acked + 300),
                     timeout=60, what="sends to be acknowledged between kills")
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
        recovered.set()
        wait_for(lambda: sent(lambda: all(sum(s.after_recovery for s in mine) >=
                                          SENDS_AFTER_RECOVERY for mine in sends)),
                 timeout=120, what="sends after recovery")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=DELIVERY_TIMEOUT_MS / 1000 + 30)
    assert not any(t.is_alive() for t in threads), "a producer's close() never returned"

    made = [s for mine in sends for s in mine]
    recorded = [record_of(s) for s in made]
    acked = sum(s.acked for s in recorded)
    records = consume_all(topic_name, PARTITIONS, expected=acked, timeout_s=120)
    anomalies = check(recorded, [Read(0, r.partition, r.offset, r.value) for r in records])
    assert not anomalies, summary(anomalies)
    failed = {s.value: s.error for s in recorded if s.error is not None}
    causes = Counter(type(e).__name__ for e in failed.values())
    print(f"{len(made)} sends, {acked} acknowledged, {len(failed)} failed: {causes}")
