"""A broker process's thread for slow storage work: compaction passes, periodic flushes and
the deletion of segments retention took, off the event loop that serves every replica.

Hand-off (the contract of ``PartitionLog``'s ``start_*``/``finish_*`` pairs): the event loop
plans a job in one short step, the job runs on this module's one thread touching no log
state (it reads through descriptors of its own and writes only files of its own), and the
event loop takes the outcome in one short step (a compaction pass's output swapped in, or
discarded if the log was truncated, closed or lost the segments meanwhile). Jobs run one at
a time in the order they were asked for, so a pass never competes with a flush for the disk
of the same broker; a log has at most one pass and one flush in flight (it says None to
another). Reads and fetches run on the event loop: they see the segments from before a swap
or from after it, never a segment closed under them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from raylog.storage import PartitionLog
from raylog.storage.handoff import delete_retired

logger = logging.getLogger(__name__)


class StorageWorker:
    """The background thread of one broker process, and the jobs it has in flight.

    Methods are called on the event loop, which owns the logs; each returns at once, having
    planned the job (if one is due) and left a task that waits for the thread and then
    finishes the job on the loop. A job's failure is logged and ends that job only.
    """

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1,
                                            thread_name_prefix="raylog-storage")
        self._tasks: set[asyncio.Task] = set()

    def compact(self, log: PartitionLog, max_offset: int) -> bool:
        """Start a compaction pass of ``log`` below ``max_offset``, if one is due."""
        job = log.start_compaction(max_offset)
        if job is None:
            return False
        self._spawn(job.build, lambda: log.finish_compaction(job),
                    f"compaction of {log.directory.name}")
        return True

    def flush(self, log: PartitionLog) -> bool:
        """Start the periodic flush of ``log`` (``flush.ms``), if one is due."""
        job = log.start_flush()
        if job is None:
            return False
        self._spawn(job.run, lambda: log.finish_flush(job), f"flush of {log.directory.name}")
        return True

    def delete_retired(self, log: PartitionLog) -> None:
        """Delete the segments retention took from ``log`` since the last call."""
        retired = log.take_retired()
        if retired:
            self._spawn(lambda: delete_retired(retired), lambda: None,
                        f"deletion of {len(retired)} segments of {log.directory.name}")

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    async def idle(self) -> None:
        """Wait until every job asked for so far has finished (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, work: Callable[[], object], finish: Callable[[], object],
               what: str) -> None:
        task = asyncio.get_running_loop().create_task(self._run(work, finish, what))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, work: Callable[[], object], finish: Callable[[], object],
                   what: str) -> None:
        # Cancelled (the process ends), the job is left unfinished: the thread may still be
        # writing its files, which the next open of the log removes.
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, work)
        except Exception:  # one job's failure must not stop the others'
            logger.exception("%s failed", what)
        try:
            finish()
        except Exception:
            logger.exception("finishing the %s failed", what)
