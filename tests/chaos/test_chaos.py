"""The chaos suite: a seeded schedule of faults while producers, a consumer and a consumer
group work, and the history check of what they saw (docs/chaos.md).

Each run is a process of its own with a cluster of its own (``python -m tests.chaos``): it
kills and removes nodes and pauses processes, which the session's shared cluster must not
suffer. Select it with ``-m chaos``, skip it with ``-m "not chaos"``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import history
from tests.chaos.processes import resume_left_paused
from tests.chaos.schedule import FAULTS

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 840  # setup, one round of faults, recovery and the checks, on a busy host


def run_chaos(seed: int, minutes: float, out: Path) -> dict:
    """``python -m tests.chaos`` in a process group of its own; its report. Killed (with
    every process of its cluster) if it outlasts its time; whatever it left paused is
    resumed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    env.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-m", "tests.chaos", "--seed", str(seed), "--minutes",
               str(minutes), "--out", str(out)]
    with open(out.parent / f"chaos-{seed}.log", "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            process.wait(timeout=RUN_TIMEOUT_S + 120 * minutes)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # Ray's processes are in its group
            process.wait(timeout=60)
        finally:
            resume_left_paused(out / "paused.json")
    output = (out.parent / f"chaos-{seed}.log").read_text()
    report_file = out / "report.json"
    assert report_file.exists(), f"chaos seed {seed}: the run ended (status " \
        f"{process.returncode}) without a report:\n{output[-6000:]}"
    return json.loads(report_file.read_text())


def failure_message(report: dict) -> str:
    anomalies = [history.Anomaly(**a) for a in report.get("anomalies", [])]
    applied = "\n".join(f"  {a['step']} -> began t+{a['began']} s {a['target']} {a['note']} "
                        f"{a['error']}".rstrip() + f"\n      ({a['partitions']})"
                        for a in report.get("applied", []))
    return (f"chaos seed {report['seed']} found {len(anomalies)} anomalies: "
            f"{history.summary(anomalies, limit=3)}\n"
            f"faults as applied:\n{applied}\n"
            f"replay: {report['replay']}\nreport: {report.get('dir')}/report.json")


@pytest.mark.chaos
@pytest.mark.cluster
def test_a_seeded_schedule_of_faults_leaves_no_anomaly(chaos_seed, tmp_path, request):
    minutes = request.config.getoption("--minutes")
    report = run_chaos(chaos_seed, minutes, tmp_path / f"seed-{chaos_seed}")
    assert "error" not in report, f"chaos seed {chaos_seed}: the run failed " \
        f"(replay: {report['replay']}):\n{report['error'][-6000:]}"
    assert not report["anomalies"], failure_message(report)
    # It did what it says: every kind of fault applied once at least, and load flowed.
    applied = {a["step"].split()[2] for a in report["applied"] if not a["error"]}
    assert applied == set(FAULTS), f"seed {chaos_seed}: not applied: {set(FAULTS) - applied}" \
        f"\n{failure_message(report)}"
    assert report["counts"]["acknowledged"] > 1000 and report["counts"]["group_processed"]
