"""The thin adapter over kafka-python's ``kafka.protocol``: a request frame in, a response
frame out. Nothing else in the gateway touches kafka-python's message classes directly
except to build a response body (``response_class``).

A request frame (after its 4-byte length) starts with the request header::

    api_key int16, api_version int16, correlation_id int32, client_id nullable string
    (+ tagged fields when the API's version is flexible)

followed by the body. kafka-python knows every message of Kafka 4's specs, flexible versions
and tagged fields included; this module finds the class by API key and decodes and
encodes with it. A frame it cannot read raises MalformedRequest (the listener then closes
that connection: Kafka's brokers do the same, there being no way to answer an unreadable
request). Plain Python, no I/O.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, Protocol

import kafka.protocol.admin as _admin
import kafka.protocol.consumer as _consumer
import kafka.protocol.metadata as _metadata
import kafka.protocol.producer as _producer
import kafka.protocol.sasl as _sasl
from kafka.protocol.api_message import ApiMessage

from raylog.errors import RaylogError

# api_key, api_version, correlation_id: what a frame of any version starts with
FIXED_HEADER = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
_MODULES = (_metadata, _producer, _consumer, _admin, _sasl)


class MalformedRequest(RaylogError):
    """A request frame that cannot be read (truncated, garbage, a version its class does
    not know): the connection it came on is closed."""


def _request_classes() -> dict[int, type[ApiMessage]]:
    found: dict[int, type[ApiMessage]] = {}
    for module in _MODULES:
        for name in module.__all__:
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, ApiMessage) and cls.is_request():
                found[cls.API_KEY] = cls
    return found


def _response_classes(requests: dict[int, type[ApiMessage]]) -> dict[int, type[ApiMessage]]:
    found: dict[int, type[ApiMessage]] = {}
    for key, request in requests.items():
        name = request.__name__.removesuffix("Request") + "Response"
        for module in _MODULES:
            if hasattr(module, name):
                found[key] = getattr(module, name)
                break
    return found


REQUESTS: dict[int, type[ApiMessage]] = _request_classes()
RESPONSES: dict[int, type[ApiMessage]] = _response_classes(REQUESTS)


@dataclasses.dataclass(frozen=True)
class Request:
    """One decoded request: its header's fields and its body (a kafka-python message whose
    fields are attributes, snake_case, as Kafka's JSON specs name them)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame: readable in every version, so an
    error can be answered to a request whose body is not."""
    if len(frame) < FIXED_HEADER.size:
        raise MalformedRequest(f"a request of {len(frame)} bytes is shorter than a header")
    return FIXED_HEADER.unpack_from(frame)


def decode_request(frame: bytes | memoryview) -> Request:
    """The request in ``frame`` (the bytes after the length). The caller checked that the
    API key and version are served (``REQUESTS`` knows every key the gateway serves)."""
    api_key, api_version, correlation_id = peek_header(frame)
    cls = REQUESTS.get(api_key)
    if cls is None:
        raise MalformedRequest(f"no message class for API key {api_key}")
    try:
        body = cls.decode(frame, version=api_version, header=True)
    except Exception as e:  # kafka-python raises what its codecs hit: struct, index,
        # unicode and value errors; any of them means the bytes are not this request
        raise MalformedRequest(f"cannot decode {cls.__name__} v{api_version}: "
                               f"{type(e).__name__}: {e}") from e
    return Request(api_key, api_version, correlation_id, body.header.client_id, body)


def response_class(api_key: int, api_version: int) -> type[ApiMessage]:
    """The response message class of an API at a version: ``response_class(3, 12)(...)``."""
    return RESPONSES[api_key][api_version]


class Encoded(Protocol):
    """A response a handler encoded itself (Fetch's, ``fetch_frame.FetchAnswer``), returned
    in place of a kafka-python message."""

    def frame(self, correlation_id: int) -> list[bytes | bytearray | memoryview]:
        """The whole frame as buffers to write in order."""


def encode_response(response: ApiMessage | Encoded, api_version: int,
                    correlation_id: int) -> list[bytes | bytearray | memoryview]:
    """``response`` as a whole frame (length, response header, body), as buffers to write
    in order: one bytearray as kafka-python encodes it (not copied again into bytes), or
    the pieces of an answer that encoded itself (a Fetch answer is megabytes, and copies of
    it were most of the listener's CPU in a consume: py-spy)."""
    if not isinstance(response, ApiMessage):
        return response.frame(correlation_id)
    if api_version != response.API_VERSION:
        response.API_VERSION = api_version  # before the header, which has no version
    response.with_header(correlation_id=correlation_id)
    return [response.encode(header=True, framed=True)]


def frame_size(prefix: bytes) -> int:
    """The length a frame's 4-byte prefix announces."""
    return _SIZE.unpack(prefix)[0]
