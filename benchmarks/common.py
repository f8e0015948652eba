"""What every benchmark shares: timing, the test data, machine facts and the report.

Benchmarks are scripts, run from the repository root as ``.venv/bin/python benchmarks/x.py``.
Python puts a script's own directory first on ``sys.path``, so ``import common`` finds this
file with no path juggling; ``benchmarks/`` is deliberately not a package. (Running a
benchmark any other way, say ``python -m benchmarks.x``, does not put it there and fails
at that import.)

The data: every record is a 100-byte JSON page view with no key, for example (one line)::

    {"page":"/p/00001","user":40785657,"service":"web-7","ms":  41,"status":200,
     "sid":"e926a5fdbc79761"}

``page`` is Zipf-distributed over 100,000 pages (popular pages repeat), ``user`` is uniform
over 8-digit ids, ``service`` one of ten, ``ms`` log-normal (median 55, right-justified with
spaces, which JSON allows, so every record is exactly 100 bytes), ``status`` mostly 200, and
``sid`` random hex filling the rest. Values vary per record, so LZ4 does real work. The
generator is seeded: every run makes the same bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import crc32c
import lz4
import numpy as np
import pyarrow as pa

from raylog.util.progress import progress

RECORD_BYTES = 100
FIRST_TIMESTAMP_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SEED = 20260101
MB = 1_000_000
RESULTS_DIR = Path(__file__).resolve().parent / "results"
T = TypeVar("T")
M = TypeVar("M")


# -- timing ----------------------------------------------------------------------------------

@dataclasses.dataclass
class Timing:
    """Seconds of each timed repetition of one measurement over ``amount`` units of work."""

    amount: float
    seconds: list[float]

    @property
    def best_rate(self) -> float:
        return self.amount / min(self.seconds)

    @property
    def median_rate(self) -> float:
        return self.amount / statistics.median(self.seconds)


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Seconds ``fn`` takes, and what it returned."""
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def measure(fn: Callable[[], T], amount: float, repetitions: int) -> tuple[Timing, T]:
    """Run ``fn`` once to warm up, then ``repetitions`` times under the timer.

    Returns the timings and what the last run returned. Each run's result is freed before
    the next run starts, outside the clock, so every run starts with the same memory in use.
    """
    with progress(repetitions + 1, "measuring", "runs") as shown:
        seconds, result = [], fn()
        shown.update()
        for _ in range(repetitions):
            del result
            elapsed, result = timed(fn)
            seconds.append(elapsed)
            shown.update()
    return Timing(amount, seconds), result


def alternate(rounds: int, steps: dict[str, Callable[[], float]], *,
              warm_up: bool = True) -> dict[str, list[float]]:
    """Run each step once per round, in turn; the seconds of each of ``rounds`` rounds.

    Each step times itself and returns its seconds. Alternating keeps the steps of a
    comparison under the same load (the machine is shared). With ``warm_up``, one more
    round runs first and is not counted; without, the caller has warmed the steps up.
    """
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    with progress((rounds + warm_up) * len(steps), "measuring " + ", ".join(steps),
                  "runs") as shown:
        for i in range(rounds + warm_up):
            for name, step in steps.items():
                elapsed = step()
                shown.update()
                if i or not warm_up:  # round 0 is the warm-up
                    seconds[name].append(elapsed)
    return seconds


@contextlib.contextmanager
def input_frozen() -> Iterator[None]:
    """Keep the collector from rescanning the pre-generated input.

    The input (lists of millions of elements) lives through the whole run; every full
    collection would walk it, charging the measurements for the benchmark's own heap.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def embedded_cluster(data_dir: Path) -> Iterator[Any]:
    """``raylog.init(address="local", data_dir=data_dir)``: an embedded single-node Ray
    cluster whose node is a broker, yielded as its ``RaylogCluster``; on leaving, the
    clients' default cluster is forgotten, Ray shut down and the data directory's
    environment variable (which ``init`` set) removed. Ray and raylog's client are imported
    here, not by every benchmark importing this module."""
    import ray

    import raylog
    from raylog.client.connection import reset_default
    from raylog.util.cluster_names import DATA_DIR_ENV

    try:
        yield raylog.init(address="local", data_dir=data_dir)
    finally:
        reset_default()
        ray.shutdown()
        os.environ.pop(DATA_DIR_ENV, None)


# -- data ------------------------------------------------------------------------------------

# Literal bytes and (field, width) slots; "sid" takes whatever width makes RECORD_BYTES.
_LAYOUT: list[bytes | tuple[str, int]] = [
    b'{"page":"/p/', ("page", 5), b'","user":', ("user", 8), b',"service":"web-',
    ("service", 1), b'","ms":', ("ms", 4), b',"status":', ("status", 3), b',"sid":"',
    ("sid", 0), b'"}',
]
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def describe_data(timestamps: str) -> str:
    """One line for a benchmark's JSON: the values, and ``timestamps``, where they come from."""
    return (
        f"{RECORD_BYTES}-byte JSON page views, no key, no headers, {timestamps}; page Zipf(1.3) "
        "over 100,000 ids, user uniform 8-digit, service web-0..9, ms log-normal (median 55) "
        "space-padded, status 200/304/404/500 at 90/6/3/1 %, sid random hex to fill; numpy "
        f"seed {SEED}"
    )


# Records with pre-generated timestamps: +1 ms each from a fixed recent time.
DATA_DESCRIPTION = describe_data(f"timestamps +1 ms per record from {FIRST_TIMESTAMP_MS}")


def _slots() -> tuple[np.ndarray, dict[str, tuple[int, int]]]:
    """The record template and each field's (start, width) in it."""
    fixed = sum(len(p) if isinstance(p, bytes) else p[1] for p in _LAYOUT)
    template, slots = bytearray(), {}
    for part in _LAYOUT:
        if isinstance(part, bytes):
            template += part
            continue
        name, width = part
        width = width or RECORD_BYTES - fixed
        slots[name] = (len(template), width)
        template += b"0" * width
    if len(template) != RECORD_BYTES:
        raise ValueError(f"record layout makes {len(template)} bytes, not {RECORD_BYTES}")
    return np.frombuffer(bytes(template), np.uint8), slots


def _put_digits(rows: np.ndarray, start: int, width: int, numbers: np.ndarray,
                fill: str) -> None:
    """Write ``numbers`` right-justified in ``width`` columns, ``fill`` before the digits."""
    for k in range(width):
        digit = (ord("0") + (numbers // 10**k) % 10).astype(np.uint8)
        if k:
            digit[numbers < 10**k] = ord(fill)
        rows[:, start + width - 1 - k] = digit


def generate_values(n: int, seed: int = SEED) -> np.ndarray:
    """``n`` page-view records as an (n, RECORD_BYTES) uint8 array, one record per row."""
    rng = np.random.default_rng(seed)
    template, slots = _slots()
    rows = np.tile(template, (n, 1))
    fields = {
        "page": rng.zipf(1.3, n) % 100_000,
        "user": rng.integers(10_000_000, 100_000_000, n),
        "service": rng.integers(0, 10, n),
        "ms": np.clip(rng.lognormal(4.0, 1.0, n), 1, 9999).astype(np.int64),
        "status": rng.choice([200, 304, 404, 500], n, p=[0.9, 0.06, 0.03, 0.01]),
    }
    for name, numbers in fields.items():
        start, width = slots[name]
        # Page ids are strings and keep their zeros; JSON numbers get leading spaces.
        _put_digits(rows, start, width, numbers, "0" if name == "page" else " ")
    start, width = slots["sid"]
    rows[:, start:start + width] = _HEX[rng.integers(0, 16, (n, width), dtype=np.uint8)]
    return rows


def split_values(flat: bytes, size: int = RECORD_BYTES) -> list[bytes]:
    """Concatenated records (``generate_values(n).tobytes()``) as one bytes object of
    ``size`` bytes each."""
    return [flat[i:i + size] for i in range(0, len(flat), size)]


def binary_array(rows: np.ndarray) -> pa.BinaryArray:
    """The rows of a C-contiguous (n, RECORD_BYTES) uint8 array as an Arrow binary array
    that shares their memory (no copy)."""
    n = len(rows)
    offsets = np.arange(0, (n + 1) * RECORD_BYTES, RECORD_BYTES, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(rows)])


def digest(values: Iterable[bytes | memoryview],
           crc: Callable[[bytes | memoryview], int] = crc32c.crc32c) -> tuple[int, int]:
    """(count, sum of ``crc`` of each value): equal for equal multisets of values, whatever
    their order. CRC32C by default; pass ``zlib.crc32`` to compare with Spark SQL's ``crc32``."""
    count = total = 0
    for value in values:
        count += 1
        total += crc(value)
    return count, total


def binary_values(column: pa.Array | pa.ChunkedArray) -> Iterator[memoryview]:
    """The values of an Arrow binary column as memoryviews into its buffers, without a
    bytes object per value."""
    for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
        _, offsets, data = chunk.buffers()
        bounds = np.frombuffer(offsets, np.int32)[chunk.offset:chunk.offset + len(chunk) + 1]
        view = memoryview(data)
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            yield view[lo:hi]


# -- report ----------------------------------------------------------------------------------

def machine_info(**extra: Any) -> dict[str, Any]:
    """CPU, platform and library versions; ``extra`` adds or overrides entries."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "numpy": np.__version__,
        "lz4": lz4.__version__,
        "crc32c_hardware": bool(getattr(crc32c, "hardware_based", False)),
        **extra,
    }


def rate_figures(name: str, timing: Timing) -> dict[str, float]:
    """``name``: the best rate; ``name_median``: the median rate."""
    return {name: timing.best_rate, f"{name}_median": timing.median_rate}


def ratio_figures(seconds: Mapping[str, Sequence[float]], amount: float,
                  ratios: Mapping[str, tuple[str, str]]) -> dict[str, float]:
    """Each step's ``<step>_records_per_s`` (best) and ``..._median`` over ``amount`` records
    per run; then each ratio ``name: (ours, theirs)`` of two of those figures, best over best
    and median over median (``name`` and ``name_median``)."""
    figures: dict[str, float] = {}
    for name, secs in seconds.items():
        figures.update(rate_figures(f"{name}_records_per_s", Timing(amount, list(secs))))
    for ratio, (ours, theirs) in ratios.items():
        figures[ratio] = figures[ours] / figures[theirs]
        figures[f"{ratio}_median"] = figures[f"{ours}_median"] / figures[f"{theirs}_median"]
    return figures


def ratio_table(result: Mapping[str, Any], steps: Sequence[str], ratios: Iterable[str]) -> str:
    """The table of ``ratio_figures``: each step's records/s, then each ratio with its
    target; columns figure, best, median, target, met."""
    rows = []
    for name in steps:
        key = f"{name}_records_per_s"
        rows.append([name, f"{result[key]:,.0f}", f"{result[key + '_median']:,.0f}", "-", "-"])
    for ratio in ratios:
        rows.append([ratio, f"{result[ratio]:.2f}", f"{result[ratio + '_median']:.2f}",
                     *target_cells(ratio, result["targets"])])
    return markdown_table(["figure", "best", "median", "target", "met"], rows, "lrrrl")


def targets_report(figures: Mapping[str, float], targets: Mapping[str, float]
                   ) -> dict[str, dict[str, Any]]:
    """For each target (a minimum), the best figure and whether it reaches the target."""
    return {name: {"target": target, "value": figures[name], "met": figures[name] >= target}
            for name, target in targets.items()}


def target_cells(name: str, targets: Mapping[str, Mapping[str, Any]], scale: float = 1,
                 unit: str = "") -> tuple[str, str]:
    """The "target" and "met" cells of a table row; "-" for a figure without a target."""
    if name not in targets:
        return "-", "-"
    entry = targets[name]
    return (f">= {entry['target'] * scale:,.2f}{unit}",
            "met" if entry["met"] else "NOT MET")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """A Markdown table; ``align`` has one letter per column, "l" or "r"."""
    if any(len(cells) != len(align) for cells in (header, *rows)):
        raise ValueError(f"every row needs {len(align)} cells, one per alignment letter")
    rule = ["---:" if a == "r" else "---" for a in align]
    return "\n".join(f"| {' | '.join(cells)} |" for cells in (header, rule, *rows))


def result_document(figures: Mapping[str, float], targets: Mapping[str, float], *, mode: str,
                    data: Mapping[str, Any], sections: Mapping[str, Any],
                    machine: Mapping[str, Any], started: float,
                    load_at_start: tuple[float, float, float]) -> dict[str, Any]:
    """The JSON a benchmark writes, keys in this order: the figures, ``targets`` (each with
    its value and whether it is met), ``mode``, ``data`` (its description and sizes), the
    benchmark's own ``sections`` (such as config and seconds), ``machine`` (with the
    1-minute load average at start and end: the machine is shared) and ``wall_seconds``
    since ``started`` (a ``time.perf_counter()``)."""
    return {
        **figures,
        "targets": targets_report(figures, targets),
        "mode": mode,
        "data": dict(data),
        **sections,
        "machine": {**machine, "load_average_1m": {"start": load_at_start[0],
                                                   "end": os.getloadavg()[0]}},
        "wall_seconds": time.perf_counter() - started,
    }


def source_tree(revision: str, root: Path) -> Path:
    """The repository's code at ``revision`` (``git archive``), in a new directory under
    ``root``: a benchmark comparing two versions runs one of them with it on PYTHONPATH."""
    tree = Path(tempfile.mkdtemp(prefix="tree-", dir=root))
    archive = subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[1]), "archive",
                              revision], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


BEFORE = "merge-preview"  # what a comparing benchmark measures as "before" by default


def parse_args(doc: str, default_json: Path, quick_help: str,
               argv: list[str] | None = None, compare: bool = False) -> argparse.Namespace:
    """The options every benchmark takes: ``--quick`` and ``--json PATH``; with ``compare``
    also ``--before REV``, the code a benchmark of a change measures as "before"."""
    parser = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", type=Path, default=default_json, metavar="PATH",
                        help=f"where to write the results (default: {default_json})")
    if compare:
        parser.add_argument("--before", default=BEFORE, metavar="REV",
                            help=f"the commit whose code is measured as 'before' (default: "
                                 f"{BEFORE})")
    return parser.parse_args(argv)


def run_benchmark(argv: list[str] | None, doc: str, default_json: Path, quick_help: str,
                  modes: tuple[M, M], run: Callable[[M, Path], dict[str, Any]],
                  headline: Callable[[M, dict[str, Any]], str],
                  table: Callable[[dict[str, Any]], str],
                  notes: Callable[[dict[str, Any]], str] | None = None,
                  compare: bool = False) -> int:
    """A benchmark's ``main``: parse ``--quick``/``--json`` (and ``--before`` with
    ``compare``: then ``run`` is called with ``before=REV``), run the quick or full mode of
    ``modes`` in a scratch directory (removed afterwards), write the JSON and print the
    headline, the table and any notes."""
    args = parse_args(doc, default_json, quick_help, argv, compare)
    mode = modes[0] if args.quick else modes[1]
    root = Path(tempfile.mkdtemp(prefix="raylog-bench-"))
    try:
        result = run(mode, root, before=args.before) if compare else run(mode, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    write_json(args.json, result)
    print(headline(mode, result) + "\n")
    print(table(result))
    if notes is not None:
        print("\n" + notes(result))
    print(f"\nwrote {args.json} ({result['wall_seconds']:.1f} s)")
    return 0
