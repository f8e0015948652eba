"""Read over and over while the faults go on: positions that must never go back (the group's
committed offsets, each partition's end offset: its high watermark), and how many replicas
of each partition are in sync (a partition with fewer than ``min.insync.replicas`` cannot
take acks=all writes, by design: its stall is no anomaly)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from raylog import Admin, Consumer, TopicPartition
from raylog.client.remote import ControllerClient
from raylog.errors import RaylogError


class Sampler:
    """Calls ``read`` (partition -> value) every ``interval`` s in a thread until stopped,
    keeping (when, partition, value) of every answer; a call that fails (the controller
    restarting or paused, a leader moving) is counted and tried again."""

    def __init__(self, name: str, read: Callable[[], dict[int, int]],
                 interval: float = 0.25) -> None:
        self.seen: list[tuple[float, int, int]] = []
        self.errors = 0
        self._read = read
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                found = self._read()
            except RaylogError:
                self.errors += 1
                continue
            at = time.monotonic()  # after the answer: one thread, so in order
            self.seen += [(at, p, value) for p, value in found.items()]

    def latest(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for _, partition, value in self.seen:
            out[partition] = value
        return out

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=150)


def committed_offsets(controller: ControllerClient, group_id: str, topic: str,
                      partitions: int) -> Sampler:
    """The group's committed offsets, as the coordinator answers them."""
    asked = [(topic, p) for p in range(partitions)]

    def read() -> dict[int, int]:
        found = controller.committed_offsets(group_id, asked)
        return {tp[1]: om[0] for tp, om in found.items() if om}

    return Sampler("committed-offsets", read, interval=0.5)


def end_offsets(topic: str, partitions: int) -> tuple[Sampler, Consumer]:
    """Each partition's end offset as a reader sees it (``list_offset("latest")`` on its
    leader); the consumer asking, to close after the sampler stopped."""
    consumer = Consumer()
    tps = [TopicPartition(topic, p) for p in range(partitions)]

    def read() -> dict[int, int]:
        return {tp.partition: end for tp, end in consumer.end_offsets(tps).items()}

    # Often: after a failover, the window in which a new leader's high watermark lags the
    # old one's is short.
    return Sampler("end-offsets", read, interval=0.05), consumer


def in_sync_replicas(admin: Admin, topic: str) -> Sampler:
    """How many replicas of each partition the controller has in sync (0 while it has no
    leader). While the controller hangs nothing is read: the last answer stands."""

    def read() -> dict[int, int]:
        return {i: len(p["isr"]) if p["leader"] is not None else 0
                for i, p in enumerate(admin.describe_topic(topic)["partitions"])}

    return Sampler("in-sync-replicas", read, interval=0.5)


def spans_below(samples: list[tuple[float, int, int]], minimum: int, until: float
                ) -> list[tuple[int, float, float]]:
    """(partition, from, to) of each span in which a partition's samples were below
    ``minimum``: from the first such sample to the next one that is not (or ``until``)."""
    out, since = [], {}
    for at, partition, value in sorted(samples):
        if value < minimum and partition not in since:
            since[partition] = at
        elif value >= minimum and partition in since:
            out.append((partition, since.pop(partition), at))
    out += [(partition, start, until) for partition, start in since.items()]
    return out
