"""Transactions' cost: transactional produce against plain, read_committed against uncommitted.

Run from the repository root::

    .venv/bin/python benchmarks/transactions.py [--quick] [--json PATH]

``--quick`` (20,000 records per step, one timed round) is a smoke test of well under a
minute; the full run (2,000,000 records, 3 timed rounds; with the C send built, about 10
transactions per repetition) takes a few minutes on a 2-core
machine. The script prints a Markdown table and writes JSON (default
``benchmarks/results/transactions.json``).

Setup: ``raylog.init(address="local", data_dir=<temporary directory>)`` starts an embedded
single-node Ray cluster whose node is a broker (and hosts the transaction coordinator in
its controller). Two topics of 6 partitions, replication factor 1, ``retention.ms=-1``:
``txn`` written by the transactional producer, ``plain`` by the plain one. Data: the
100-byte page views of ``common.py``, keyless, generated before timing.

Measurements, alternating one repetition of each per round (the machine is shared) after a
warm-up round; best and median of the timed rounds (``time.perf_counter``):

txn_produce      ``Producer(transactional_id=..., acks="all")`` (idempotent, LZ4, linger
                 5 ms: the defaults otherwise), ``init_transactions()`` once before timing;
                 then ``begin_transaction()``, ``send`` values for 100 ms
                 (``COMMIT_INTERVAL_S``), ``commit_transaction()``, repeated until n records
                 were sent.
plain_produce    the same settings without a transactional id (``acks="all"``,
                 idempotent): ``send`` values for 100 ms, ``flush()``, repeated until n
                 records were sent. Both producers test the clock every 1,000 sends.
committed_consume    a new ``Consumer(isolation_level="read_committed")`` assigned all of
                 ``txn``'s partitions from offset 0, polling until it has n records.
uncommitted_consume  the same with ``isolation_level="read_uncommitted"`` (the default).

``txn_vs_plain`` is txn_produce / plain_produce records/s (target >= 0.9);
``read_committed_vs_uncommitted`` committed_consume / uncommitted_consume (target >= 0.95).
Checks, outside the timed regions: ``plain`` grew by exactly n records per produce; ``txn``
by n records plus at most one marker per partition per transaction (markers are written
after the commit returns, so some may not be there yet); each consume read n
records of 100 bytes.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from raylog import Admin, Consumer, Producer, TopicPartition

from common import (
    RECORD_BYTES,
    RESULTS_DIR,
    alternate,
    describe_data,
    embedded_cluster,
    generate_values,
    input_frozen,
    machine_info,
    ratio_figures,
    ratio_table,
    result_document,
    run_benchmark,
    split_values,
)

DEFAULT_JSON = RESULTS_DIR / "transactions.json"
PARTITIONS = 6
COMMIT_INTERVAL_S = 0.1
CLOCK_EVERY = 1000  # sends between looks at the clock
STALL_S = 30.0
STEPS = ("txn_produce", "plain_produce", "committed_consume", "uncommitted_consume")
RATIOS = {"txn_vs_plain": ("txn_produce_records_per_s", "plain_produce_records_per_s"),
          "read_committed_vs_uncommitted": ("committed_consume_records_per_s",
                                            "uncommitted_consume_records_per_s")}
TARGETS = {"txn_vs_plain": 0.9, "read_committed_vs_uncommitted": 0.95}
PRODUCER = {"acks": "all"}  # both producers; the transactional one adds its id


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    records: int      # per repetition of every step
    repetitions: int  # timed rounds, after one warm-up round


QUICK = Mode("quick", records=20_000, repetitions=1)
FULL = Mode("full", records=2_000_000, repetitions=3)


class Steps:
    """The four steps over one cluster: each runs once and returns its seconds."""

    def __init__(self, values: list[bytes]) -> None:
        self.values = values
        admin = Admin()
        for name in ("txn", "plain"):
            admin.create_topic(name, PARTITIONS, 1, {"retention.ms": -1})
        self.txn_tps = [TopicPartition("txn", p) for p in range(PARTITIONS)]
        self.plain_tps = [TopicPartition("plain", p) for p in range(PARTITIONS)]
        self.txn_producer = Producer(transactional_id="bench-txn", **PRODUCER)
        self.txn_producer.init_transactions()
        self.plain_producer = Producer(**PRODUCER)
        self.transactions: list[int] = []  # per txn_produce run
        self._probe = Consumer()
        self._probe.assign(self.txn_tps + self.plain_tps)

    def _offsets(self, tps: list[TopicPartition]) -> int:
        return sum(self._probe.end_offsets(tps).values())

    def _in_intervals(self, topic: str, start: Any, end: Any) -> tuple[float, int]:
        """Send every value to ``topic`` in slices of COMMIT_INTERVAL_S, each opened by
        ``start()`` and closed by ``end()``; the seconds, and the slices."""
        values, send = self.values, (self.txn_producer if topic == "txn"
                                     else self.plain_producer).send
        n, i, slices = len(values), 0, 0
        started = time.perf_counter()
        while i < n:
            start()
            until = time.perf_counter() + COMMIT_INTERVAL_S
            while i < n:
                for value in values[i:i + CLOCK_EVERY]:
                    send(topic, value)
                i += CLOCK_EVERY
                if time.perf_counter() >= until:
                    break
            end()
            slices += 1
        return time.perf_counter() - started, slices

    def txn_produce(self) -> float:
        before = self._offsets(self.txn_tps)
        producer = self.txn_producer
        elapsed, slices = self._in_intervals("txn", producer.begin_transaction,
                                             producer.commit_transaction)
        grown, n = self._offsets(self.txn_tps) - before, len(self.values)
        if not n <= grown <= n + slices * PARTITIONS:  # the markers follow the commit
            raise RuntimeError(f"txn: {n:,} records in {slices} transactions, the topic grew "
                               f"by {grown:,}")
        self.transactions.append(slices)
        return elapsed

    def plain_produce(self) -> float:
        before = self._offsets(self.plain_tps)
        elapsed, _ = self._in_intervals("plain", lambda: None, self.plain_producer.flush)
        grown = self._offsets(self.plain_tps) - before
        if grown != len(self.values):
            raise RuntimeError(f"plain: {len(self.values):,} records sent, the topic grew "
                               f"by {grown:,}")
        return elapsed

    def _consume(self, isolation_level: str) -> float:
        n, seen, size = len(self.values), 0, 0
        started = time.perf_counter()
        with Consumer(auto_offset_reset="earliest", isolation_level=isolation_level) as consumer:
            consumer.assign(self.txn_tps)
            while seen < n:
                records = consumer.poll(timeout_ms=int(STALL_S * 1000))
                if not records:
                    raise RuntimeError(f"{isolation_level} consume stalled at {seen:,}")
                seen += len(records)
                size += sum(len(r.value) for r in records)
            elapsed = time.perf_counter() - started
        if size != seen * RECORD_BYTES:
            raise RuntimeError(f"{isolation_level} consume read {seen:,} records of "
                               f"{size:,} bytes")
        return elapsed

    def committed_consume(self) -> float:
        return self._consume("read_committed")

    def uncommitted_consume(self) -> float:
        return self._consume("read_uncommitted")

    def close(self) -> None:
        self.txn_producer.close()
        self.plain_producer.close()
        self._probe.close()


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load = time.perf_counter(), os.getloadavg()
    values = split_values(generate_values(mode.records).tobytes())
    with embedded_cluster(root / "data"):
        steps = Steps(values)
        try:
            with input_frozen():
                seconds = alternate(mode.repetitions, {name: getattr(steps, name)
                                                       for name in STEPS})
        finally:
            steps.close()
    return result_document(
        ratio_figures(seconds, mode.records, RATIOS), TARGETS, mode=mode.name,
        data={"description": describe_data("timestamps taken at send"),
              "records": mode.records},
        sections={"config": {"partitions": PARTITIONS, "producer": PRODUCER,
                             "commit_interval_s": COMMIT_INTERVAL_S,
                             "clock_every_sends": CLOCK_EVERY},
                  "transactions_per_run": steps.transactions, "seconds": seconds},
        machine=machine_info(), started=started, load_at_start=load)


def table(result: dict[str, Any]) -> str:
    return ratio_table(result, STEPS, RATIOS)


def headline(mode: Mode, result: dict[str, Any]) -> str:
    load = result["machine"]["load_average_1m"]
    return (f"Transactions against plain produce and read_uncommitted, {mode.name} mode: "
            f"{result['data']['records']:,} records of 100 bytes per step, "
            f"{result['config']['partitions']} partitions, a commit (or flush) every "
            f"{COMMIT_INTERVAL_S * 1000:.0f} ms, best and median of {mode.repetitions} "
            f"alternated rounds; {result['machine']['cpu_count']} CPUs, load "
            f"{load['start']:.1f} at start, {load['end']:.1f} at end")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON, "20,000 records per step, one round",
                         (QUICK, FULL), run, headline, table)


if __name__ == "__main__":
    sys.exit(main())
