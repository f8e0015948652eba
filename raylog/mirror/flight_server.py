"""A source cluster's Arrow Flight endpoint: topics read from outside the Ray cluster.

``raylog flight-serve`` runs :class:`SourceFlightServer` in a driver process of the source
cluster. It serves what :mod:`raylog.mirror.protocol` describes: stored batches as they are
(a mirror forwards them untouched), decoded records (for any Flight client: pyarrow, the
Java, Go or Rust Flight clients), topics, offsets and groups' committed offsets. Every call
must carry ``authorization: Bearer <token>``; the server listens on 127.0.0.1 unless told
another address, and speaks TLS when given a certificate.

The server reads the cluster through a *backend* (:class:`raylog.mirror.source.ClusterSource`
on a cluster; a fake in unit tests), so this module needs no Ray.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from raylog.errors import RaylogError
from raylog.mirror import protocol
from raylog.mirror.protocol import Ticket
from raylog.records.header import iter_headers
from raylog.records.payload import TABLE_SCHEMA
from raylog.records.reader import read_table

logger = logging.getLogger(__name__)

BATCHES_SCHEMA = pa.schema([pa.field("batch", pa.binary(), nullable=False)])
FETCH_BYTES = 8 << 20  # per read of the partition; a stream holds several
_EMPTY_RECORDS = pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in TABLE_SCHEMA],
                                            schema=TABLE_SCHEMA)


class Fetched(NamedTuple):
    """What one read of a partition found: whole stored batches from the offset asked,
    below the high watermark."""

    data: bytes
    high_watermark: int
    log_start_offset: int


class SourceBackend(Protocol):
    """What the endpoint needs of a cluster. Methods may be called from several threads."""

    def topics(self) -> list[dict[str, Any]]: ...

    def offsets(self, topic: str) -> list[tuple[int, int]]: ...

    def group_offsets(self, topics: list[str]) -> dict[str, list[list[Any]]]: ...

    def start_fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
                    max_wait_ms: int) -> Callable[[], Fetched]: ...


class TokenAuth(flight.ServerMiddlewareFactory):
    """Refuses every call that does not carry ``authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._expected = protocol.bearer(token).encode()

    def start_call(self, info: flight.CallInfo, headers: dict[str, list[Any]]) -> None:
        given = headers.get(protocol.AUTH_HEADER) or [""]
        value = given[0].encode() if isinstance(given[0], str) else given[0]
        if not hmac.compare_digest(value, self._expected):
            raise flight.FlightUnauthenticatedError(
                "missing or wrong token (give the endpoint's token as 'authorization: "
                "Bearer <token>')")
        return None


def _below(data: bytes, end: int | None) -> tuple[bytes, list[int], int | None]:
    """The batches of ``data`` that start below ``end`` (all for None): their bytes, where
    each starts, and the offset after the last (None for none)."""
    starts: list[int] = []
    next_offset = None
    for pos, header in iter_headers(data, verify=False):
        if end is not None and header.base_offset >= end:
            return data[:pos], starts, next_offset
        starts.append(pos)
        next_offset = header.next_offset
    return data, starts, next_offset


def batches_column(data: bytes, starts: list[int]) -> pa.RecordBatch:
    """Stored batches, starting at ``starts`` in ``data``, as one row each of a binary
    column sharing ``data``'s memory."""
    bounds = np.asarray([*starts, len(data)], np.int32)
    array = pa.Array.from_buffers(pa.binary(), len(starts), [
        None, pa.py_buffer(bounds), pa.py_buffer(data)])
    return pa.record_batch([array], schema=BATCHES_SCHEMA)


def _flight_error(error: RaylogError) -> flight.FlightServerError:
    return flight.FlightServerError(str(error), extra_info=protocol.error_info(error))


class SourceFlightServer(flight.FlightServerBase):
    """Serves one cluster's topics over Flight. ``serve()`` blocks; ``shutdown()`` from
    another thread (or a signal handler) stops it. Calls run on gRPC's threads."""

    def __init__(self, backend: SourceBackend, token: str, host: str = "127.0.0.1",
                 port: int = 0, tls: tuple[bytes, bytes] | None = None) -> None:
        if not token:
            raise ValueError("a Flight endpoint needs a token")
        scheme = "grpc+tls" if tls else "grpc+tcp"
        super().__init__(f"{scheme}://{host}:{port}", middleware={"auth": TokenAuth(token)},
                         tls_certificates=[tls] if tls else None)
        self.backend = backend
        self.location = f"{scheme}://{host}:{self.port}"
        self._counted = threading.Lock()
        self.reads = 0       # do_get calls (`raylog flight-serve` says both when it stops)
        self.bytes_sent = 0  # bytes of record batches they sent

    # -- reads ---------------------------------------------------------------------------------

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket
               ) -> flight.FlightDataStream:
        try:
            wanted = Ticket.decode(ticket.ticket)
        except RaylogError as e:
            raise _flight_error(e) from e
        with self._counted:
            self.reads += 1
        schema = BATCHES_SCHEMA if wanted.format == "batches" else TABLE_SCHEMA
        return flight.GeneratorStream(schema, self._stream(wanted, context))

    def _stream(self, ticket: Ticket, context: flight.ServerCallContext) -> Iterator[Any]:
        """Fetch after fetch from ``ticket.offset``, the next one asked before the current
        one is sent, until the end, ``max_bytes``, a wait without records, or the client
        goes away."""
        offset, sent = ticket.offset, 0

        def fetch(at: int) -> Callable[[], Fetched]:
            return self.backend.start_fetch(ticket.topic, ticket.partition, at,
                                            min(FETCH_BYTES, ticket.max_bytes),
                                            ticket.max_wait_ms)

        try:
            pending = fetch(offset)
            while True:
                fetched = pending()
                data, starts, next_offset = _below(fetched.data, ticket.end)
                if next_offset is not None:
                    offset = max(offset, next_offset)
                sent += len(data)
                with self._counted:
                    self.bytes_sent += len(data)
                more = bool(data) and sent < ticket.max_bytes and not context.is_cancelled() \
                    and (ticket.end is None or offset < ticket.end)
                if more:
                    pending = fetch(offset)
                meta = pa.py_buffer(json.dumps({
                    "next_offset": offset, "high_watermark": fetched.high_watermark,
                    "log_start_offset": fetched.log_start_offset}).encode())
                if ticket.format == "batches":
                    yield batches_column(data, starts), meta
                else:
                    parts = read_table(data, ticket.offset, ticket.end).to_batches()
                    yield (parts[0] if parts else _EMPTY_RECORDS), meta
                    yield from parts[1:]
                if not more:
                    return
        except RaylogError as e:
            raise _flight_error(e) from e

    def list_flights(self, context: flight.ServerCallContext, criteria: bytes
                     ) -> Iterator[flight.FlightInfo]:
        for topic in self._call(self.backend.topics):
            yield self._info(topic["name"])

    def get_flight_info(self, context: flight.ServerCallContext,
                        descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
        if descriptor.descriptor_type != flight.DescriptorType.PATH or \
                len(descriptor.path) != 1:
            raise flight.FlightServerError("describe a topic by a path of one element: its name")
        return self._info(descriptor.path[0].decode())

    def _info(self, topic: str) -> flight.FlightInfo:
        """A topic's records as they are now: one endpoint (ticket) per partition."""
        offsets = self._call(self.backend.offsets, topic)
        endpoints = [flight.FlightEndpoint(Ticket(topic, p, start, end, "records").encode(), [])
                     for p, (start, end) in enumerate(offsets)]
        return flight.FlightInfo(TABLE_SCHEMA, flight.FlightDescriptor.for_path(topic),
                                 endpoints, sum(end - start for start, end in offsets), -1)

    # -- actions -------------------------------------------------------------------------------

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return list(protocol.ACTIONS.items())

    def do_action(self, context: flight.ServerCallContext, action: flight.Action
                  ) -> Iterator[flight.Result]:
        body = self._call(protocol.json_body, action.body.to_pybytes(), action.type)
        if action.type == protocol.ACTION_TOPICS:
            answer: Any = self._call(self.backend.topics)
        elif action.type == protocol.ACTION_OFFSETS:
            answer = self._call(self.backend.offsets, body.get("topic"))
        elif action.type == protocol.ACTION_GROUP_OFFSETS:
            answer = self._call(self.backend.group_offsets, list(body.get("topics") or []))
        else:
            raise flight.FlightServerError(f"unknown action {action.type!r}; known: "
                                           f"{', '.join(protocol.ACTIONS)}")
        yield flight.Result(pa.py_buffer(json.dumps(answer).encode()))

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except RaylogError as e:
            raise _flight_error(e) from e
