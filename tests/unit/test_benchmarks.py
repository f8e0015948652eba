"""The benchmark scripts start, and the storage one writes the figures its issue names.

Figures are never compared with anything here: the machine is shared and noisy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("script", ["storage", "produce_consume", "groups", "analytics", "density",
                                    "replication", "schemas"])
def test_each_benchmark_explains_its_options(script):
    done = subprocess.run([sys.executable, str(BENCHMARKS / f"{script}.py"), "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout and "--json" in done.stdout


def test_storage_benchmark_writes_its_figures(tmp_path):
    out = tmp_path / "storage.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "storage.py"), "--quick",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    for name in ("encode_records_per_s", "append_mb_per_s", "raw_write_mb_per_s",
                 "read_records_per_s", "read_arrow_records_per_s"):
        assert figures[name] > 0, name
    assert "| (c) read to Arrow |" in done.stdout
