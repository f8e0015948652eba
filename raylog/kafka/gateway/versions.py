"""ApiVersions (key 18), versions 0-3: the APIs this listener serves and their versions.

A client asking with a version above 3 (a newer client) is answered by the listener in the
v0 format with UNSUPPORTED_VERSION and the same ranges (:func:`unsupported_answer`), as
Kafka's brokers do: the client then asks again at a version both know.
"""

from __future__ import annotations

from typing import Any

from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.protocol import encode_response, response_class

API_KEY = 18
MAX_VERSION = 3


async def handle(ctx: Context, version: int, request: Any) -> Any:
    return answer(ctx.dispatch, version, Code.NONE)


def answer(dispatch: Dispatch, version: int, code: int) -> Any:
    cls = response_class(API_KEY, version)
    keys = [cls.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, low, high in dispatch.ranges()]
    return cls(error_code=code, api_keys=keys, throttle_time_ms=0)


def unsupported_answer(dispatch: Dispatch, correlation_id: int) -> list[Any]:
    """The whole frame answering an ApiVersions request of a version not served, as
    buffers (``encode_response``)."""
    return encode_response(answer(dispatch, 0, Code.UNSUPPORTED_VERSION), 0, correlation_id)


def register(dispatch: Dispatch) -> None:
    dispatch.add(API_KEY, 0, MAX_VERSION, handle)
