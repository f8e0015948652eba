"""A REST server over an in-memory registry, for tests of the REST API and serializers."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from raylog.schemas.registry import MemoryLog, Registry
from raylog.schemas.rest import RegistryHTTPServer


@contextlib.contextmanager
def registry_server() -> Iterator[RegistryHTTPServer]:
    """A server on a free port, stopped on exit; ``.registry`` is its Registry."""
    server = RegistryHTTPServer(Registry(MemoryLog()), port=0, serialize=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
