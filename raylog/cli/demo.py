"""``raylog demo``: page views from simulated microservices, produced and read back.

Each service is a Ray task with its own Producer, writing page views keyed by user to the
``pageviews`` topic. A consumer then reads the run's records from every partition and the
demo proves, record by record, that each arrived exactly once and that every partition holds
each service's records in the order that service sent them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from itertools import pairwise
from typing import Any, TextIO

import ray

from raylog.util.cluster_names import DATA_DIR_ENV
from raylog.util.progress import Progress

DEMO_TOPIC = "pageviews"
SERVICES = ["web", "mobile", "checkout", "search", "recommend", "ads", "account", "cart"]
PAGES = ["/", "/home", "/search", "/product/1", "/product/2", "/product/3", "/cart",
         "/checkout", "/account", "/help", "/deals", "/blog"]


def page_view(rng: random.Random, run: str, service: str, seq: int) -> tuple[bytes, bytes]:
    """One page view: (key, value); the key is the user, the value a JSON document."""
    user = f"user-{rng.randrange(5000):04d}"
    value = {"run": run, "service": service, "seq": seq, "user": user,
             "page": rng.choice(PAGES), "duration_ms": rng.randrange(20, 4000)}
    return user.encode(), json.dumps(value, separators=(",", ":")).encode()


@ray.remote(num_cpus=0)
def run_service(topic: str, run: str, service: str, count: int, seed: int) -> dict[str, Any]:
    """A microservice: produce ``count`` page views with its own producer."""
    from raylog import Producer

    rng = random.Random(seed)
    started = time.perf_counter()
    with Producer(linger_ms=20) as producer:
        for seq in range(count):
            key, value = page_view(rng, run, service, seq)
            producer.send(topic, value, key=key, headers=[("service", service.encode())])
        producer.flush()
    return {"service": service, "sent": count, "seconds": time.perf_counter() - started}


def read_run(cluster: Any, topic: str, run: str, start: dict, expected: int,
             timeout_s: float = 120.0, shown: Progress | None = None) -> list:
    """Every record of this run, from the offsets the topic had before it, with its parsed
    page view: (record, document) pairs."""
    from raylog import Consumer

    records: list = []
    with Consumer(cluster=cluster) as consumer:
        consumer.assign(list(start))
        for tp, offset in start.items():
            consumer.seek(tp, offset)
        deadline = time.monotonic() + timeout_s
        while len(records) < expected and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=500):
                try:
                    doc = json.loads(record.value)
                except (TypeError, ValueError):
                    continue  # not a page view: someone else's record in the topic
                if isinstance(doc, dict) and doc.get("run") == run:
                    records.append((record, doc))
            if shown is not None:
                shown.update(len(records) - shown.done)
    return records


def _produce(tasks: list, consumer: Any, start: dict, total: int) -> list[dict]:
    """Wait for the services, showing how many of their records the partitions hold."""
    from raylog.client.remote import resolve
    from raylog.util.progress import progress

    pending = list(tasks)
    with progress(total, "producing", "records") as shown:
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
            ends = consumer.end_offsets(list(start))
            held = min(sum(ends[tp] - start[tp] for tp in start), total)
            shown.update(max(held - shown.done, 0))
    return resolve(tasks)


def check(records: list, sent: dict[str, int]) -> tuple[list[dict], list[dict], bool]:
    """Per-service and per-partition verdicts on the (record, document) pairs read back."""
    by_partition: dict[int, list] = defaultdict(list)
    for record, doc in records:
        by_partition[record.partition].append((record, doc))
    seqs: dict[str, Counter] = defaultdict(Counter)
    out_of_order: Counter = Counter()
    partitions = []
    for partition, rows in sorted(by_partition.items()):
        offsets = [r.offset for r, _ in rows]
        gaps = sum(1 for a, b in pairwise(offsets) if b != a + 1)
        last_seq: dict[str, int] = {}
        for _, doc in rows:
            service, seq = doc["service"], doc["seq"]
            seqs[service][seq] += 1
            if seq <= last_seq.get(service, -1):
                out_of_order[service] += 1
            last_seq[service] = seq
        partitions.append({"partition": partition, "records": len(rows),
                           "first_offset": offsets[0], "last_offset": offsets[-1],
                           "gaps": gaps})
    services = []
    for service, count in sent.items():
        seen = seqs[service]
        services.append({
            "service": service, "sent": count, "received": sum(seen.values()),
            "duplicates": sum(n - 1 for n in seen.values() if n > 1),
            "missing": sum(1 for seq in range(count) if seq not in seen),
            "out_of_order": out_of_order[service],
        })
    ok = all(s["duplicates"] == s["missing"] == s["out_of_order"] == 0 for s in services) and \
        all(p["gaps"] == 0 for p in partitions)
    return services, partitions, ok


def _table(rows: list[dict], out: TextIO) -> None:
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    out.write("  ".join(c.rjust(widths[c]) for c in columns) + "\n")
    for row in rows:
        out.write("  ".join(str(row[c]).rjust(widths[c]) for c in columns) + "\n")


def run_demo(services: int = 4, records_per_service: int = 25_000, partitions: int = 6,
             address: str | None = None, out: TextIO | None = None) -> int:
    import sys

    import raylog
    from raylog import Admin, TopicPartition
    from raylog.util.progress import progress

    out = out or sys.stdout
    services = max(1, min(services, len(SERVICES)))
    embedded = not ray.is_initialized()
    data_dir = tempfile.mkdtemp(prefix="raylog-demo-") if embedded else None
    try:
        cluster = raylog.init(address, data_dir=data_dir)
        embedded = embedded and cluster.embedded
        admin = Admin(cluster=cluster)
        if DEMO_TOPIC not in admin.list_topics():
            admin.create_topic(DEMO_TOPIC, partitions=partitions)
        count = cluster.topic(DEMO_TOPIC, refresh=True).num_partitions
        tps = [TopicPartition(DEMO_TOPIC, p) for p in range(count)]
        from raylog import Consumer

        with Consumer(cluster=cluster) as probe:
            probe.assign(tps)
            start = probe.end_offsets(tps)
        run = uuid.uuid4().hex[:8]
        names = SERVICES[:services]
        out.write(f"raylog demo: {services} services x {records_per_service} page views -> "
                  f"topic {DEMO_TOPIC!r} ({count} partitions)"
                  f"{' on an embedded local cluster' if embedded else ''}\n")
        total = services * records_per_service
        began = time.perf_counter()
        with Consumer(cluster=cluster) as probe:
            probe.assign(tps)
            reports = _produce([run_service.remote(DEMO_TOPIC, run, name, records_per_service,
                                                   i) for i, name in enumerate(names)],
                               probe, start, total)
        produced_s = time.perf_counter() - began
        began = time.perf_counter()
        with progress(total, "reading back", "records") as shown:
            records = read_run(cluster, DEMO_TOPIC, run, start, total, shown=shown)
        consumed_s = time.perf_counter() - began
        by_service, by_partition, ok = check(records, {r["service"]: r["sent"]
                                                       for r in reports})
        out.write("\nper service\n")
        _table(by_service, out)
        out.write("\nper partition\n")
        _table(by_partition, out)
        out.write(f"\nproduced {total} records in {produced_s:.1f} s, read them back in "
                  f"{consumed_s:.1f} s\n")
        if ok and len(records) == total:
            out.write("OK: every record arrived exactly once, in order within its partition\n")
            return 0
        out.write("FAILED: see the rows above with duplicates, missing, out-of-order or gaps\n")
        return 1
    finally:
        if embedded:
            ray.shutdown()
            raylog.client.connection.reset_default()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
            os.environ.pop(DATA_DIR_ENV, None)
