"""One chaos run, the way its test starts it, as a scenario (tests/integration/scenarios.py):
``python -m tests.chaos.scenario chaos-seed-S ROOT`` runs ``python -m tests.chaos --seed S``
with ROOT/seed-S as its directory and prints its report as JSON (test_chaos.py judges it).

``make test`` runs a seed this way so that its minutes of faults go by on the scenario
thread, after the other scenarios, while the integration tests run: the run has a cluster
and a process of its own either way, and the thread still runs one scenario at a time. Its
cluster now runs beside the integration tests' one, as the other scenarios' clusters do (it
found no anomaly so in two runs at load 15-46). A soak (``--minutes``) runs in its test as
before.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.chaos.processes import resume_left_paused

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 840  # setup, one round of faults, recovery and the checks, on a busy host
PREFIX = "chaos-seed-"  # a scenario's name: PREFIX and the seed


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


def main(name: str, root: Path) -> None:
    seed = int(name.removeprefix(PREFIX))
    print(json.dumps(run_chaos(seed, 0, root / f"seed-{seed}")))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
