"""raylog's metrics, exported through ``ray.util.metrics``.

Every Ray node serves its processes' metrics in Prometheus' text format on its metrics
export port (``ray.nodes()[i]["MetricsExportPort"]``; ``ray start --metrics-export-port``),
which Ray's Prometheus service discovery already finds. Ray prefixes each name with
``ray_`` and counters get ``_total``: ``raylog_records_in`` is scraped as
``ray_raylog_records_in_total``. Each process reports its own series (a ``WorkerId``
label): sum them per topic.

Brokers report what clients write and read (replication between brokers is not counted),
the controller the cluster's health and its groups. A Grafana dashboard over these is in
``docs/grafana/raylog.json``.

The Ray metric objects are made on first use in a process, behind :class:`Recorder`, so
code that records metrics runs (and is tested) without Ray; the counting rules
(:func:`partition_change_counts`, :func:`partition_health`, :func:`rebalances`) are plain
functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)

LATENCY_BOUNDARIES_MS = [0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]


class Metric(NamedTuple):
    kind: str  # "counter", "gauge" or "histogram"
    description: str
    tags: tuple[str, ...] = ()


METRICS: dict[str, Metric] = {
    "raylog_bytes_in": Metric("counter", "Bytes of record batches producers wrote, as "
                                         "stored (compressed)", ("topic",)),
    "raylog_records_in": Metric("counter", "Records producers wrote", ("topic",)),
    "raylog_bytes_out": Metric("counter", "Bytes of record batches sent to consumers and "
                                          "readers (Ray Data, Spark)", ("topic",)),
    "raylog_records_out": Metric("counter", "Records in the batches sent to consumers and "
                                            "readers", ("topic",)),
    "raylog_produce_latency_ms": Metric("histogram", "Time a broker took to answer a produce "
                                                     "request (acks=all: until the ISR has it)",
                                        ("topic",)),
    "raylog_fetch_latency_ms": Metric("histogram", "Time a broker took to answer a fetch, its "
                                                   "long-poll wait included", ("topic",)),
    "raylog_open_fetch_streams": Metric("gauge", "Consumers' fetch streams a broker's "
                                                 "process is answering (stream_fetches)"),
    "raylog_socket_connections": Metric("gauge", "Client processes' connections to a "
                                                 "broker process's data socket"),
    "raylog_throttle_time_ms": Metric("counter", "Time answers to a client were held back by "
                                                 "its quota (docs/quotas.md)",
                                      ("quota", "client_id")),
    "raylog_under_replicated_partitions": Metric("gauge", "Partitions whose ISR lacks some of "
                                                          "their replicas"),
    "raylog_offline_partitions": Metric("gauge", "Partitions without a live leader"),
    "raylog_isr_shrinks": Metric("counter", "Replicas that left a partition's ISR",
                                 ("topic",)),
    "raylog_isr_expands": Metric("counter", "Replicas that joined a partition's ISR",
                                 ("topic",)),
    "raylog_leader_elections": Metric("counter", "Partitions given a new leader",
                                      ("topic",)),
    "raylog_consumer_group_lag": Metric("gauge", "Records between a group's committed offset "
                                                 "and the partition's end",
                                        ("group", "topic", "partition")),
    "raylog_consumer_group_rebalances": Metric("counter", "Rebalances (new generations) of a "
                                                          "consumer group", ("group",)),
}


def _ray_metric(name: str, metric: Metric) -> Any:
    from ray.util import metrics

    if metric.kind == "counter":
        return metrics.Counter(name, description=metric.description, tag_keys=metric.tags)
    if metric.kind == "gauge":
        return metrics.Gauge(name, description=metric.description, tag_keys=metric.tags)
    return metrics.Histogram(name, description=metric.description,
                             boundaries=LATENCY_BOUNDARIES_MS, tag_keys=metric.tags)


class Recorder:
    """Records raylog's metrics in this process. ``factory`` makes a metric object with
    ``inc``, ``set`` and ``observe`` (Ray's by default); a metric that cannot be recorded
    is logged once and dropped, never failing the request it describes."""

    def __init__(self, factory: Callable[[str, Metric], Any] = _ray_metric) -> None:
        self._factory = factory
        self._made: dict[str, Any] = {}
        self._broken: set[str] = set()

    def _metric(self, name: str) -> Any:
        made = self._made.get(name)
        if made is None:
            made = self._made[name] = self._factory(name, METRICS[name])
        return made

    def _record(self, name: str, method: str, value: float, tags: Mapping[str, object]
                ) -> None:
        if name in self._broken:
            return
        try:
            getattr(self._metric(name), method)(
                value, tags={k: str(v) for k, v in tags.items()} or None)
        except Exception:  # metrics must never break what they measure
            self._broken.add(name)
            logger.exception("metric %s cannot be recorded; dropping it", name)

    def inc(self, name: str, value: float = 1, **tags: object) -> None:
        if value:
            self._record(name, "inc", value, tags)

    def set(self, name: str, value: float, **tags: object) -> None:
        self._record(name, "set", value, tags)

    def observe(self, name: str, value: float, **tags: object) -> None:
        self._record(name, "observe", value, tags)


_recorder: Recorder | None = None


def recorder() -> Recorder:
    """This process's recorder."""
    global _recorder
    if _recorder is None:
        _recorder = Recorder()
    return _recorder


# -- the counting rules --------------------------------------------------------------------------

def partition_change_counts(old_leader: int | None, old_isr: Iterable[int],
                            new_leader: int | None, new_isr: Iterable[int]) -> dict[str, int]:
    """What a change of a partition's leader and ISR counts as: a leader election when it
    gets a leader other than the one it had, an ISR shrink per replica that left the ISR
    and an expand per replica that joined it."""
    before, after = set(old_isr), set(new_isr)
    return {"raylog_leader_elections": int(new_leader is not None and new_leader != old_leader),
            "raylog_isr_shrinks": len(before - after),
            "raylog_isr_expands": len(after - before)}


def partition_health(partitions: Iterable[Any], live: set[int]) -> tuple[int, int]:
    """(under-replicated, offline) among partitions with ``replicas``, ``isr`` and
    ``leader``, given the live brokers."""
    under = offline = 0
    for p in partitions:
        under += len(p.isr) < len(p.replicas)
        offline += p.leader is None or p.leader not in live
    return under, offline


def rebalances(seen: dict[str, int] | None, generations: Mapping[str, int]
               ) -> tuple[dict[str, int], dict[str, int]]:
    """New generations per group since ``seen`` (None on this process's first look), and
    what is seen now. At the first look nothing counts (those generations were counted
    before a controller restart, or came before anyone looked); a group that appears later
    counts every generation it has."""
    out = {}
    for group, generation in generations.items():
        before = generation if seen is None else seen.get(group, 0)
        if generation > before:
            out[group] = generation - before
    return out, dict(generations)
