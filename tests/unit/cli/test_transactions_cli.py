"""``raylog transactions``: bad input refused before connecting, and what list, describe and
abort print (over a fake Admin; against a cluster: tests/integration/test_transactions.py)."""

from __future__ import annotations

from typing import Any

import pytest

import raylog
import raylog.cli.transactions as transactions_cli
from raylog.errors import TransactionalIdNotFoundError
from tests.unit.cli.common import run

DESCRIBED = {"transactional_id": "app-1", "state": "ONGOING", "producer_id": 4242,
             "producer_epoch": 3, "timeout_ms": 60_000, "partitions": ["a:0", "b:1"],
             "groups": [], "start_ms": 1_700_000_000_000, "age_ms": 12_345,
             "update_ms": 1_700_000_000_100, "coordinator_epoch": 9,
             "previous_producer_id": 4242, "last_producer_epoch": -1, "writing": None}


class FakeAdmin:
    calls: list[tuple] = []

    def __init__(self, cluster: Any = None) -> None:
        pass

    def list_transactions(self, states, min_age_ms) -> list[dict[str, Any]]:
        self.calls.append(("list", states, min_age_ms))
        return [DESCRIBED]

    def describe_transaction(self, transactional_id: str) -> dict[str, Any]:
        self.calls.append(("describe", transactional_id))
        if transactional_id != "app-1":
            raise TransactionalIdNotFoundError(f"no transactional id {transactional_id!r}")
        return DESCRIBED

    def abort_transaction(self, transactional_id: str) -> dict[str, Any]:
        self.calls.append(("abort", transactional_id))
        return {**DESCRIBED, "state": "PREPARE_ABORT", "producer_epoch": 4}


@pytest.fixture
def admin(monkeypatch):
    FakeAdmin.calls = []
    monkeypatch.setattr(raylog, "Admin", FakeAdmin)
    monkeypatch.setattr(transactions_cli, "connect", lambda args: None)
    return FakeAdmin


@pytest.mark.parametrize("argv", [
    ["transactions"], ["transactions", "describe"], ["transactions", "abort"],
    ["transactions", "list", "--state", "HALF_DONE"],
    ["transactions", "list", "--duration-filter", "-1"],
])
def test_bad_command_lines_are_usage_errors(argv, admin, capsys):
    assert run(argv)[0] == 2
    assert capsys.readouterr().err.startswith("raylog: error: ")
    assert admin.calls == []


def test_list_passes_its_filters_and_prints_kafkas_columns(admin):
    code, out = run(["transactions", "list", "--state", "ongoing", "--state", "PREPARE_ABORT",
                     "--duration-filter", "5000"])
    assert code == 0
    assert admin.calls == [("list", ["ONGOING", "PREPARE_ABORT"], 5000)]
    header, row = out.splitlines()
    assert header.split() == ["TransactionalId", "ProducerId", "ProducerEpoch",
                              "TransactionState"]
    assert row.split() == ["app-1", "4242", "3", "Ongoing"]


def test_describe_prints_one_row_under_kafkas_columns(admin):
    code, out = run(["transactions", "describe", "--transactional-id", "app-1"])
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:5] == ["CoordinatorEpoch", "TransactionalId", "ProducerId",
                                  "ProducerEpoch", "TransactionState"]
    assert row.split()[:5] == ["9", "app-1", "4242", "3", "Ongoing"]
    assert row.split()[-2:] == ["12345", "a:0,b:1"]


def test_an_unknown_id_is_one_line_and_status_1(admin, capsys):
    code, _ = run(["transactions", "describe", "--transactional-id", "nobody"])
    assert code == 1
    assert capsys.readouterr().err.strip() == \
        "raylog: error: no transactional id 'nobody'"


def test_abort_says_what_it_did(admin):
    code, out = run(["transactions", "abort", "--transactional-id", "app-1", "--json"])
    assert code == 0 and admin.calls == [("abort", "app-1")]
    assert '"state": "PREPARE_ABORT"' in out
    code, out = run(["transactions", "abort", "--transactional-id", "app-1"])
    assert out.splitlines()[0].startswith("aborting the transaction of app-1: producer 4242 "
                                          "fenced at epoch 4")
    assert "PrepareAbort" in out.splitlines()[2]
