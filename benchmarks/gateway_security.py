"""Produce throughput through the Kafka listener with TLS and SCRAM, against plaintext.

Run from the repository root (the certificates come from tests/tls.py)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/gateway_security.py [--quick] [--json PATH]

``--quick``: 200,000 records per step; the full run 1,000,000. Prints a Markdown table and
writes JSON (default ``benchmarks/results/gateway_security.json``).

Setup: an embedded single-node cluster (``raylog.init(address="local")``) and two ``raylog
gateway`` processes on it, as a user runs them: one PLAINTEXT, one SASL_SSL (a test CA's
certificate for 127.0.0.1, SCRAM-SHA-512, a user added to ``__raylog_users`` first). Two
topics of 6 partitions, replication factor 1, one per listener. Data: the 100-byte page
views of ``common.py``, keyless, generated before timing.

Steps, alternated one repetition each per round after a warm-up round (the machine is
shared); best and median of the timed rounds:

plaintext_produce  confluent-kafka through the PLAINTEXT listener, gateway.py's producer
                   settings (acks=1, lz4, linger.ms=5, errors-only delivery reports):
                   ``produce`` each value, ``flush``.
tls_produce        the same through the SASL_SSL listener, logged in with SCRAM-SHA-512
                   (one login per producer; the producer lives for the run, as an
                   application's does, so the records' cost is TLS's).

``tls_vs_plaintext`` = tls / plaintext (target >= 0.7). Checked outside the timed regions:
each produce grew its topic by exactly n records, with no delivery error.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import ray
from confluent_kafka import Producer as KafkaProducer
from gateway import (
    FULL,
    KAFKA_PRODUCER,
    PARTITIONS,
    QUICK,
    STALL_S,
    Gateway,
    Mode,
    produce_all,
)

from raylog import Admin, Consumer, TopicPartition
from raylog.kafka.auth.scram import Mechanism, make_credential
from raylog.kafka.gateway.users import UsersTopic
from raylog.kafka.records import compiled

from common import (
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

DEFAULT_JSON = RESULTS_DIR / "gateway_security.json"
RATIOS = {"tls_vs_plaintext": ("tls_produce_records_per_s", "plaintext_produce_records_per_s")}
TARGETS = {"tls_vs_plaintext": 0.7}
USER, PASSWORD = "bench", "bench-password-0123456789"
MECHANISM = "SCRAM-SHA-512"


class Steps:
    def __init__(self, values: list[bytes], plain: str, secure: str, ca: Path) -> None:
        self.values = values
        admin = Admin()
        for name in ("plain", "secure"):
            admin.create_topic(name, PARTITIONS, 1, {"retention.ms": -1})
        self.failed: list[Any] = []
        common = {"on_delivery": self._delivery_failed, **KAFKA_PRODUCER}
        self.producers = {
            "plain": KafkaProducer({"bootstrap.servers": plain, **common}),
            "secure": KafkaProducer({"bootstrap.servers": secure, **common,
                                     "security.protocol": "SASL_SSL",
                                     "sasl.mechanism": MECHANISM, "sasl.username": USER,
                                     "sasl.password": PASSWORD, "ssl.ca.location": str(ca)})}
        self._probe = Consumer()
        self._probe.assign([TopicPartition(t, p) for t in ("plain", "secure")
                            for p in range(PARTITIONS)])

    def _delivery_failed(self, error: Any, message: Any) -> None:
        self.failed.append(error)

    def _records(self, topic: str) -> int:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return sum(self._probe.end_offsets(tps).values())

    def _produce(self, topic: str) -> float:
        before = self._records(topic)
        self.failed.clear()
        elapsed, left = produce_all(self.producers[topic], topic, self.values)
        grown = self._records(topic) - before
        if left or self.failed or grown != len(self.values):
            raise RuntimeError(f"{topic}: {left} undelivered, errors {self.failed[:3]}, the topic "
                               f"grew by {grown:,} of {len(self.values):,}")
        return elapsed

    def plaintext_produce(self) -> float:
        return self._produce("plain")

    def tls_produce(self) -> float:
        return self._produce("secure")

    def close(self) -> None:
        self._probe.close()
        for producer in self.producers.values():
            producer.flush(STALL_S)
        self.producers.clear()  # gone before the listeners stop: no reconnect noise


def run(mode: Mode, root: Path) -> dict[str, Any]:
    from tests.tls import make_pki

    started, load = time.perf_counter(), os.getloadavg()
    values = split_values(generate_values(mode.records).tobytes())
    pki = make_pki(root / "pki", ("127.0.0.1", "localhost"))
    with embedded_cluster(root / "data") as cluster:
        UsersTopic(cluster).put(USER, [make_credential(PASSWORD, Mechanism.named(MECHANISM))])
        address = ray.get_runtime_context().gcs_address
        plain = Gateway(address)
        secure = None
        try:
            secure = Gateway(address, "--security-protocol", "SASL_SSL", "--sasl-mechanisms",
                             MECHANISM, "--ssl-certfile", str(pki.server_cert),
                             "--ssl-keyfile", str(pki.server_key))
            steps = Steps(values, plain.bootstrap, secure.bootstrap, pki.ca)
            try:
                seconds = alternate(mode.repetitions, {
                    "plaintext_produce": steps.plaintext_produce,
                    "tls_produce": steps.tls_produce})
            finally:
                steps.close()
        finally:
            said = {"plaintext": plain.stop(), "sasl_ssl": secure.stop() if secure else ""}
    return result_document(
        ratio_figures(seconds, mode.records, RATIOS), TARGETS, mode=mode.name,
        data={"description": describe_data("timestamps taken at send"),
              "records": mode.records},
        sections={"config": {"partitions": PARTITIONS, "kafka_producer": KAFKA_PRODUCER,
                             "secure": {"security.protocol": "SASL_SSL",
                                        "sasl.mechanism": MECHANISM},
                             "kafka_records_compiled": compiled()},
                  "seconds": seconds, "gateway_output": said},
        machine=machine_info(), started=started, load_at_start=load)


def table(result: dict[str, Any]) -> str:
    return ratio_table(result, ("plaintext_produce", "tls_produce"), RATIOS)


def headline(mode: Mode, result: dict[str, Any]) -> str:
    return (f"Kafka listener, SASL_SSL ({MECHANISM}) against PLAINTEXT, {mode.name} mode: "
            f"{result['data']['records']:,} records of 100 bytes per step, {PARTITIONS} "
            f"partitions, best and median of {mode.repetitions} alternated rounds; the "
            f"listener's C helper "
            f"{'built' if result['config']['kafka_records_compiled'] else 'NOT built'}; "
            f"{result['machine']['cpu_count']} CPUs")


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(argv, __doc__, DEFAULT_JSON, "200,000 records per step",
                         (QUICK, FULL), run, headline, table)


if __name__ == "__main__":
    sys.exit(main())
