"""The other benchmark scripts' sections of the generated benchmarks/RESULTS.md.

Each script writes its JSON to ``benchmarks/results/<script>.json``; when that file exists,
its section is the script's own headline and table, rendered from the JSON by the script's
``headline`` and ``table`` functions. Otherwise the section says how to produce it. Nothing
here holds a figure of its own.
"""

from __future__ import annotations

import datetime
import importlib
import json
from pathlib import Path

from common import RESULTS_DIR

SCRIPTS = ("storage", "produce_consume", "groups", "replication", "density", "broker_scaling",
           "schemas", "analytics", "mirror", "controller_restart", "compaction", "gateway")


def other_sections(results_dir: Path = RESULTS_DIR) -> list[str]:
    """One Markdown section per script, from its latest JSON when there is one."""
    sections = []
    for name in SCRIPTS:
        path = results_dir / f"{name}.json"
        command = f"python benchmarks/{name}.py --quick"
        if not path.exists():
            sections.append(f"### `{command}`\n\nNo `benchmarks/results/{name}.json` when this "
                            f"was published: run the script and publish again. Its earlier "
                            f"figures are in [`docs/performance.md`](../docs/performance.md).\n")
            continue
        result = json.loads(path.read_text())
        module = importlib.import_module(name)
        mode = {m.name: m for m in (module.QUICK, module.FULL)}[result["mode"]]
        when = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC)
        load = result.get("machine", {}).get("load_average_1m", {})
        parts = [f"### `{command.replace('--quick', '--' + mode.name)}`", "",
                 f"{module.headline(mode, result)} (written {when:%Y-%m-%d %H:%M} UTC; load "
                 f"average {load.get('start', float('nan')):.2f} at start)", "",
                 module.table(result)]
        if hasattr(module, "notes"):
            parts += ["", module.notes(result)]
        sections.append("\n".join(parts) + "\n")
    return sections
