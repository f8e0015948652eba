"""What crosses from Python actors to Java callers (the Spark connector).

Ray's cross-language calls move strings, bytes, numbers and lists of them, not pickled
Python objects: the actors' ``java_*`` methods take and return JSON strings or Arrow IPC
bytes. A typed raylog error cannot cross either; it crosses as its message with the error's
name, retriability and text between two markers, which the Java side finds again
(io.raylog.spark.RaylogException) and so knows which failures to retry.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from raylog.errors import RaylogError

ERROR_MARK = "@@raylog-error@@"

T = TypeVar("T")


class JavaCallError(RuntimeError):
    """A RaylogError as a Java caller can read it (see the module docstring)."""


def java_error(error: RaylogError) -> JavaCallError:
    return JavaCallError(f"{ERROR_MARK}{json.dumps(error_json(error))}{ERROR_MARK}")


def error_json(error: RaylogError) -> dict[str, Any]:
    """A RaylogError as a JSON object, for answers that report errors per item."""
    return {"type": type(error).__name__, "retriable": bool(error.retriable),
            "message": str(error)}


def java_call(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Wrap an async actor method called from Java: a RaylogError leaves as JavaCallError."""

    @functools.wraps(method)
    async def wrapped(*args: Any, **kwargs: Any) -> T:
        try:
            return await method(*args, **kwargs)
        except RaylogError as e:
            raise java_error(e) from e

    return wrapped
