"""Replicas a broker waits to open while another process of its own holds their directory
(raylog/replica/lock_waits.py), and the open that refuses at once (actors/hosting.py): no
Ray."""

from __future__ import annotations

import random

import pytest

from actors.hosting import HostedReplica
from raylog.errors import StorageError, UnsupportedFormatVersionError
from raylog.metadata.identity import LOCK_FILE, DirectoryLock, DirectoryLockedError
from raylog.replica.lock_waits import LockWaits, waits_out

TP = ("t", 0)


def word(version: int, topic_id: str = "id-1", leader: int = 1) -> dict:
    return {"topic": "t", "partition": 0, "topic_id": topic_id, "leader": leader,
            "version": version}


LOCKED = {"error": "DirectoryLockedError(...)", "locked": True}


def test_only_a_held_lock_is_waited_out():
    assert waits_out(DirectoryLockedError("held by process 12"))
    for other in (StorageError("marker unreadable"), UnsupportedFormatVersionError("f", 9, 1),
                  OSError("disk full"), ValueError("a bug")):
        assert not waits_out(other)


def test_a_locked_answer_starts_one_retry_loop_and_keeps_the_newest_word():
    waits = LockWaits(rng=random.Random(0))
    assert waits.answered(TP, word(5), 5, LOCKED), "the first locked answer starts retries"
    assert not waits.answered(TP, word(7), 7, LOCKED), "one loop per replica"
    assert waits.get(TP).state == word(7) and waits.get(TP).version == 7
    # An older word answered late never replaces the newest.
    assert not waits.answered(TP, word(6), 6, LOCKED)
    assert waits.get(TP).version == 7


def test_a_word_making_this_broker_leader_is_not_retried_but_the_next_one_is():
    waits = LockWaits()
    waits.answered(TP, word(3, leader=0), 3, LOCKED)
    assert not waits.get(TP).retried_by(0)  # it may be the epoch the old process led at
    waits.answered(TP, word(4, leader=2), 4, LOCKED)  # the controller moved it away
    assert waits.get(TP).retried_by(0)
    waits.answered(TP, word(5, leader=None), 5, LOCKED)  # or left it leaderless
    assert waits.get(TP).retried_by(0)


def test_a_topics_new_configs_go_with_its_waiting_replicas_unless_older():
    waits = LockWaits()
    waits.wait(TP, {**word(5), "configs": {"retention_ms": 1}}, 5)
    waits.wait(("u", 0), {**word(5), "topic": "u", "configs": {}}, 5)
    waits.update_configs("t", {"retention_ms": 2}, 4)  # older than the word kept
    assert waits.get(TP).state["configs"] == {"retention_ms": 1}
    waits.update_configs("t", {"retention_ms": 3}, 6)
    assert waits.get(TP).state["configs"] == {"retention_ms": 3}
    assert waits.get(TP).version == 6 and waits.get(TP).state["leader"] == 1
    assert waits.get(("u", 0)).state["configs"] == {}


@pytest.mark.parametrize("answer", [
    {"role": "follower", "leader_epoch": 3},  # opened (by a word, or a retry)
    {"error": "StorageError('damaged')"},     # failed otherwise: stands, not retried
    None,                                     # not attempted: a newer word stopped it
])
def test_any_other_answer_ends_the_wait(answer):
    waits = LockWaits()
    waits.answered(TP, word(1), 1, LOCKED)
    assert not waits.answered(TP, word(2), 2, answer)
    assert TP not in waits and waits.next_wait_s(TP) is None  # its loop ends


def test_the_waits_back_off_to_a_cap():
    waits = LockWaits(initial_s=0.1, max_s=1.0, jitter=0)
    waits.wait(TP, word(1), 1)
    assert [waits.next_wait_s(TP) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert waits.get(TP).attempts == 6


def test_the_waits_are_spread_by_jitter_within_bounds():
    waits = LockWaits(initial_s=1.0, max_s=1.0, jitter=0.2, rng=random.Random(3))
    waits.wait(TP, word(1), 1)
    seen = [waits.next_wait_s(TP) for _ in range(50)]
    assert all(0.8 <= s <= 1.2 for s in seen) and len(set(seen)) > 1


def test_a_replica_stopped_moved_away_or_of_an_older_topic_waits_no_more():
    waits = LockWaits()
    for p in range(4):
        waits.wait(("t", p), {**word(1), "partition": p}, 1)
    waits.forget(("t", 0))  # stopped (moved away, deleted)
    # A full word names every replica the broker holds: t-1 no longer, t-2 as a new topic.
    gone = waits.keep_only({("t", 2): "id-2", ("t", 3): "id-1"})
    assert sorted(gone) == [("t", 1), ("t", 2)]
    assert list(waits) == [("t", 3)]
    waits.clear()  # the broker closes
    assert len(waits) == 0 and waits.next_wait_s(("t", 3)) is None


def test_opening_a_replica_another_process_holds_refuses_at_once_and_changes_nothing(
        tmp_path):
    first = HostedReplica.open(tmp_path, "t", 0, "id-1", 0, {})
    first.partition.close()
    first.release()
    directory = tmp_path / "t-0"
    holder = DirectoryLock(directory)  # another open file: flock excludes it as a process
    assert holder.acquire()
    before = {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}
    with pytest.raises(DirectoryLockedError, match=r"names process \d+") as raised:
        HostedReplica.open(tmp_path, "t", 0, "id-1", 0, {})
    assert waits_out(raised.value)
    assert {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()} == before
    assert (directory / LOCK_FILE).read_text().strip() == str(holder.holder())
    holder.release()  # that process is gone: the next attempt opens it
    hosted = HostedReplica.open(tmp_path, "t", 0, "id-1", 0, {})
    assert hosted.lock.held
    hosted.partition.close()
    hosted.release()


def test_a_damaged_directory_is_not_waited_out(tmp_path):
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "partition.metadata").write_text("{not json")
    with pytest.raises(StorageError) as raised:
        HostedReplica.open(tmp_path, "t", 0, "id-1", 0, {})
    assert not waits_out(raised.value)
    assert (directory / "partition.metadata").read_text() == "{not json"


def test_a_new_replica_whose_directory_is_held_gets_nothing_written(tmp_path):
    holder = DirectoryLock(tmp_path / "t-0")
    assert holder.acquire()
    with pytest.raises(DirectoryLockedError):
        HostedReplica.open(tmp_path, "t", 0, "id-1", 0, {})
    assert [p.name for p in (tmp_path / "t-0").iterdir()] == [LOCK_FILE]
    holder.release()
