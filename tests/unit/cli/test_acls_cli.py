"""``raylog acls add|list|remove`` over an in-memory topic: the bindings kafka-acls' flags
mean, tombstones on remove, and incomplete flags refused before anything connects."""

from __future__ import annotations

import io
import json

import pytest

from raylog.cli import acls as acls_cli
from raylog.cli.commands import main
from raylog.kafka.auth.acls import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    decode,
)
from raylog.kafka.gateway import users as users_module


class FakeTopic:
    """AclsTopic's interface over a list of records (the topic's log)."""

    log: list[tuple[bytes, bytes | None]] = []
    connected = False

    def __init__(self, cluster) -> None:
        FakeTopic.connected = True

    def write(self, records) -> None:
        self.log.extend(records)

    def load(self, store):
        for key, value in self.log:
            store.apply(key, value)
        return store


@pytest.fixture
def topic(monkeypatch):
    FakeTopic.log = []
    FakeTopic.connected = False
    monkeypatch.setattr(users_module, "AclsTopic", FakeTopic)
    monkeypatch.setattr(acls_cli, "connect", lambda args: None)
    return FakeTopic


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main(["acls", *argv], out=out), out.getvalue()


def test_add_writes_one_binding_per_principal_host_operation_and_resource(topic):
    code, out = run(["add", "--allow-principal", "User:alice", "--allow-principal", "User:bob",
                     "--operation", "Read", "--operation", "Describe", "--topic", "pay.",
                     "--resource-pattern-type", "prefixed", "--group", "g"])
    assert code == 0
    written = [decode(k, v) for k, v in topic.log]
    assert len(written) == 2 * 2 * 2 and all(present for _, present in written)
    assert (AclBinding("User:bob", "*", ResourceType.GROUP, "g", PatternType.PREFIXED,
                       Operation.DESCRIBE, Permission.ALLOW), True) in written
    assert out.count("added: ALLOW") == 8


def test_deny_with_hosts_and_default_all(topic):
    run(["add", "--deny-principal", "User:*", "--deny-host", "10.0.0.9", "--cluster"])
    [(binding, _)] = [decode(k, v) for k, v in topic.log]
    assert binding == AclBinding("User:*", "10.0.0.9", ResourceType.CLUSTER, "kafka-cluster",
                                 PatternType.LITERAL, Operation.ALL, Permission.DENY)


def test_remove_tombstones_what_exists_and_list_shows_the_rest(topic):
    run(["add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "a",
         "--topic", "b"])
    code, out = run(["remove", "--allow-principal", "User:alice", "--operation", "Write",
                     "--topic", "a", "--topic", "nope"])
    assert code == 0 and "removed: ALLOW User:alice" in out and "1 of the ACLs" in out
    assert topic.log[-1][1] is None
    code, out = run(["list", "--json"])
    assert [b["resource_name"] for b in json.loads(out)] == ["b"]
    assert run(["list", "--topic", "a"])[1] == ""
    assert run(["list", "--principal", "User:bob"])[1] == ""


@pytest.mark.parametrize("argv", [
    ["add", "--allow-principal", "User:alice"],                       # no resource
    ["add", "--topic", "t"],                                          # no principal
    ["add", "--allow-principal", "alice", "--topic", "t"],            # not type:name
])
def test_incomplete_flags_are_refused_before_connecting(topic, argv):
    code, _ = run(argv)
    assert code != 0 and not topic.connected and topic.log == []


def test_unknown_operation_is_refused(topic):
    with pytest.raises(SystemExit):
        run(["add", "--allow-principal", "User:a", "--topic", "t", "--operation", "Fly"])
