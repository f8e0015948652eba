"""benchmarks/transactions.py runs end to end in its quick mode and writes every figure.

The script starts its own embedded single-node cluster (as a user runs it), so it runs in a
subprocess; no figure is compared with anything (the machine is shared and noisy).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_transactions_benchmark_writes_its_figures(tmp_path):
    out = tmp_path / "transactions.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "transactions.py"), "--quick",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    for step in ("txn_produce", "plain_produce", "committed_consume", "uncommitted_consume"):
        assert result[f"{step}_records_per_s"] > 0, step
        assert result[f"{step}_records_per_s_median"] > 0, step
    assert set(result["targets"]) == {"txn_vs_plain", "read_committed_vs_uncommitted"}
    for name, entry in result["targets"].items():
        assert entry["value"] == result[name]
        assert entry["met"] == (entry["value"] >= entry["target"])
    assert result["transactions_per_run"] and min(result["transactions_per_run"]) >= 1
    assert set(result["machine"]["load_average_1m"]) == {"start", "end"}
    assert "| txn_vs_plain |" in done.stdout
