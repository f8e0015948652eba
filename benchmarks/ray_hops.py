"""Ray's hop from a process holding new data to a reader in another process, two ways.

The question behind it (issue 25, docs/performance.md, "Delivering to a reader: a parked call
or a stream"): raylog's consumer reads by a parked call (``fetch_many``: a long poll the
broker answers when an append wakes it), so every answer costs the reader a new call. A
streaming call (an async generator method: one long-lived call, one yielded object per
answer) would take the reader's ``.remote()`` per answer out of the path. Before building
it into the consumer, this measures what it would buy here, on Ray alone:

- a hub actor (async, as the broker is) that makes stamped items itself at a paced rate, on
  its event loop (``time.monotonic_ns()``, one clock for every process here), as appends
  arrive at a broker: only the hop to the reader is measured, not a producer's call;
- a reader actor in its own process whose thread reads everything pushed, either
  ``parked``: one call at a time, each answered with every item pushed since the last (the
  hub parks it until there is one, up to 0.5 s), or ``stream``: one generator call, whose
  next object the hub yields with every item pushed since the last one it yielded;
- per mode and rate: the latency of each item from its push to its receipt by the reader
  (p50, p99, p99.9), the calls or objects per item, and the CPU per item of the hub's and
  the reader's processes (all their threads, Ray's included); an empty call's round trip
  beside them.

Run: ``.venv/bin/python benchmarks/ray_hops.py [--quick] [--json PATH]``; it starts its own
local Ray instance. Every run gets a new hub and reader, after a one-second warm-up run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray

from common import RESULTS_DIR, machine_info, markdown_table, run_benchmark

PARK_WAIT_S = 0.5  # as the consumer's fetch_max_wait_ms


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    rates: tuple[int, ...]  # items per second
    seconds: float  # per run
    empty_calls: int


QUICK = Mode("quick", (500, 2_000, 10_000), 3.0, 2_000)
FULL = Mode("full", (200, 500, 1_000, 2_000, 5_000, 10_000), 6.0, 5_000)


@ray.remote(num_cpus=0)
class Hub:
    """Holds the stamps pushed to it; answers parked calls and feeds streams."""

    def __init__(self) -> None:
        self.stamps: list[int] = []
        self.changed: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self.changed is None:
            self.changed = asyncio.Event()
        return self.changed

    def _append(self, stamps: list[int]) -> None:
        self.stamps.extend(stamps)
        event, self.changed = self._event(), asyncio.Event()
        event.set()  # wakes every waiter, once

    async def generate(self, rate: int, count: int) -> None:
        """Start making ``count`` items at ``rate`` per second (returns at once): every
        millisecond or so, the items due by then, each stamped when made."""
        async def make() -> None:
            clock, start, made = time.monotonic_ns, time.monotonic_ns(), 0
            while made < count:
                due = min(count, int((clock() - start) * rate / 1e9) + 1)
                if due > made:
                    now = clock()
                    self._append([now] * (due - made))
                    made = due
                await asyncio.sleep(min(0.001, 1 / rate))

        self.maker = asyncio.get_running_loop().create_task(make())

    async def _wait_past(self, since: int, timeout: float | None) -> bool:
        while len(self.stamps) <= since:
            try:
                await asyncio.wait_for(self._event().wait(), timeout)
            except TimeoutError:
                return False
        return True

    async def park(self, since: int) -> bytes:
        """The stamps from index ``since`` on, once there is one (empty after the wait)."""
        await self._wait_past(since, PARK_WAIT_S)
        return np.array(self.stamps[since:], np.int64).tobytes()

    async def stream(self, since: int):
        """Yields the stamps pushed since the last yield, whenever there are some."""
        while True:
            await self._wait_past(since, None)
            chunk = self.stamps[since:]
            since += len(chunk)
            yield np.array(chunk, np.int64).tobytes()

    def cpu_seconds(self) -> float:
        return time.process_time()

    async def call(self) -> None:
        return None


@ray.remote(num_cpus=0)
class Reader:
    """Reads every stamp the hub gets, on a thread of its own, one way."""

    def __init__(self, hub: Any, how: str) -> None:
        self.hub, self.how = hub, how
        self.latencies: list[int] = []
        self.answers = 0
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self, expected: int) -> float:
        self.thread = threading.Thread(target=self._read, args=(expected,), daemon=True)
        self.thread.start()
        return time.process_time()

    def _take(self, data: bytes) -> None:
        now = time.monotonic_ns()
        stamps = np.frombuffer(data, np.int64)
        self.latencies.extend((now - stamps).tolist())
        self.answers += 1

    def _read(self, expected: int) -> None:
        try:
            if self.how == "parked":
                while len(self.latencies) < expected:
                    self._take(ray.get(self.hub.park.remote(len(self.latencies))))
            else:
                stream = self.hub.stream.remote(0)
                for ref in stream:
                    self._take(ray.get(ref))
                    if len(self.latencies) >= expected:
                        break
        except BaseException as e:  # reported by result()
            self.error = e

    def result(self) -> tuple[bytes, int, float]:
        """(latencies in ns, answers read, the process's CPU seconds now)."""
        self.thread.join(120)
        if self.error is not None:
            raise self.error
        return np.array(self.latencies, np.int64).tobytes(), self.answers, time.process_time()


def one_run(how: str, rate: int, seconds: float) -> dict[str, Any]:
    """``rate * seconds`` items made at ``rate`` by a new hub, read by a new reader."""
    count = int(rate * seconds)
    hub = Hub.remote()
    reader = Reader.remote(hub, how)
    try:
        ray.get(hub.call.remote())
        hub_cpu = ray.get(hub.cpu_seconds.remote())
        reader_cpu = ray.get(reader.start.remote(count))
        ray.get(hub.generate.remote(rate, count))
        data, answers, reader_end = ray.get(reader.result.remote())
        hub_end = ray.get(hub.cpu_seconds.remote())
    finally:
        ray.kill(reader, no_restart=True)
        ray.kill(hub, no_restart=True)
    latencies = np.frombuffer(data, np.int64) / 1e6
    if len(latencies) != count:
        raise RuntimeError(f"{how} at {rate}/s: read {len(latencies)} of {count} items")
    p50, p99, p999 = np.percentile(latencies, [50, 99, 99.9])
    return {"how": how, "rate": rate, "items": count, "p50_ms": float(p50),
            "p99_ms": float(p99), "p999_ms": float(p999),
            "answers_per_item": answers / count,
            "hub_cpu_us_per_item": (hub_end - hub_cpu) / count * 1e6,
            "reader_cpu_us_per_item": (reader_end - reader_cpu) / count * 1e6}


def empty_call_p50_ms(calls: int) -> float:
    hub = Hub.remote()
    try:
        for _ in range(100):
            ray.get(hub.call.remote())
        times = []
        for _ in range(calls):
            start = time.perf_counter_ns()
            ray.get(hub.call.remote())
            times.append((time.perf_counter_ns() - start) / 1e6)
        return float(np.median(times))
    finally:
        ray.kill(hub, no_restart=True)


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load = time.perf_counter(), os.getloadavg()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=str(root / "ray"))
    try:
        runs = []
        for rate in mode.rates:
            for how in ("parked", "stream"):  # alternated, rate by rate
                one_run(how, rate, 1.0)  # warm-up, not counted
                runs.append(one_run(how, rate, mode.seconds))
                print(f"{how} at {rate:,}/s: p50 {runs[-1]['p50_ms']:.2f} ms, "
                      f"p99 {runs[-1]['p99_ms']:.2f} ms", file=sys.stderr)
        empty = empty_call_p50_ms(mode.empty_calls)
    finally:
        ray.shutdown()
    return {"runs": runs, "empty_call_p50_ms": empty, "mode": mode.name,
            "seconds_per_run": mode.seconds, "park_wait_s": PARK_WAIT_S,
            "machine": {**machine_info(), "load_average_1m": {"start": load[0],
                                                              "end": os.getloadavg()[0]}},
            "wall_seconds": time.perf_counter() - started}


def headline(mode: Mode, result: dict[str, Any]) -> str:
    load = result["machine"]["load_average_1m"]
    return (f"Ray's hop to a reader, {mode.name} mode: parked calls against a stream; "
            f"an empty call's p50 {result['empty_call_p50_ms']:.2f} ms; load "
            f"{load['start']:.1f} at start, {load['end']:.1f} at the end")


def table(result: dict[str, Any]) -> str:
    rows = [[f"{r['rate']:,}", r["how"], f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
             f"{r['p999_ms']:.2f}", f"{r['answers_per_item']:.2f}",
             f"{r['hub_cpu_us_per_item']:.0f}", f"{r['reader_cpu_us_per_item']:.0f}"]
            for r in result["runs"]]
    return markdown_table(["items/s", "reader", "p50 ms", "p99 ms", "p99.9 ms",
                           "answers per item", "hub CPU µs per item",
                           "reader CPU µs per item"], rows, "rlrrrrrr")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, RESULTS_DIR / "ray_hops.json",
                         "three rates, 3 s each (full: six, 6 s)", (QUICK, FULL), run,
                         headline, table)


if __name__ == "__main__":
    sys.exit(main())
