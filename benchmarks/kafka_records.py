"""Kafka record batches to raylog's and back (raylog/kafka/records.py): records/s, per codec.

Run from the repository root::

    .venv/bin/python benchmarks/kafka_records.py [--quick] [--json PATH]

No cluster: this measures the translation alone, on one core. ``--quick`` (100,000 records
per measurement) takes about a minute here, the full run (500,000) a few. The script prints
a Markdown table and writes JSON (default ``benchmarks/results/kafka_records.json``).

Data: the 100-byte JSON page views of ``common.py``, no key, no headers, timestamps +1 ms per
record; cut into batches of two shapes: ``1000`` records each, and ``16kb``, the records that
fill a Kafka client's default ``batch.size`` of 16 KiB (151 records of 100 bytes with their
framing). Everything is built before any timing.

Measurements, for each Kafka codec (none, gzip, snappy, lz4, zstd) and each shape (one
warm-up, then the best and the median of N timed repetitions), in records per CPU-second of
this process (``time.process_time``; the work is single-threaded, and on the shared machine
wall time would count other processes' turns too; the wall seconds are in the JSON):

- ``to_raylog``: a Produce request's records field (one Kafka batch, compressed with the
  codec) through ``kafka_batches`` (CRC) and ``to_raylog`` (to a raylog batch, LZ4, as
  raylog's producer sends it). Figure ``to_raylog_<codec>_<shape>_records_per_s``.
- ``to_kafka``: stored raylog batches (LZ4, stamped), concatenated into 1 MiB fetch answers
  as a broker's fetch returns them, through ``to_kafka`` with the codec. Figure
  ``to_kafka_<codec>_<shape>_records_per_s``.

Beside them, in the same run: the same two with the pure-Python per-record work
(``records_py``, the fallback where the C helper is not built), codec none, 1000-record
batches (``..._python_...``); and raylog's own encoding and decoding of the same records for
scale: ``BatchBuilder`` appends and builds (what raylog's producer pays per record) and
``read_records`` of the fetch answers (what its consumer pays).

Targets (issue 24: the gateway at >= 0.5x raylog's native clients, about 1.2M records/s
produced and 2.7M consumed here): the translation alone at least as fast as the native
clients, so that it takes at most half of the gateway's budget: Kafka's default shape
(16 KiB, uncompressed) to raylog >= 1.2M records/s, stored 1000-record batches to Kafka
(uncompressed) >= 2.7M records/s.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from raylog.kafka import records, records_py
from raylog.kafka.batch import KafkaCodec, kafka_batches
from raylog.kafka.records import to_kafka, to_raylog
from raylog.records import PAYLOAD_SCHEMA, BatchBuilder, read_records, stamp
from raylog.records.payload import empty_headers, encode
from raylog.util.progress import progress

from common import (
    DATA_DESCRIPTION,
    FIRST_TIMESTAMP_MS,
    RECORD_BYTES,
    RESULTS_DIR,
    Timing,
    binary_array,
    generate_values,
    input_frozen,
    machine_info,
    markdown_table,
    rate_figures,
    result_document,
    run_benchmark,
    split_values,
    target_cells,
)

DEFAULT_JSON = RESULTS_DIR / "kafka_records.json"
# Records that fill a Kafka client's 16 KiB batch: each 100-byte value takes 8 more bytes of
# record framing (length, attributes, deltas, key and value lengths, header count).
SHAPES = {"1000": 1000, "16kb": (16 << 10) // (RECORD_BYTES + 8)}
FETCH_BYTES = 1 << 20
TARGETS = {"to_raylog_none_16kb_records_per_s": 1.2e6,
           "to_kafka_none_1000_records_per_s": 2.7e6}


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    records: int
    repetitions: int


QUICK = Mode("quick", records=100_000, repetitions=3)
FULL = Mode("full", records=500_000, repetitions=5)


def stored_batches(values: np.ndarray, per_batch: int) -> list[bytes]:
    """The records as stamped raylog batches of ``per_batch`` records (LZ4), built
    columnar (not timed)."""
    out, offset = [], 0
    for start in range(0, len(values), per_batch):
        rows = values[start:start + per_batch]
        n = len(rows)
        columns = pa.record_batch([
            pa.array(np.arange(FIRST_TIMESTAMP_MS + start, FIRST_TIMESTAMP_MS + start + n)),
            pa.nulls(n, pa.binary()), binary_array(np.ascontiguousarray(rows)),
            empty_headers(n)], schema=PAYLOAD_SCHEMA)
        batch = bytearray(encode(columns))
        stamp(batch, offset, 1)
        offset += n
        out.append(bytes(batch))
    return out


def fetch_answers(batches: list[bytes]) -> list[bytes]:
    """Stored batches concatenated into answers of at most FETCH_BYTES (at least one)."""
    answers, current, size = [], [], 0
    for batch in batches:
        if current and size + len(batch) > FETCH_BYTES:
            answers.append(b"".join(current))
            current, size = [], 0
        current.append(batch)
        size += len(batch)
    answers.append(b"".join(current))
    return answers


def run(mode: Mode, _root: Path) -> dict[str, Any]:
    started, load = time.perf_counter(), os.getloadavg()
    values = generate_values(mode.records)
    n = mode.records
    figures: dict[str, float] = {}
    seconds: dict[str, list[float]] = {}

    def timed(name: str, fn) -> None:
        timing, wall = cpu_measure(fn, n, mode.repetitions)
        figures.update(rate_figures(name, timing))
        seconds[name] = {"cpu": timing.seconds, "wall": wall}

    with input_frozen():
        for shape, per_batch in SHAPES.items():
            answers = fetch_answers(stored_batches(values, per_batch))
            for codec in KafkaCodec:
                label = f"{codec.name.lower()}_{shape}"
                produced = [to_kafka(answer, codec) for answer in answers]
                requests = [bytes(b.data) for p in produced for b in kafka_batches(p)]
                print(f"{label}: {len(requests)} Kafka batches, "
                      f"{sum(map(len, requests)) / n:.1f} bytes per record")
                timed(f"to_raylog_{label}_records_per_s",
                      lambda requests=requests: [to_raylog(kafka_batches(r)[0])
                                                 for r in requests])
                timed(f"to_kafka_{label}_records_per_s",
                      lambda answers=answers, codec=codec: [to_kafka(a, codec)
                                                            for a in answers])
        answers = fetch_answers(stored_batches(values, SHAPES["1000"]))
        requests = [bytes(b.data) for a in answers for b in kafka_batches(to_kafka(a))]
        saved = records.coder
        records.coder = records_py
        try:
            timed("to_raylog_python_none_1000_records_per_s",
                  lambda: [to_raylog(kafka_batches(r)[0]) for r in requests])
            timed("to_kafka_python_none_1000_records_per_s",
                  lambda: [to_kafka(a) for a in answers])
        finally:
            records.coder = saved
        rows = split_values(values.tobytes())
        timed("native_encode_1000_records_per_s", lambda: native_encode(rows, SHAPES["1000"]))
        timed("native_decode_1000_records_per_s", lambda: [read_records(a) for a in answers])
    return result_document(
        figures, TARGETS, mode=mode.name,
        data={"description": DATA_DESCRIPTION, "records": n, "shapes": SHAPES,
              "fetch_bytes": FETCH_BYTES},
        sections={"seconds": seconds,
                  "coder": records.coder.__name__},
        machine=machine_info(), started=started, load_at_start=load)


def cpu_measure(fn, amount: int, repetitions: int) -> tuple[Timing, list[float]]:
    """As common.measure, but timed in this process's CPU seconds (``time.process_time``):
    the work is single-threaded and the machine shared, so CPU time is what it costs, where
    wall time also counts the other processes' turns. Also returns the wall seconds."""
    fn()
    cpu, wall = [], []
    with progress(repetitions, "measuring", "runs") as shown:
        for _ in range(repetitions):
            gc.collect()
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            fn()
            cpu.append(time.process_time() - cpu_start)
            wall.append(time.perf_counter() - wall_start)
            shown.update()
    return Timing(amount, cpu), wall


def native_encode(rows: list[bytes], per_batch: int) -> list[bytes]:
    """raylog's producer path: BatchBuilder appends and builds, ``per_batch`` records each."""
    out, builder = [], None
    for i, value in enumerate(rows):
        if i % per_batch == 0:
            if builder is not None:
                out.append(builder.build())
            builder = BatchBuilder(1 << 24)
        builder.append(FIRST_TIMESTAMP_MS + i, None, value)
    out.append(builder.build())
    return out


def headline(mode: Mode, result: dict[str, Any]) -> str:
    return (f"Kafka record batches <-> raylog batches, {mode.name} run, {mode.records:,} "
            f"records per measurement, per-record work by {result['coder']}")


def table(result: dict[str, Any]) -> str:
    targets = result["targets"]
    rows = []
    for shape in SHAPES:
        for codec in KafkaCodec:
            for direction in ("to_raylog", "to_kafka"):
                name = f"{direction}_{codec.name.lower()}_{shape}_records_per_s"
                rows.append([direction, codec.name.lower(), shape,
                             f"{result[name] / 1e6:.2f}",
                             f"{result[name.replace('_per_s', '_per_s_median')] / 1e6:.2f}",
                             *target_cells(name, targets, 1e-6, "M")])
    for name, what in (("to_raylog_python_none_1000_records_per_s", "to_raylog, pure Python"),
                       ("to_kafka_python_none_1000_records_per_s", "to_kafka, pure Python"),
                       ("native_encode_1000_records_per_s", "raylog BatchBuilder (native)"),
                       ("native_decode_1000_records_per_s", "raylog read_records (native)")):
        rows.append([what, "none" if "python" in name else "lz4", "1000",
                     f"{result[name] / 1e6:.2f}",
                     f"{result[name.replace('_per_s', '_per_s_median')] / 1e6:.2f}", "-", "-"])
    return markdown_table(["path", "codec", "batch", "best M rec/CPU-s", "median M rec/CPU-s",
                           "target", "met"], rows, "lllrrll")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON,
                         f"{QUICK.records:,} records per measurement instead of "
                         f"{FULL.records:,}", (QUICK, FULL), run, headline, table)


if __name__ == "__main__":
    raise SystemExit(main())
