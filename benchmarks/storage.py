"""Storage-layer benchmark: encoding batches, appending them to a partition log, reading back.

Run from the repository root::

    .venv/bin/python benchmarks/storage.py [--quick] [--json PATH]

``--quick`` (1.5 million records) finishes in well under a minute on a 2-core machine; the
full run (10 million records) takes a few minutes. The script prints a Markdown table and
writes JSON (default ``benchmarks/results/storage.json``).

Data: the 100-byte JSON page views of ``common.py`` (seeded, so every run encodes the same
bytes), with timestamps increasing by 1 ms per record from a fixed recent time, all generated
before any timing.

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
    fires), MB/s with MB = 10**6 bytes; the same appends with ``verify_payload=False``,
    which skips the leader's payload check (one LZ4 decompression, an Arrow stream read and
    a timestamp min/max per batch: what a producer's batch costs beyond its CRC); and the
    raw rate of writing the same bytes to a plain file in the same temporary directory with
    one ``os.write`` per batch. None fsyncs: opening (the log fsyncs its checkpoint) and
    closing are outside the timed region, and logs are removed with
    ``PartitionLog.delete``, which does not flush. Raw, checked and unchecked rounds
    alternate, their order rotating each round, because the machine is shared. Two ratios
    compare the checked append with the unchecked one: of the appends alone, and of the
    produce path on one core: encoding from (a), per-record or columnar, plus the append
    (best times, and median times for the median).
(c) reading the whole log written by the last round of (b), records/s: into Python records
    (``read_records`` over ``log.read`` chunks of 1 MiB, each chunk's records dropped before
    the next read, as a consumer would) and into Arrow (``log.read_range`` + ``read_table``
    per chunk, concatenated). The log was just written, so reads come from the page cache:
    these figures measure verifying and decoding, not the disk.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from raylog.records import PAYLOAD_SCHEMA, BatchBuilder, parse_header, read_records, read_table
from raylog.records.payload import empty_headers, encode
from raylog.storage import LogConfig, PartitionLog

from common import (
    DATA_DESCRIPTION,
    FIRST_TIMESTAMP_MS,
    MB,
    RECORD_BYTES,
    RESULTS_DIR,
    Timing,
    binary_array,
    generate_values,
    input_frozen,
    machine_info,
    markdown_table,
    measure,
    rate_figures,
    result_document,
    run_benchmark,
    split_values,
    target_cells,
    timed,
)

BATCH_MAX_BYTES = 1 << 20
SEGMENT_BYTES = 256 << 20
READ_MAX_BYTES = 1 << 20
DEFAULT_JSON = RESULTS_DIR / "storage.json"

TARGETS = {  # figure -> minimum for this (2-core) machine
    "encode_records_per_s": 3_000_000,
    "append_ratio_vs_raw": 0.70,
    "produce_path_ratio_vs_unchecked": 0.90,  # the payload check costs at most 10%
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


# -- data ------------------------------------------------------------------------------------

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
        values = split_values(flat)
        timestamps = list(range(FIRST_TIMESTAMP_MS, FIRST_TIMESTAMP_MS + n))
        return cls(rows, values, timestamps)

    def __len__(self) -> int:
        return len(self.values)

    def record_batch(self, lo: int, hi: int) -> pa.RecordBatch:
        """Records [lo, hi) as payload columns, sharing the value bytes with ``rows``."""
        n = hi - lo
        values = binary_array(self.rows[lo:hi])
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


def append_all(log: PartitionLog, batches: Sequence[bytes], verify_payload: bool = True
               ) -> None:
    append = log.append
    for batch in batches:
        append(batch, verify_payload=verify_payload)


def write_all(fd: int, batches: Sequence[bytes]) -> None:
    for batch in batches:
        if os.write(fd, batch) != len(batch):
            raise OSError(f"short write of a {len(batch)}-byte batch")


def run_append(directory: Path, batches: Sequence[bytes], verify_payload: bool = True
               ) -> tuple[float, PartitionLog]:
    """Seconds to append ``batches`` to a new log in ``directory``; the log, still open."""
    log = open_log(directory)
    seconds, _ = timed(lambda: append_all(log, batches, verify_payload))
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


def paired(numerator: Timing, denominator: Timing) -> list[float]:
    """Per-round rate ratios numerator/denominator (denominator seconds over numerator's)."""
    return [d / n for n, d in zip(numerator.seconds, denominator.seconds, strict=True)]


@dataclasses.dataclass
class AppendResult:
    raw: Timing
    append: Timing
    unchecked: Timing  # appends with verify_payload=False
    log: PartitionLog  # written by the last checked append round, left open for reading


APPEND_STEPS = ("raw", "append", "unchecked")


def measure_append(root: Path, batches: Sequence[bytes], rounds: int) -> AppendResult:
    """Alternate raw writes, checked and unchecked log appends: one warm-up round and
    ``rounds`` timed rounds, the order of the three rotating each round."""
    total_mb = sum(len(b) for b in batches) / MB
    timings = {step: Timing(total_mb, []) for step in APPEND_STEPS}
    log = None
    for i in range(rounds + 1):
        if log is not None:
            log.delete()
        for step in APPEND_STEPS[i % 3:] + APPEND_STEPS[:i % 3]:
            directory = root / f"round-{i}-{step}"
            if step == "raw":
                seconds = run_raw(directory, batches)
            elif step == "unchecked":
                seconds, unchecked = run_append(directory, batches, verify_payload=False)
                unchecked.delete()
            else:
                seconds, log = run_append(directory, batches)
            if i:  # round 0 is the warm-up
                timings[step].seconds.append(seconds)
    return AppendResult(timings["raw"], timings["append"], timings["unchecked"], log)


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

ROWS = [  # (figure, label, unit, scale)
    ("encode_records_per_s", "(a) encode, per-record BatchBuilder", "M records/s", 1e-6),
    ("encode_columnar_records_per_s", "(a) encode, columnar payload.encode", "M records/s",
     1e-6),
    ("raw_write_mb_per_s", "(b) raw os.write of the same bytes", "MB/s", 1),
    ("append_mb_per_s", "(b) PartitionLog.append", "MB/s", 1),
    ("append_ratio_vs_raw", "(b) append / raw", "ratio", 1),
    ("append_unchecked_mb_per_s", "(b) PartitionLog.append, verify_payload=False", "MB/s", 1),
    ("append_ratio_vs_unchecked", "(b) append / unchecked append", "ratio", 1),
    ("produce_path_ratio_vs_unchecked", "(b) encode + append / encode + unchecked append",
     "ratio", 1),
    ("columnar_produce_path_ratio_vs_unchecked", "(b) the same, columnar encode", "ratio", 1),
    ("read_records_per_s", "(c) read to Python records", "M records/s", 1e-6),
    ("read_arrow_records_per_s", "(c) read to Arrow", "M records/s", 1e-6),
]


def table(result: dict[str, Any]) -> str:
    rows = []
    for name, label, unit, scale in ROWS:
        best, median = result[name] * scale, result[f"{name}_median"] * scale
        rows.append([label, f"{best:,.2f}", f"{median:,.2f}", unit,
                     *target_cells(name, result["targets"], scale)])
    return markdown_table(["measurement", "best", "median", "unit", "target", "met"], rows,
                          align="lrrlrl")


# -- main ------------------------------------------------------------------------------------

@dataclasses.dataclass
class Measurements:
    encode: Timing
    encode_columnar: Timing
    raw_write: Timing
    append: Timing
    append_unchecked: Timing
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
            "append_ratio_vs_raw_median": statistics.median(paired(self.append,
                                                                   self.raw_write)),
            **rate_figures("append_unchecked_mb_per_s", self.append_unchecked),
            "append_ratio_vs_unchecked":
                self.append.best_rate / self.append_unchecked.best_rate,
            "append_ratio_vs_unchecked_median": statistics.median(
                paired(self.append, self.append_unchecked)),
            "produce_path_ratio_vs_unchecked": self.produce_path_ratio(self.encode, min),
            "produce_path_ratio_vs_unchecked_median": self.produce_path_ratio(
                self.encode, statistics.median),
            "columnar_produce_path_ratio_vs_unchecked": self.produce_path_ratio(
                self.encode_columnar, min),
            "columnar_produce_path_ratio_vs_unchecked_median": self.produce_path_ratio(
                self.encode_columnar, statistics.median),
            **rate_figures("read_records_per_s", self.read_records),
            **rate_figures("read_arrow_records_per_s", self.read_arrow),
        }

    def produce_path_ratio(self, encoding: Timing,
                           pick: Callable[[list[float]], float]) -> float:
        """Rate of encoding then appending, checked over unchecked, on one core."""
        encode = pick(encoding.seconds)
        return (encode + pick(self.append_unchecked.seconds)) / (
            encode + pick(self.append.seconds))

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
                        appended.unchecked, reading, arrow, batches)


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load_at_start = time.perf_counter(), os.getloadavg()
    data = Dataset.generate(mode.records)
    with input_frozen():
        measured = measure_all(mode, data, root)
    total_bytes = sum(len(b) for b in measured.batches)
    return result_document(
        measured.figures(), TARGETS, mode=mode.name, started=started,
        load_at_start=load_at_start, machine=machine_info(),
        data={
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
        sections={
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
        })


def headline(mode: Mode, result: dict[str, Any]) -> str:
    data = result["data"]
    return (f"storage benchmark, {mode.name} mode: {data['records']:,} records of "
            f"{RECORD_BYTES} bytes in {data['batches']} batches, "
            f"{data['total_bytes'] / MB:,.1f} MB encoded; {result['machine']['cpu_count']} "
            f"CPUs, Python {platform.python_version()}, pyarrow {pa.__version__}")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         f"{QUICK.records:,} records instead of {FULL.records:,}",
                         (QUICK, FULL), run, headline, table)


if __name__ == "__main__":
    sys.exit(main())
