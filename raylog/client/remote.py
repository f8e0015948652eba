"""Every Ray call a client makes goes through these wrappers, one per remote actor kind.

They turn Ray's exceptions into raylog's: an error raised inside an actor comes back as the
raylog error it was (not wrapped in RayTaskError, however deep), a dead or unreachable actor
becomes a retriable error, a timeout becomes RequestTimeoutError, and anything else raised
inside an actor (a bug) becomes InternalError. Unit tests replace them with fakes.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import ray
from ray.exceptions import ActorUnschedulableError, GetTimeoutError, RayActorError, RayTaskError

from raylog.errors import (
    ActorUnavailableError,
    ControllerUnavailableError,
    InternalError,
    LeaderNotAvailableError,
    NoClusterError,
    RaylogError,
    RequestTimeoutError,
)

CONTROLLER_RETRIES = 30  # a restarting controller is back within seconds


def resolve(ref: ray.ObjectRef | list[ray.ObjectRef], timeout: float | None = None) -> Any:
    """``ray.get`` with raylog's errors."""
    try:
        return ray.get(ref, timeout=timeout)
    except (RayTaskError, RayActorError, ActorUnschedulableError) as e:
        raise unwrap(e) from e
    except GetTimeoutError as e:
        raise RequestTimeoutError(f"no answer within {timeout} s") from e


def wait_done(refs: list[ray.ObjectRef], timeout: float) -> list[ray.ObjectRef]:
    """The requests among ``refs`` that have finished: waits up to ``timeout`` s for the
    first, then takes every other one that is done too."""
    done, _ = ray.wait(refs, num_returns=1, timeout=timeout)
    if done and len(refs) > 1:
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    return done


def unwrap(error: BaseException) -> BaseException:
    """The raylog error a Ray error stands for. An actor that awaited another actor's
    failed call re-raises it wrapped once more: look through every wrapper."""
    cause = error
    while isinstance(cause, RayTaskError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, RaylogError):
        return cause
    if isinstance(error, RayActorError | ActorUnschedulableError):
        # Dead, restarting, or pinned to a node that is gone (its broker is served by
        # another node now): the caller refreshes its metadata and tries again.
        return ActorUnavailableError(f"actor unavailable: {error}")
    if isinstance(cause, RayActorError | ActorUnschedulableError):
        # the controller found a replica it called dead
        return LeaderNotAvailableError(f"a partition replica is unavailable: {cause}")
    if isinstance(error, RayTaskError):
        return InternalError(f"{type(cause).__name__} inside the cluster: {cause}")
    return error


class ReplicaClient:
    """Calls to one replica actor; every method returns an ObjectRef (asynchronous)."""

    def __init__(self, handle: ray.actor.ActorHandle) -> None:
        self.handle = handle

    def append(self, batch: bytes, acks: int | str, leader_epoch: int | None) -> ray.ObjectRef:
        return self.handle.append.remote(batch, acks, leader_epoch)

    def fetch(self, offset: int, max_bytes: int, max_wait_ms: int,
              min_bytes: int) -> ray.ObjectRef:
        return self.handle.fetch.remote(offset, max_bytes, max_wait_ms, min_bytes)

    def list_offset(self, spec: str | int) -> ray.ObjectRef:
        return self.handle.list_offset.remote(spec)

    def read_kafka_table(self, start: int, end: int) -> ray.ObjectRef:
        return self.handle.read_kafka_table.remote(start, end)


class ControllerClient:
    """Synchronous calls to the controller, retried while it restarts."""

    def __init__(self, handle: ray.actor.ActorHandle, timeout: float = 120.0) -> None:
        self.handle = handle
        self.timeout = timeout

    def call(self, method: str, *args: Any, retry: bool = True, **kwargs: Any) -> Any:
        """Call ``method`` and wait. Reads pass ``retry=True`` and ride out a controller
        restart; changes pass False, since a change cut off by a crash may have happened."""
        attempts = CONTROLLER_RETRIES if retry else 1
        for attempt in itertools.count(1):
            try:
                return resolve(getattr(self.handle, method).remote(*args, **kwargs),
                               timeout=self.timeout)
            except ActorUnavailableError as e:
                if not retry:
                    raise ControllerUnavailableError(
                        f"the raylog controller became unavailable during {method}: {e}; "
                        f"check whether the change happened before repeating it") from e
                if attempt >= attempts:
                    raise NoClusterError(f"the raylog controller is unreachable: {e}") from e
                time.sleep(min(0.05 * 2**attempt, 1.0))
