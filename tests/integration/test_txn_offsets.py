"""Offsets committed inside a transaction (Kafka's TxnOffsetCommit), on the session's
3-broker cluster, through the controller's txn_* methods and txn_offset_commit: invisible
until the transaction commits (a stable read answers UnstableOffsetCommitError, retriable,
meanwhile), committed with it, dropped at an abort, and kept pending through a controller
restart until the transaction completes.
"""

from __future__ import annotations

import uuid

import pytest

from raylog.errors import InvalidTxnStateError, UnstableOffsetCommitError
from tests.integration.conftest import restart_controller, wait_for

PARTITIONS = 2


def new_id(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def state(controller, tid: str) -> str:
    return controller.txn_describe(tid)["state"]


def committed(controller, group: str, topic: str, stable: bool = False) -> dict:
    found = controller.committed_offsets(group, [(topic, 0), (topic, 1)],
                                         require_stable=stable)
    return {tp[1]: (om[0] if om else None) for tp, om in found.items()}


def begin(controller, tid: str, group: str) -> tuple[int, int]:
    producer = controller.txn_init_producer_id(tid, 600_000)
    controller.txn_add_offsets(tid, *producer, group)
    return producer


def test_offsets_are_committed_with_the_transaction_and_dropped_at_an_abort(
        ray_cluster, topic):
    controller = ray_cluster.raylog.controller
    tid, group = new_id("offsets"), new_id("group")
    controller.commit_offsets(group, None, -1, [(topic, 0, 1, "plain")])
    producer = controller.txn_init_producer_id(tid, 600_000)
    with pytest.raises(InvalidTxnStateError):  # the group's offsets are not in a transaction
        controller.txn_offset_commit(tid, *producer, group, None, -1, [(topic, 0, 5, "")])
    controller.txn_add_offsets(tid, *producer, group)
    controller.txn_offset_commit(tid, *producer, group, None, -1,
                                 [(topic, 0, 5, "txn"), (topic, 1, 7, "txn")])

    assert committed(controller, group, topic) == {0: 1, 1: None}  # not yet
    with pytest.raises(UnstableOffsetCommitError) as pending:
        committed(controller, group, topic, stable=True)
    assert pending.value.retriable
    assert controller.describe_group(group)["partitions"][0]["committed"] == 1

    controller.txn_end(tid, *producer, True)
    wait_for(lambda: state(controller, tid) == "COMPLETE_COMMIT", timeout=60,
             what="the commit to complete")
    assert committed(controller, group, topic, stable=True) == {0: 5, 1: 7}

    # The producer's next transaction aborts: its offsets are dropped.
    controller.txn_add_offsets(tid, *producer, group)
    controller.txn_offset_commit(tid, *producer, group, "", -1, [(topic, 0, 9, "")])
    controller.txn_end(tid, *producer, False)
    wait_for(lambda: state(controller, tid) == "COMPLETE_ABORT", timeout=60,
             what="the abort to complete")
    assert committed(controller, group, topic, stable=True) == {0: 5, 1: 7}


def test_a_restarted_controller_keeps_them_pending_until_the_transaction_commits(
        ray_cluster, topic):
    controller = ray_cluster.raylog.controller
    tid, group = new_id("restart"), new_id("group")
    producer = begin(controller, tid, group)
    controller.txn_offset_commit(tid, *producer, group, None, -1, [(topic, 1, 11, "")])
    aborted_id = new_id("aborted")
    other = begin(controller, aborted_id, group)
    controller.txn_offset_commit(aborted_id, *other, group, None, -1, [(topic, 0, 3, "")])
    controller.txn_end(aborted_id, *other, False)
    wait_for(lambda: state(controller, aborted_id) == "COMPLETE_ABORT", timeout=60,
             what="the abort to complete")

    restart_controller()  # between the offset commit and the commit
    with pytest.raises(UnstableOffsetCommitError):  # replayed from the log: still pending
        committed(controller, group, topic, stable=True)
    assert committed(controller, group, topic) == {0: None, 1: None}

    controller.txn_end(tid, *producer, True)
    wait_for(lambda: state(controller, tid) == "COMPLETE_COMMIT", timeout=60,
             what="the commit to complete")
    assert committed(controller, group, topic, stable=True) == {0: None, 1: 11}

    restart_controller()  # and the log says so again
    assert committed(controller, group, topic, stable=True) == {0: None, 1: 11}
