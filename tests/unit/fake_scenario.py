"""A scenario for tests/unit/test_scenarios.py, run as ``python -m tests.unit.fake_scenario
NAME ROOT``: notes NAME in ROOT/ran and prints it (and $FAKE_SCENARIO_MARK) as JSON; a NAME
starting with ``fail`` says so on stderr and exits 1."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    name, root = sys.argv[1], Path(sys.argv[2])
    with open(root / "ran", "a") as ran:
        ran.write(name + "\n")
    if name.startswith("fail"):
        print(f"{name} went wrong", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"name": name, "root": str(root),
                      "mark": os.environ.get("FAKE_SCENARIO_MARK")}))
