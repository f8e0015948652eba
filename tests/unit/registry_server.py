"""A REST server over an in-memory registry, for tests of the REST API and serializers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from raylog.schemas.registry import MemoryLog, Registry
from raylog.schemas.rest import RegistryHTTPServer


@contextlib.contextmanager
def registry_server(registry: Any = None) -> Iterator[RegistryHTTPServer]:
    """A server on a free port over ``registry`` (default: a new in-memory Registry),
    stopped on exit; ``.registry`` is what it serves."""
    if registry is None:
        registry = Registry(MemoryLog())
    with RegistryHTTPServer(registry, port=0, serialize=True).running() as server:
        yield server
