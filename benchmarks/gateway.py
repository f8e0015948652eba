"""Kafka clients through raylog's Kafka listener, against raylog's own clients, same run.

Run from the repository root::

    .venv/bin/python benchmarks/gateway.py [--quick] [--json PATH]

``--quick`` (200,000 records per step) takes about a minute on a 2-core machine, the full run
(1,000,000) a few. The script prints a Markdown table
and writes JSON (default ``benchmarks/results/gateway.json``).

Setup: ``raylog.init(address="local", data_dir=<temporary directory>)`` starts an embedded
single-node Ray cluster whose node is a broker; ``raylog gateway --address <it> --port 0``
runs in a process of its own, as a user runs it. Two topics of 6 partitions, replication
factor 1: ``native`` written by raylog's Producer, ``kafka`` by confluent-kafka through the
listener. Data: the 100-byte page views of ``common.py``, keyless, generated before timing.

Measurements, alternating one repetition of each per round (the machine is shared) after a
warm-up round; best and median of the timed rounds (``time.perf_counter``):

native_produce   raylog ``Producer()`` defaults (acks=1, LZ4): ``send`` each value, ``flush``.
gateway_produce  confluent-kafka ``Producer`` (acks=1, lz4, linger.ms=5, idempotence off as
                 raylog's default producer): ``produce`` each value (``poll(0)`` every
                 10,000), ``flush``. Delivery reports only for failures
                 (``delivery.report.only.error``, one producer-wide ``on_delivery``): the
                 native producer calls nothing per record either, and a Python callback
                 per record cost confluent-kafka's client 1 of its 1.4 CPU seconds per
                 400,000 records (measured); the topic's growth is checked after.
native_consume   a new raylog ``Consumer`` assigned the ``native`` topic's partitions from
                 offset 0, polling until it has the first n records (n per repetition).
gateway_consume  a new confluent-kafka ``Consumer`` (``assign`` from offset 0, no group
                 use) through the listener, ``consume(num_messages=500)`` until it has n
                 records (``KAFKA_CONSUME_BATCH``, below).

What each consumer uses, and why (measured with 400,000 records, medians of 4 rounds,
each configuration alternated in one run):

- Records per call: 500 on both sides, raylog's ``max_poll_records`` default. Larger
  batches make confluent-kafka slower, not faster: ``consume(1000)``, which this script
  used before, took 0.45 s where ``consume(500)`` took 0.32 s and ``consume(100)`` 0.34 s;
  ``consume(2000)`` 0.78 s, ``consume(10000)`` 2-3 s. It is the call's own CPU: with every
  record already queued, draining 400,000 cost the process 0.13-0.14 CPU s with 500 and
  0.31-0.34 s with 1000.
- Fetch sizes and queues: each client's defaults. raylog's Consumer asks 8 MiB per
  partition (``max_partition_fetch_bytes``) and buffers up to 200,000 records per
  partition; librdkafka asks 1 MB (``max.partition.fetch.bytes``) and keeps 100,000
  (``queued.min.messages``, at most 64 MB: ``queued.max.messages.kbytes``). Giving
  confluent-kafka raylog's sizes did not make it faster (8 MiB: 0.46 s against 0.44 s;
  200,000 records and 1 GB: 0.34 s against 0.32 s), so a Python user's defaults stay.
- ``fetch.queue.backoff.ms`` 10 (default 1000): librdkafka stops fetching a partition whose
  queue is full and looks again only after this long; with the default the listener sat
  idle 1.1 s between Fetches. raylog's Consumer resumes as soon as ``poll`` drains its
  buffer. ``fetch.wait.max.ms`` 100 (raylog's ``fetch_max_wait_ms`` is 500): it only
  matters once a partition has nothing new.

Each ratio is gateway / native (target >= 0.5). ``kafka_records_compiled`` in the JSON says
whether the listener's record translation was the compiled one (``python -m
raylog.kafka.build`` in a worktree): the pure-Python one makes the listener the bound.
Checks, outside the timed regions: each produce grew its topic by exactly n records; each
consume read n records of 100 bytes.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import ray
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.client.consumer import ConsumerConfig
from raylog.kafka.records import compiled

from common import (
    RECORD_BYTES,
    RESULTS_DIR,
    alternate,
    describe_data,
    embedded_cluster,
    generate_values,
    machine_info,
    ratio_figures,
    ratio_table,
    result_document,
    run_benchmark,
    split_values,
)

DEFAULT_JSON = RESULTS_DIR / "gateway.json"
PARTITIONS = 6
STALL_S = 30.0
RATIOS = {"produce_ratio": ("gateway_produce_records_per_s", "native_produce_records_per_s"),
          "consume_ratio": ("gateway_consume_records_per_s", "native_consume_records_per_s")}
TARGETS = {"produce_ratio": 0.5, "consume_ratio": 0.5}
KAFKA_PRODUCER = {"acks": 1, "compression.type": "lz4", "linger.ms": 5,
                  "enable.idempotence": False, "queue.buffering.max.messages": 2_000_000,
                  "delivery.report.only.error": True}

# fetch.queue.backoff.ms: librdkafka stops fetching a partition whose queue holds more than
# queued.min.messages (100,000) and looks again only after this long (1 s by default);
# raylog's Consumer resumes as soon as poll drains its buffer below max_buffered_records.
# With the default, 1.1 s gaps between Fetches were measured (the listener idle).
KAFKA_CONSUMER = {"group.id": "bench", "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                  "fetch.queue.backoff.ms": 10}
# Records per consume() call: raylog's Consumer returns at most max_poll_records (500) per
# poll; larger batches measured slower with confluent-kafka (see the docstring).
KAFKA_CONSUME_BATCH = ConsumerConfig().max_poll_records


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    records: int      # per repetition of every step
    repetitions: int  # timed rounds, after one warm-up round


QUICK = Mode("quick", records=200_000, repetitions=3)
FULL = Mode("full", records=1_000_000, repetitions=3)


class Gateway:
    """``raylog gateway`` in a process of its own (``options``: more of its options);
    ``bootstrap`` once it listens. What it prints after that is read by a thread (a full
    pipe would stop the listener) and returned by ``stop``."""

    def __init__(self, ray_address: str, *options: str) -> None:
        raylog_script = os.path.join(os.path.dirname(sys.executable), "raylog")
        self.process = subprocess.Popen(
            [raylog_script, "gateway", "--address", ray_address, "--port", "0", *options],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.said: list[str] = []
        deadline = time.monotonic() + 120
        for line in self.process.stdout:
            self.said.append(line)
            found = re.search(r"advertised as (\S+)", line)
            if found:
                self.bootstrap = found.group(1)
                self.reader = threading.Thread(target=self.said.extend,
                                               args=(self.process.stdout,), daemon=True)
                self.reader.start()
                return
            if time.monotonic() > deadline:
                break
        self.process.kill()
        self.process.wait()
        raise RuntimeError("raylog gateway did not start listening: " + "".join(self.said))

    def stop(self) -> str:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join(10)
        return "".join(self.said).strip()


def produce_all(producer: KafkaProducer, topic: str, values: list[bytes]) -> tuple[float, int]:
    """confluent-kafka ``produce`` of every value to ``topic`` (``poll(0)`` every 10,000),
    then ``flush``: the seconds that took, and how many records were left undelivered."""
    started = time.perf_counter()
    for i, value in enumerate(values):
        producer.produce(topic, value)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(STALL_S * 4)
    return time.perf_counter() - started, left


class Steps:
    def __init__(self, mode: Mode, values: list[bytes], bootstrap: str) -> None:
        self.mode, self.values, self.bootstrap = mode, values, bootstrap
        admin = Admin()
        for name in ("native", "kafka"):
            admin.create_topic(name, PARTITIONS, 1, {"retention.ms": -1})
        self.native = [TopicPartition("native", p) for p in range(PARTITIONS)]
        self.kafka = [TopicPartition("kafka", p) for p in range(PARTITIONS)]
        self.producer = Producer()
        self.failed: list[Any] = []
        self.kafka_producer = KafkaProducer({"bootstrap.servers": bootstrap,
                                             "on_delivery": self._delivery_failed,
                                             **KAFKA_PRODUCER})
        self._probe = Consumer()
        self._probe.assign(self.native + self.kafka)

    def _records(self, tps: list[TopicPartition]) -> int:
        return sum(self._probe.end_offsets(tps).values())

    def _check_grew(self, tps: list[TopicPartition], before: int) -> None:
        grown = self._records(tps) - before
        if grown != len(self.values):
            raise RuntimeError(f"{tps[0].topic}: {len(self.values):,} records sent, the "
                               f"topic grew by {grown:,}")

    def _delivery_failed(self, error: Any, message: Any) -> None:
        self.failed.append(error)

    def native_produce(self) -> float:
        before = self._records(self.native)
        send, started = self.producer.send, time.perf_counter()
        for value in self.values:
            send("native", value)
        self.producer.flush()
        elapsed = time.perf_counter() - started
        self._check_grew(self.native, before)
        return elapsed

    def gateway_produce(self) -> float:
        before = self._records(self.kafka)
        self.failed.clear()
        elapsed, left = produce_all(self.kafka_producer, "kafka", self.values)
        if left or self.failed:
            raise RuntimeError(f"confluent-kafka: {left} undelivered, errors {self.failed[:3]}")
        self._check_grew(self.kafka, before)
        return elapsed

    def native_consume(self) -> float:
        n, seen, size = len(self.values), 0, 0
        started = time.perf_counter()
        with Consumer(auto_offset_reset="earliest") as consumer:
            consumer.assign(self.native)
            while seen < n:
                records = consumer.poll(timeout_ms=int(STALL_S * 1000))
                if not records:
                    raise RuntimeError(f"native consume stalled at {seen:,}")
                seen += len(records)
                size += sum(len(r.value) for r in records)
            elapsed = time.perf_counter() - started
        if seen < n or size != seen * RECORD_BYTES:
            raise RuntimeError(f"native consume read {seen:,} records of {size:,} bytes")
        return elapsed

    def gateway_consume(self) -> float:
        n, seen, size = len(self.values), 0, 0
        consumer = KafkaConsumer({"bootstrap.servers": self.bootstrap, **KAFKA_CONSUMER})
        started = time.perf_counter()
        consumer.assign([KafkaTopicPartition("kafka", p, 0) for p in range(PARTITIONS)])
        last = time.monotonic()
        while seen < n:
            messages = consumer.consume(KAFKA_CONSUME_BATCH, timeout=1.0)
            for m in messages:
                if m.error() is None:
                    seen += 1
                    size += len(m.value())
            if messages:
                last = time.monotonic()
            elif time.monotonic() - last > STALL_S:
                raise RuntimeError(f"confluent-kafka consume stalled at {seen:,}")
        elapsed = time.perf_counter() - started
        consumer.close()
        if size != seen * RECORD_BYTES:
            raise RuntimeError(f"gateway consume read {seen:,} records of {size:,} bytes")
        return elapsed

    def close(self) -> None:
        self.producer.close()
        self._probe.close()
        self.kafka_producer.flush(STALL_S)
        self.kafka_producer = None  # gone before the listener stops: no reconnect noise


def run(mode: Mode, root: Path) -> dict[str, Any]:
    started, load = time.perf_counter(), os.getloadavg()
    values = split_values(generate_values(mode.records).tobytes())
    with embedded_cluster(root / "data"):
        gateway = Gateway(ray.get_runtime_context().gcs_address)
        try:
            steps = Steps(mode, values, gateway.bootstrap)
            try:
                seconds = alternate(mode.repetitions, {
                    "native_produce": steps.native_produce,
                    "gateway_produce": steps.gateway_produce,
                    "native_consume": steps.native_consume,
                    "gateway_consume": steps.gateway_consume})
            finally:
                steps.close()
        finally:
            gateway_said = gateway.stop()
    return result_document(
        ratio_figures(seconds, mode.records, RATIOS), TARGETS, mode=mode.name,
        data={"description": describe_data("timestamps taken at send"),
              "records": mode.records},
        sections={"config": {"partitions": PARTITIONS, "kafka_producer": KAFKA_PRODUCER,
                             "kafka_consumer": KAFKA_CONSUMER,
                             "kafka_consume_batch": KAFKA_CONSUME_BATCH,
                             "kafka_records_compiled": compiled()},
                  "seconds": seconds, "gateway_output": gateway_said},
        machine=machine_info(), started=started, load_at_start=load)


def table(result: dict[str, Any]) -> str:
    return ratio_table(result, ("native_produce", "gateway_produce", "native_consume",
                                "gateway_consume"), RATIOS)


def headline(mode: Mode, result: dict[str, Any]) -> str:
    config = result["config"]
    return (f"Kafka listener against raylog's own clients, {mode.name} mode: "
            f"{result['data']['records']:,} records of 100 bytes per step, {config['partitions']}"
            f" partitions, best and median of {mode.repetitions} alternated rounds; "
            f"confluent-kafka consuming {config['kafka_consume_batch']} per call; the listener's "
            f"C helper {'built' if config['kafka_records_compiled'] else 'NOT built'}; "
            f"{result['machine']['cpu_count']} CPUs")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON, "200,000 records per step",
                         (QUICK, FULL), run, headline, table)


if __name__ == "__main__":
    sys.exit(main())
