"""benchmarks/transactions.py runs end to end in its quick mode and writes every figure.

The script starts its own embedded single-node cluster (as a user runs it), so it runs in a
process of its own, started early (tests/integration/command_scenario.py, run by
scenarios.py while the unit tests run); no figure is compared with anything (the machine is
shared and noisy).
"""

from __future__ import annotations

import json

import pytest

from tests.integration.command_scenario import TRANSACTIONS_JSON


@pytest.fixture
def transactions_benchmark(scenarios) -> dict:
    """The script's exit status, output and errors, and the figures it wrote."""
    done = scenarios.result("transactions-benchmark")
    return {**done, "json": scenarios.root("transactions-benchmark") / TRANSACTIONS_JSON}


def test_the_transactions_benchmark_writes_its_figures(transactions_benchmark):
    done = transactions_benchmark
    assert done["returncode"] == 0, done["stderr"][-3000:]
    result = json.loads(done["json"].read_text())
    for step in ("txn_produce", "plain_produce", "committed_consume", "uncommitted_consume"):
        assert result[f"{step}_records_per_s"] > 0, step
        assert result[f"{step}_records_per_s_median"] > 0, step
    assert set(result["targets"]) == {"txn_vs_plain", "read_committed_vs_uncommitted"}
    for name, entry in result["targets"].items():
        assert entry["value"] == result[name]
        assert entry["met"] == (entry["value"] >= entry["target"])
    assert result["transactions_per_run"] and min(result["transactions_per_run"]) >= 1
    assert set(result["machine"]["load_average_1m"]) == {"start", "end"}
    assert "| txn_vs_plain |" in done["stdout"]
