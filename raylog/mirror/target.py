"""The target side of a mirror: where a partition's copy stopped, and appending to it.

The mirror is a driver of the target cluster and calls its partition leaders through
raylog's wrappers (``ReplicaClient``). :func:`last_batch` reads the last batch below a
partition's high watermark, whose producer fields say where the copy stopped
(:mod:`.position`). :class:`PartitionAppender` appends numbered batches in order, a few at a
time; on a retriable failure it waits (:class:`.retry.Backoff`), refreshes the metadata and
sends every unanswered batch again, in order. Sending again is always safe: the leader
answers a batch it holds already (same producer id and sequence) with its first answer.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

from raylog.client.connection import RaylogCluster
from raylog.client.remote import ReplicaClient, appended, discard, resolve
from raylog.errors import OutOfOrderSequenceError, RaylogError
from raylog.mirror.position import resume_offset, source_range
from raylog.mirror.retry import Backoff, Retrying
from raylog.records.header import BatchHeader, iter_headers
from raylog.storage import AppendInfo
from raylog.types import EARLIEST, LATEST

SCAN_BYTES = 8 << 20
# A leader that keeps refusing a batch as out of order has lost batches before it (acks=1
# and a failover): the copier starts over from what the target holds.
MAX_OUT_OF_ORDER = 3


def last_batch(cluster: RaylogCluster, topic: str, partition: int, retrying: Retrying
               ) -> tuple[BatchHeader | None, int, int]:
    """(the header of the last batch below the high watermark or None, the log start, the
    high watermark) of a target partition."""
    def read() -> tuple[BatchHeader | None, int, int]:
        leader, start, end = _leader_and_bounds(cluster, topic, partition)
        if end <= start:
            return None, start, end
        # A fetch returns at least the whole batch holding ``end - 1``. Should compaction
        # have removed that batch, the last one left is found reading forward.
        headers = _headers_below(leader, end - 1, 1, end)
        found = headers[-1] if headers else _scan(leader, start, end)
        return found, start, end

    return retrying.call(f"reading the end of {topic}-{partition} on the target", read)


def resume_at(cluster: RaylogCluster, topic: str, partition: int, source_offset: int,
              retrying: Retrying) -> int | None:
    """The target offset a consumer resumes at whose next source record is
    ``source_offset``, found in the target's own batches (each says which source offsets it
    holds): a binary search of a few fetches. None when the partition is empty; its log
    start when everything it holds came from above ``source_offset``."""
    def search() -> int | None:
        leader, start, end = _leader_and_bounds(cluster, topic, partition)
        lo, hi, best = start, end, None
        while lo < hi:
            mid = (lo + hi) // 2
            header = next(iter(_headers_below(leader, mid, 1, end)), None)
            if header is None:
                hi = mid
            elif source_range(header)[0] <= source_offset:
                best, lo = header, header.next_offset
            else:
                hi = min(header.base_offset, mid)
        if best is None:
            return None if end <= start else start
        return resume_offset(best, source_offset)

    return retrying.call(f"looking up source offset {source_offset} in {topic}-{partition}",
                         search)


def _leader_and_bounds(cluster: RaylogCluster, topic: str, partition: int
                       ) -> tuple[ReplicaClient, int, int]:
    """The partition's leader (metadata refreshed), its log start and its high watermark."""
    leader = cluster.topic(topic, refresh=True).partitions[partition].leader_client()
    earliest, latest = resolve([leader.list_offset(EARLIEST), leader.list_offset(LATEST)])
    return leader, earliest[0], latest[0]


def _headers_below(leader: ReplicaClient, offset: int, max_bytes: int, end: int
                   ) -> list[BatchHeader]:
    """The headers of the batches a fetch from ``offset`` returns, those starting below
    ``end``."""
    data = resolve(leader.fetch(offset, max_bytes, 0, 1)).data
    return [h for _, h in iter_headers(data, verify=False) if h.base_offset < end]


def _scan(leader: ReplicaClient, start: int, end: int) -> BatchHeader | None:
    """The last batch header in [start, end), reading forward."""
    found, at = None, start
    while at < end:
        headers = _headers_below(leader, at, SCAN_BYTES, end)
        if not headers:
            return found
        found, at = headers[-1], headers[-1].next_offset
    return found


class _Pending:
    __slots__ = ("data", "done", "ref")

    def __init__(self, data: bytes, done: Callable[[AppendInfo], None]) -> None:
        self.data, self.done, self.ref = data, done, None


class PartitionAppender:
    """Appends numbered batches to one target partition in the order given, at most
    ``max_in_flight`` at once (no more than the leader remembers per producer, so a batch
    sent again is always recognised). Not safe for concurrent use: one copier owns it.

    ``done(info)`` runs for each batch once the leader acknowledged it, in order, with the
    offsets where it is (a batch the leader held already is answered with its first answer).
    A failure that is not retriable is raised, and so is an answer that is not an
    acknowledgement (a negative offset); OutOfOrderSequenceError (UnknownProducerIdError too)
    after MAX_OUT_OF_ORDER attempts.
    """

    def __init__(self, cluster: RaylogCluster, topic: str, partition: int, *, acks: int | str,
                 max_in_flight: int, request_timeout_ms: int, backoff: Backoff,
                 report: Callable[[str], None], stop: threading.Event | None = None) -> None:
        self.cluster, self.topic, self.partition = cluster, topic, partition
        self.acks, self.max_in_flight = acks, max_in_flight
        self.request_timeout_ms = request_timeout_ms
        self.backoff, self.report = backoff, report
        self.stop = stop or threading.Event()
        self._in_flight: collections.deque[_Pending] = collections.deque()
        self._refresh = False
        self._out_of_order = 0

    def send(self, data: bytes, done: Callable[[AppendInfo], None], *,
             after_all: bool = False) -> None:
        """Queue one batch; ``after_all``: only once every batch before it is acknowledged
        (the first batch of a new producer id)."""
        if after_all:
            self.drain()
        while len(self._in_flight) >= self.max_in_flight:
            self._complete_oldest()
        pending = _Pending(data, done)
        self._in_flight.append(pending)
        self._submit(pending)

    def drain(self) -> None:
        """Wait until every batch sent is acknowledged."""
        while self._in_flight:
            self._complete_oldest()

    def abandon(self) -> None:
        """Stop waiting for the batches in flight (the copier is stopping or starting over);
        their answers are read and dropped."""
        for pending in self._in_flight:
            discard(pending.ref)
        self._in_flight.clear()

    def _submit(self, pending: _Pending) -> None:
        try:
            leader = self.cluster.topic(self.topic, refresh=self._refresh) \
                .partitions[self.partition].leader_client()
            self._refresh = False
            pending.ref = leader.append(pending.data, self.acks, self.request_timeout_ms)
        except RaylogError as e:
            if not e.retriable:
                raise
            pending.ref = e  # resolved below as this failure

    def _complete_oldest(self) -> None:
        pending = self._in_flight[0]
        try:
            if isinstance(pending.ref, RaylogError):
                raise pending.ref
            info = appended(resolve(pending.ref, timeout=self.request_timeout_ms / 1000 + 30),
                            self.topic, self.partition)
        except RaylogError as e:
            if not e.retriable or self.stop.is_set():
                raise
            if isinstance(e, OutOfOrderSequenceError):
                self._out_of_order += 1
                if self._out_of_order >= MAX_OUT_OF_ORDER:
                    raise
            self._resend(e)
            return
        self._in_flight.popleft()
        self._out_of_order = 0
        self.backoff.reset()
        pending.done(info)

    def _resend(self, error: RaylogError) -> None:
        wait = self.backoff.next()
        self.report(f"appending to {self.topic}-{self.partition} on the target: {error}; "
                    f"sending again in {wait:.1f} s")
        for pending in self._in_flight:
            discard(pending.ref)
        self.stop.wait(wait)
        self._refresh = True
        for pending in self._in_flight:
            self._submit(pending)
