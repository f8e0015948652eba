"""raylog's metrics on the Prometheus endpoint of every node of the test cluster, with the
values a known workload must give."""

from __future__ import annotations

import os
import re
import urllib.request
from collections import defaultdict

import ray

from raylog import Admin, Consumer, Producer, TopicPartition
from tests.integration.conftest import wait_for

SAMPLE = re.compile(r"^(ray_raylog_\w+)\{(.*)\} (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape() -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every raylog sample of every live node's metrics endpoint."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        for line in text.splitlines():
            found = SAMPLE.match(line)
            if found:
                samples[found[1]].append((dict(LABEL.findall(found[2])), float(found[3])))
    return samples


def total(samples: dict, name: str, **labels: str) -> float | None:
    """The sum over processes of a metric's samples with these labels; None if absent."""
    values = [v for tags, v in samples.get(name, [])
              if all(tags.get(k) == str(want) for k, want in labels.items())]
    return sum(values) if values else None


def test_a_known_workload_shows_on_the_metrics_endpoint(ray_cluster, topic_name):
    admin = Admin()
    admin.create_topic(topic_name, partitions=2)
    values = [os.urandom(100) for _ in range(500)]  # incompressible: stored bytes >= 50,000
    with Producer(linger_ms=5) as producer:
        for i, value in enumerate(values):
            producer.send(topic_name, value, key=b"k%d" % (i % 7))
    tps = [TopicPartition(topic_name, p) for p in range(2)]
    group = f"metrics-{topic_name}"
    with Consumer(group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        consumer.subscribe([topic_name])
        read = []
        wait_for(lambda: read.extend(consumer.poll(timeout_ms=200)) or len(read) >= 500,
                 timeout=60, what="the consumer reading 500 records")
        ends = consumer.end_offsets(tps)
        consumer.commit({tp: ends[tp] - 30 for tp in tps})  # 60 records behind
        def streams_shown() -> bool:  # while it reads, its streams are on the brokers' gauge
            consumer.poll(timeout_ms=100)
            return (total(scrape(), "ray_raylog_open_fetch_streams") or 0) >= 1

        wait_for(streams_shown, timeout=60, interval=1,
                 what="the consumer's fetch streams on the brokers' gauge")
    # The producer's process (this one) keeps its connections to the produce sockets.
    wait_for(lambda: (total(scrape(), "ray_raylog_socket_connections") or 0) >= 1,
             timeout=60, interval=1, what="this process's produce connections on the gauge")

    def shown() -> dict | None:
        # The gauges are the controller's: one series, the value cluster status gives. Both
        # are read at different moments (the gauge reaches the endpoint a report interval
        # later), so they must agree once the cluster holds still (earlier tests' brokers
        # may still be coming back).
        offline = admin.cluster_status()["offline_partitions"]
        samples = scrape()
        expected = {
            "records in": total(samples, "ray_raylog_records_in_total", topic=topic_name) == 500,
            "bytes in": (total(samples, "ray_raylog_bytes_in_total", topic=topic_name) or 0)
            >= 50_000,
            "records out": (total(samples, "ray_raylog_records_out_total", topic=topic_name)
                            or 0) >= 500,
            "bytes out": (total(samples, "ray_raylog_bytes_out_total", topic=topic_name)
                          or 0) >= 50_000,
            "produce latency": (total(samples, "ray_raylog_produce_latency_ms_count",
                                      topic=topic_name) or 0) >= 1,
            "fetch latency": (total(samples, "ray_raylog_fetch_latency_ms_count",
                                    topic=topic_name) or 0) >= 1,
            "lag": total(samples, "ray_raylog_consumer_group_lag", group=group,
                         topic=topic_name) == 60,
            "rebalances": (total(samples, "ray_raylog_consumer_group_rebalances_total",
                                 group=group) or 0) >= 1,
            "under-replicated": total(samples, "ray_raylog_under_replicated_partitions")
            is not None,
            "offline": total(samples, "ray_raylog_offline_partitions") == offline,
        }
        missing = [name for name, ok in expected.items() if not ok]
        assert not missing, missing  # wait_for reports the last one
        return samples

    wait_for(shown, timeout=60, interval=1, what="the workload's metrics")
