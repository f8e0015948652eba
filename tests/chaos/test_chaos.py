"""The chaos suite: a seeded schedule of faults while producers, a consumer and a consumer
group work, and the history check of what they saw (docs/chaos.md).

Each run is a process of its own with a cluster of its own (``python -m tests.chaos``): it
kills and removes nodes and pauses processes, which the session's shared cluster must not
suffer. Select it with ``-m chaos``, skip it with ``-m "not chaos"``.
"""

from __future__ import annotations

import pytest

from tests import history
from tests.chaos.scenario import run_chaos
from tests.chaos.schedule import FAULTS


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
    planned = request.node.get_closest_marker("scenario")
    if planned is not None:  # run early, on the scenario thread (tests/chaos/scenario.py)
        report = request.getfixturevalue("scenarios").result(planned.args[0].name)
    else:
        report = run_chaos(chaos_seed, request.config.getoption("--minutes"),
                           tmp_path / f"seed-{chaos_seed}")
    assert "error" not in report, f"chaos seed {chaos_seed}: the run failed " \
        f"(replay: {report['replay']}):\n{report['error'][-6000:]}"
    assert not report["anomalies"], failure_message(report)
    # It did what it says: every kind of fault applied once at least, and load flowed.
    applied = {a["step"].split()[2] for a in report["applied"] if not a["error"]}
    assert applied == set(FAULTS), f"seed {chaos_seed}: not applied: {set(FAULTS) - applied}" \
        f"\n{failure_message(report)}"
    assert report["counts"]["acknowledged"] > 1000 and report["counts"]["group_processed"]
