"""The transaction coordinator hosted in the controller, on the session's 3-broker cluster,
called through the controller's txn_* methods (the producer's API is the next step): a
commit's markers in every partition and COMPLETE_COMMIT; a controller killed after a commit
was decided and before any marker (a fail point), whose successor loads __transaction_state,
keeps an open transaction and finishes the decided one at a higher coordinator epoch; a
transaction past its timeout aborted by the controller's loop; ``raylog transactions``.
"""

from __future__ import annotations

import contextlib
import io
import time
import uuid

import pytest

from raylog import Admin
from raylog.cli import main
from raylog.client.remote import resolve
from raylog.errors import ConcurrentTransactionsError, InvalidTopicError, ProducerFencedError
from raylog.metadata.topics import TRANSACTION_STATE_TOPIC
from raylog.records import iter_headers
from raylog.records.control import MarkerType, read_marker
from tests.integration.conftest import replica_info, restart_controller, wait_for
from tests.unit.txnutil import txn_batch

PARTITIONS = 2
COMMIT, ABORT = MarkerType.COMMIT, MarkerType.ABORT


def new_id(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def produce(admin: Admin, topic: str, partition: int, producer: tuple[int, int],
            values: list[bytes], sequence: int = 0) -> None:
    """A transactional producer's batch, acks=all, to the partition's leader."""
    client = admin._cluster.topic(topic, refresh=True).partitions[partition].leader_client()
    # Timestamped now: retention must not take the records (txn_batch's default is 2023).
    batch = txn_batch(values, producer[0], producer[1], sequence, ts=int(time.time() * 1000))
    resolve(client.append(batch, "all"), timeout=60)


def markers(admin: Admin, topic: str, partition: int) -> list[tuple[int, int, MarkerType, int]]:
    """(producer id, epoch, type, coordinator epoch) of every marker below the leader's high
    watermark (a fetch answers from one segment at most: read on to the high watermark)."""
    client = admin._cluster.topic(topic, refresh=True).partitions[partition].leader_client()
    found, end = [], None
    offset = resolve(client.list_offset("earliest"), timeout=60)[0]
    while end is None or offset < end:
        result = resolve(client.fetch(offset, 8 << 20, 0, 1), timeout=60)
        end = result.high_watermark
        for pos, h in iter_headers(result.data):
            if h.control:
                found.append((h.producer_id, h.producer_epoch,
                              *read_marker(h, result.data, pos)))
            offset = h.last_offset + 1
        if not result.data:
            break
    return found


def state(controller, tid: str) -> str:
    return controller.txn_describe(tid)["state"]


def test_a_commit_is_marked_in_every_partition_and_completes(ray_cluster, topic):
    controller, admin = ray_cluster.raylog.controller, Admin()
    tid = new_id("commit")
    producer = controller.txn_init_producer_id(tid, 60_000)
    controller.txn_add_partitions(tid, *producer, [(topic, 0), (topic, 1)])
    for p in range(PARTITIONS):
        produce(admin, topic, p, producer, [b"a%d" % p, b"b%d" % p])
    described = controller.txn_describe(tid)
    assert described["state"] == "ONGOING"
    assert described["partitions"] == [f"{topic}:0", f"{topic}:1"]
    epoch = described["coordinator_epoch"]
    open_here = replica_info(admin, topic, 0)  # the open transaction holds the LSO back
    assert open_here["last_stable_offset"] == 0 < open_here["high_watermark"]

    controller.txn_end(tid, *producer, True)
    wait_for(lambda: state(controller, tid) == "COMPLETE_COMMIT", timeout=60,
             what="the commit to complete")
    for p in range(PARTITIONS):
        assert markers(admin, topic, p) == [(*producer, COMMIT, epoch)]
        info = replica_info(admin, topic, p)  # the marker is in: stable to the end
        assert info["last_stable_offset"] == info["high_watermark"] == 3
    assert controller.txn_end(tid, *producer, True) is None  # a retried end: answered alike
    listed = {t["transactional_id"]: t["state"]
              for t in controller.txn_list(["COMPLETE_COMMIT"])}
    assert listed.get(tid) == "COMPLETE_COMMIT"

    # __transaction_state is internal: hidden from listings, refused to users.
    assert TRANSACTION_STATE_TOPIC not in admin.list_topics()
    assert TRANSACTION_STATE_TOPIC in admin.list_topics(include_internal=True)
    with pytest.raises(InvalidTopicError):
        admin.delete_topic(TRANSACTION_STATE_TOPIC)


def test_a_restarted_controller_keeps_an_open_transaction_and_finishes_a_decided_one(
        ray_cluster, topic, tmp_path):
    controller, admin = ray_cluster.raylog.controller, Admin()
    open_id, decided_id = new_id("open"), new_id("decided")
    kept = controller.txn_init_producer_id(open_id, 600_000)
    controller.txn_add_partitions(open_id, *kept, [(topic, 0)])
    produce(admin, topic, 0, kept, [b"kept"])
    before = controller.txn_describe(open_id)
    decided = controller.txn_init_producer_id(decided_id, 600_000)
    controller.txn_add_partitions(decided_id, *decided, [(topic, 0), (topic, 1)])
    for p in range(PARTITIONS):
        produce(admin, topic, p, decided, [b"decided"])
    old_epoch = before["coordinator_epoch"]

    # The controller dies once the commit is durable, before it writes any marker.
    with ray_cluster.failpoints({"controller.txn_prepared":
                                 f"exit-once:{tmp_path / 'prepared'}"}):
        # Ray restarts the controller; the call is sent again to the new one, which answers
        # it (complete), or refuses it while it writes the markers (retriable).
        with contextlib.suppress(ConcurrentTransactionsError):
            controller.txn_end(decided_id, *decided, True)
        assert (tmp_path / "prepared").exists()  # the old controller died there

    wait_for(lambda: state(controller, decided_id) == "COMPLETE_COMMIT", timeout=90,
             what="the new controller to complete the decided commit")
    new_epoch = controller.txn_describe(decided_id)["coordinator_epoch"]
    assert new_epoch > old_epoch
    for p in range(PARTITIONS):  # every marker is the new coordinator's
        assert (*decided, COMMIT, new_epoch) in markers(admin, topic, p)
        assert all(m[3] == new_epoch for m in markers(admin, topic, p) if m[0] == decided[0])

    restart_controller()  # once more, killed from outside: the open one is kept as it was
    after = controller.txn_describe(open_id)
    assert after["coordinator_epoch"] > new_epoch
    assert after["state"] == "ONGOING" and after["partitions"] == before["partitions"]
    assert after["start_ms"] == before["start_ms"]
    assert (after["producer_id"], after["producer_epoch"]) == kept
    controller.txn_end(open_id, *kept, False)  # its producer still ends it
    wait_for(lambda: state(controller, open_id) == "COMPLETE_ABORT", timeout=60,
             what="the abort to complete")
    assert (*kept, ABORT, after["coordinator_epoch"]) in markers(admin, topic, 0)


def test_a_transaction_past_its_timeout_is_aborted_by_the_controller(ray_cluster, topic):
    controller, admin = ray_cluster.raylog.controller, Admin()
    tid = new_id("timeout")
    producer = controller.txn_init_producer_id(tid, 2_000)
    controller.txn_add_partitions(tid, *producer, [(topic, 1)])
    produce(admin, topic, 1, producer, [b"abandoned"])
    wait_for(lambda: state(controller, tid) == "COMPLETE_ABORT", timeout=60,
             what="the timed-out transaction to be aborted")
    described = controller.txn_describe(tid)
    fenced = described["producer_epoch"]
    assert fenced == producer[1] + 1  # the producer was fenced before the abort
    assert markers(admin, topic, 1) == [(producer[0], fenced, ABORT,
                                         described["coordinator_epoch"])]
    with pytest.raises(ProducerFencedError):
        controller.txn_end(tid, *producer, True)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_the_command_line_lists_describes_and_aborts_a_hanging_transaction(ray_cluster, topic):
    controller = ray_cluster.raylog.controller
    tid = new_id("hanging")
    producer = controller.txn_init_producer_id(tid, 600_000)
    controller.txn_add_partitions(tid, *producer, [(topic, 0)])
    code, out = run("transactions", "list", "--state", "ONGOING")
    assert code == 0 and any(line.split()[:2] == [tid, str(producer[0])]
                             for line in out.splitlines())
    code, out = run("transactions", "describe", "--transactional-id", tid)
    assert code == 0 and "Ongoing" in out and f"{topic}:0" in out
    code, out = run("transactions", "abort", "--transactional-id", tid)
    assert code == 0 and out.startswith(f"aborting the transaction of {tid}")
    wait_for(lambda: state(controller, tid) == "COMPLETE_ABORT", timeout=60,
             what="the operator's abort to complete")
    code, _ = run("transactions", "describe", "--transactional-id", new_id("nobody"))
    assert code == 1
