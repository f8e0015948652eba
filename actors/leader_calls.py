"""The controller's own calls to partition leaders, for the internal topics its coordinators
keep their state in (``__consumer_offsets``, ``__transaction_state``): a call retried while
the leadership moves, one acks=all append of a batch, and the replay of a partition.

Every call has a deadline: LEADER_ANSWER_S per try (a paused broker does not answer), and
LEADER_RETRY_S of tries while a partition has no reachable leader.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import ray
from ray.exceptions import RayActorError

from raylog.errors import LeaderNotAvailableError, RaylogError, RequestTimeoutError
from raylog.records import BatchHeader, Record, batch_records, decode, iter_batches
from raylog.records.control import Marker, read_marker
from raylog.storage import AppendInfo

LEADER_RETRY_S = 30.0  # how long a request rides out a leader change of an internal topic
LEADER_ANSWER_S = 15.0  # one request to a leader waits this long for its answer
LOAD_WAIT_MS = 500     # a loading fetch waits this long for the high watermark to move
APPEND_TIMEOUT_MS = 10_000  # one send of a batch: the leader's wait for its ISR ...
APPEND_ANSWER_S = 15.0      # ... and ours for any answer (a paused broker gives none)

# (the broker actor leading a partition, its leader epoch); LeaderNotAvailableError if none
Leader = Callable[[str, int], tuple[ray.actor.ActorHandle, int]]


class LeaderCalls:
    """Calls to the leaders ``leader`` names. Stateless; any task may use it."""

    def __init__(self, leader: Leader) -> None:
        self.leader = leader

    async def call(self, topic: str, partition: int,
                   call: Callable[[ray.actor.ActorHandle, int], Awaitable[Any]],
                   retry_s: float = LEADER_RETRY_S) -> Any:
        """``call(handle, leader_epoch)`` on the partition's leader, retried for ``retry_s``
        while the leadership moves (a broker went, its leader is being elected); each try
        waits LEADER_ANSWER_S at most (a paused broker does not answer)."""
        deadline = time.monotonic() + retry_s
        while True:
            try:
                handle, epoch = self.leader(topic, partition)
                try:
                    return await asyncio.wait_for(call(handle, epoch), LEADER_ANSWER_S)
                except TimeoutError:
                    raise RequestTimeoutError(f"{topic}-{partition}: its leader did not answer "
                                              f"within {LEADER_ANSWER_S:.0f} s") from None
            except (RaylogError, RayActorError) as e:
                retriable = getattr(e, "retriable", True)
                if not retriable or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def list_offset(self, topic: str, partition: int, spec: str | int,
                          retry_s: float = LEADER_RETRY_S) -> tuple[int, int] | None:
        return await self.call(
            topic, partition, lambda h, e: h.list_offset.remote(topic, partition, e, spec),
            retry_s)

    async def append(self, topic: str, partition: int, batch: bytes) -> AppendInfo:
        """One send of a batch to the partition's leader (acks=all): an OffsetsWriter's
        ``append``, which sends again after an error."""
        handle, epoch = self.leader(topic, partition)
        try:
            return await asyncio.wait_for(
                handle.produce.remote(topic, partition, epoch, batch, "all", APPEND_TIMEOUT_MS),
                APPEND_ANSWER_S)
        except TimeoutError:
            raise RequestTimeoutError(
                f"{topic}-{partition}: no answer from its leader within "
                f"{APPEND_ANSWER_S:.0f} s") from None

    async def replay(self, topic: str, partition: int) -> list[Record]:
        """Every record of the partition (control batches left out): see
        :meth:`replay_batches`."""
        return [record for _, content in await self.replay_batches(topic, partition)
                if not isinstance(content, Marker) for record in content]

    async def replay_batches(self, topic: str, partition: int
                             ) -> list[tuple[BatchHeader, list[Record] | Marker]]:
        """Every batch of the partition with its records (a control batch with the marker
        it holds), from its log start to the leader's log end as the replay starts (not to
        its high watermark: right after a failover a new leader's high watermark lags what
        was acknowledged until its followers have fetched, and a record skipped here would
        be lost to the coordinator). LeaderNotAvailableError if the high watermark does not
        reach that end within LEADER_RETRY_S."""
        offset = (await self.list_offset(topic, partition, "earliest"))[0]
        batches: list[tuple[BatchHeader, list[Record] | Marker]] = []
        end = deadline = None
        while end is None or offset < end:
            wait = 0 if end is None else LOAD_WAIT_MS  # the first one only looks
            result = await self.call(
                topic, partition, lambda h, e, o=offset, w=wait: h.fetch.remote(
                    topic, partition, e, o, 8 << 20, w, 1))
            if end is None:
                end, deadline = result.log_end_offset, time.monotonic() + LEADER_RETRY_S
            if result.data:
                data = result.data
                for pos, header in iter_batches(data):
                    if header.last_offset < offset:
                        continue
                    batches.append((header, read_marker(header, data, pos) if header.control
                                    else batch_records(header, decode(header, data, pos),
                                                       offset)))
                offset = max(h.next_offset for _, h in iter_batches(data))
            elif time.monotonic() > deadline:
                raise LeaderNotAvailableError(
                    f"{topic}-{partition}: its high watermark stays below the log end {end}; "
                    f"loading it again later")
        return batches


class Loading:
    """A coordinator's replay of its internal topic: started by the first request that
    needs it (or by the next one after a load that failed, say while its leader was
    offline), awaited by every request for at most ``wait_s``. One event loop."""

    def __init__(self, load: Callable[[], Awaitable[None]], what: str, wait_s: float) -> None:
        self._load = load
        self.what = what  # "the group coordinator is still loading __consumer_offsets"
        self.wait_s = wait_s
        self._task: asyncio.Task | None = None

    @property
    def done(self) -> bool:
        """Whether a load finished without error."""
        task = self._task
        return task is not None and task.done() and not task.cancelled() and \
            task.exception() is None

    async def wait(self) -> None:
        """Return once loaded; RequestTimeoutError (retriable) after ``wait_s``; the
        load's own error if it failed."""
        task = self._task
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = self._task = asyncio.get_running_loop().create_task(self._load())
        try:
            await asyncio.wait_for(asyncio.shield(task), self.wait_s)
        except TimeoutError:
            raise RequestTimeoutError(f"{self.what}; try again") from None
