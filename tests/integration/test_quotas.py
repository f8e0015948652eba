"""Client quotas on the test cluster (docs/quotas.md): a greedy producer held to its rate
while another producer on the same partition keeps its latency; a Kafka client told its
throttle time; ``raylog quotas`` and bad input. The brokers measure over 11 samples of
0.25 s (conftest.py), so a quota holds within about 3 s.

Every test sets quotas only for client ids of its own and deletes them after: the
controller's quotas live for the whole session.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer as KafkaProducer

from raylog import Admin, Producer
from raylog.cli import main
from raylog.errors import InvalidQuotaError
from raylog.kafka.gateway.quotas import ListenerQuotas
from raylog.quotas import DEFAULT, ClientQuotas, QuotaEntity, QuotaSettings
from tests.integration.conftest import QUOTA_WINDOW_SIZE_S, kafka_listener_backend, wait_for

WINDOW_S = 11 * float(QUOTA_WINDOW_SIZE_S)  # the whole window the brokers measure over


@contextlib.contextmanager
def quota(entity: QuotaEntity, **values: float) -> Iterator[None]:
    admin = Admin()
    admin.alter_quotas(entity, values)
    try:
        yield
    finally:
        admin.alter_quotas(entity, delete_quotas=list(values))


class Polite(threading.Thread):
    """Sends one small record at a time, every 20 ms, noting each one's latency."""

    def __init__(self, topic: str, client_id: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(client_id=client_id, linger_ms=0)
        self.topic = topic
        self.latencies: list[tuple[float, float]] = []  # (when sent, seconds to its ack)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.02):
            sent = time.monotonic()
            self.producer.send(self.topic, b"p" * 100).result(timeout=60)
            self.latencies.append((sent, time.monotonic() - sent))

    def median_since(self, start: float, end: float) -> float:
        return statistics.median(s for t, s in self.latencies if start <= t < end)


def test_a_greedy_producer_is_held_to_its_quota_while_another_keeps_its_latency(
        ray_cluster, topic_name):
    admin = Admin()
    admin.create_topic(topic_name, partitions=1, replication_factor=1)  # one leader
    greedy_id, polite_id = f"greedy-{uuid.uuid4().hex[:8]}", f"polite-{uuid.uuid4().hex[:8]}"
    rate = 100_000  # bytes/s
    polite = Polite(topic_name, polite_id)
    polite.start()
    wait_for(lambda: len(polite.latencies) >= 20, what="the polite producer's first records")
    before = time.monotonic()
    acked: list[tuple[float, int]] = []
    value = os.urandom(4000)
    with quota(QuotaEntity(client_id=greedy_id), producer_byte_rate=rate), \
            Producer(client_id=greedy_id, batch_size=32_000, linger_ms=5,
                     buffer_memory=256_000, compression_type="none") as greedy:
        # (quotas count the bytes sent, compressed: the same value again and again would
        # compress to little)
        stop = threading.Event()

        def flood() -> None:
            while not stop.is_set():
                greedy.send(topic_name, value).add_done_callback(
                    lambda f: acked.append((time.monotonic(), len(value))))

        flooding = threading.Thread(target=flood, daemon=True)
        flooding.start()
        try:
            wait_for(lambda: greedy.throttle_time_ms > 0, timeout=60,
                     what="the greedy producer's first throttled answer")
            held_from = time.monotonic()
            # past the first window (whose start the quota lets through at once), a window
            measured = (held_from + WINDOW_S, held_from + 2 * WINDOW_S)
            wait_for(lambda: time.monotonic() > measured[1], timeout=60,
                     what="the measured window to pass")
        finally:
            stop.set()
            flooding.join(timeout=120)
            polite.stop.set()
            polite.join(timeout=60)
    sent = sum(n for t, n in acked if measured[0] <= t < measured[1])
    achieved = sent / (measured[1] - measured[0])
    assert rate / 2 <= achieved <= 2 * rate, f"{achieved:.0f} B/s against a quota of {rate}"
    # the other producer on the same partition leader is never held back, and its latency
    # stays far from the greedy one's waits (a batch of 32 KB at 100 KB/s: about 0.3 s)
    assert polite.producer.throttle_time_ms == 0
    calm = polite.median_since(0, before)
    busy = polite.median_since(held_from, measured[1])
    assert busy <= 5 * calm + 0.1, f"median latency {busy:.3f} s, {calm:.3f} s before"
    polite.producer.close()


def test_a_kafka_client_is_told_its_throttle_time(ray_cluster, topic_name):
    Admin().create_topic(topic_name, partitions=1, replication_factor=1)
    client_id = f"kafka-{uuid.uuid4().hex[:8]}"
    throttles: list[float] = []
    listener_quotas = ListenerQuotas(ClientQuotas(QuotaSettings(11, float(QUOTA_WINDOW_SIZE_S))))
    # principal and client id: the most specific entity (a PLAINTEXT listener's user is
    # ANONYMOUS, as Kafka's)
    entity = QuotaEntity(user="ANONYMOUS", client_id=client_id)
    with quota(entity, producer_byte_rate=20_000), kafka_listener_backend(
            ray_cluster.raylog, listener={"quotas": listener_quotas}) as (bootstrap, _):
        wait_for(lambda: listener_quotas.quotas.quota("producer_byte_rate", "ANONYMOUS",
                                                      client_id) == 20_000,
                 what="the listener to follow the quota")
        producer = KafkaProducer({"bootstrap.servers": bootstrap, "client.id": client_id,
                                  "linger.ms": 5, "compression.type": "none",
                                  "throttle_cb": lambda event: throttles.append(
                                      event.throttle_time)})
        delivered = []

        def produced() -> bool:
            for _ in range(20):
                producer.produce(topic_name, b"k" * 5000,
                                 on_delivery=lambda err, msg: delivered.append(err))
            producer.poll(0.1)
            return bool(throttles)

        wait_for(produced, timeout=60, what="a throttle time reported to the Kafka client")
        assert producer.flush(60) == 0
    assert delivered and all(err is None for err in delivered)  # delayed, never failed
    assert max(throttles) > 0


def run(*argv: str) -> tuple[int, str]:
    import io

    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_cli_set_list_delete_and_bad_input(ray_cluster, capsys):
    client_id = f"cli-{uuid.uuid4().hex[:8]}"
    admin = Admin()
    assert run("quotas", "set", "--client-id", client_id,
               "producer_byte_rate=1048576,consumer_byte_rate=2097152")[0] == 0
    assert run("quotas", "set", "--user", "alice", "--client-id", client_id,
               "request_percentage=25")[0] == 0
    try:
        code, out = run("quotas", "list", "--client-id", client_id)
        assert code == 0
        assert f"client-id={client_id}\tproducer_byte_rate=1048576, " \
               f"consumer_byte_rate=2097152" in out
        assert f"user=alice,client-id={client_id}\trequest_percentage=25.0" in out
        assert admin.describe_quotas(client_id=client_id, strict=True) == {
            QuotaEntity(client_id=client_id): {"producer_byte_rate": 1048576,
                                               "consumer_byte_rate": 2097152}}
        # bad input: refused with the reason, nothing changed
        for argv, reason in ((["producer_byte_rate=-10"], "must be a number > 0"),
                             (["producer_bytes=10"], "unknown quota key 'producer_bytes'")):
            assert run("quotas", "set", "--client-id", client_id, *argv)[0] == 1
            assert reason in capsys.readouterr().err
        with pytest.raises(InvalidQuotaError, match="must be a number > 0"):
            admin.alter_quotas(QuotaEntity(user=DEFAULT), {"consumer_byte_rate": -1})
        with pytest.raises(InvalidQuotaError, match="unknown quota key"):  # past the client
            ray_cluster.raylog.controller.alter_quotas(
                [{"entity": {"client-id": client_id}, "set": {"io_thread_rate": 5}}])
        assert admin.describe_quotas(client_id=client_id)[QuotaEntity(client_id=client_id)] \
            == {"producer_byte_rate": 1048576, "consumer_byte_rate": 2097152}
        assert run("quotas", "delete", "--client-id", client_id, "consumer_byte_rate") == (
            0, f"client-id={client_id}: deleted consumer_byte_rate\n")
    finally:
        run("quotas", "delete", "--client-id", client_id)
        run("quotas", "delete", "--user", "alice", "--client-id", client_id)
    assert run("quotas", "list", "--client-id", client_id) == (0, "")
