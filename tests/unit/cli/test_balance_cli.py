"""``raylog cluster balance``: bad input refused, the plan shown as a table or JSON, a dry run
unless --execute, and an execution that waits with progress (over a fake Admin whose plan is
the real planner's; against a cluster: tests/integration/test_balance.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import raylog
import raylog.cli.balance as balance_cli
from raylog.metadata.balance import check_brokers, plan_balance
from raylog.metadata.state import PartitionState, TopicState
from tests.unit.cli.common import run

TOPIC = TopicState("t", "id", [PartitionState(i, r, r[0], 0, r) for i, r in enumerate(
    [[1, 2], [2, 3], [3, 1], [1, 2], [2, 3], [3, 1]])], {})
SIZES = {("t", i, b): 1 << 20 for i in range(6) for b in (1, 2, 3)}


class FakeAdmin:
    calls: list[tuple] = []

    def __init__(self, cluster: Any = None) -> None:
        pass

    def plan_balance(self, remove) -> dict[str, Any]:
        self.calls.append(("plan", list(remove)))
        check_brokers("brokers to empty", remove, {1, 2, 3, 4})
        plan = plan_balance([TOPIC], {1, 2, 3, 4}, SIZES, remove=remove).to_dict()
        return {**plan, "live": [1, 2, 3, 4], "remove": list(remove)}

    def execute_balance(self, plan, *, timeout_s=None, progress=None) -> dict[str, Any]:
        self.calls.append(("execute", len(plan["moves"]), timeout_s))
        progress({"moving": [{"bytes_to_copy": 2 << 20, "bytes_copied": 1 << 20}],
                  "leaders_pending": []})
        return plan


@pytest.fixture
def admin(monkeypatch):
    FakeAdmin.calls = []
    monkeypatch.setattr(raylog, "Admin", FakeAdmin)
    monkeypatch.setattr(balance_cli, "connect", lambda args: None)
    return FakeAdmin


@pytest.mark.parametrize("argv", [
    ["cluster", "balance", "--remove", "-1"],
    ["cluster", "balance", "--remove"],
    ["cluster", "balance", "--execute", "--dry-run"],
    ["cluster", "balance", "--execute", "--timeout-s", "0"],
    ["cluster", "balance", "--execute", "--timeout-s", "soon"],
])
def test_bad_command_lines_are_usage_errors(admin, argv, capsys):
    assert run(argv)[0] == 2
    assert "raylog: error:" in capsys.readouterr().err
    assert admin.calls == []


def test_the_plan_is_shown_and_nothing_moves_without_execute(admin):
    code, out = run(["cluster", "balance"])
    assert code == 0
    assert out.splitlines()[0].split() == ["TOPIC", "PARTITION", "REPLICAS", "TARGET", "COPY"]
    assert "dry run: nothing moved" in out
    assert "1.0 MiB" in out and "0 -> 3" in out  # broker 4 joins with nothing
    assert [c[0] for c in admin.calls] == ["plan"]
    assert run(["cluster", "balance", "--dry-run"])[1] == out


def test_the_plan_as_json(admin):
    code, out = run(["cluster", "balance", "--dry-run", "--json"])
    plan = json.loads(out)
    assert code == 0 and plan["executed"] is False
    assert plan["after"]["4"]["replicas"] == 3
    assert {tuple(m["target"]) for m in plan["moves"]}
    assert all(set(m) >= {"topic", "partition", "replicas", "target", "bytes"}
               for m in plan["moves"])


def test_execute_waits_and_shows_progress(admin):
    code, out = run(["cluster", "balance", "--execute", "--timeout-s", "30"])
    assert code == 0
    assert "moving 1 partitions: 1.0 MiB of 2.0 MiB copied" in out
    assert out.strip().endswith("balance done: every move made, preferred leaders elected")
    assert admin.calls[1][0] == "execute" and admin.calls[1][2] == 30.0


def test_removing_brokers_and_unknown_ones_named(admin, capsys):
    code, out = run(["cluster", "balance", "--remove", "3", "--json"])
    assert code == 0 and json.loads(out)["after"]["3"]["replicas"] == 0
    assert run(["cluster", "balance", "--remove", "9", "7"])[0] == 1
    assert "unknown brokers 7, 9 " in capsys.readouterr().err


def test_a_balanced_cluster_says_so(admin, monkeypatch):
    monkeypatch.setattr(FakeAdmin, "plan_balance", lambda self, remove: {
        **plan_balance([TOPIC], {1, 2, 3}, SIZES).to_dict(), "live": [1, 2, 3], "remove": []})
    code, out = run(["cluster", "balance", "--execute"])
    assert code == 0 and "balanced: nothing to move" in out
    assert "balance done" not in out

