"""A workload for fault tests: producers and a consumer running while something breaks, and
the history check of what they saw (tests/history.py).

:class:`Workload` runs producer threads, each sending unique values (``p<producer>-<index>``)
with ``acks="all"`` and recording every send and its future, and a consumer thread reading
every partition from the start, recording every record in the order it got them. The test
breaks things meanwhile, says when the cluster is healthy again (:meth:`healthy`: sends
made after that must succeed), then :meth:`finish` stops everything, reads every record once
more from the start to each partition's end, and returns the anomalies the history checker
finds: lost or duplicated acknowledged records, an offset holding two values, a consumer going
back, a producer's records out of order, futures that never resolved or resolved after
their deadline, acknowledgements at a negative offset.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raylog import Consumer, Producer, TopicPartition
from raylog.client.futures import RecordFuture
from raylog.errors import ProduceFailedError, RaylogError
from raylog.records.partitioner import key_partition
from tests import history
from tests.integration.conftest import consume_all, wait_for

DELIVERY_TIMEOUT_MS = 20_000
# Per producer. Enough that every fault finds batches in flight and sends queued behind them
# (three producers, 750 sends/s in all); more only makes every check after the faults read
# and compare more records (at 1,000 a test's 60 s made some 80,000) and starves the two
# cores the brokers recover on.
SENDS_PER_SECOND = 250
FINAL_READER = 1  # the reader id of finish()'s pass over the whole topic


@dataclasses.dataclass
class Sent:
    producer: int
    index: int
    value: bytes
    future: RecordFuture
    after_recovery: bool
    sent_at: float = 0.0             # monotonic s, just before send()
    deadline: float | None = None    # sent_at + the producer's delivery timeout
    key_partition: int | None = None
    resolved_at: float | None = None  # set by the future's callback

    def watch(self) -> None:
        """Note when the future resolves (its callback runs on the producer's thread)."""
        self.future.add_done_callback(self._resolved)

    def _resolved(self, _future: RecordFuture) -> None:
        self.resolved_at = time.monotonic()

    def record(self) -> history.Send:
        """The checker's view of the send: resolved or not, how, and when."""
        future = self.future
        times = {"sent_at": self.sent_at, "deadline": self.deadline,
                 "resolved_at": self.resolved_at, "key_partition": self.key_partition}
        if not future.done():
            return history.Send(self.producer, self.index, self.value, False, **times)
        error = future.exception(0)
        if error is not None:
            return history.Send(self.producer, self.index, self.value, True, error=error,
                                must_succeed=self.after_recovery, **times)
        meta = future.result(0)
        return history.Send(self.producer, self.index, self.value, True, meta.partition,
                            meta.offset, must_succeed=self.after_recovery, **times)


@ray.remote(num_cpus=0)
class NodeReader:
    """A consumer in a thread of an actor pinned to a node: it reads every partition from
    the start (from an in-sync replica on its node when there is one) until stopped."""

    def __init__(self, topic: str, partitions: int) -> None:
        import raylog

        self.reads: list[tuple[int, int, bytes]] = []
        self.error: str | None = None
        self.followers: set[int] = set()  # partitions it fetched from a follower
        self._stop = threading.Event()
        self._cluster = raylog.init(start_local=False, create=False)
        self._thread = threading.Thread(target=self._read, args=(topic, partitions),
                                        daemon=True)
        self._thread.start()

    def _read(self, topic: str, partitions: int) -> None:
        try:
            with Consumer(cluster=self._cluster, auto_offset_reset="earliest",
                          fetch_max_wait_ms=200) as consumer:
                tps = [TopicPartition(topic, p) for p in range(partitions)]
                consumer.assign(tps)
                while not self._stop.is_set():
                    try:
                        records = consumer.poll(timeout_ms=200)
                    except RaylogError:
                        continue
                    self.reads.extend((r.partition, r.offset, r.value) for r in records)
                    for tp in tps:
                        with contextlib.suppress(RaylogError):
                            meta = consumer._topic(topic).partitions[tp.partition]
                            if consumer._reader(tp).broker_id != meta.leader:
                                self.followers.add(tp.partition)
        except Exception as e:  # reported to the test
            self.error = repr(e)

    def stop(self) -> tuple[list[tuple[int, int, bytes]], str | None]:
        self._stop.set()
        self._thread.join(timeout=60)
        return self.reads, self.error

    def followers_read_from(self) -> list[int]:
        return sorted(self.followers)


class Workload:
    """Producers and a live consumer on ``topic`` until :meth:`finish`."""

    def __init__(self, topic: str, partitions: int, producers: int = 3,
                 sends_per_second: float = SENDS_PER_SECOND, keyed: bool = True,
                 producer_settings: dict[str, Any] | None = None,
                 reader_nodes: list[str] = ()) -> None:
        self.topic = topic
        self.partitions = partitions
        self.keyed = keyed
        self.pause_s = 10 / sends_per_second  # a short pause every 10 sends per producer
        self.settings = {"acks": "all", "linger_ms": 1, "batch_size": 8192,
                         "delivery_timeout_ms": DELIVERY_TIMEOUT_MS, **(producer_settings or {})}
        self.sent: list[list[Sent]] = [[] for _ in range(producers)]
        self.reads: list[history.Read] = []
        self.errors: list[BaseException] = []
        self.followers_read_from: list[int] = []  # partitions a node's reader read from a follower
        self._stop = threading.Event()
        self._recovered = threading.Event()
        self._threads = [threading.Thread(target=self._guard, args=(self._produce, i),
                                          daemon=True, name=f"workload-producer-{i}")
                         for i in range(producers)]
        self._threads.append(threading.Thread(target=self._guard, args=(self._consume, 0),
                                              daemon=True, name="workload-consumer"))
        # Consumers on broker nodes too: there they read from in-sync followers (KIP-392).
        self._node_readers = [NodeReader.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node, soft=False)).remote(topic, partitions) for node in reader_nodes]

    def __enter__(self) -> Workload:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=DELIVERY_TIMEOUT_MS / 1000 + 30)
        for i, reader in enumerate(self._node_readers):
            self.followers_read_from = sorted({*self.followers_read_from, *ray.get(
                reader.followers_read_from.remote(), timeout=60)})
            reads, error = ray.get(reader.stop.remote(), timeout=60)
            if error:
                self.errors.append(AssertionError(f"a node's reader failed: {error}"))
            self.reads.extend(history.Read(2 + i, *r) for r in reads)
            ray.kill(reader)
        self._node_readers = []

    # -- what the threads do ---------------------------------------------------------------------

    def _guard(self, body: Any, i: int) -> None:
        try:
            body(i)
        except BaseException as e:  # the test's waits look at this list and stop at once
            self.errors.append(e)
            raise

    def _produce(self, i: int) -> None:
        producer = Producer(**self.settings)
        delivery_s = producer.config.delivery_timeout_ms / 1000
        try:
            index = 0
            while not self._stop.is_set():
                value = b"p%d-%07d" % (i, index)
                key = b"key-%d" % (index % 17) if self.keyed else None
                after = self._recovered.is_set()  # before the send: it must succeed then
                sent_at = time.monotonic()
                future = producer.send(self.topic, value, key=key)
                sent = Sent(i, index, value, future, after, sent_at, sent_at + delivery_s,
                            None if key is None else key_partition(key, self.partitions))
                sent.watch()
                self.sent[i].append(sent)
                index += 1
                if index % 10 == 0:
                    time.sleep(self.pause_s)  # pacing: failures come from the faults
        finally:
            # Sends made while brokers were down may fail: the checker looks at each.
            with contextlib.suppress(ProduceFailedError):
                producer.close()

    def _consume(self, reader: int) -> None:
        with Consumer(auto_offset_reset="earliest", fetch_max_wait_ms=200) as consumer:
            consumer.assign([TopicPartition(self.topic, p) for p in range(self.partitions)])
            while not self._stop.is_set():
                try:
                    records = consumer.poll(timeout_ms=200)
                except RaylogError:  # a leader moving under it: the next poll goes on
                    continue
                self.reads.extend(history.Read(reader, r.partition, r.offset, r.value)
                                  for r in records)

    # -- what the test does ----------------------------------------------------------------------

    def check_threads(self) -> None:
        if self.errors:
            raise AssertionError(f"a workload thread failed: {self.errors[0]!r}")

    def acknowledged(self) -> int:
        self.check_threads()
        return sum(s.future.done() and s.future.exception(0) is None
                   for mine in self.sent for s in mine)

    def wait_acknowledged(self, more: int, timeout: float = 60) -> None:
        """Wait until ``more`` sends more than now are acknowledged (traffic is flowing)."""
        target = self.acknowledged() + more
        wait_for(lambda: self.acknowledged() >= target, timeout=timeout,
                 what=f"{more} more acknowledged sends")

    def healthy(self, sends_after: int = 300, timeout: float = 120) -> None:
        """The cluster is whole again: every send made from now on must succeed; wait until
        each producer has made ``sends_after`` of them, and they are resolved."""
        self._recovered.set()

        def enough() -> bool:
            self.check_threads()
            return all(sum(s.after_recovery and s.future.done() for s in mine) >= sends_after
                       for mine in self.sent)

        wait_for(enough, timeout=timeout, what="sends after recovery")

    def finish(self, timeout: float = 120, origin: float = 0.0) -> list[history.Anomaly]:
        """Stop, read everything once more, and return the anomalies of the history. A log
        that never holds as many records as were acknowledged is read as it is (the checker
        names the missing ones) and is the anomaly ``short_log``. Times in the anomalies are
        seconds after ``origin`` (a monotonic time)."""
        self.__exit__()
        assert not any(t.is_alive() for t in self._threads), "a workload thread never ended"
        self.check_threads()
        sends = [s.record() for mine in self.sent for s in mine]
        acked = sum(s.acked for s in sends)
        short = []
        try:
            final = consume_all(self.topic, self.partitions, expected=acked, timeout_s=timeout)
        except AssertionError as e:
            short = [history.Anomaly("short_log", f"{acked} records acknowledged: {e}")]
            final = consume_all(self.topic, self.partitions, expected=0, timeout_s=timeout)
        self.final = [history.Read(FINAL_READER, r.partition, r.offset, r.value)
                      for r in final]
        self.summary = {"sends": len(sends), "acknowledged": acked,
                        "failed": sum(s.error is not None for s in sends),
                        "live_reads": len(self.reads), "final_reads": len(final),
                        "followers_read_from": self.followers_read_from}
        return short + history.check(sends, [*self.reads, *self.final],
                                     complete_readers=[FINAL_READER], origin=origin)
