"""``raylog quotas set|list|delete`` over the controller's quota service in memory: what is
stored, what is printed, and the input refused before anything changes."""

from __future__ import annotations

import asyncio
import io
import json
import types

import pytest

from actors.quota_service import QuotaService
from raylog.cli import quotas as quotas_cli
from raylog.cli.commands import main
from raylog.client import admin as admin_module
from raylog.client.admin import Admin
from raylog.metadata import state as events
from raylog.metadata.access import MemoryLog, MetadataAccess
from raylog.quotas import DEFAULT, QuotaEntity


class Controller:
    """The controller client's quota calls, answered by a QuotaService."""

    def __init__(self) -> None:
        access = MetadataAccess(MemoryLog())
        access.commit(events.cluster_created("c"))
        self.service = QuotaService(access)

    def alter_quotas(self, entries, validate_only=False):
        return asyncio.run(self.service.alter_quotas(entries, validate_only))

    def describe_quotas(self, components=None, strict=False):
        return asyncio.run(self.service.describe_quotas(components, strict))


@pytest.fixture
def controller(monkeypatch) -> Controller:
    controller = Controller()
    admin = Admin.__new__(Admin)  # an Admin whose cluster is only its controller
    admin._cluster, admin._closed = types.SimpleNamespace(controller=controller), False
    monkeypatch.setattr(quotas_cli, "connect", lambda args: None)
    monkeypatch.setattr(admin_module, "Admin", lambda cluster: admin)
    return controller


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["quotas", *argv], out=out), out.getvalue()


def test_set_list_delete(controller, capsys):
    assert run("set", "--client-id", "loader", "producer_byte_rate=1048576,"
               "request_percentage=12.5") == (
        0, "client-id=loader: producer_byte_rate=1048576, request_percentage=12.5\n")
    assert run("set", "--user-default", "--client-default", "consumer_byte_rate=100")[0] == 0
    assert controller.service.access.state.quotas == {
        QuotaEntity(client_id="loader"): {"producer_byte_rate": 1048576,
                                          "request_percentage": 12.5},
        QuotaEntity(DEFAULT, DEFAULT): {"consumer_byte_rate": 100}}
    status, text = run("list")
    assert status == 0
    assert text.splitlines() == [
        "client-id=loader\tproducer_byte_rate=1048576, request_percentage=12.5",
        "user=<default>,client-id=<default>\tconsumer_byte_rate=100"]
    status, text = run("list", "--user-default", "--json")
    assert json.loads(text) == [{"entity": {"user": None, "client-id": None},
                                 "quotas": {"consumer_byte_rate": 100}}]
    assert run("delete", "--client-id", "loader", "request_percentage") == (
        0, "client-id=loader: deleted request_percentage\n")
    assert run("delete", "--client-id", "loader") == (
        0, "client-id=loader: deleted producer_byte_rate\n")
    assert run("delete", "--client-id", "loader")[0] == 1
    assert "client-id=loader has no quotas" in capsys.readouterr().err
    assert run("list")[1] == "user=<default>,client-id=<default>\tconsumer_byte_rate=100\n"


@pytest.mark.parametrize("argv, message", [
    (["set", "--client-id", "c", "producer_byte_rate=-1"], "must be a number > 0"),
    (["set", "--client-id", "c", "producer_byte_rate=1.5"], "whole number"),
    (["set", "--client-id", "c", "producer_byte_rate=fast"], "must be a number > 0"),
    (["set", "--client-id", "c", "bytes_per_second=5"], "unknown quota key"),
    (["set", "--client-id", "c", "producer_byte_rate"], "quotas are KEY=VALUE"),
    (["delete", "--user", "u", "nonsense"], "unknown quota key"),
])
def test_bad_input_is_refused_and_changes_nothing(controller, capsys, argv, message):
    assert run(*argv)[0] == 1
    assert message in capsys.readouterr().err
    assert controller.service.access.state.quotas == {}


def test_an_entity_is_needed_and_its_flags_exclude_each_other(controller, capsys):
    assert run("set", "producer_byte_rate=5")[0] == 2
    assert "needs an entity" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run("set", "--user", "a", "--user-default", "producer_byte_rate=5")
