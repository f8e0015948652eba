"""Tiered storage in one replica-host process: the thin part around raylog/tiered's rules.

:class:`TieredHost` belongs to a :class:`~actors.serving.ReplicaHost` and owns, once the
process hosts a tiered replica (or is asked for a tiered view):

- the cluster's object store, as the controller names it (``remote_storage``);
- a :class:`~raylog.tiered.metadata.RemoteLogState` fed by a thread that consumes
  ``__raylog_remote_log`` from its beginning (raylog's own Consumer), under a lock;
- one upload thread: the leader's copies, its orphans' deletions and whole-log retention,
  each a job planned on the event loop (:meth:`upkeep`, from the host's maintenance, and as
  soon as the job before it ended) and run there, one at a time, recording each step with
  raylog's own Producer (acks=all) and returning once the feed has applied it (what this
  process decides next sees it); and the sweep of each partition led (after the new
  leader's orphans, then every ``RAYLOG_TIERED_SWEEP_S``: raylog/tiered/sweep.py), a job
  of the same queue that backs off on its own;
- the :class:`~raylog.tiered.reader.RemoteReader` (cache) fetches below the local log start
  read through, on worker threads;
- in the process leading ``__raylog_remote_log``, the cleanup of deleted topics'
  remote data (raylog/tiered/cleanup.py), a job of the same thread every CLEANUP_INTERVAL_S,
  backing off as the others do: so whichever process leads the metadata topic after a
  restart finishes what a sweep cut short left.

Nothing here blocks the event loop: a store that is down fails jobs, which back off and
resume, and fails remote fetches with a retriable error; produce and local fetches never
wait for it. Only the event loop calls the methods not named ``_job_*``/``_feed*``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from raylog.errors import (
    OffsetOutOfRangeError,
    RaylogError,
    RemoteObjectError,
    RemoteStorageUnavailableError,
)
from raylog.records.header import iter_headers
from raylog.replica.partition import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchResult,
    Partition,
    RemoteRange,
    Role,
)
from raylog.storage.txn_index import AbortedTxn
from raylog.tiered.cleanup import find_deleted, remove
from raylog.tiered.layout import METADATA_TOPIC, RemoteSegment
from raylog.tiered.metadata import RemoteLogState
from raylog.tiered.reader import RemoteReader
from raylog.tiered.store import ObjectStore
from raylog.tiered.sweep import SweepSettings, list_upload_folders, plan_sweep, sweep
from raylog.tiered.uploader import (
    PartitionRef,
    Uploader,
    closed_segments,
    expired_remote,
    local_deletable_below,
    plan_copy,
)
from raylog.util.backoff import Backoff
from raylog.util.clocks import wall_clock_ms

logger = logging.getLogger(__name__)

METADATA_PARTITIONS = 1
METADATA_CONFIGS = {"cleanup.policy": "compact"}
APPLY_WAIT_S = 60.0  # a written record not seen by the feed by then: the job fails, retries
FEED_POLL_MS = 200
CLEANUP = (METADATA_TOPIC, -1)  # the cleanup's key among the jobs
CLEANUP_INTERVAL_S = 10.0  # between cleanups of deleted topics' remote data
CONTROLLER_TIMEOUT_S = 30.0


class TieredHost:
    """The tiered part of one replica-host process (see the module docstring)."""

    def __init__(self, broker_id: Callable[[], int | None],
                 controller: Callable[[], ray.actor.ActorHandle],
                 job_done: Callable[[tuple[str, int]], tuple[str, Partition] | None],
                 sweep_settings: SweepSettings | None = None) -> None:
        self._broker_id = broker_id
        self._controller = controller
        # On the event loop: a replica's job ended. The host answers (topic id, partition)
        # while it still hosts the replica (its next job is planned then), else None.
        self._job_done = job_done
        self.state = RemoteLogState()
        self.lock = threading.Lock()
        self._applied = threading.Condition(self.lock)
        self.position = 0  # the next metadata offset the feed applies
        self.store_info: dict[str, Any] | None = None
        self.store: ObjectStore | None = None
        self.reader: RemoteReader | None = None
        self._starting: asyncio.Task | None = None
        self._stop = threading.Event()
        # Set once the feed has applied what the metadata topic held when it started: until
        # then the remote log looks shorter than it is (see check_loaded).
        self.loaded = threading.Event()
        self._feed_error: BaseException | None = None
        self._jobs = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tiered")
        self._running: dict[tuple[str, int], concurrent.futures.Future] = {}
        self._backoff: dict[tuple[str, int], Backoff] = {}
        self._not_before: dict[tuple[str, int], float] = {}
        # (topic id, leader epoch) caught up, orphans gone: the id, as a topic deleted and
        # created again under its name is another log whose leaders must fence theirs.
        self._ready_epoch: dict[tuple[str, int], tuple[str, int]] = {}
        self._producer: Any = None
        # The sweep of each partition led (_job_sweep): when it is due next (monotonic),
        # and its own backoff, so a store that is down delays it, not the other jobs.
        self.sweep_settings = sweep_settings or SweepSettings.from_environ()
        self._sweep_due: dict[tuple[str, int], float] = {}
        self._sweep_backoff: dict[tuple[str, int], Backoff] = {}
        self.clock = wall_clock_ms  # the store's objects' times are compared with it

    # -- starting --------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.store is not None

    def start(self) -> None:
        """Begin (once): ask the controller for the store, then start the feed."""
        if self._starting is None or (self._starting.done() and not self.ready):
            self._starting = asyncio.get_running_loop().create_task(self._start())

    async def store_settings(self) -> dict[str, Any]:
        """The cluster's store, as the controller names it (asked once)."""
        if self.store_info is None:
            self.store_info = await self._controller().remote_storage.remote()
        return self.store_info

    async def _start(self) -> None:
        try:
            info = await self.store_settings()
            if info["uri"] is None:
                return
            store = await asyncio.to_thread(ObjectStore.from_uri, info["uri"], info["settings"])
        except (RaylogError, OSError, ray.exceptions.RayError) as e:
            logger.warning("tiered storage cannot start yet: %r", e)
            return
        self.reader = RemoteReader(store)
        threading.Thread(target=self._feed, name="tiered-feed", daemon=True).start()
        self.store = store

    def close(self) -> None:
        """Stop the feed, drop jobs not started, close the record writer after the job
        running (on the job thread: closing flushes, which must not block the loop)."""
        self._stop.set()
        if self._producer is not None:
            self._jobs.submit(self._producer.close)
        self._jobs.shutdown(wait=False, cancel_futures=False)

    # -- the metadata feed (its own thread) --------------------------------------------------------

    def _feed(self) -> None:
        from raylog.client.connection import default_cluster
        from raylog.client.consumer import Consumer
        from raylog.types import TopicPartition

        backoff = Backoff(0.2, 5.0)
        tp = TopicPartition(METADATA_TOPIC, 0)
        consumer, loaded_at = None, None
        while not self._stop.is_set():
            try:
                if consumer is None:
                    default_cluster().controller.ensure_internal_topic(
                        METADATA_TOPIC, METADATA_PARTITIONS, METADATA_CONFIGS)
                    consumer = Consumer(auto_offset_reset="earliest", enable_auto_commit=False,
                                        fetch_from_nearest=False)
                    consumer.assign([tp])
                    consumer.seek(tp, self.position)
                if loaded_at is None:
                    loaded_at = consumer.end_offsets([tp])[tp]
                for record in consumer.poll(timeout_ms=FEED_POLL_MS):
                    with self.lock:
                        self.state.apply_value(record.key, record.value)
                        self.position = record.offset + 1
                        self._applied.notify_all()
                if self.position >= loaded_at:
                    self.loaded.set()
                backoff.reset()
            except (RaylogError, ValueError, ray.exceptions.RayError) as e:
                logger.warning("the remote-log metadata feed failed, again soon: %r", e)
                self._feed_error = e
                time.sleep(backoff.next())
            except Exception as e:  # a bug, ours or Ray's: the feed must outlive it
                logger.exception("the remote-log metadata feed failed unexpectedly; it "
                                 "starts again with a new consumer")
                self._feed_error = e
                if consumer is not None:
                    with contextlib.suppress(Exception):  # it failed already
                        consumer.close()
                    consumer = None
                time.sleep(backoff.next())
        if consumer is not None:
            consumer.close()

    def _wait_applied(self, offset: int) -> None:
        """Until the feed has applied the metadata record at ``offset``."""
        with self.lock:
            if not self._applied.wait_for(lambda: self.position > offset, APPLY_WAIT_S):
                raise TimeoutError(f"{METADATA_TOPIC} record {offset} not applied within "
                                   f"{APPLY_WAIT_S} s")

    def _write(self, record: RemoteSegment) -> bool:
        """Record ``record`` (acks=all) and return once this process's state has it: whether
        it took effect (the attempt had not gone further meanwhile)."""
        self._send(record.key(), record.to_json())
        with self.lock:
            return self.state.state_of(record) == record.state

    def _tombstone(self, key: str) -> None:
        """Record a tombstone of ``key`` (acks=all); return once this process applied it."""
        self._send(key, None)

    def _send(self, key: str, value: bytes | None) -> None:
        if self._producer is None:
            from raylog.client.producer import Producer
            self._producer = Producer(acks="all", linger_ms=0)
        future = self._producer.send(METADATA_TOPIC, value, key=key.encode(), partition=0)
        self._producer.flush()
        self._wait_applied(future.result().offset)

    def _catch_up(self) -> None:
        """Until the feed has applied every record the metadata topic holds now."""
        from raylog.client.connection import default_cluster
        from raylog.client.consumer import Consumer
        from raylog.types import TopicPartition

        default_cluster()
        tp = TopicPartition(METADATA_TOPIC, 0)
        consumer = Consumer(enable_auto_commit=False, fetch_from_nearest=False)
        try:
            end = consumer.end_offsets([tp])[tp]
        finally:
            consumer.close()
        if end:
            self._wait_applied(end - 1)

    # -- what the host's maintenance does for each replica -----------------------------------------

    def copied_below(self, topic_id: str, partition: Partition) -> int | None:
        """Below this offset local segments are copied (see Partition.enforce_retention)."""
        if not self.ready or not partition.log.config.remote_storage_enable:
            return None
        with self.lock:
            return local_deletable_below(self.state, _ref(partition, topic_id))

    def upkeep(self, topic_id: str, partition: Partition) -> None:
        """For a tiered leader, the next job: catch up and delete orphans after becoming
        leader, then a copy, else retention's deletions; for the leader of the metadata
        topic, a cleanup of deleted topics when due. Returns at once."""
        if partition.topic == METADATA_TOPIC:
            if partition.role is Role.LEADER:
                self._plan_cleanup()
            return
        if not partition.log.config.remote_storage_enable:
            return
        self.start()
        if not self.ready or partition.role is not Role.LEADER:
            return
        tp = (partition.topic, partition.partition)
        if not self._may_plan(tp, partition.name):
            return
        ref, epoch = _ref(partition, topic_id), partition.leader_epoch
        if self._ready_epoch.get(tp) != (ref.topic_id, epoch):
            self._submit(tp, self._job_prepare, tp, ref, epoch)
            return
        if time.monotonic() >= self._sweep_due.get(tp, 0.0):
            self._submit(tp, self._job_sweep, tp, ref, epoch)
            return
        log = partition.log
        broker_id = self._broker_id()
        with self.lock:
            plan = plan_copy(self.state, ref, closed_segments(log), log.high_watermark,
                             log.log_start_offset, epoch, -1 if broker_id is None else broker_id,
                             [tuple(e) for e in partition.epochs.entries],
                             log.aborted_transactions, log.directory)
            if plan is None:
                readable = self.state.readable(ref.topic_id, ref.partition)
                doomed = expired_remote(readable, log.config, log.clock(),
                                        self._not_copied_bytes(ref, partition))
                doomed += self.state.orphans(ref.topic_id, ref.partition, epoch + 1)
        if plan is not None:
            self._submit(tp, self._uploader().copy, plan)
        elif doomed:
            self._submit(tp, self._job_delete, doomed, epoch)

    def _may_plan(self, tp: tuple[str, int], name: str) -> bool:
        """Whether a job of ``tp`` may be planned now: none running, and not waiting out the
        backoff of a failed one (its failure is logged and its backoff begun here)."""
        job = self._running.get(tp)
        if job is not None:
            if not job.done():
                return False
            del self._running[tp]
            error = job.exception()
            backoff = self._backoff.setdefault(tp, Backoff(0.5, 30.0))
            if error is not None:
                wait = backoff.next()
                self._not_before[tp] = time.monotonic() + wait
                logger.warning("%s: tiered job failed, again in %.1f s: %r", name, wait, error)
                return False
            backoff.reset()
        return time.monotonic() >= self._not_before.get(tp, 0.0)

    def _plan_cleanup(self) -> None:
        """Plan a cleanup of deleted topics' remote data when due (this process leads the
        metadata topic; its store is open and its state loaded)."""
        self.start()
        if not (self.ready and self.loaded.is_set()) or not self._may_plan(CLEANUP, "cleanup"):
            return
        self._not_before[CLEANUP] = time.monotonic() + CLEANUP_INTERVAL_S
        self._submit(CLEANUP, self._job_cleanup)

    def _job_cleanup(self) -> None:
        """Remove what deleted topics left in the store and the metadata topic
        (raylog/tiered/cleanup.py: the state is read before the controller is asked)."""
        with self.lock:
            recorded = self.state.topics()
        for deleted in find_deleted(self.store, recorded, self._live_topic_ids):
            logger.info("removing the remote data of deleted topic id %s: %d folders, "
                        "%d metadata keys", deleted.topic_id, len(deleted.folders),
                        len(deleted.keys))
            remove(self.store, deleted, self._tombstone)

    def _live_topic_ids(self) -> set[str] | None:
        """The ids of the controller's topics now; None if its answer cannot be whole (it
        lacks the metadata topic, which exists while this process leads it)."""
        topics = ray.get(self._controller().describe_topics.remote(),
                         timeout=CONTROLLER_TIMEOUT_S)
        if not any(t["name"] == METADATA_TOPIC for t in topics):
            return None
        return {t["topic_id"] for t in topics}

    def _not_copied_bytes(self, ref: PartitionRef, partition: Partition) -> int:
        """Bytes of the local segments from the one holding the first offset not copied
        (lock held)."""
        log = partition.log
        copied = local_deletable_below(self.state, ref) or log.log_start_offset
        return sum(s.size for s in log.segments if s.next_offset > copied)

    def _submit(self, tp: tuple[str, int], job: Callable[..., Any], *args: Any) -> None:
        loop = asyncio.get_running_loop()
        future = self._running[tp] = self._jobs.submit(job, *args)
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(self._ended, tp))

    def _ended(self, tp: tuple[str, int]) -> None:
        """(On the event loop.) A job of ``tp`` ended: its next job (a copy, retention's
        deletions) is planned now, not at the host's next maintenance round: a busy host
        looks once a second, and a backlog of small segments would be copied one a second."""
        hosted = self._job_done(tp)
        if hosted is None or self._stop.is_set():
            return
        try:
            self.upkeep(*hosted)
        except Exception:  # maintenance plans it again; one replica must not stop the loop
            logger.exception("planning the next tiered job of %s-%d failed", *tp)

    def _uploader(self) -> Uploader:
        return Uploader(self.store, self._write)

    def _job_prepare(self, tp: tuple[str, int], ref: PartitionRef, epoch: int) -> None:
        """A new leader: fence older leaders' copies, catch up with the metadata, then
        delete the orphans of earlier attempts (nothing of this process is in flight for
        the partition now) and sweep the folders no record accounts for. The fence comes
        first: a deposed leader's COPY_FINISHED recorded after it is refused, so no copy
        found unfinished below can become readable before it is deleted."""
        broker_id = self._broker_id()
        self._uploader().fence(ref, epoch, -1 if broker_id is None else broker_id)
        since_ms = self.clock()
        self._catch_up()
        with self.lock:
            orphans = self.state.orphans(ref.topic_id, ref.partition, epoch + 1)
        self._job_delete(orphans, epoch)
        self._job_sweep(tp, ref, epoch, since_ms)
        self._ready_epoch[tp] = ref.topic_id, epoch

    def _job_delete(self, segments: list[RemoteSegment], epoch: int) -> None:
        uploader = self._uploader()
        for segment in segments:
            uploader.delete(segment, epoch)

    def _job_sweep(self, tp: tuple[str, int], ref: PartitionRef, epoch: int,
                   since_ms: int | None = None) -> None:
        """Delete the partition's upload folders the metadata does not account for
        (raylog/tiered/sweep.py), after catching up with the metadata (``since_ms``: the
        clock before a catch-up the caller made). A failure (the store or the metadata
        unreachable) is logged and the sweep alone backs off: it never fails the job it
        runs in."""
        backoff = self._sweep_backoff.setdefault(tp, Backoff(0.5, 30.0))
        try:
            if since_ms is None:
                since_ms = self.clock()
                self._catch_up()
            folders = list_upload_folders(self.store, ref)
            with self.lock:
                plan = plan_sweep(self.state, ref, epoch, folders)
            deleted = sweep(self.store, plan, since_ms,
                            int(self.sweep_settings.grace * 1000))
        except (OSError, RaylogError, ray.exceptions.RayError) as e:  # OSError: timeouts too
            wait = backoff.next()
            self._sweep_due[tp] = time.monotonic() + wait
            logger.warning("%s-%d: tiered sweep failed, again in %.1f s: %r", *tp, wait, e)
            return
        backoff.reset()
        self._sweep_due[tp] = time.monotonic() + self.sweep_settings.interval_s
        if deleted:
            logger.info("%s-%d: swept %d upload folders no metadata accounts for: %s",
                        *tp, len(deleted), deleted)

    # -- reads -----------------------------------------------------------------------------------

    def check_loaded(self, partition: Partition) -> None:
        """For a tiered replica, RemoteStorageUnavailableError (retriable) until the store is
        open and the feed has applied the metadata topic as it was at start: before, the
        remote log looks empty or short, and an answer from it (an offset out of range, an
        earliest offset at the local log start) would send a consumer past records the
        store holds."""
        if partition.log.config.remote_storage_enable and not (
                self.ready and self.loaded.is_set()):
            self.start()
            raise RemoteStorageUnavailableError(
                f"{partition.name}: the remote log's metadata is not loaded yet")

    def remote_start(self, topic_id: str, partition: Partition) -> int:
        """The first offset of the whole log: the remote log's start, or the local one."""
        local = partition.log.log_start_offset
        if not partition.log.config.remote_storage_enable or not self.ready:
            return local
        with self.lock:
            start = self.state.log_start(topic_id, partition.partition)
        return local if start is None else min(start, local)

    def readable(self, topic_id: str, partition: int) -> list[RemoteSegment]:
        with self.lock:
            return self.state.readable(topic_id, partition)

    async def fetch(self, topic_id: str, partition: Partition, leader_epoch: object,
                    offset: int, max_bytes: int, isolation: str = READ_UNCOMMITTED
                    ) -> FetchResult | None:
        """Batches from ``offset`` below the local log start, from the store (None when the
        offset is not below it: the local log serves it, and Partition.fetch checks the
        replica may serve). ``read_committed``: below the last stable offset, with the
        aborted transactions overlapping what is returned, from the txn.index of every
        remote segment from this one on and from the local log."""
        log = partition.log
        if not log.config.remote_storage_enable or offset >= log.log_start_offset:
            return None
        partition.check_serving(leader_epoch)
        self.check_loaded(partition)
        start = self.remote_start(topic_id, partition)
        later = self._segments_from(topic_id, partition, offset)
        committed = isolation == READ_COMMITTED
        bound = partition.last_stable_offset if committed else log.high_watermark
        data = await self._read(self.reader.read, later[0], offset, max_bytes, bound)
        if not committed:
            return FetchResult(data, log.high_watermark, start, log.log_end_offset)
        aborted = list(log.aborted_transactions(log.log_start_offset, bound)) if data else []
        if data:
            aborted += await self._remote_aborted(later, offset)
        aborted = sorted(set(aborted), key=lambda a: a.last_offset)
        return FetchResult(data, log.high_watermark, start, log.log_end_offset, bound,
                           tuple(aborted))

    async def read_below(self, topic_id: str, partition: Partition, leader_epoch: object,
                         start: int, end: int, isolation: str = READ_UNCOMMITTED
                         ) -> RemoteRange | None:
        """For a range read (the analytics' hot path: ``read_kafka_table``, ``java_read``,
        ``java_read_batches``) starting below the local log start of a tiered replica, the
        store's part (None when ``start`` is not below it: the local log serves it all).
        Read as a fetch reads: the readable segment holding each offset, through the
        verified cache, with the same errors. Local retention may move the local log start
        while the store is read: the part read goes on until it reaches the local log start
        as it is when this returns, so the caller's local read (Partition.read_table,
        read_batches, with this ``remote``), made before anything else runs on the event
        loop, finds its start held."""
        log = partition.log
        if not log.config.remote_storage_enable or start >= log.log_start_offset:
            return None
        partition.check_serving(leader_epoch)
        self.check_loaded(partition)
        first = self._segments_from(topic_id, partition, start)
        chunks, offset = [], start
        while offset < (cut := min(end, log.log_start_offset)):
            segment = self._segments_from(topic_id, partition, offset)[0]
            data = await self._read(self.reader.read, segment, offset, segment.size_bytes, cut)
            if not data:  # its record says it holds the offset; its verified object does not
                raise RemoteObjectError(f"remote segment {segment.key()} holds no batch at "
                                        f"offset {offset}")
            *_, (_, last) = iter_headers(data, verify=False)
            chunks.append(data)
            offset = last.next_offset
        aborted = await self._remote_aborted(first, start) \
            if chunks and isolation == READ_COMMITTED else []
        return RemoteRange(tuple(chunks), offset, tuple(aborted))

    def _segments_from(self, topic_id: str, partition: Partition, offset: int
                       ) -> list[RemoteSegment]:
        """The readable remote segments from the one holding ``offset`` on;
        OffsetOutOfRangeError when none holds it (below the remote log start: whole-log
        retention deleted it)."""
        with self.lock:
            later = [s for s in self.state.readable(topic_id, partition.partition)
                     if s.end_offset >= offset]
        if not later or later[0].base_offset > offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.remote_start(topic_id, partition)}, "
                f"{partition.log.log_end_offset}] of {partition.name}")
        return later

    async def _remote_aborted(self, segments: list[RemoteSegment], offset: int
                              ) -> list[AbortedTxn]:
        """The aborted transactions ending at or after ``offset`` that the txn.index objects
        of ``segments`` list (a transaction's marker may be in a later segment than its
        batches: pass the segment holding ``offset`` and every later one)."""
        aborted: list[AbortedTxn] = []
        for segment in segments:
            aborted += await self._read(self.reader.aborted, segment)
        return [a for a in aborted if a.last_offset >= offset]

    async def _read(self, read: Callable[..., Any], segment: RemoteSegment, *args: Any) -> Any:
        """``read(segment, *args)`` on a worker thread. An object missing because whole-log
        retention deleted its segment after the fetch chose it is an offset out of range
        (the consumer's reset policy, or a new plan, resolves it), not a corrupt store."""
        try:
            return await asyncio.to_thread(read, segment, *args)
        except RemoteObjectError as e:
            with self.lock:
                readable = self.state.readable(segment.topic_id, segment.partition)
            if any(s.segment_id == segment.segment_id for s in readable):
                raise
            raise OffsetOutOfRangeError(
                f"remote segment {segment.key()} was deleted by retention while read") from e

    def describe(self, topic_id: str, partition: Partition) -> dict[str, Any]:
        """The remote side of a replica, for ``raylog topics describe``."""
        if not partition.log.config.remote_storage_enable:
            return {}
        readable = self.readable(topic_id, partition.partition) if self.ready else []
        with self.lock:
            not_copied = self._not_copied_bytes(_ref(partition, topic_id), partition)
        return {"remote_log_start_offset": readable[0].base_offset if readable else None,
                "not_copied_bytes": not_copied,
                "remote_end_offset": readable[-1].end_offset if readable else None,
                "remote_size_bytes": sum(s.size_bytes for s in readable),
                "remote_segments": len(readable)}


def _ref(partition: Partition, topic_id: str) -> PartitionRef:
    return PartitionRef(partition.topic, topic_id, partition.partition)
