"""Opening a partition log of many segments, the code before a change and after it: seconds,
and how often the opening lists its directory.

Run from the repository root (no Ray cluster)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/log_opening.py [--quick] [--json PATH] \\
        [--before REV]

Both variants are measured in one run, alternated: **after** is the working tree, **before**
the code at ``--before`` (default ``merge-preview``: what opening a log was before it listed
its directory once; pass the commit to compare with), taken with ``git archive`` into the
scratch directory. Each round runs each variant in a Python process of its own whose
``PYTHONPATH`` is the variant's tree.

Data: one log of 5,000 segments (``--quick``: 2,000) of one 1,000-byte batch each
(``segment_bytes`` 1,024: every append rolls), closed cleanly, in a scratch directory (its
files in the page cache). Measured: ``PartitionLog(directory, config)`` then ``close()``, as
a broker restarting after a clean shutdown does for each replica, in seconds on the clock
and in CPU seconds of the process (user and system: less swayed by a busy machine); per
round and variant the best of three, then the best (and the clock's median) of the rounds,
the variants in the order before, after, after, before, ...; and, in one more opening, the
calls that list the directory (``os.listdir``, ``os.scandir``, ``Path.iterdir``,
``Path.glob``; a listing made inside another counts once). ``open_speedup`` is the best
seconds before over after.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raylog.records import BatchBuilder, Codec
from raylog.storage import LogConfig, PartitionLog

from common import RESULTS_DIR, machine_info, markdown_table, run_benchmark, source_tree

CONFIG = LogConfig(segment_bytes=1024, retention_ms=None)
MODES = ({"name": "quick", "segments": 2000, "rounds": 5},
         {"name": "full", "segments": 5000, "rounds": 9})
OPENS = 3  # per round and variant, best of them
HERE = Path(__file__).resolve()


def write_log(directory: Path, segments: int) -> None:
    with PartitionLog(directory, CONFIG) as log:
        for i in range(segments):
            builder = BatchBuilder(1 << 20, codec=Codec.NONE)
            builder.append(1_767_225_600_000 + i, None, b"x" * 900)
            log.append(builder.build())
        if len(log.segments) < segments:
            raise RuntimeError(f"{len(log.segments)} segments, not {segments}")


@contextlib.contextmanager
def listings_counted() -> Iterator[list[str]]:
    """Record the calls that list a directory while the block runs (a listing made inside
    another, as ``Path.glob`` makes with ``os.scandir``, counts once)."""
    calls: list[str] = []
    depth = [0]
    real = {"listdir": os.listdir, "scandir": os.scandir, "iterdir": Path.iterdir,
            "glob": Path.glob}

    def counting(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not depth[0]:
                calls.append(name)
            depth[0] += 1
            try:
                result = fn(*args, **kwargs)
                return list(result) if name in ("glob", "iterdir") else result
            finally:
                depth[0] -= 1
        return wrapper

    os.listdir, os.scandir = counting("listdir", real["listdir"]), counting("scandir",
                                                                              real["scandir"])
    Path.iterdir, Path.glob = counting("iterdir", real["iterdir"]), counting("glob",
                                                                            real["glob"])
    try:
        yield calls
    finally:
        os.listdir, os.scandir = real["listdir"], real["scandir"]
        Path.iterdir, Path.glob = real["iterdir"], real["glob"]


def open_close(directory: Path) -> tuple[float, float]:
    """Seconds of an opening and closing of the log: on the clock, and of the process's CPU
    (user and system: less swayed by the other processes of a busy machine)."""
    started, cpu = time.perf_counter(), time.process_time()
    PartitionLog(directory, CONFIG).close()
    return time.perf_counter() - started, time.process_time() - cpu


def variant_main(directory: Path, opens: int) -> int:
    """``--variant DIR OPENS``: open the log ``opens`` times, then once counting its
    listings; print the seconds and the count as JSON."""
    seconds = [open_close(directory) for _ in range(opens)]
    with listings_counted() as calls:
        open_close(directory)
    print(json.dumps({"seconds": min(wall for wall, _ in seconds),
                      "cpu_seconds": min(cpu for _, cpu in seconds), "listings": calls}))
    return 0


def in_variant(tree: Path, directory: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(HERE), "--variant", str(directory), str(OPENS)],
                          env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree,
                          capture_output=True, text=True, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(mode: dict[str, Any], root: Path, before: str) -> dict[str, Any]:
    started = time.perf_counter()
    trees = {"before": source_tree(before, root), "after": HERE.parents[1]}
    directory = root / "log"
    write_log(directory, mode["segments"])
    open_close(directory)  # the files in the page cache
    best = {kind: {name: [] for name in trees} for kind in ("seconds", "cpu_seconds")}
    listings: dict[str, list[str]] = {}
    # Before, after, after, before, ...: a drift of the machine's load weighs on both alike.
    order = list(trees)
    for _ in range(mode["rounds"]):
        for name in order:
            answer = in_variant(trees[name], directory)
            for kind, seconds in best.items():
                seconds[name].append(answer[kind])
            listings[name] = answer["listings"]
        order.reverse()
    figures = {}
    for name in trees:
        figures[f"open_{name}_s"] = min(best["seconds"][name])
        figures[f"open_{name}_median_s"] = statistics.median(best["seconds"][name])
        figures[f"open_{name}_cpu_s"] = min(best["cpu_seconds"][name])
        figures[f"listings_{name}"] = len(listings[name])
    figures["open_speedup"] = figures["open_before_s"] / figures["open_after_s"]
    figures["open_cpu_speedup"] = figures["open_before_cpu_s"] / figures["open_after_cpu_s"]
    return {**figures, "segments": mode["segments"], "mode": mode["name"], "before": before,
            "listing_calls": listings, "rounds": best,
            "machine": machine_info(load_average_1m=os.getloadavg()[0]),
            "wall_seconds": time.perf_counter() - started}


def headline(mode: dict[str, Any], result: dict[str, Any]) -> str:
    return (f"opening a log of {result['segments']} segments ({mode['name']}), before "
            f"({result['before']}) and after: {result['open_speedup']:.2f}x on the clock, "
            f"{result['open_cpu_speedup']:.2f}x in CPU seconds")


def table(result: dict[str, Any]) -> str:
    def row(what: str, key: str, fmt: str) -> list[str]:
        return [what, format(result[key.format("before")], fmt),
                format(result[key.format("after")], fmt)]

    return markdown_table(["", "before", "after"], [
        row("open and close, best (s)", "open_{}_s", ".4f"),
        row("open and close, median of the rounds (s)", "open_{}_median_s", ".4f"),
        row("open and close, CPU seconds, best", "open_{}_cpu_s", ".4f"),
        row("directory listings in one opening", "listings_{}", "d"),
    ], "lrr")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--variant"]:
        return variant_main(Path(argv[1]), int(argv[2]))
    return run_benchmark(argv, __doc__, RESULTS_DIR / "log_opening.json",
                         "2,000 segments, 5 rounds (about a minute)", MODES, run,
                         headline, table, compare=True)


if __name__ == "__main__":
    sys.exit(main())
