"""Copying one source partition to its remote partition, on a thread of its own.

The loop: find where the copy stopped from the target itself (:func:`.target.last_batch`,
:mod:`.position`), read the source from there over Flight, number each stored batch and
append it (:class:`.target.PartitionAppender`). Any retriable failure, of the source, the
target, or a target that lost batches, starts the loop over from what the target holds,
after a backoff: that needs no memory of what was sent, so it is right however the previous
attempt ended. What stops a copier for good is said in :attr:`PartitionCopier.outcome`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from raylog.client.connection import RaylogCluster
from raylog.errors import (
    MirrorPositionError,
    OffsetOutOfRangeError,
    RaylogError,
    SourceAuthenticationError,
    UnknownTopicError,
)
from raylog.mirror.flight_client import SourceClient, batch_views
from raylog.mirror.forward import forward
from raylog.mirror.position import PartitionPosition
from raylog.mirror.protocol import Ticket
from raylog.mirror.retry import Backoff, Retrying
from raylog.mirror.status import MirrorStatus
from raylog.mirror.target import PartitionAppender, last_batch
from raylog.mirror.translation import OffsetSyncs
from raylog.records.header import parse_header, with_producer
from raylog.replica.producer_state import RECENT_BATCHES


@dataclasses.dataclass(frozen=True)
class CopyOptions:
    acks: int | str = "all"
    max_in_flight: int = RECENT_BATCHES  # per partition; no more than a leader remembers
    request_timeout_ms: int = 30_000
    max_wait_ms: int = 500             # a source read ends after this long without records
    give_up_after_s: float | None = None  # per outage; None: retry for ever


@dataclasses.dataclass
class PartitionLink:
    """One source partition and its copy; ``syncs`` is shared with the checkpoint writer
    (under ``lock``)."""

    source_topic: str
    target_topic: str
    partition: int
    syncs: OffsetSyncs = dataclasses.field(default_factory=OffsetSyncs)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class PartitionCopier:
    """Copies ``link`` until ``stop`` is set, or up to source offset ``end`` (``--once``).

    ``outcome`` after :meth:`run`: "done" (reached ``end``), "stopped", "deleted" (the
    source topic is gone) or "failed: <error>".
    """

    def __init__(self, source: SourceClient, cluster: RaylogCluster, link: PartitionLink,
                 options: CopyOptions, status: MirrorStatus, report: Callable[[str], None],
                 stop: threading.Event, end: int | None = None) -> None:
        self.source, self.cluster, self.link, self.options = source, cluster, link, options
        self.status, self.report, self.stop, self.end = status, report, stop, end
        self.name = f"{link.source_topic}-{link.partition}"
        self.outcome = "running"
        self.started_at = self.finished_at = 0.0  # monotonic s, when run() began and ended
        self._backoff = Backoff()
        self._retrying = Retrying(Backoff(), report, options.give_up_after_s, stop.is_set,
                                  sleep=stop.wait)

    def run(self) -> None:
        self.started_at = time.monotonic()
        try:
            self._run()
        finally:
            self.finished_at = time.monotonic()

    def _run(self) -> None:
        while True:
            try:
                self.outcome = "done" if self._copy() else "stopped"
                return
            except UnknownTopicError as e:
                self.report(f"{self.name}: the source topic is gone ({e}); its copy "
                            f"{self.link.target_topic} keeps what was copied")
                self.outcome = "deleted"
                return
            except RaylogError as e:
                if self.stop.is_set():
                    self.outcome = "stopped"
                    return
                if not e.retriable:
                    self.outcome = f"failed: {e}"
                    self.report(f"{self.name}: copying stopped: {e}")
                    if isinstance(e, SourceAuthenticationError):
                        self.stop.set()  # the source refuses every partition: all stop
                    return
                wait = self._backoff.next()
                self.report(f"{self.name}: {e}; starting again from the target's end in "
                            f"{wait:.1f} s")
                if self.stop.wait(wait):
                    self.outcome = "stopped"
                    return
            except Exception as e:  # a bug: this partition stops, said, the others go on
                self.outcome = f"failed: {type(e).__name__}: {e}"
                self.report(f"{self.name}: copying stopped by an unexpected error: {e!r}")
                return

    # -- one attempt ---------------------------------------------------------------------------

    def _recover(self) -> PartitionPosition:
        """Where the copy stopped, from the target's last batch (or the checkpointed syncs
        when retention removed every batch); the source's log start for a new copy."""
        link = self.link
        header, _, end = last_batch(self.cluster, link.target_topic, link.partition,
                                    self._retrying)
        if header is not None:
            position = PartitionPosition.after(header)
            with link.lock:
                link.syncs.add(position.next_source, position.next_source, header.next_offset,
                               header.next_offset)
            return position
        if end > 0:
            with link.lock:
                source = link.syncs.source_at(end)
            if source is None:
                raise MirrorPositionError(
                    f"{link.target_topic}-{link.partition} on the target ends at offset {end} "
                    f"but holds no batch saying where its copy stopped (retention removed "
                    f"them): delete the remote topic to copy the partition again")
            return PartitionPosition(source)
        start = self._retrying.call(f"asking the source for {self.name}'s start",
                                    lambda: self.source.offsets(link.source_topic))
        return PartitionPosition.fresh(start[link.partition][0])

    def _copy(self) -> bool:
        """One attempt; True when ``end`` was reached, False when stopped."""
        link = self.link
        appender = PartitionAppender(
            self.cluster, link.target_topic, link.partition, acks=self.options.acks,
            max_in_flight=self.options.max_in_flight,
            request_timeout_ms=self.options.request_timeout_ms, backoff=Backoff(),
            report=self.report, stop=self.stop)
        try:
            position = self._recover()
            read_from = position.next_source
            while not self.stop.is_set():
                if self.end is not None and position.next_source >= self.end:
                    appender.drain()
                    return True
                try:
                    read_from, reached = self._read(read_from, position, appender)
                except OffsetOutOfRangeError:
                    read_from = self._after_loss(read_from)
                    continue
                if reached:
                    appender.drain()
                    return True
            return False
        finally:
            appender.abandon()

    def _read(self, offset: int, position: PartitionPosition, appender: PartitionAppender
              ) -> tuple[int, bool]:
        """One source read from ``offset``, every batch forwarded; (where the next read
        starts, whether ``end`` is reached)."""
        link = self.link
        ticket = Ticket(link.source_topic, link.partition, offset, end=self.end,
                        max_wait_ms=self.options.max_wait_ms)
        meta: dict[str, int] = {}
        rows = 0
        for chunk, meta in self.source.read(ticket):
            rows += chunk.num_rows
            self._backoff.reset()  # the source answers: the next outage starts short
            for view in batch_views(chunk):
                self._forward(view, position, appender)
            self.status.position(link.target_topic, link.partition, position.next_source,
                                 meta.get("high_watermark", 0))
            if self.stop.is_set():
                break
        offset = max(offset, position.next_source, meta.get("next_offset", offset))
        # Nothing left below ``end`` (compaction may leave its last offsets empty).
        reached = self.end is not None and (
            offset >= self.end or (not rows and meta.get("high_watermark", 0) >= self.end))
        return offset, reached

    def _forward(self, view: memoryview, position: PartitionPosition,
                 appender: PartitionAppender) -> None:
        link = self.link
        sent = forward(view, parse_header(view), position.next_source)
        if sent is None:
            return
        if not sent.records:
            position.skip(sent.source_end)
            return
        stamp = position.stamp(sent.source_start, sent.source_end, sent.records)
        data = with_producer(sent.data, stamp.producer_id, stamp.producer_epoch,
                             stamp.base_sequence)

        def done(info, start=sent.source_start, end=sent.source_end, n=sent.records) -> None:
            with link.lock:
                link.syncs.add(start, end, info.base_offset, info.base_offset + n)
            self.status.copied(link.target_topic, n)

        appender.send(data, done, after_all=stamp.new_run)

    def _after_loss(self, offset: int) -> int:
        """The source has no records at ``offset`` any more: say what was lost, go on from
        its log start. (Past its end means the source lost records it had served, which a
        copy cannot follow.)"""
        start, end = self.source.offsets(self.link.source_topic)[self.link.partition]
        if offset < start:
            self.report(f"{self.name}: source offsets [{offset}, {start}) were deleted on the "
                        f"source before they were copied (retention); going on from {start}")
            return start
        raise MirrorPositionError(
            f"{self.name}: the copy stands at source offset {offset} but the source now "
            f"ends at {end}: it lost records it had served (an unclean leader election, or "
            f"the topic was deleted and created again)")
