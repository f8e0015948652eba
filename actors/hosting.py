"""One partition replica inside a broker's process (the broker actor or one of its replica
hosts): the asyncio shell around a plain Partition.

A :class:`HostedReplica` owns a :class:`~raylog.replica.partition.Partition` and what only an event
loop can do for it: callers that wait for something to change (a consumer's long poll, a
follower's fetch) park a future on it and are woken when records are appended, the high
watermark moves or the role changes; an acks=all append waiting for its followers parks one
keyed by its last offset, woken only once the high watermark passed it (or the role, the
epochs or the ISR changed, or the replica stopped), so an append does not wake every append
still waiting; a leader's ISR changes go to the controller one at a time, each asked again
until its answer is known. The process hosting it runs each of its replicas on its one event
loop, so a Partition never sees concurrent calls; it holds the replica's directory lock while
it has the replica open (no other process of the broker opens it meanwhile).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raylog.errors import (
    FencedEpochError,
    LeadershipLostAfterAppendError,
    RaylogError,
    RequestTimeoutError,
    StorageError,
)
from raylog.metadata.identity import DirectoryLock, DirectoryLockedError
from raylog.metadata.topics import log_config
from raylog.records.control import MarkerType
from raylog.replica.partition import AlterIsr, LeaderAndIsr, Partition, Role
from raylog.replica.producer_state import ProducerSnapshots, SequenceGap
from raylog.storage import AppendInfo, PartitionLog, files
from raylog.storage.formats import json_version

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

METADATA_FILE = "partition.metadata"
# Its JSON object's format (a "format_version" member, absent in version 0): a newer one
# raises UnsupportedFormatVersionError and the directory is left alone.
METADATA_FILE_VERSION = 0
# How long a batch ahead of its producer's sequence waits for the batches before it. Ray may
# start an async actor's calls out of order when their arguments arrive out of order (an
# argument fetched from the object store: milliseconds, a few hundred on a loaded node), so
# a short wait lets such a gap fill. A gap that outlasts it fails the batch (never accepts
# it), and the producer either retries it in place behind its earlier batch, or, when no
# earlier batch of its is unresolved (the leader lost its state: a failover that lost an
# acks=1 tail), bumps its epoch and sends again. A producer must go on within a second of a
# failover (docs/producer.md): this wait, its first backoff (100 ms) and two round trips stay
# under that. A gap that is only Ray's reordering and outlasts the wait costs one retry.
SEQUENCE_WAIT_S = 0.5
ISR_RETRY_S = 0.5      # after the controller refused an ISR change, or did not answer
ALTER_PARTITION_TIMEOUT_S = 30.0  # an ISR change not answered by then is asked again


def partition_dir_owner(directory: Path) -> str | None:
    """The topic id a partition directory belongs to (its marker), None without a marker.
    Raises StorageError for a marker that cannot be read: never guess whose data it is."""
    marker = directory / METADATA_FILE
    try:
        content = json.loads(marker.read_text())
        json_version(marker, content, METADATA_FILE_VERSION)
        return content["topic_id"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StorageError(f"{marker} is unreadable ({e}); the directory is left as it is: "
                           f"move it away to let the partition start over") from e


def open_partition_dir(data_dir: Path, topic: str, partition: int, topic_id: str) -> Path:
    """The replica's directory, emptied first if it belonged to an older topic of that name.

    The marker naming the topic id is written atomically and durably before anything else
    goes into the directory, so a crash never leaves segments under a marker that is
    missing or half written."""
    directory = data_dir / f"{topic}-{partition}"
    owner = partition_dir_owner(directory)
    if owner is not None and owner != topic_id:
        logger.warning("removing %s: it belongs to topic id %s, not %s", directory, owner,
                       topic_id)
        remove_partition_dir(directory)
    if owner != topic_id:
        files.make_dirs(directory)
        write_marker(directory, {"topic": topic, "partition": partition, "topic_id": topic_id})
    return directory


def write_marker(directory: Path, content: dict[str, Any]) -> None:
    files.write_atomic(directory / METADATA_FILE, json.dumps(content).encode())


def remove_partition_dir(directory: Path) -> None:
    """Remove a partition's directory for good: its marker first (durably), so a crash
    midway leaves a directory without a marker, which is never taken for live data."""
    if directory.is_dir():
        files.remove(directory / METADATA_FILE)
        files.fsync_dir(directory)
        shutil.rmtree(directory, ignore_errors=True)
    files.fsync_dir(directory.parent)


def _lock_or_refuse(lock: DirectoryLock) -> None:
    """Take a replica directory's lock, or raise DirectoryLockedError at once."""
    if not lock.acquire():
        holder = lock.holder()
        raise DirectoryLockedError(
            f"{lock.directory} is held by another process of this broker (its lock file "
            f"names {'no process' if holder is None else f'process {holder}'}): opened once "
            f"that process is gone")


class HostedReplica:
    """A Partition and the futures of callers waiting for it to change. Only the event loop
    of the process hosting it uses it."""

    def __init__(self, partition: Partition, topic_id: str, configs: dict[str, Any],
                 lock: DirectoryLock | None = None) -> None:
        self.partition = partition
        self.lock = lock  # its directory's, while this process has it open
        self.topic_id = topic_id
        self.configs = dict(configs)  # the topic's overrides, as the controller sent them
        self.version = -1  # the metadata version of the last state taken (see Broker.apply)
        self.stopped = False  # no longer hosted: waiters fail at once
        self._waiters: set[asyncio.Future] = set()
        # acks=all appends: (last offset, arrival, future), lowest offset first; futures of
        # waits that timed out stay until popped or swept (``_dead`` counts them).
        self._commit_waiters: list[tuple[int, int, asyncio.Future]] = []
        self._arrivals = itertools.count()
        self._dead = 0
        self._woken_as: tuple[Any, ...] | None = None  # (role, epochs, stopped) last woken at
        self.active = True  # maintenance has something to do (see Broker._maintain)
        self.proposing = False  # an ISR change is with the controller
        self.propose_after = 0.0  # monotonic s: not before, after a refusal
        # Bytes a second it copies at while it moves here (None: unthrottled), from the
        # controller's state (actors/fetcher.py).
        self.throttled_rate: int | None = None
        self.last_hw_checkpoint = time.monotonic()

    @classmethod
    def open(cls, data_dir: Path, topic: str, partition: int, topic_id: str,
             broker_id: int, configs: dict[str, Any]) -> HostedReplica:
        """Open the replica's log, taking its directory's lock. Two processes of a broker
        node (its replica hosts) must never have one replica open: the broker places each on
        one host, and the host holds the lock while it has it open. A host that Ray
        restarted, or the hosts of a broker that restarted, may find the lock still held by
        the process being replaced, still exiting: DirectoryLockedError at once, never a
        wait on the event loop (the broker opens it again once that process is gone:
        raylog/replica/lock_waits.py). Other errors (StorageError for a directory that is
        not this topic's or is damaged, UnsupportedFormatVersionError) stand."""
        lock = DirectoryLock(data_dir / f"{topic}-{partition}")
        # Looked at before anything in the directory is read or written (the process holding
        # it may be using it), and taken again after: an older topic's directory is removed
        # first, its lock file with it.
        _lock_or_refuse(lock)
        lock.release()
        directory = open_partition_dir(data_dir, topic, partition, topic_id)
        _lock_or_refuse(lock)
        try:
            # A newer raylog's files are refused before the log changes anything (the log
            # checks its own; the producer snapshots are the replica's).
            ProducerSnapshots(directory).check_versions()
            log = PartitionLog(directory, log_config(configs))
        except BaseException:
            lock.release()
            raise
        # The broker's storage worker deletes what retention takes (actors/background.py).
        log.defer_deletions = True
        hosted = cls(Partition(topic, partition, log, broker_id, configs), topic_id, configs,
                     lock)
        logger.info("opened %s: %s", directory, log.recovery)
        return hosted

    def update_configs(self, configs: dict[str, Any]) -> None:
        if configs != self.configs:
            self.configs = dict(configs)
            self.partition.update_configs(configs)
            self.notify()  # say, a shorter retention.ms: maintenance looks at once

    def stop(self) -> None:
        self.stopped = True
        self.notify()

    def release(self) -> None:
        """Its files are closed (or removed): another process may open it now."""
        if self.lock is not None:
            self.lock.release()

    @property
    def name(self) -> str:
        return self.partition.name

    # -- waiting -------------------------------------------------------------------------------

    def notify(self) -> None:
        """Something changed (records, high watermark, role): wake every long poll, and the
        acks=all appends whose last offset the high watermark passed; every acks=all append
        if the role, the leader or partition epoch (an ISR change) or ``stopped`` changed since
        the last call, for each must then look whether it fails."""
        self.active = True
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()
        partition = self.partition
        state = (partition.role, partition.leader_epoch, partition.partition_epoch,
                 self.stopped)
        if state != self._woken_as:
            self._woken_as = state
            woken, self._commit_waiters, self._dead = self._commit_waiters, [], 0
        else:
            woken = []
            waiting, high_watermark = self._commit_waiters, partition.high_watermark
            while waiting and waiting[0][0] < high_watermark:
                woken.append(heapq.heappop(waiting))
        for _, _, waiter in woken:
            if waiter.done():  # its wait ended before: one entry fewer to sweep
                self._dead = max(self._dead - 1, 0)
            else:
                waiter.set_result(None)

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the next change; whether one came."""
        return await wait_any([self], timeout)

    async def _wait_committed(self, last_offset: int, timeout: float) -> bool:
        """Wait up to ``timeout`` s until the high watermark passed ``last_offset`` or the
        replica's state changed; whether either came."""
        if timeout <= 0:
            return False
        waiter = asyncio.get_running_loop().create_future()
        heapq.heappush(self._commit_waiters, (last_offset, next(self._arrivals), waiter))
        try:
            await asyncio.wait_for(waiter, timeout)
            return True
        except TimeoutError:
            # Swept once they are half of the heap: a stuck high watermark must not let the
            # entries of waits that ended pile up.
            self._dead += 1
            if self._dead * 2 > len(self._commit_waiters):
                self._commit_waiters = [w for w in self._commit_waiters if not w[2].done()]
                heapq.heapify(self._commit_waiters)
                self._dead = 0
            return False

    # -- appending as leader -------------------------------------------------------------------

    def append_now(self, batch: bytes, acks: int | str, leader_epoch: int,
                   checked: pa.Table | Exception | None = None) -> AppendInfo | SequenceGap:
        """Append a producer's batch now, without waiting: where it landed, or the
        SequenceGap that holds it back (not appended: batches of its producer before it are
        missing). Raises what Partition.append raises for a batch it refuses. ``checked``:
        its payload checked ahead (PartitionLog.append's)."""
        try:
            info = self.partition.append(batch, acks, leader_epoch, checked)
        except SequenceGap as gap:
            return gap
        self.notify()
        return info

    async def append(self, batch: bytes, acks: int | str, leader_epoch: int,
                     first: AppendInfo | SequenceGap | None = None,
                     gap_deadline: float | None = None,
                     checked: pa.Table | Exception | None = None) -> AppendInfo:
        """Append a producer's batch (``first``: what :meth:`append_now` answered for it
        already, if the caller tried). A batch ahead of its producer's sequence waits (up to
        SEQUENCE_WAIT_S, or until ``gap_deadline``, monotonic s) for the batches before it,
        which Ray may have started later; if they do not come it fails with
        OutOfOrderSequenceError (UnknownProducerIdError for a producer id this replica has
        no state for), never appended. ``checked``: as for append_now."""
        attempt = self.append_now(batch, acks, leader_epoch, checked) if first is None \
            else first
        deadline = time.monotonic() + SEQUENCE_WAIT_S if gap_deadline is None \
            else gap_deadline
        while isinstance(attempt, SequenceGap):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise attempt.error(self.name, SEQUENCE_WAIT_S)
            await self.wait(remaining)  # then once more: the gap may have filled
            attempt = self.append_now(batch, acks, leader_epoch, checked)
        return attempt

    async def produce(self, batch: bytes, acks: int | str, leader_epoch: int,
                      timeout_s: float) -> AppendInfo:
        """Append a producer's batch (:meth:`append`); with acks=all, answer once the ISR
        has it. An acks=all batch that is not committed within ``timeout_s`` fails with
        RequestTimeoutError (it is written: the producer's retry is recognised as a
        duplicate)."""
        info = await self.append(batch, acks, leader_epoch)
        if acks in ("all", -1):
            await self.committed(info.last_offset, timeout_s)
        return info

    async def write_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int, leader_epoch: int, timeout_s: float
                           ) -> AppendInfo | None:
        """End a producer's transaction here (a transaction coordinator's marker,
        Partition.write_marker), answered as an acks=all write: once the ISR has it. A
        marker already written (a retry) is not written again, and is answered once
        everything in the log is committed, so that the first one is too. Returns where the
        marker landed (None for a retry)."""
        partition = self.partition
        info = partition.write_marker(producer_id, producer_epoch,
                                      MarkerType.COMMIT if commit else MarkerType.ABORT,
                                      coordinator_epoch, leader_epoch)
        if info is not None:
            self.notify()
        last = info.last_offset if info is not None else partition.log_end_offset - 1
        if last >= 0:
            await self.committed(last, timeout_s)
        return info

    async def committed(self, last_offset: int, timeout_s: float) -> None:
        """Wait until the records up to ``last_offset`` are committed (the high watermark
        passed them), this replica stopped leading (LeadershipLostAfterAppendError, a
        NotLeaderError: the records may be in the new leader's log) or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        epoch = self.partition.leader_epoch
        while not self.partition.acks_all_done(last_offset):
            if self.stopped or self.partition.leader_epoch != epoch:
                raise LeadershipLostAfterAppendError(
                    f"{self.name}: this replica stopped leading before the batch was "
                    f"committed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimeoutError(
                    f"{self.name}: offsets up to {last_offset} are written on the leader but "
                    f"not yet on the in-sync replicas {sorted(self.partition.isr)} after "
                    f"{timeout_s:.1f} s")
            await self._wait_committed(last_offset, remaining)

    # -- the ISR, through the controller ----------------------------------------------------------

    def maybe_propose_isr(self, propose: Callable[[AlterIsr], Awaitable[dict[str, Any]]],
                          timeout_s: float = ALTER_PARTITION_TIMEOUT_S) -> None:
        """If the leader should change its ISR and no change is with the controller, send
        one: ``propose`` calls the controller, whose answer is ``{"state": the partition's
        state, "error": None or why it refused}``."""
        if self.proposing or time.monotonic() < self.propose_after:
            return
        was = sorted(self.partition.isr)
        request = self.partition.propose_isr_change()
        if request is None:
            return
        self.proposing = True
        logger.info("%s: proposing ISR %s (was %s)", self.name, list(request.isr), was)
        background(self._propose(request, propose, timeout_s))

    async def _propose(self, request: AlterIsr,
                       propose: Callable[[AlterIsr], Awaitable[dict[str, Any]]],
                       timeout_s: float) -> None:
        """Ask until the answer is known. No answer (the call timed out, the controller
        died or restarts) is not a refusal: the controller may have committed the change
        and died before replying, so it stays pending (the high watermark keeps waiting for
        both ISRs) and the same request is asked again, which the controller answers with
        the partition's state if it was made. Ends early when the controller's word on the
        partition (Broker.apply) settled it, or this replica stopped leading."""
        try:
            while not self.stopped and self.partition.isr_change_pending(request):
                try:
                    answer = await asyncio.wait_for(propose(request), timeout_s)
                except RaylogError as e:  # refused before it looked at the partition
                    answer = {"state": None, "error": e}
                except Exception as e:  # no answer: the outcome is unknown
                    logger.info("%s: no answer to the ISR change to %s (%r); asking again",
                                self.name, list(request.isr), e)
                    await asyncio.sleep(ISR_RETRY_S)
                    continue
                state, refused = answer["state"], answer["error"]
                self.partition.isr_change_answered(
                    request, None if state is None else LeaderAndIsr.from_dict(state),
                    refused=refused is not None)
                if refused is not None:
                    # Say, a follower that restarted fetches before the controller saw it
                    # come back: asking again at every fetch would only be refused again.
                    self.propose_after = time.monotonic() + ISR_RETRY_S
                    if not isinstance(refused, FencedEpochError):
                        logger.info("%s: ISR change to %s refused: %r", self.name,
                                    list(request.isr), refused)
                return
        finally:
            self.proposing = False
            self.notify()

    # -- upkeep --------------------------------------------------------------------------------

    def behind(self) -> bool:
        """Whether this leader has followers that have not fetched everything: its ISR may
        have to shrink, so maintenance keeps looking."""
        partition = self.partition
        if partition.role is not Role.LEADER:
            return False
        end = partition.log_end_offset
        replica_set = partition.replica_set
        return any(replica_set.follower(r).log_end_offset != end
                   for r in partition.replicas if r != partition.replica_id)


_background: set[asyncio.Task] = set()


def background(work: Awaitable[Any]) -> asyncio.Task:
    """Run ``work`` on the event loop without waiting for it, keeping a reference until it
    ends (asyncio keeps only weak ones: an unreferenced task may vanish mid-way)."""
    task = asyncio.get_running_loop().create_task(work)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


async def wait_any(replicas: Iterable[HostedReplica], timeout: float) -> bool:
    """Wait up to ``timeout`` s until any of ``replicas`` changes; whether one did."""
    if timeout <= 0:
        return False
    waiter = asyncio.get_running_loop().create_future()
    hosts = list(replicas)
    for hosted in hosts:
        hosted._waiters.add(waiter)
    try:
        await asyncio.wait_for(waiter, timeout)
        return True
    except TimeoutError:
        return False
    finally:
        for hosted in hosts:
            hosted._waiters.discard(waiter)
