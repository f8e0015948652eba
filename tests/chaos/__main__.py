"""``python -m tests.chaos --seed S [--minutes N] [--faults a,b] [--out DIR]``: one chaos run
(tests/chaos/run.py) on a cluster of its own; prints the schedule as it goes, then the
anomalies, and writes the whole report to DIR/report.json. Exit status 0: no anomaly;
1: anomalies; 2: the run itself failed (its traceback is in the report).

Run it from the repository's root with ``PYTHONPATH=$PWD`` (the Ray workers import the
tests' actors from there), through /work/wt/cluster-run on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import traceback
from pathlib import Path

from tests import history
from tests.chaos.run import replay_command, run
from tests.chaos.schedule import FAULTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, required=True, help="the schedule's seed")
    parser.add_argument("--minutes", type=float, default=0,
                        help="how long faults go on (at least one round of every kind; "
                             "0: one round, a few minutes in all)")
    parser.add_argument("--faults", default=None,
                        help=f"comma-separated kinds to use (default all): {', '.join(FAULTS)}")
    parser.add_argument("--out", type=Path, default=None,
                        help="the run's directory (data, member logs, report.json); "
                             "default a new temporary one")
    args = parser.parse_args(argv)
    kinds = args.faults.split(",") if args.faults else None
    out = args.out or Path(tempfile.mkdtemp(prefix=f"raylog-chaos-{args.seed}-"))
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")

    def say(text: str) -> None:
        print(text, flush=True)

    try:
        report = run(args.seed, args.minutes, out, kinds, say=say)
    except BaseException as e:  # the report says how the run itself failed
        report = {"seed": args.seed, "minutes": args.minutes, "kinds": kinds,
                  "replay": replay_command(args.seed, args.minutes, kinds),
                  "error": "".join(traceback.format_exception(e))}
    report["dir"] = str(out)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=repr))
    anomalies = [history.Anomaly(**a) for a in report.get("anomalies", [])]
    if "error" in report:
        say(f"chaos seed {args.seed}: the run failed:\n{report['error']}")
    elif anomalies:
        say(f"chaos seed {args.seed}: {len(anomalies)} anomalies: {history.summary(anomalies)}")
    else:
        say(f"chaos seed {args.seed}: no anomaly ({report['counts']})")
    say(f"report: {out / 'report.json'}; replay: {report['replay']}")
    return 2 if "error" in report else 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
