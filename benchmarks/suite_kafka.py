"""Apache Kafka's side of the suite's workloads, with the client a Python user would pick:
confluent-kafka (librdkafka) for producing, consuming and the latency probe, Spark's own
``format("kafka")`` source, and ``ray.data.read_kafka``. kafka_peer.py starts the brokers.

The producer's settings are raylog's defaults where both have one (acks=1, linger.ms=5,
LZ4), librdkafka's otherwise (batch.size 1,000,000 bytes, idempotence off). It runs in the
suite's driver and serves librdkafka's queue when it is full (``BufferError``), as a user's
loop must. The consumer (gateway.py's settings: ``fetch.queue.backoff.ms`` 10, 500 records
per ``consume``) is assigned every partition from the beginning and touches every value
(``len``), as raylog's.

The same ``kafka_produce`` and ``kafka_consume`` against raylog's Kafka-protocol listener
(``raylog_listener``) give "confluent-kafka -> raylog".
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import ray
from suite_raylog import STAMP_BYTES, StampedProbe, paced_send, probe_latencies

PRODUCER_SETTINGS = {"acks": "1", "linger.ms": 5, "compression.type": "lz4",
                     "enable.idempotence": False}
PROBE_POLL_S = 0.1
PROBE_TIMEOUT_S = 300.0     # librdkafka at linger.ms=0 falls behind 10,000/s here


def producer(bootstrap: str, **settings: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS, **settings})


def kafka_produce(client: Any, topic: str, values: list[bytes]) -> None:
    """``produce`` every value (no key), serving the client's queue when full; then flush."""
    produce, poll = client.produce, client.poll
    for i, value in enumerate(values):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:  # the queue is full until librdkafka has sent some
                poll(0.005)
        if not i & 0x3FF:
            poll(0)
    if remaining := client.flush(120):
        raise RuntimeError(f"{remaining:,} records still queued after flush")


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of ``topic``'s high watermarks."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "raylog-bench-offsets"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                   for p in range(partitions))
    finally:
        consumer.close()


def kafka_consume(bootstrap: str, topic: str, partitions: int, count: int) -> tuple[int, int]:
    """Read ``count`` records of ``topic`` from the beginning of every partition; (records,
    value bytes) read."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from gateway import KAFKA_CONSUME_BATCH, KAFKA_CONSUMER

    # gateway.py's consumer: librdkafka's 1 s fetch.queue.backoff.ms left the broker idle
    # between fetches, against Kafka as against raylog's listener.
    consumer = Consumer({"bootstrap.servers": bootstrap, **KAFKA_CONSUMER,
                         "group.id": "raylog-bench-consume", "enable.partition.eof": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        seen = size = 0
        deadline = time.monotonic() + 300
        while seen < count:
            for message in consumer.consume(KAFKA_CONSUME_BATCH, 1.0):
                if message.error() is not None:
                    raise RuntimeError(f"Kafka consumer: {message.error()}")
                size += len(message.value())
                seen += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"read {seen:,} of {count:,} records from Kafka in 300 s")
        return seen, size
    finally:
        consumer.close()


# -- end-to-end latency ----------------------------------------------------------------------

@ray.remote(num_cpus=0, max_restarts=0)
class KafkaLatencyProbe(StampedProbe):
    """suite_raylog.LatencyProbe's twin on Kafka: a confluent-kafka consumer of every
    partition in its own process; ``arm`` assigns it at the high watermarks and starts the
    polling thread."""

    timeout_s = PROBE_TIMEOUT_S

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from confluent_kafka import Consumer

        super().__init__(Consumer({"bootstrap.servers": bootstrap,
                                   "group.id": "raylog-bench-latency",
                                   "enable.auto.commit": False,
                                   "fetch.wait.max.ms": 100}))
        self.topic, self.partitions = topic, partitions

    def arm(self, expected: int) -> None:
        from confluent_kafka import TopicPartition

        ends = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        for tp in ends:  # positions fixed now, before any record is sent
            tp.offset = self.consumer.get_watermark_offsets(tp, timeout=30)[1]
        self.consumer.assign(ends)
        self._start(expected)

    def _fetch(self) -> list[Any]:
        # consume(n, timeout) waits for n messages or the timeout: poll returns at the
        # first one, as raylog's poll does, then consume(n, 0) takes the rest
        first = self.consumer.poll(PROBE_POLL_S)
        return [] if first is None else [first, *self.consumer.consume(10_000, 0)]

    @staticmethod
    def _stamp(message: Any) -> int:
        if message.error() is not None:
            raise RuntimeError(str(message.error()))
        return int.from_bytes(message.value()[:STAMP_BYTES], "big")


class _Sender:
    """A confluent-kafka producer in suite_raylog.paced_send's shape (``send``, ``flush``):
    ``poll(0)`` after each send serves librdkafka's callbacks in the caller's thread."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def send(self, topic: str, value: bytes) -> None:
        self.client.produce(topic, value)
        self.client.poll(0)

    def flush(self) -> None:
        if remaining := self.client.flush(PROBE_TIMEOUT_S):
            raise RuntimeError(f"{remaining:,} records still queued after flush")


def measure_kafka_latency(probe: Any, bootstrap: str, topic: str, rate: int, seconds: float,
                          settings: dict[str, Any]) -> np.ndarray:
    """Latencies (ms) of one paced run through a new confluent-kafka producer, as
    suite_raylog.measure_latency does through a raylog one."""
    count = int(rate * seconds)
    client = producer(bootstrap, **settings)
    client.produce(topic, bytes(STAMP_BYTES) + b"warm-up")  # metadata, not counted
    client.flush(30)
    ray.get(probe.arm.remote(count))
    paced_send(_Sender(client), topic, rate, seconds)
    return probe_latencies(probe, count)


# -- Spark and Ray Data --------------------------------------------------------------------------

def spark_configs(lib: Any) -> dict[str, str]:
    """Spark settings putting the Kafka source's jars (those pyspark lacks) on the driver's
    and the executors' JVM classpaths, beside Spark's own jars. Not ``spark.jars``: classes
    loaded by the task's class loader there failed to deserialize their partitions on RayDP's
    executors (a ClassCastException of Scala's List$SerializationProxy); RayDP starts its
    executors with ``raydp.executor.extraClassPath``, not Spark's executor setting."""
    import os
    from pathlib import Path

    import pyspark
    from kafka_peer import spark_source_jars

    jars = os.pathsep.join(str(j) for j in spark_source_jars(
        lib, Path(pyspark.__file__).parent / "jars"))
    return {"spark.driver.extraClassPath": jars, "raydp.executor.extraClassPath": jars,
            "spark.ui.showConsoleProgress": "false"}


def kafka_frame(spark: Any, bootstrap: str, topic: str) -> Any:
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("endingOffsets", "latest").load())


def read_kafka_dataset(bootstrap: str, topic: str) -> Any:
    return ray.data.read_kafka(topic, bootstrap_servers=bootstrap)


@contextlib.contextmanager
def raylog_listener(ray_address: str) -> Iterator[str]:
    """raylog's Kafka listener for the Ray cluster at ``ray_address``, stopped after the
    block: its bootstrap address. ``raylog gateway`` in a process of its own, as a user runs
    it (gateway.py's ``Gateway``): in the driver it would share the interpreter lock with the
    confluent-kafka loop it serves."""
    from gateway import Gateway

    gateway = Gateway(ray_address)
    try:
        yield gateway.bootstrap
    finally:
        gateway.stop()
