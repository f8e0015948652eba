"""Ray's notices of actor state changes, for watches in the controller's event loop.

Ray's GCS publishes every change of an actor's state (ALIVE, RESTARTING, DEAD, ...) on its
actor channel; Ray's dashboard reads it, and so does :class:`ActorNotices`, with one
subscription per process whatever the number of actors watched. A watch learns of a death
when Ray announces it, with no call to the actor and no timer per actor. The channel's
client is private to Ray (``ray._private.gcs_pubsub``, as of Ray 2.60, pinned in STACK.md):
everything that touches it is in :class:`GcsActorChannel`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import ray

logger = logging.getLogger(__name__)

RESUBSCRIBE_S = 1.0  # after the subscription broke (the GCS restarted, say)
POLL_BATCH = 1000    # notices taken per read of the channel


class ActorChannel(Protocol):
    async def poll(self) -> list[tuple[str, str]]:
        """The next notices, (actor id in hex, state name); empty once the channel broke."""

    async def close(self) -> None: ...


class GcsActorChannel:
    """A subscription to the GCS's actor channel (Ray's own client for it)."""

    def __init__(self, subscriber: object) -> None:
        from ray.core.generated import gcs_pb2
        self._subscriber = subscriber
        self._state_name = gcs_pb2.ActorTableData.ActorState.Name

    @classmethod
    async def open(cls) -> GcsActorChannel:
        from ray._private.gcs_pubsub import GcsAioActorSubscriber
        subscriber = GcsAioActorSubscriber(address=ray.get_runtime_context().gcs_address)
        await subscriber.subscribe()  # notices published from here on are kept for us
        return cls(subscriber)

    async def poll(self) -> list[tuple[str, str]]:
        # Without a timeout, Ray's poll returns nothing only when the channel broke.
        return [(actor_id.hex(), self._state_name(data.state))
                for actor_id, data in await self._subscriber.poll(batch_size=POLL_BATCH)
                if actor_id]

    async def close(self) -> None:
        await self._subscriber.close()


class ActorNotices:
    """Dispatches the actor channel's notices to the queues listening to each actor.

    A listener's queue (:meth:`listen`) receives each state Ray announces for its actor,
    in order, and None when the subscription started or was renewed after a break: a notice
    published before may have been missed, so the listener asks the actor directly. Listen
    before asking the actor, and no change is lost between the two. The subscription opens
    with the first listener and stays open (one long poll, idle when no actor changes). Runs
    on one event loop; not thread-safe.
    """

    def __init__(self, open_channel: Callable[[], Awaitable[ActorChannel]] = GcsActorChannel.open,
                 resubscribe_s: float = RESUBSCRIBE_S) -> None:
        self._open_channel = open_channel
        self._resubscribe_s = resubscribe_s
        self._listeners: dict[str, list[asyncio.Queue]] = {}
        self._task: asyncio.Task | None = None

    def listen(self, actor_id: str) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        self._listeners.setdefault(actor_id, []).append(queue)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen())
        return queue

    def stop_listening(self, actor_id: str, queue: asyncio.Queue) -> None:
        listeners = self._listeners.get(actor_id, [])
        if queue in listeners:
            listeners.remove(queue)
        if not listeners:
            self._listeners.pop(actor_id, None)

    def _tell(self, actor_id: str, state: str | None) -> None:
        for queue in self._listeners.get(actor_id, ()):
            queue.put_nowait(state)

    async def _listen(self) -> None:
        broke = False
        while True:
            try:
                channel = await self._open_channel()
            except Exception as e:  # Ray's client raises what gRPC raises: try again later
                if not broke:
                    logger.warning("cannot subscribe to Ray's actor notices (%r); deaths are "
                                   "noticed by sessions running out until it can", e)
                broke = True
                await asyncio.sleep(self._resubscribe_s)
                continue
            if broke:
                logger.info("subscribed to Ray's actor notices again")
            broke = False
            for actor_id in list(self._listeners):
                self._tell(actor_id, None)  # listening before the subscription: look again
            try:
                while notices := await channel.poll():
                    for actor_id, state in notices:
                        self._tell(actor_id, state)
            except Exception as e:  # the channel broke: subscribe again
                logger.warning("Ray's actor notices broke off (%r); subscribing again", e)
            finally:
                await channel.close()
            broke = True
            await asyncio.sleep(self._resubscribe_s)


_notices: ActorNotices | None = None


def actor_notices() -> ActorNotices:
    """The process's one subscription."""
    global _notices
    if _notices is None:
        _notices = ActorNotices()
    return _notices
