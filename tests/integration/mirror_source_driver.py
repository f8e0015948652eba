"""A driver of the mirror tests' source cluster, in a process of its own (the test process
is a driver of the session's cluster, and a process joins one Ray cluster).

Run as ``python -m tests.integration.mirror_source_driver ADDRESS``; it answers one JSON
line on stdout per JSON line on stdin (``{"cmd": ..., ...}`` -> ``{"ok": ..., "error":
...}``) until stdin closes. Producers run on a thread between ``produce-start`` and
``produce-stop``, sending records with keys (37 of them, so every partition gets some),
headers and explicit timestamps, so that everything a mirror must keep can be compared.
"""

from __future__ import annotations

import json
import pickle
import sys
import threading
import time
from typing import Any

import raylog
from raylog import Admin, Consumer, Producer
from tests.integration.conftest import consume_all, wait_for

# Explicit, distinct, and recent: retention by time must not remove them while tests run.
FIRST_TIMESTAMP_MS = int(time.time() * 1000)


class Driver:
    def __init__(self, address: str) -> None:
        self.cluster = raylog.init(address, start_local=False, create=False)
        self.admin = Admin(cluster=self.cluster)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0

    def create(self, topic: str, partitions: int, configs: dict[str, Any] | None = None) -> int:
        self.admin.create_topic(topic, partitions, configs=configs)
        return partitions

    def alter(self, topic: str, partitions: int | None = None,
              configs: dict[str, Any] | None = None) -> None:
        if partitions is not None:
            self.admin.add_partitions(topic, partitions)
        if configs:
            self.admin.alter_configs(topic, configs)

    def delete(self, topic: str) -> None:
        self.admin.delete_topic(topic)

    def produce_start(self, topics: list[str], per_tick: int, tick_s: float) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._produce, args=(topics, per_tick, tick_s),
                                        daemon=True)
        self._thread.start()

    def _produce(self, topics: list[str], per_tick: int, tick_s: float) -> None:
        with Producer(cluster=self.cluster, acks="all", linger_ms=5) as producer:
            while not self._stop.is_set():
                for topic in topics:
                    for _ in range(per_tick):
                        i = self.sent
                        producer.send(topic, f"value-{i}".encode(), key=f"key-{i % 37}".encode(),
                                      headers=[("seq", str(i).encode()), ("empty", None)],
                                      timestamp=FIRST_TIMESTAMP_MS + i)
                        self.sent += 1
                time.sleep(tick_s)

    def produce_some(self, topic: str, count: int) -> int:
        """``count`` records, acknowledged before this returns."""
        with Producer(cluster=self.cluster, acks="all") as producer:
            for i in range(count):
                producer.send(topic, f"{topic}-{i}".encode(), key=f"key-{i % 5}".encode(),
                              headers=[("n", str(i).encode())], timestamp=FIRST_TIMESTAMP_MS + i)
        return count

    def produce_stop(self) -> int:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.sent

    def records(self, topic: str, path: str) -> int:
        """Every record of ``topic`` per partition, pickled to ``path``."""
        partitions = self.cluster.topic(topic, refresh=True).num_partitions
        out: dict[int, list] = {p: [] for p in range(partitions)}
        for r in consume_all(topic, partitions, 0):
            out[r.partition].append((r.offset, r.timestamp, r.key, r.value, r.headers))
        with open(path, "wb") as f:
            pickle.dump(out, f)
        return sum(len(v) for v in out.values())

    def consume_group(self, group: str, topic: str, at_least: int) -> dict[str, int]:
        """Read ``at_least`` records of ``topic``, and some of each of its partitions, as a
        member of ``group``, commit what was read, leave; returns the committed offsets by
        partition. (Each partition read: the first answers may hold hundreds of records of
        one partition, and a partition never read has no position to commit.)"""
        with Consumer(cluster=self.cluster, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, max_poll_records=100) as consumer:
            consumer.subscribe([topic])
            seen = 0
            partitions: set[int] = set()

            def enough() -> bool:
                nonlocal seen
                records = consumer.poll(timeout_ms=200)
                seen += len(records)
                partitions.update(r.partition for r in records)
                assigned = {tp.partition for tp in consumer.assignment()}
                return seen >= at_least and bool(assigned) and assigned <= partitions

            wait_for(enough, timeout=60, interval=0,
                     what=f"{at_least} records of {topic} in {group}")
            consumer.commit()
            committed = self.admin.list_consumer_group_offsets(group)
        return {str(tp.partition): offset for tp, offset in committed.items()}


def main() -> None:
    driver = Driver(sys.argv[1])
    print(json.dumps({"ok": "ready"}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        command = request.pop("cmd").replace("-", "_")
        try:
            answer = {"ok": getattr(driver, command)(**request)}
        except Exception as e:  # the test reads the error
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer), flush=True)
    driver.produce_stop()


if __name__ == "__main__":
    main()
