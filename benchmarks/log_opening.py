"""Opening a partition log of many segments: seconds, and how often it lists its directory.

Run from the repository root (no Ray cluster)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/log_opening.py [--quick] [--json PATH]

Data: one log of 5,000 segments (``--quick``: 2,000) of one 1,000-byte batch each
(``segment_bytes`` 1,024: every append rolls), closed cleanly, in a scratch directory (its
files in the page cache). Measured: ``PartitionLog(directory, config)`` and ``close()``, as a
broker restarting after a clean shutdown does for each replica, best and median of the
rounds; and, in one more open, the calls that list the directory (``os.listdir``,
``os.scandir``, ``Path.iterdir`` and ``Path.glob``, counted by wrapping them).

To compare two versions of the storage code, run the script with each on ``PYTHONPATH``:
it uses only ``PartitionLog``'s public API. The figures are for one machine and one moment
(the machine is shared): compare them within a run, or across runs close in time.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raylog.records import BatchBuilder, Codec
from raylog.storage import LogConfig, PartitionLog

from common import RESULTS_DIR, machine_info, markdown_table, run_benchmark

CONFIG = LogConfig(segment_bytes=1024, retention_ms=None)
MODES = ({"name": "quick", "segments": 2000, "rounds": 5},
         {"name": "full", "segments": 5000, "rounds": 9})


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


def open_close(directory: Path) -> float:
    started = time.perf_counter()
    PartitionLog(directory, CONFIG).close()
    return time.perf_counter() - started


def run(mode: dict[str, Any], root: Path) -> dict[str, Any]:
    started = time.perf_counter()
    directory = root / "log"
    write_log(directory, mode["segments"])
    open_close(directory)  # warm-up: the files in the page cache
    seconds = [open_close(directory) for _ in range(mode["rounds"])]
    with listings_counted() as calls:
        open_close(directory)
    return {"open_s": min(seconds), "open_median_s": statistics.median(seconds),
            "directory_listings": len(calls), "listing_calls": calls,
            "segments": mode["segments"], "mode": mode["name"], "seconds": seconds,
            "machine": machine_info(load_average_1m=os.getloadavg()[0]),
            "wall_seconds": time.perf_counter() - started}


def headline(mode: dict[str, Any], result: dict[str, Any]) -> str:
    return (f"opening a log of {result['segments']} segments ({mode['name']}): "
            f"{result['open_s']:.3f} s best, {result['directory_listings']} listings")


def table(result: dict[str, Any]) -> str:
    return markdown_table(["", "value"], [
        ["open and close, best (s)", f"{result['open_s']:.4f}"],
        ["open and close, median (s)", f"{result['open_median_s']:.4f}"],
        ["directory listings in one open", str(result["directory_listings"])],
    ], "lr")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, RESULTS_DIR / "log_opening.json",
                         "2,000 segments, 5 rounds (about half a minute)", MODES, run,
                         headline, table)


if __name__ == "__main__":
    sys.exit(main())
