"""The dispatch table: which handler answers each Kafka API, at which versions.

A handler is a coroutine function::

    async def handle_x(ctx: Context, version: int, request: Any) -> ApiMessage | None

``ctx`` is the request's :class:`Context` (the cluster seam ``ctx.backend``, the settings,
the connection and its per-connection state); ``version`` is the request's API version,
within the range the handler was registered for; ``request`` is the decoded body, a
kafka-python message whose fields are attributes named as in Kafka's JSON specs
(``request.topics[0].partition_data``). It returns the response body, built with
``response_class(API_KEY, version)(...)`` (raylog/kafka/gateway/protocol.py), which the
listener frames with the request's correlation id; or None for a request that gets no
answer (Produce with acks=0). Errors of single partitions or topics are answered inside the
response with their Kafka codes (:func:`~raylog.kafka.gateway.errors.code_of`); an exception
that escapes a handler closes the client's connection (there is no generic error answer in
Kafka's protocol), and is logged.

Handlers of one connection run concurrently (up to ``settings.max_in_flight``), started in
request order; their answers go out in request order whatever order they finish in. A
handler whose effects must keep request order (Produce's appends) takes
``ctx.connection.order`` (a FIFO lock) while it issues them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.api_message import ApiMessage

from raylog.errors import RaylogError
from raylog.kafka.auth.principal import ANONYMOUS, Principal
from raylog.kafka.gateway.backend import Backend
from raylog.kafka.gateway.errors import code_of, refreshes_metadata
from raylog.kafka.gateway.settings import GatewaySettings


@dataclasses.dataclass
class Connection:
    """One client connection: where it comes from, the FIFO lock handlers keep request
    order with, and ``state``, where a handler module keeps per-connection state under its
    own name. Used from the listener's event loop only.

    Who it is: ``principal`` (``User:ANONYMOUS`` until a login or a client certificate
    says otherwise; raylog/kafka/auth/principal.py), what later checks (ACLs) read.
    ``authenticated`` is False on a SASL listener until the login succeeded (``sasl``, its
    :class:`~raylog.kafka.gateway.sasl.SaslSession`, runs it); until then the listener
    serves only the login's APIs. A handler sets ``close_after_answer`` to have the
    connection closed once its answer is written (a failed login)."""

    peer: str
    order: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    principal: Principal = ANONYMOUS
    authenticated: bool = True
    sasl: Any = None
    close_after_answer: bool = False
    throttled_until: float = 0.0  # (monotonic s) a quota holds the client back until then

    def login(self, principal: Principal) -> None:
        """The connection is ``principal`` from now on, and may ask any API."""
        self.principal = principal
        self.authenticated = True


@dataclasses.dataclass(frozen=True)
class Context:
    """What a handler gets besides its request: the cluster, the settings, the dispatch
    table, the connection and the request header's correlation and client ids; ``users``,
    the listener's :class:`~raylog.kafka.gateway.scram_users.UserAdmin` (None on a listener
    without credentials); ``access``, its :class:`~raylog.kafka.gateway.access.Access`
    (None: no authorizer, everything allowed), which handlers ask through :meth:`allows`."""

    backend: Backend
    settings: GatewaySettings
    dispatch: Dispatch
    connection: Connection
    client_id: str | None
    correlation_id: int
    users: Any = None
    access: Any = None

    def allows(self, operation: Any, resource_type: Any, name: str,
               audit: bool = True) -> bool:
        """Whether this connection's principal may do ``operation`` on the resource (ACLs,
        raylog/kafka/auth/acls.py); True without an authorizer. A denial is audited unless
        ``audit`` is False (a list filtered to what the principal may see)."""
        return self.access is None or self.access.allows(self.connection, operation,
                                                         resource_type, name, audit)

    def error_code(self, topic: str, error: RaylogError) -> int:
        """Kafka's code for ``error`` on ``topic``. One that says this gateway's metadata of
        the topic is stale makes its next request for it ask the controller."""
        code = code_of(error)
        if refreshes_metadata(code):
            self.backend.forget(topic)
        return code


Handler = Callable[[Context, int, Any], Awaitable[ApiMessage | None]]


@dataclasses.dataclass(frozen=True)
class Api:
    key: int
    min_version: int
    max_version: int
    handler: Handler

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


class Dispatch:
    """API key -> :class:`Api`. Built once, before the listener starts; read-only after."""

    def __init__(self) -> None:
        self._apis: dict[int, Api] = {}

    def add(self, key: int, min_version: int, max_version: int, handler: Handler) -> None:
        """Serve API ``key`` at versions [min_version, max_version] with ``handler``."""
        if key in self._apis:
            raise ValueError(f"API key {key} has a handler already")
        if not 0 <= min_version <= max_version:
            raise ValueError(f"bad version range {min_version}-{max_version} for key {key}")
        self._apis[key] = Api(key, min_version, max_version, handler)

    def get(self, key: int) -> Api | None:
        return self._apis.get(key)

    def ranges(self) -> list[tuple[int, int, int]]:
        """(key, min version, max version) of every API served, by key: what ApiVersions
        answers."""
        return [(a.key, a.min_version, a.max_version)
                for a in sorted(self._apis.values(), key=lambda a: a.key)]


# The modules whose ``register(dispatch)`` adds their handlers: to add an API, write its
# handler in a module of this package and name the module here.
HANDLER_MODULES = ("versions", "metadata", "produce", "fetch", "admin", "groups", "sasl",
                   "scram_users", "acls", "transactions", "client_quotas")


def default_dispatch() -> Dispatch:
    """The table of every API the gateway serves."""
    import importlib

    dispatch = Dispatch()
    for name in HANDLER_MODULES:
        importlib.import_module(f"raylog.kafka.gateway.{name}").register(dispatch)
    return dispatch
