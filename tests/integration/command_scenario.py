"""Commands that start an embedded cluster of their own, run as scenarios (scenarios.py) so
that they run while the unit tests do: ``python -m tests.integration.command_scenario NAME
ROOT`` runs the command NAME names, with the deadline its test gave it, and prints its exit
status, output and errors as JSON (its test judges them; a command past its deadline is a
failed scenario).

- ``demo-embedded``: ``raylog demo --embedded`` (test_demo.py).
- ``transactions-benchmark``: ``benchmarks/transactions.py --quick``, its figures written to
  ROOT/transactions.json (test_benchmark_transactions.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
TRANSACTIONS_JSON = "transactions.json"  # in the scenario's directory


def command(name: str, root: Path) -> tuple[list[str], float]:
    """The command NAME runs, and its deadline in seconds."""
    if name == "demo-embedded":
        return [os.path.join(os.path.dirname(sys.executable), "raylog"), "demo", "--embedded",
                "--services", "2", "--records", "2000"], 300
    if name == "transactions-benchmark":
        return [sys.executable, str(REPOSITORY / "benchmarks" / "transactions.py"), "--quick",
                "--json", str(root / TRANSACTIONS_JSON)], 600
    raise ValueError(f"no command named {name!r}")


def main(name: str, root: Path) -> None:
    argv, timeout_s = command(name, root)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    print(json.dumps({"returncode": done.returncode, "stdout": done.stdout,
                      "stderr": done.stderr}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
