"""Reading a source cluster through its Flight endpoint (:mod:`raylog.mirror.flight_server`).

Every Flight failure becomes a typed raylog error: an endpoint that cannot be reached (or
times out) is SourceUnavailableError (retriable), a refused token
SourceAuthenticationError, and an error raised by the source cluster itself the same
raylog error it was there (UnknownTopicError, OffsetOutOfRangeError, ...).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from raylog.errors import (
    InternalError,
    RaylogError,
    SourceAuthenticationError,
    SourceUnavailableError,
)
from raylog.mirror import protocol
from raylog.mirror.protocol import Ticket

DEFAULT_TIMEOUT_S = 30.0
STREAM_TIMEOUT_S = 300.0  # a whole read (gRPC's deadline covers the stream, not a message)


def batch_views(chunk: pa.RecordBatch) -> list[memoryview]:
    """The stored batches of a ``batches`` chunk, one memoryview each, without copying."""
    column = chunk.column(0)
    n = len(column)
    if not n:
        return []
    _, offsets, data = column.buffers()
    bounds = np.frombuffer(offsets, np.int32)[column.offset:column.offset + n + 1].tolist()
    view = memoryview(data)
    return [view[lo:hi] for lo, hi in itertools.pairwise(bounds)]


class SourceClient:
    """Calls to one source endpoint. Safe to share between threads (each call is its own
    gRPC call on one channel).

    >>> source = SourceClient("grpc://127.0.0.1:8815", token="...")
    >>> [t["name"] for t in source.topics()]
    ['orders']
    """

    def __init__(self, location: str, token: str, *, tls_root_certs: bytes | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.location = location
        self._timeout_s = timeout_s
        self._headers = [(protocol.AUTH_HEADER.encode(), protocol.bearer(token).encode())]
        try:
            self._client = flight.FlightClient(location, tls_root_certs=tls_root_certs)
        except (flight.FlightError, pa.ArrowException) as e:
            raise SourceUnavailableError(f"cannot open the source {location}: {e}") from e

    def _options(self, timeout_s: float | None = None) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(headers=self._headers,
                                        timeout=timeout_s or self._timeout_s)

    def _error(self, error: Exception) -> RaylogError:
        if isinstance(error, flight.FlightUnauthenticatedError | flight.FlightUnauthorizedError):
            return SourceAuthenticationError(f"the source {self.location} refused the token: "
                                             f"{_first_line(error)}")
        if isinstance(error, flight.FlightServerError):
            typed = protocol.error_from(str(error), error.extra_info)
            if typed is not None:
                return typed
        if isinstance(error, flight.FlightUnavailableError | flight.FlightTimedOutError |
                      flight.FlightCancelledError):
            return SourceUnavailableError(f"the source {self.location} is unreachable: "
                                          f"{_first_line(error)}")
        return InternalError(f"the source {self.location} failed: {_first_line(error)}")

    def _action(self, name: str, body: dict[str, Any] | None = None) -> Any:
        try:
            results = list(self._client.do_action(
                flight.Action(name, json.dumps(body or {}).encode()), self._options()))
        except flight.FlightError as e:
            raise self._error(e) from e
        return json.loads(results[0].body.to_pybytes())

    def topics(self) -> list[dict[str, Any]]:
        """Every topic: name, topic_id, partitions (a count), replication_factor, configs."""
        return self._action(protocol.ACTION_TOPICS)

    def offsets(self, topic: str) -> list[tuple[int, int]]:
        """(log start, high watermark) of each partition of ``topic``."""
        return [tuple(p) for p in self._action(protocol.ACTION_OFFSETS, {"topic": topic})]

    def group_offsets(self, topics: list[str]) -> dict[str, list[list[Any]]]:
        """group id -> [[topic, partition, committed offset], ...] of ``topics``."""
        return self._action(protocol.ACTION_GROUP_OFFSETS, {"topics": topics})

    def read(self, ticket: Ticket) -> Iterator[tuple[pa.RecordBatch, dict[str, int]]]:
        """The stream ``ticket`` asks for: (chunk, its metadata) pairs; metadata comes with
        the first chunk of each read the server made."""
        wait_s = max(self._timeout_s, STREAM_TIMEOUT_S) + ticket.max_wait_ms / 1000
        try:
            reader = self._client.do_get(flight.Ticket(ticket.encode()), self._options(wait_s))
            meta: dict[str, int] = {}
            for chunk in reader:
                if chunk.app_metadata is not None:
                    meta = json.loads(chunk.app_metadata.to_pybytes())
                yield chunk.data, meta
        except flight.FlightError as e:
            raise self._error(e) from e

    def close(self) -> None:
        self._client.close()


def _first_line(error: Exception) -> str:
    return str(error).split(". Detail:")[0].splitlines()[0]
