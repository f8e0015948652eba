"""Broker identity on disk (raylog/metadata/identity.py) and who serves which broker
(raylog/metadata/brokers.py), without Ray."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from raylog.metadata.brokers import BrokerRegistry, Offer, Verdict
from raylog.metadata.identity import (
    IDENTITY_FILE,
    BrokerIdentity,
    DirectoryLock,
    IdentityError,
    claim_data_dir,
    read_identity,
    write_identity,
)

CLUSTER = "0123456789abcdef"
OTHER = "fedcba9876543210"


def test_an_identity_round_trips_and_a_new_directory_has_none(tmp_path):
    assert read_identity(tmp_path) is None
    write_identity(tmp_path, BrokerIdentity(3, CLUSTER))
    assert read_identity(tmp_path) == BrokerIdentity(3, CLUSTER)
    text = (tmp_path / IDENTITY_FILE).read_text()
    assert "broker.id=3" in text and f"cluster.id={CLUSTER}" in text
    assert not (tmp_path / (IDENTITY_FILE + ".tmp")).exists()


@pytest.mark.parametrize("text", [
    "", "version=1\nbroker.id=3\n", "version=0\nbroker.id=3\ncluster.id=0123456789abcdef\n",
    "version=1\nbroker.id=x\ncluster.id=0123456789abcdef\n", "garbage\n",
    "version=1\nbroker.id=-1\ncluster.id=0123456789abcdef\n",
    "version=1\nbroker.id=1\ncluster.id=not hex!\n", "\xff\xfe",
])
def test_a_damaged_identity_is_refused_with_the_file_named(tmp_path, text):
    (tmp_path / IDENTITY_FILE).write_bytes(text.encode("latin-1"))
    with pytest.raises(IdentityError, match=IDENTITY_FILE):
        read_identity(tmp_path)


def test_a_torn_write_leaves_the_old_identity(tmp_path, monkeypatch):
    write_identity(tmp_path, BrokerIdentity(1, CLUSTER))

    def crash(*args):
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        write_identity(tmp_path, BrokerIdentity(2, CLUSTER))
    assert read_identity(tmp_path) == BrokerIdentity(1, CLUSTER)


def _try_lock(directory, queue):
    queue.put(DirectoryLock(directory).acquire())


def test_a_directory_is_held_by_one_process_at_a_time(tmp_path):
    held = DirectoryLock(tmp_path)
    assert held.acquire()
    queue = multiprocessing.get_context("fork").Queue()
    other = multiprocessing.get_context("fork").Process(target=_try_lock, args=(tmp_path, queue))
    other.start()
    try:
        assert queue.get(timeout=30) is False
    finally:
        other.join(30)
        if other.is_alive():
            other.kill()
            other.join(30)
    held.release()
    assert DirectoryLock(tmp_path).acquire()


def test_default_slots_are_stable_and_distinct(tmp_path):
    first, lock = claim_data_dir(None, tmp_path)
    second, _ = claim_data_dir(None, tmp_path)
    assert (first.name, second.name) == ("0", "1")
    lock.release()  # the first node stops: the next to start takes its slot, and identity
    again, _ = claim_data_dir(None, tmp_path)
    assert again == first


def test_a_configured_directory_in_use_is_refused(tmp_path):
    claim_data_dir(tmp_path / "b", tmp_path / "unused")
    with pytest.raises(IdentityError, match="in use by another process"):
        claim_data_dir(tmp_path / "b", tmp_path / "unused")


# -- who serves which broker ---------------------------------------------------------------------


def offer(node: str, identity: BrokerIdentity | None = None) -> Offer:
    return Offer(node, "10.0.0.1", f"/data/{node}", identity)


def test_new_known_foreign_and_unknown_directories():
    registry = BrokerRegistry(CLUSTER, {0, 1})
    assert registry.decide(offer("n1"))[0] is Verdict.NEW
    assert registry.decide(offer("n1", BrokerIdentity(1, CLUSTER)))[0] is Verdict.SERVES
    verdict, reason = registry.decide(offer("n1", BrokerIdentity(1, OTHER)))
    assert verdict is Verdict.REFUSED and OTHER in reason and "untouched" in reason
    verdict, reason = registry.decide(offer("n1", BrokerIdentity(9, CLUSTER)))
    assert verdict is Verdict.REFUSED and "never gave out" in reason


def test_a_copied_disk_is_refused_while_the_original_is_served():
    registry = BrokerRegistry(CLUSTER, {0})
    registry.serve(0, offer("n1", BrokerIdentity(0, CLUSTER)))
    verdict, reason = registry.decide(offer("n2", BrokerIdentity(0, CLUSTER)))
    assert verdict is Verdict.REFUSED and "copied" in reason
    registry.refuse("n2", reason)
    assert registry.decide(offer("n1", BrokerIdentity(0, CLUSTER)))[0] is Verdict.SERVES


def test_a_broker_comes_back_on_a_new_node():
    registry = BrokerRegistry(CLUSTER, {0, 1})
    registry.serve(0, offer("n1", BrokerIdentity(0, CLUSTER)))
    registry.serve(1, offer("n2", BrokerIdentity(1, CLUSTER)))
    assert registry.nodes_gone(set()) == []  # missing from one listing is not gone
    assert registry.nodes_gone({"n1"}) == [0]
    assert [b for b, info in registry.brokers.items() if info.alive] == [1]
    assert registry.brokers[0].describe()["alive"] is False
    moved = offer("n3", BrokerIdentity(0, CLUSTER))
    assert registry.decide(moved)[0] is Verdict.SERVES
    registry.serve(0, moved)
    assert registry.broker_of("n3") == 0 and registry.brokers[0].data_dir == "/data/n3"


def test_a_refused_duplicate_is_asked_again_and_serves_once_the_other_node_is_dead():
    """The disk of a dead machine moved to a new node may be presented before Ray declares
    the old node dead: refused meanwhile, asked again, and served once it is."""
    registry = BrokerRegistry(CLUSTER, {0})
    registry.serve(0, offer("old", BrokerIdentity(0, CLUSTER)))
    verdict, reason = registry.decide(offer("new", BrokerIdentity(0, CLUSTER)))
    registry.refuse("new", reason, final=False)
    assert verdict is Verdict.REFUSED and registry.to_ask("new")
    registry.nodes_gone({"old"})
    assert registry.decide(offer("new", BrokerIdentity(0, CLUSTER)))[0] is Verdict.SERVES
    registry.serve(0, offer("new", BrokerIdentity(0, CLUSTER)))
    assert registry.refused == {} and not registry.to_ask("new")


def test_a_foreign_directory_is_not_asked_again_while_its_node_runs():
    registry = BrokerRegistry(CLUSTER, {0})
    verdict, reason = registry.decide(offer("n1", BrokerIdentity(0, OTHER)))
    registry.refuse("n1", reason)
    assert verdict is Verdict.REFUSED and not registry.to_ask("n1")
    registry.nodes_gone({"n1"})  # the node restarted (a new id next time): forgotten
    assert registry.refused == {} and registry.to_ask("n1")
