"""Confluent Schema Registry's REST API over a registry: routing, arguments, answers and
error codes, and a small threaded HTTP server (the standard library's) that serves it.

:func:`handle` maps one request (method, path, query, body) to (HTTP status, JSON) over
any object with :class:`raylog.schemas.registry.Registry`'s methods: the registry itself
in tests, raylog's client of the registry actor in ``raylog registry``. Errors answer as
Confluent's do: ``{"error_code": 40401, "message": "..."}`` with the HTTP status of the
code. No Ray here: the HTTP shell and its rules are tested without a cluster.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from raylog.errors import RaylogError
from raylog.schemas.errors import InvalidSchemaError, SchemaRegistryError

logger = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY_BYTES = 16 << 20

Answer = tuple[int, Any]


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _flag(query: dict[str, list[str]], name: str) -> bool:
    values = query.get(name)
    return bool(values) and values[-1].lower() == "true"


def _int(query: dict[str, list[str]], name: str, default: int) -> int:
    values = query.get(name)
    try:
        return int(values[-1]) if values else default
    except ValueError:
        raise _HttpError(400, f"query parameter {name} must be an integer") from None


def _page(items: list, query: dict[str, list[str]]) -> list:
    """``offset`` and ``limit`` (-1: all) of a list answer, as Confluent's pages."""
    offset, limit = max(_int(query, "offset", 0), 0), _int(query, "limit", -1)
    return items[offset:] if limit < 0 else items[offset:offset + limit]


def _deleted_only(query: dict[str, list[str]]) -> bool:
    return _flag(query, "deletedOnly") or _flag(query, "deleted_only")


def _subjects(registry: Any, query: dict[str, list[str]]) -> list[str]:
    prefix = (query.get("subjectPrefix") or [""])[-1]
    if _deleted_only(query):
        live = set(registry.subjects(False, prefix))
        found = [s for s in registry.subjects(True, prefix) if s not in live]
    else:
        found = registry.subjects(_flag(query, "deleted"), prefix)
    return _page(found, query)


def _versions(registry: Any, subject: str, query: dict[str, list[str]]) -> list[int]:
    if not _deleted_only(query):
        return _page(registry.versions(subject, _flag(query, "deleted")), query)
    every = registry.versions(subject, True)
    live = set(registry.versions(subject)) if subject in registry.subjects(False, subject) \
        else set()
    return _page([v for v in every if v not in live], query)


def _body(body: bytes) -> dict[str, Any]:
    try:
        decoded = json.loads(body or b"{}")
    except ValueError:
        raise _HttpError(400, "the request body is not JSON") from None
    if not isinstance(decoded, dict):
        raise _HttpError(400, "the request body must be a JSON object")
    return decoded


def _schema_args(body: bytes) -> dict[str, Any]:
    decoded = _body(body)
    schema = decoded.get("schema")
    if not isinstance(schema, str) or not schema.strip():
        raise InvalidSchemaError("Empty schema")
    return {"schema": schema, "schema_type": decoded.get("schemaType"),
            "references": decoded.get("references")}


def _level(body: bytes) -> object:
    return _body(body).get("compatibility")


def _schema_id(text: str) -> int:
    if not text.isdigit():
        raise _HttpError(404, f"HTTP 404 Not Found: schema id {text!r}")
    return int(text)


def _compatibility(messages: list[str], verbose: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"is_compatible": not messages}
    if verbose:
        out["messages"] = messages
    return out


# (method, path pattern) -> handler(registry, match groups, query, body) -> JSON answer.
Route = Callable[[Any, tuple, dict, bytes], Any]
_ROUTES: list[tuple[str, re.Pattern, Route]] = []


def _route(method: str, pattern: str) -> Callable[[Route], Route]:
    def register(function: Route) -> Route:
        _ROUTES.append((method, re.compile(pattern.replace("{}", "([^/]+)") + "$"), function))
        return function
    return register


_route("GET", "/")(lambda r, a, q, b: {})
_route("GET", "/schemas/types")(lambda r, a, q, b: ["AVRO"])
_route("GET", "/contexts")(lambda r, a, q, b: ["."])
_route("GET", "/mode")(lambda r, a, q, b: {"mode": "READWRITE"})
_route("GET", "/mode/{}")(lambda r, a, q, b: {"mode": "READWRITE"})
_route("GET", "/schemas/ids/{}")(lambda r, a, q, b: r.schema(_schema_id(a[0])))
_route("GET", "/schemas/ids/{}/schema")(
    lambda r, a, q, b: json.loads(r.schema(_schema_id(a[0]))["schema"]))
_route("GET", "/schemas/ids/{}/versions")(
    lambda r, a, q, b: r.versions_of_id(_schema_id(a[0]), _flag(q, "deleted")))
_route("GET", "/schemas/ids/{}/subjects")(
    lambda r, a, q, b: sorted({v["subject"] for v in r.versions_of_id(
        _schema_id(a[0]), _flag(q, "deleted"))}))
_route("GET", "/subjects")(lambda r, a, q, b: _subjects(r, q))
_route("GET", "/subjects/{}/versions")(lambda r, a, q, b: _versions(r, a[0], q))
_route("POST", "/subjects/{}/versions")(
    lambda r, a, q, b: r.register(a[0], **_schema_args(b), normalize=_flag(q, "normalize")))
_route("POST", "/subjects/{}")(
    lambda r, a, q, b: r.lookup(a[0], **_schema_args(b), deleted=_flag(q, "deleted"),
                                normalize=_flag(q, "normalize")))
_route("GET", "/subjects/{}/versions/{}")(
    lambda r, a, q, b: r.version(a[0], a[1], _flag(q, "deleted")))
_route("GET", "/subjects/{}/versions/{}/schema")(
    lambda r, a, q, b: json.loads(r.version(a[0], a[1], _flag(q, "deleted"))["schema"]))
_route("GET", "/subjects/{}/versions/{}/referencedby")(
    lambda r, a, q, b: r.version(a[0], a[1]) and [])
_route("DELETE", "/subjects/{}/versions/{}")(
    lambda r, a, q, b: r.delete_version(a[0], a[1], _flag(q, "permanent")))
_route("DELETE", "/subjects/{}")(lambda r, a, q, b: r.delete_subject(a[0], _flag(q, "permanent")))
_route("POST", "/compatibility/subjects/{}/versions/{}")(
    lambda r, a, q, b: _compatibility(r.check(a[0], spec=a[1], **_schema_args(b)),
                                      _flag(q, "verbose")))
_route("POST", "/compatibility/subjects/{}/versions")(
    lambda r, a, q, b: _compatibility(r.check(a[0], **_schema_args(b)), _flag(q, "verbose")))
_route("GET", "/config")(lambda r, a, q, b: {"compatibilityLevel": r.config()})
_route("PUT", "/config")(lambda r, a, q, b: {"compatibility": r.set_config(None, _level(b))})
_route("DELETE", "/config")(lambda r, a, q, b: {"compatibilityLevel": r.delete_config()})
_route("GET", "/config/{}")(lambda r, a, q, b: {"compatibilityLevel": r.config(
    a[0], _flag(q, "defaultToGlobal"))})
_route("PUT", "/config/{}")(lambda r, a, q, b: {"compatibility": r.set_config(a[0], _level(b))})
_route("DELETE", "/config/{}")(lambda r, a, q, b: {"compatibilityLevel": r.delete_config(a[0])})


def handle(registry: Any, method: str, target: str, body: bytes = b"") -> Answer:
    """Answer one request: ``target`` is the path with its query string."""
    parts = urlsplit(target)
    query = parse_qs(parts.query)
    path = parts.path.rstrip("/") or "/"
    allowed = []
    try:
        for route_method, pattern, function in _ROUTES:
            # Match before decoding: a subject may hold an encoded '/' (%2F).
            match = pattern.match(path)
            if match is None:
                continue
            if route_method != method:
                allowed.append(route_method)
                continue
            return 200, function(registry, tuple(unquote(g) for g in match.groups()), query,
                                 body)
        if allowed:
            return 405, {"error_code": 405, "message": "HTTP 405 Method Not Allowed"}
        return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}
    except SchemaRegistryError as e:
        out = {"error_code": e.error_code, "message": str(e)}
        return e.http_status, out
    except _HttpError as e:
        return e.status, {"error_code": e.status, "message": str(e)}
    except RaylogError as e:  # the cluster refused or failed: the store's error
        return 500, {"error_code": 50001, "message": f"Error in the backend data store: {e}"}


class _Handler(BaseHTTPRequestHandler):
    server: RegistryHTTPServer
    protocol_version = "HTTP/1.1"  # keep-alive: a client's requests reuse its connection

    def setup(self) -> None:
        super().setup()
        # Headers and body leave in two writes: without this, Nagle's algorithm holds the
        # body until the client's delayed ACK (40 ms) on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            status, answer = 413, {"error_code": 413, "message": "request body too large"}
            self.close_connection = True
        else:
            body = self.rfile.read(length) if length else b""
            status, answer = self.server.answer(self.command, self.path, body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)


class RegistryHTTPServer(ThreadingHTTPServer):
    """The REST API on ``(host, port)`` over ``registry``, a thread per connection.
    ``serialize``: one request at a time (for a registry that is not safe to share)."""

    daemon_threads = True

    def __init__(self, registry: Any, host: str = "127.0.0.1", port: int = 8081,
                 serialize: bool = False) -> None:
        super().__init__((host, port), _Handler)
        self.registry = registry
        self._lock = threading.Lock() if serialize else None
        self._counted = threading.Lock()
        self.answered = 0  # requests answered, the last line of `raylog registry`

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    @contextlib.contextmanager
    def running(self) -> Iterator[RegistryHTTPServer]:
        """Serve on a daemon thread while the block runs; then stop and close the server."""
        thread = threading.Thread(target=self.serve_forever, name="raylog-registry-http",
                                  daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.shutdown()
            self.server_close()
            thread.join(timeout=10)

    def answer(self, method: str, target: str, body: bytes) -> Answer:
        with self._counted:
            self.answered += 1
        if self._lock is None:
            return handle(self.registry, method, target, body)
        with self._lock:
            return handle(self.registry, method, target, body)
