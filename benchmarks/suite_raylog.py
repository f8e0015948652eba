"""raylog's workloads in the benchmark suite: producers in their own processes, the
end-to-end latency probe, and the latency/throughput curve.

Producers run as Ray actors (one process each, as separate applications would), pinned to
the driver's node, each with its own pre-generated values (frozen out of the garbage
collector) and one ``Producer`` per setting, kept across rounds. A run's rate is all the
records the producers sent divided by the time from the first one's first ``send`` until
the last one's ``flush`` returned; each producer also reports the CPU seconds its process
used meanwhile (all its threads, Ray's included), hence records per CPU-second.

Latency: a probe actor (its own process) holds a consumer on every partition of the latency
topic, positioned at the end; the driver sends records at a fixed offered rate, each value
starting with the ``time.monotonic_ns()`` of its ``send`` call (CLOCK_MONOTONIC is one clock
for every process of a Linux machine), and the probe takes the difference when ``poll``
returns the record.

The machine's limits beside them: an empty call to an async actor (the kind the broker is),
one at a time, for the latency's floor; and ``lz4`` alone compressing the batches that
``send_batch`` would compress (the same rows cut and framed as the producer cuts and frames
them), one after the other on one core, for the columnar path's.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
from produce_consume import produce_records
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import raylog
from raylog import Consumer, Producer, TopicPartition
from raylog.client.producer import ProducerConfig
from raylog.client.tables import partition_rows
from raylog.records.header import HEADER_SIZE, Codec
from raylog.records.payload import compress, encode

from common import RECORD_BYTES, generate_values, split_values

STAMP_BYTES = 8   # a latency value starts with its send time: monotonic ns, big-endian
PROBE_POLL_MS = 100
PROBE_TIMEOUT_S = 60.0


def make_values(count: int, size: int, seed: int) -> list[bytes]:
    """``count`` values of ``size`` bytes (a multiple of 100): each is ``size // 100`` of
    common.py's 100-byte JSON page views back to back."""
    if size % RECORD_BYTES:
        raise ValueError(f"value size must be a multiple of {RECORD_BYTES}, got {size}")
    return split_values(generate_values(count * (size // RECORD_BYTES), seed).tobytes(), size)


@ray.remote(num_cpus=0, max_restarts=0)
class ProducerWorker:
    """One producing process: its values, and a Producer per settings (kept across runs)."""

    def __init__(self) -> None:
        raylog.init()
        self.values: dict[int, list[bytes]] = {}
        self.producers: dict[tuple[Any, ...], Producer] = {}

    def prepare(self, count: int, size: int, seed: int) -> int:
        self.values[size] = make_values(count, size, seed)
        gc.collect()
        gc.freeze()  # the values live through every run: keep the collector off them
        return len(self.values[size])

    def produce(self, topic: str, size: int, settings: dict[str, Any]) -> dict[str, float]:
        """Send every value of ``size`` bytes to ``topic``, then flush; when it started and
        ended (wall clock, comparable across processes), and the CPU seconds it used."""
        key = (topic, *sorted(settings.items()))
        producer = self.producers.get(key)
        if producer is None:
            producer = self.producers[key] = Producer(**settings)
        values = self.values[size]
        gc.collect()
        cpu, start = time.process_time(), time.time()
        produce_records(producer, topic, values)
        return {"start": start, "end": time.time(), "cpu_seconds": time.process_time() - cpu,
                "records": len(values)}

    def close(self) -> None:
        for producer in self.producers.values():
            producer.close()


def start_workers(count: int, node_id: str) -> list[Any]:
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return [ProducerWorker.options(scheduling_strategy=strategy).remote() for _ in range(count)]


def stop_workers(workers: list[Any]) -> None:
    try:
        ray.get([w.close.remote() for w in workers], timeout=120)
    finally:
        for worker in workers:
            ray.kill(worker, no_restart=True)


def produce_round(workers: list[Any], topic: str, size: int, settings: dict[str, Any]
                  ) -> dict[str, float]:
    """All ``workers`` produce at once; the records, the seconds from the first start to the
    last end, and the producers' CPU seconds."""
    runs = ray.get([w.produce.remote(topic, size, settings) for w in workers], timeout=600)
    seconds = max(r["end"] for r in runs) - min(r["start"] for r in runs)
    return {"records": sum(r["records"] for r in runs), "seconds": seconds,
            "cpu_seconds": sum(r["cpu_seconds"] for r in runs)}


# -- end-to-end latency ----------------------------------------------------------------------

class StampedProbe:
    """What a latency probe does whatever its client: a polling thread, started by
    ``_start``, takes each record's time from its send (the stamp its value starts with) to
    its receipt, until ``expected`` records have come or ``timeout_s`` has passed;
    ``latencies`` waits for that thread and raises what it raised. A subclass gives
    ``_fetch`` (the records of one poll) and ``_stamp`` (a record's send time); the receipt
    time is taken once per poll, before any record is looked at."""

    timeout_s = PROBE_TIMEOUT_S

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.thread: threading.Thread | None = None
        self.received: list[int] = []
        self.error: BaseException | None = None

    def _fetch(self) -> list[Any]:
        raise NotImplementedError

    @staticmethod
    def _stamp(record: Any) -> int:
        raise NotImplementedError

    def _start(self, expected: int) -> None:
        self.received, self.error = [], None
        self.thread = threading.Thread(target=self._poll, args=(expected,), daemon=True)
        self.thread.start()

    def _poll(self, expected: int) -> None:
        deadline = time.monotonic() + self.timeout_s
        stamp = self._stamp
        try:
            while len(self.received) < expected and time.monotonic() < deadline:
                records = self._fetch()
                now = time.monotonic_ns()
                self.received.extend(now - stamp(r) for r in records)
        except BaseException as e:  # reported by latencies(), in the driver
            self.error = e

    def latencies(self) -> bytes:
        """The latencies (ns, int64) of the records received since ``arm``."""
        if self.thread is not None:
            self.thread.join(self.timeout_s + 10)
        if self.error is not None:
            raise self.error
        return np.array(self.received, np.int64).tobytes()

    def close(self) -> None:
        self.consumer.close()


@ray.remote(num_cpus=0, max_restarts=0)
class LatencyProbe(StampedProbe):
    """A raylog consumer of every partition of one topic, in its own process, measuring each
    record's time from its send call to its receipt here. ``arm`` positions it at the end
    and starts the polling thread."""

    def __init__(self, topic: str, partitions: int, **settings: Any) -> None:
        raylog.init()
        super().__init__(Consumer(auto_offset_reset="latest", enable_auto_commit=False,
                                  max_poll_records=10_000, **settings))
        self.partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self.consumer.assign(self.partitions)

    def arm(self, expected: int) -> None:
        self.consumer.seek_to_end()
        for tp in self.partitions:
            self.consumer.position(tp)  # resolved now, before any record is sent
        self._start(expected)

    def _fetch(self) -> list[Any]:
        return self.consumer.poll(timeout_ms=PROBE_POLL_MS)

    @staticmethod
    def _stamp(record: Any) -> int:
        return int.from_bytes(record.value[:STAMP_BYTES], "big")


def paced_send(producer: Producer, topic: str, rate: int, seconds: float) -> int:
    """Send ``rate * seconds`` 100-byte records at ``rate`` per second (each value stamped
    with its send time), then flush; how many were sent."""
    count = int(rate * seconds)
    filler = generate_values(1).tobytes()[STAMP_BYTES:]
    interval_ns = 1e9 / rate
    clock, send = time.monotonic_ns, producer.send
    start = clock()
    for i in range(count):
        ahead = start + int(i * interval_ns) - clock()
        if ahead > 200_000:  # sleep only when well ahead: sleep itself overshoots ~60 us
            time.sleep(ahead / 1e9)
        send(topic, clock().to_bytes(STAMP_BYTES, "big") + filler)
    producer.flush()
    return count


def measure_latency(probe: Any, topic: str, rate: int, seconds: float,
                    settings: dict[str, Any]) -> np.ndarray:
    """Latencies (ms) of one paced run through a new producer with ``settings``."""
    count = int(rate * seconds)
    with Producer(**settings) as producer:
        producer.send(topic, bytes(STAMP_BYTES) + b"warm-up").result(30)  # metadata, not counted
        ray.get(probe.arm.remote(count))  # at the end, past the warm-up record
        paced_send(producer, topic, rate, seconds)
    return probe_latencies(probe, count)


def probe_latencies(probe: Any, count: int) -> np.ndarray:
    """The latencies (ms) a probe actor took since its ``arm``: all ``count`` records'."""
    latencies = np.frombuffer(ray.get(probe.latencies.remote()), np.int64) / 1e6
    if len(latencies) != count:
        raise RuntimeError(f"the probe received {len(latencies):,} of {count:,} records")
    return latencies


# -- the machine's limits ----------------------------------------------------------------------

@ray.remote(num_cpus=0, max_restarts=0)
class EmptyActor:
    """An async actor, as the broker is, whose method does nothing."""

    async def call(self) -> None:
        return None


def actor_call_latencies(calls: int, warm_up: int = 100) -> list[float]:
    """The round trip (ms) of each of ``calls`` empty calls to a new async actor on the
    driver's node, one at a time, after ``warm_up`` calls not counted."""
    node = ray.get_runtime_context().get_node_id()
    actor = EmptyActor.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
    try:
        for _ in range(warm_up):
            ray.get(actor.call.remote())
        clock, latencies = time.perf_counter_ns, []
        for _ in range(calls):
            start = clock()
            ray.get(actor.call.remote())
            latencies.append((clock() - start) / 1e6)
        return latencies
    finally:
        ray.kill(actor, no_restart=True)


def uncompressed_payloads(table: Any, partitions: int) -> list[bytes]:
    """What ``send_batch(topic, table)`` would hand LZ4, with the producer's defaults: the
    rows cut into batches as it cuts them, each batch's Arrow IPC stream."""
    pieces = partition_rows(table, partitions, ProducerConfig().batch_size, partition=None,
                            topic="lz4")
    return [encode(columns, codec=Codec.NONE)[HEADER_SIZE:] for _, columns in pieces]


def write_fresh(payloads: list[bytes], directory: Path) -> int:
    """Write every payload, one after the other (one core), into a new file of
    ``directory`` (the brokers' disk), as a log's append writes a batch into the page cache,
    no fsync; the file is deleted after. The bytes written."""
    path = directory / f"page-cache-{os.getpid()}-{time.monotonic_ns()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        return sum(os.write(fd, payload) for payload in payloads)
    finally:
        os.close(fd)
        path.unlink()


def compress_all(payloads: list[bytes]) -> int:
    """LZ4 every payload as a batch's is compressed, one after the other (one core); the
    compressed bytes."""
    return sum(len(compress(payload)) for payload in payloads)
