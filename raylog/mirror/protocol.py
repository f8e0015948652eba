"""What a source cluster's Flight endpoint and its clients say to each other.

``do_get`` takes a ticket, JSON::

    {"topic": "orders", "partition": 0, "offset": 1200,   where to start
     "end": 5000,             optional: stop there (exclusive); else follow
     "format": "batches",     "batches": stored batches as they are on disk, one per row
                              of a binary column "batch"; "records": decoded records
                              (offset, timestamp, key, value, headers), for any Flight client
     "max_wait_ms": 500,      end the stream after this long without new records ...
     "max_bytes": 67108864}   ... or after this many bytes (the client asks again)

and streams Arrow record batches, each with application metadata (JSON):
``{"next_offset": ..., "high_watermark": ..., "log_start_offset": ...}``, where
``next_offset`` is where a following ticket goes on. Actions (``do_action``, JSON bodies):
``topics`` (names, partition counts, replication factors, configs), ``offsets`` (log start
and high watermark per partition of a topic), ``group-offsets`` (every group's committed
offsets of the given topics). An error travels as a Flight server error whose
``extra_info`` names raylog's error type, so a client raises the same typed error.

Plain Python: no Ray, no Arrow.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from raylog import errors
from raylog.errors import InvalidArgumentError, RaylogError
from raylog.metadata.topics import validate_topic_name
from raylog.util.arguments import INT32_MAX, INT64_MAX, check_int, short_repr

FORMATS = ("batches", "records")
ACTION_TOPICS = "topics"
ACTION_OFFSETS = "offsets"
ACTION_GROUP_OFFSETS = "group-offsets"
ACTIONS = {
    ACTION_TOPICS: "every topic: name, partitions, replication factor, configs",
    ACTION_OFFSETS: 'log start and high watermark per partition: {"topic": NAME}',
    ACTION_GROUP_OFFSETS: 'committed offsets of every group: {"topics": [NAME, ...]}',
}
DEFAULT_MAX_WAIT_MS = 500
DEFAULT_MAX_BYTES = 64 << 20
AUTH_HEADER = "authorization"


def bearer(token: str) -> str:
    return f"Bearer {token}"


@dataclasses.dataclass(frozen=True)
class Ticket:
    """One read of a partition: [offset, end) or from offset on, as stored batches or as
    records. Checked when built."""

    topic: str
    partition: int
    offset: int
    end: int | None = None
    format: str = "batches"
    max_wait_ms: int = DEFAULT_MAX_WAIT_MS
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        check_int("partition", self.partition, 0, INT32_MAX)
        check_int("offset", self.offset, 0, INT64_MAX)
        if self.end is not None:
            check_int("end", self.end, self.offset, INT64_MAX)
        if self.format not in FORMATS:
            raise InvalidArgumentError(f"ticket format must be one of {FORMATS}, got "
                                       f"{short_repr(self.format)}")
        check_int("max_wait_ms", self.max_wait_ms, 0, INT32_MAX)
        check_int("max_bytes", self.max_bytes, 1, INT64_MAX)

    def encode(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Ticket:
        try:
            fields = json.loads(raw)
            if not isinstance(fields, dict):
                raise TypeError("not an object")
            return cls(**fields)
        except (ValueError, TypeError) as e:
            if isinstance(e, RaylogError):
                raise
            fields = [f.name for f in dataclasses.fields(cls)]
            raise InvalidArgumentError(f"a ticket must be a JSON object with the fields "
                                       f"{fields}, got {short_repr(raw)}") from None


def json_body(raw: bytes, what: str) -> dict[str, Any]:
    """An action's body: a JSON object (empty body: {})."""
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise InvalidArgumentError(f"the body of action {what!r} must be a JSON object, got "
                                   f"{short_repr(raw)}")
    return body


def error_info(error: RaylogError) -> bytes:
    """What travels with an error: its type, so the client can raise the same one."""
    return json.dumps({"error": type(error).__name__}).encode()


def error_from(message: str, info: bytes | None) -> RaylogError | None:
    """The raylog error a Flight error carrying ``info`` stands for, None if it names none."""
    try:
        name = json.loads(info or b"{}").get("error")
    except (ValueError, AttributeError):
        return None
    cls = getattr(errors, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, RaylogError)):
        return None
    # Flight appends ". Detail: ..." and gRPC context to the message: keep the sender's.
    return cls(message.split(". Detail:")[0].split(". gRPC client debug context")[0])
