"""Storage-layer benchmark: encoding batches, appending them to a partition log, reading back.

Run from the repository root::

    .venv/bin/python benchmarks/storage.py [--quick] [--json PATH]

``--quick`` (1.5 million records) finishes in well under a minute on a 2-core machine; the
full run (10 million records) takes a few minutes. The script prints a Markdown table and
writes JSON (default ``benchmarks/results/storage.json``).

Data: every record is a 100-byte JSON page view with no key, for example (one line)::

    {"page":"/p/00001","user":40785657,"service":"web-7","ms":  41,"status":200,
     "sid":"e926a5fdbc79761"}

``page`` is Zipf-distributed over 100,000 pages (popular pages repeat), ``user`` is uniform
over 8-digit ids, ``service`` one of ten, ``ms`` log-normal (median 55, right-justified with
spaces, which JSON allows, so every record is exactly 100 bytes), ``status`` mostly 200, and
``sid`` random hex filling the rest. Values vary per record, so LZ4 does real work. Timestamps
increase by 1 ms per record from a fixed recent time. Values and timestamps are generated
before any timing (seeded, so every run encodes the same bytes).

Measurements (each: one warm-up, then the best and the median of N timed repetitions,
``time.perf_counter``). The garbage collector stays on, as in a real process, but the
pre-generated input is frozen out of it (``gc.freeze``): otherwise every full collection
would walk its millions of list entries and charge the benchmark's own heap to raylog.

(a) encoding, records/s: the producer's per-record path, ``BatchBuilder(max_bytes=1 MiB)``
    ``.append(timestamp, None, value)`` per record and ``build()`` when full; and, separately,
    the columnar path, ``raylog.records.payload.encode`` of ready Arrow record batches (the
    same record counts per batch; building the Arrow arrays is not timed).
(b) appending the batches from (a) to a fresh ``PartitionLog`` (256 MiB segments, no
    retention, a clock fixed at the records' first timestamp so time-based rolling never
    fires), MB/s with MB = 10**6 bytes; and the raw rate of writing the same bytes to a plain
    file in the same temporary directory with one ``os.write`` per batch. Neither fsyncs:
    opening (the log fsyncs its checkpoint) and closing are outside the timed region, and
    logs are removed with ``PartitionLog.delete``, which does not flush. Raw and append
    rounds alternate, their order flipping each round, because the machine is shared.
(c) reading the whole log written by the last round of (b), records/s: into Python records
    (``read_records`` over ``log.read`` chunks of 1 MiB, each chunk's records dropped before
    the next read, as a consumer would) and into Arrow (``log.read_range`` + ``read_table``
    per chunk, concatenated). The log was just written, so reads come from the page cache:
    these figures measure verifying and decoding, not the disk.
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
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import crc32c
import lz4
import numpy as np
import pyarrow as pa

from raylog.records import PAYLOAD_SCHEMA, BatchBuilder, parse_header, read_records, read_table
from raylog.records.payload import empty_headers, encode
from raylog.storage import LogConfig, PartitionLog

RECORD_BYTES = 100
BATCH_MAX_BYTES = 1 << 20
SEGMENT_BYTES = 256 << 20
READ_MAX_BYTES = 1 << 20
FIRST_TIMESTAMP_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SEED = 20260101
MB = 1_000_000
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "storage.json"
T = TypeVar("T")

TARGETS = {  # figure -> minimum for this (2-core) machine
    "encode_records_per_s": 3_000_000,
    "append_ratio_vs_raw": 0.70,
    "read_records_per_s": 2_000_000,
    "read_arrow_records_per_s": 20_000_000,
}


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    records: int
    repetitions: int    # timed repetitions per measurement, after one warm-up
    append_rounds: int  # timed raw/append pairs, after one warm-up pair


QUICK = Mode("quick", records=1_500_000, repetitions=3, append_rounds=9)
FULL = Mode("full", records=10_000_000, repetitions=3, append_rounds=7)


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
    seconds, result = [], fn()
    for _ in range(repetitions):
        del result
        elapsed, result = timed(fn)
        seconds.append(elapsed)
    return Timing(amount, seconds), result


# -- data ------------------------------------------------------------------------------------

# Literal bytes and (field, width) slots; "sid" takes whatever width makes RECORD_BYTES.
_LAYOUT: list[bytes | tuple[str, int]] = [
    b'{"page":"/p/', ("page", 5), b'","user":', ("user", 8), b',"service":"web-',
    ("service", 1), b'","ms":', ("ms", 4), b',"status":', ("status", 3), b',"sid":"',
    ("sid", 0), b'"}',
]
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
DATA_DESCRIPTION = (
    f"{RECORD_BYTES}-byte JSON page views, no key, no headers, timestamps +1 ms per record from "
    f"{FIRST_TIMESTAMP_MS}; page Zipf(1.3) over 100,000 ids, user uniform 8-digit, service "
    "web-0..9, ms log-normal (median 55) space-padded, status 200/304/404/500 at "
    f"90/6/3/1 %, sid random hex to fill; numpy seed {SEED}"
)


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


@dataclasses.dataclass
class Dataset:
    """Pre-generated input: the values as one array and as Python bytes, and timestamps."""

    rows: np.ndarray          # (n, RECORD_BYTES) uint8
    values: list[bytes]
    timestamps: list[int]

    @classmethod
    def generate(cls, n: int) -> Dataset:
        flat = generate_values(n).tobytes()
        rows = np.frombuffer(flat, np.uint8).reshape(n, RECORD_BYTES)  # a view: no third copy
        values = [flat[i:i + RECORD_BYTES] for i in range(0, len(flat), RECORD_BYTES)]
        timestamps = list(range(FIRST_TIMESTAMP_MS, FIRST_TIMESTAMP_MS + n))
        return cls(rows, values, timestamps)

    def __len__(self) -> int:
        return len(self.values)

    def record_batch(self, lo: int, hi: int) -> pa.RecordBatch:
        """Records [lo, hi) as payload columns, sharing the value bytes with ``rows``."""
        n = hi - lo
        offsets = np.arange(0, (n + 1) * RECORD_BYTES, RECORD_BYTES, dtype=np.int32)
        values = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(self.rows[lo:hi])])
        timestamps = pa.array(np.arange(self.timestamps[lo], self.timestamps[lo] + n))
        return pa.RecordBatch.from_arrays(
            [timestamps, pa.nulls(n, pa.binary()), values, empty_headers(n)],
            schema=PAYLOAD_SCHEMA)


# -- (a) encoding ----------------------------------------------------------------------------

def encode_per_record(timestamps: Sequence[int], values: Sequence[bytes]) -> list[bytes]:
    """Batches as a producer makes them: one append per record, build when full."""
    batches = []
    builder = BatchBuilder(max_bytes=BATCH_MAX_BYTES)
    append = builder.append
    for timestamp, value in zip(timestamps, values, strict=True):
        if not append(timestamp, None, value):
            batches.append(builder.build())
            builder = BatchBuilder(max_bytes=BATCH_MAX_BYTES)
            append = builder.append
            append(timestamp, None, value)
    batches.append(builder.build())
    return batches


def encode_columnar(columns: Sequence[pa.RecordBatch]) -> list[bytes]:
    return [encode(batch) for batch in columns]


def columnar_input(data: Dataset, batches: Sequence[bytes]) -> list[pa.RecordBatch]:
    """Arrow record batches with the same record counts as ``batches``."""
    out, lo = [], 0
    for batch in batches:
        hi = lo + parse_header(batch).record_count
        out.append(data.record_batch(lo, hi))
        lo = hi
    return out


# -- (b) appending ---------------------------------------------------------------------------

def fixed_clock() -> int:
    return FIRST_TIMESTAMP_MS


def open_log(directory: Path) -> PartitionLog:
    config = LogConfig(segment_bytes=SEGMENT_BYTES, retention_ms=None)
    return PartitionLog(directory, config, clock=fixed_clock)


def append_all(log: PartitionLog, batches: Sequence[bytes]) -> None:
    append = log.append
    for batch in batches:
        append(batch)


def write_all(fd: int, batches: Sequence[bytes]) -> None:
    for batch in batches:
        if os.write(fd, batch) != len(batch):
            raise OSError(f"short write of a {len(batch)}-byte batch")


def run_append(directory: Path, batches: Sequence[bytes]) -> tuple[float, PartitionLog]:
    """Seconds to append ``batches`` to a new log in ``directory``; the log, still open."""
    log = open_log(directory)
    seconds, _ = timed(lambda: append_all(log, batches))
    expected = sum(len(b) for b in batches)
    if log.size_bytes != expected:
        raise RuntimeError(f"log holds {log.size_bytes} bytes after appending {expected}")
    return seconds, log


def run_raw(directory: Path, batches: Sequence[bytes]) -> float:
    """Seconds to write ``batches`` to a new plain file in ``directory``, one write each."""
    directory.mkdir()
    fd = os.open(directory / "raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        return timed(lambda: write_all(fd, batches))[0]
    finally:
        os.close(fd)
        shutil.rmtree(directory)


@dataclasses.dataclass
class AppendResult:
    raw: Timing
    append: Timing
    log: PartitionLog  # written by the last append round, left open for reading

    @property
    def paired_ratios(self) -> list[float]:
        """append/raw rate of each round (raw seconds over append seconds)."""
        return [r / a for r, a in zip(self.raw.seconds, self.append.seconds, strict=True)]


def measure_append(root: Path, batches: Sequence[bytes], rounds: int) -> AppendResult:
    """Alternate raw writes and log appends, one warm-up pair and ``rounds`` timed pairs."""
    total_mb = sum(len(b) for b in batches) / MB
    timings = {"raw": Timing(total_mb, []), "append": Timing(total_mb, [])}
    log = None
    for i in range(rounds + 1):
        if log is not None:
            log.delete()
        for step in ("raw", "append") if i % 2 == 0 else ("append", "raw"):
            directory = root / f"round-{i}-{step}"
            if step == "raw":
                seconds = run_raw(directory, batches)
            else:
                seconds, log = run_append(directory, batches)
            if i:  # round 0 is the warm-up
                timings[step].seconds.append(seconds)
    return AppendResult(timings["raw"], timings["append"], log)


# -- (c) reading -----------------------------------------------------------------------------

def read_python(log: PartitionLog) -> int:
    """Read the whole log as Python records, chunk by chunk; return how many."""
    count, offset, end = 0, log.log_start_offset, log.log_end_offset
    while offset < end:
        records = read_records(log.read(offset, READ_MAX_BYTES))
        count += len(records)
        offset = records[-1].offset + 1
    return count


def read_arrow(log: PartitionLog) -> pa.Table:
    chunks = log.read_range(log.log_start_offset, log.log_end_offset)
    return pa.concat_tables([read_table(chunk) for chunk in chunks])


def check_reads(log: PartitionLog, data: Dataset) -> None:
    """Refuse to report read rates of reads that lose or alter records."""
    if (count := read_python(log)) != len(data):
        raise RuntimeError(f"read {count} records back, wrote {len(data)}")
    table = read_arrow(log)
    if table.num_rows != len(data) or table.column("value")[-1].as_py() != data.values[-1]:
        raise RuntimeError("the Arrow read does not match what was written")


# -- report ----------------------------------------------------------------------------------

def machine_info() -> dict[str, Any]:
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
    }


def rate_figures(name: str, timing: Timing) -> dict[str, float]:
    return {name: timing.best_rate, f"{name}_median": timing.median_rate}


def targets_report(figures: dict[str, float]) -> dict[str, dict[str, Any]]:
    return {name: {"target": target, "value": figures[name], "met": figures[name] >= target}
            for name, target in TARGETS.items()}


ROWS = [  # (figure, label, unit, scale)
    ("encode_records_per_s", "(a) encode, per-record BatchBuilder", "M records/s", 1e-6),
    ("encode_columnar_records_per_s", "(a) encode, columnar payload.encode", "M records/s",
     1e-6),
    ("raw_write_mb_per_s", "(b) raw os.write of the same bytes", "MB/s", 1),
    ("append_mb_per_s", "(b) PartitionLog.append", "MB/s", 1),
    ("append_ratio_vs_raw", "(b) append / raw", "ratio", 1),
    ("read_records_per_s", "(c) read to Python records", "M records/s", 1e-6),
    ("read_arrow_records_per_s", "(c) read to Arrow", "M records/s", 1e-6),
]


def markdown_table(figures: dict[str, float], targets: dict[str, dict[str, Any]]) -> str:
    lines = ["| measurement | best | median | unit | target | met |",
             "| --- | ---: | ---: | --- | ---: | --- |"]
    for name, label, unit, scale in ROWS:
        target, met = "-", "-"
        if name in targets:
            target = f">= {targets[name]['target'] * scale:,.2f}"
            met = "met" if targets[name]["met"] else "NOT MET"
        best, median = figures[name] * scale, figures[f"{name}_median"] * scale
        lines.append(f"| {label} | {best:,.2f} | {median:,.2f} | {unit} | {target} | {met} |")
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------

@dataclasses.dataclass
class Measurements:
    encode: Timing
    encode_columnar: Timing
    raw_write: Timing
    append: Timing
    append_paired_ratios: list[float]
    read_records: Timing
    read_arrow: Timing
    batches: list[bytes]

    def figures(self) -> dict[str, float]:
        return {
            **rate_figures("encode_records_per_s", self.encode),
            **rate_figures("encode_columnar_records_per_s", self.encode_columnar),
            **rate_figures("append_mb_per_s", self.append),
            **rate_figures("raw_write_mb_per_s", self.raw_write),
            "append_ratio_vs_raw": self.append.best_rate / self.raw_write.best_rate,
            "append_ratio_vs_raw_median": statistics.median(self.append_paired_ratios),
            **rate_figures("read_records_per_s", self.read_records),
            **rate_figures("read_arrow_records_per_s", self.read_arrow),
        }

    def seconds(self) -> dict[str, list[float]]:
        return {field.name: value.seconds for field in dataclasses.fields(self)
                if isinstance(value := getattr(self, field.name), Timing)}


def measure_all(mode: Mode, data: Dataset, root: Path) -> Measurements:
    encoding, batches = measure(lambda: encode_per_record(data.timestamps, data.values),
                                len(data), mode.repetitions)
    columns = columnar_input(data, batches)
    columnar, _ = measure(lambda: encode_columnar(columns), len(data), mode.repetitions)
    appended = measure_append(root, batches, mode.append_rounds)
    log = appended.log
    try:
        check_reads(log, data)
        reading, _ = measure(lambda: read_python(log), len(data), mode.repetitions)
        arrow, _ = measure(lambda: read_arrow(log), len(data), mode.repetitions)
    finally:
        log.delete()
    return Measurements(encoding, columnar, appended.raw, appended.append,
                        appended.paired_ratios, reading, arrow, batches)


@contextlib.contextmanager
def input_frozen() -> Iterator[None]:
    """Keep the collector from rescanning the pre-generated input.

    The input (two lists of millions of elements) lives through the whole run; every full
    collection would walk it, charging the measurements for the benchmark's own heap.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load_at_start = time.perf_counter(), os.getloadavg()
    data = Dataset.generate(mode.records)
    with input_frozen():
        measured = measure_all(mode, data, root)
    figures = measured.figures()
    total_bytes = sum(len(b) for b in measured.batches)
    return {
        **figures,
        "targets": targets_report(figures),
        "mode": mode.name,
        "data": {
            "description": DATA_DESCRIPTION,
            "example_value": data.values[0].decode(),
            "records": len(data),
            "record_bytes": RECORD_BYTES,
            "batch_max_bytes": BATCH_MAX_BYTES,
            "batches": len(measured.batches),
            "records_per_batch": len(data) / len(measured.batches),
            "total_bytes": total_bytes,
            "value_bytes_per_encoded_byte": len(data) * RECORD_BYTES / total_bytes,
        },
        "config": {
            "segment_bytes": SEGMENT_BYTES,
            "retention_ms": None,
            "read_max_bytes": READ_MAX_BYTES,
            "temp_dir": str(root),
            "repetitions": mode.repetitions,
            "append_rounds": mode.append_rounds,
            "warmups": 1,
            "input_gc_frozen": True,
        },
        "seconds": measured.seconds(),
        # The machine is shared: the 1-minute load average says how busy it was.
        "machine": {**machine_info(), "load_average_1m": {"start": load_at_start[0],
                                                          "end": os.getloadavg()[0]}},
        "wall_seconds": time.perf_counter() - started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.records:,} records instead of {FULL.records:,}")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, metavar="PATH",
                        help=f"where to write the results (default: {DEFAULT_JSON})")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    root = Path(tempfile.mkdtemp(prefix="raylog-bench-"))
    try:
        result = run(mode, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    data = result["data"]
    print(f"storage benchmark, {mode.name} mode: {data['records']:,} records of "
          f"{RECORD_BYTES} bytes in {data['batches']} batches, {data['total_bytes'] / MB:,.1f} MB "
          f"encoded; {result['machine']['cpu_count']} CPUs, Python {platform.python_version()}, "
          f"pyarrow {pa.__version__}\n")
    print(markdown_table(result, result["targets"]))
    print(f"\nwrote {args.json} ({result['wall_seconds']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
