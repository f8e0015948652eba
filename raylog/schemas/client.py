"""The client of a cluster's schema registry (the actor in ``actors/schema_registry.py``),
and the REST server over it.

:class:`SchemaRegistry` has the methods of :class:`raylog.schemas.registry.Registry`;
every call goes to the cluster's one registry actor (created on first use) and comes back
as the registry's typed error when refused. The REST server (``raylog registry``) and the
``raylog schemas`` commands use it; so can Python code::

    >>> registry = SchemaRegistry()
    >>> registry.register("users-value", open("user.avsc").read())
    {'id': 1, 'version': 1}

Safe to use from several threads (the actor serializes what it is asked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

import ray

from raylog.client.connection import RaylogCluster, cluster_or_default
from raylog.client.remote import resolve
from raylog.errors import ActorUnavailableError
from raylog.schemas.errors import RegistryStoreError
from raylog.util.cluster_names import ACTOR_RUNTIME_ENV, HEAD_RESOURCE, NAMESPACE

REGISTRY_NAME = "raylog-schema-registry"
REQUEST_TIMEOUT_S = 60.0
CALL_ATTEMPTS = 3  # a call that finds the actor restarting is tried again this often


def registry_handle() -> ray.actor.ActorHandle:
    """The cluster's registry actor, created (detached, on the head node) if missing."""
    from actors.schema_registry import SchemaRegistryActor

    return SchemaRegistryActor.options(
        name=REGISTRY_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=0, resources={HEAD_RESOURCE: 0.001},
        runtime_env=ACTOR_RUNTIME_ENV).remote()


class SchemaRegistry:
    """The cluster's schema registry, as :class:`raylog.schemas.registry.Registry`."""

    def __init__(self, cluster: RaylogCluster | None = None) -> None:
        cluster_or_default(cluster)  # connects this process if it is not yet
        self.handle = registry_handle()

    def _call(self, method: str, *args: Any) -> Any:
        for attempt in range(CALL_ATTEMPTS):
            try:
                return resolve(getattr(self.handle, method).remote(*args), REQUEST_TIMEOUT_S)
            except ActorUnavailableError:
                if attempt == CALL_ATTEMPTS - 1:
                    raise
                self.handle = registry_handle()  # restarted or gone: find it again
        raise AssertionError("unreachable")

    def ready(self) -> dict[str, Any]:
        """Load the registry (replaying ``_schemas``); its size."""
        return self._call("ready")

    def register(self, subject: str, schema: str, schema_type: str | None = None,
                 references: list | None = None, normalize: bool = False) -> dict[str, Any]:
        return self._call("register", subject, schema, schema_type, references, normalize)

    def lookup(self, subject: str, schema: str, schema_type: str | None = None,
               references: list | None = None, deleted: bool = False,
               normalize: bool = False) -> dict[str, Any]:
        return self._call("lookup", subject, schema, schema_type, references, deleted,
                          normalize)

    def schema(self, schema_id: int) -> dict[str, Any]:
        return self._call("schema", schema_id)

    def versions_of_id(self, schema_id: int, deleted: bool = False) -> list[dict[str, Any]]:
        return self._call("versions_of_id", schema_id, deleted)

    def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        return self._call("subjects", deleted, prefix)

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        return self._call("versions", subject, deleted)

    def version(self, subject: str, spec: object, deleted: bool = False) -> dict[str, Any]:
        return self._call("version", subject, spec, deleted)

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        return self._call("delete_subject", subject, permanent)

    def delete_version(self, subject: str, spec: object, permanent: bool = False) -> int:
        return self._call("delete_version", subject, spec, permanent)

    def check(self, subject: str, schema: str, spec: object | None = None,
              schema_type: str | None = None, references: list | None = None) -> list[str]:
        return self._call("check", subject, schema, spec, schema_type, references)

    def config(self, subject: str | None = None, default_to_global: bool = False) -> str:
        return self._call("config", subject, default_to_global)

    def set_config(self, subject: str | None, level: object) -> str:
        return self._call("set_config", subject, level)

    def delete_config(self, subject: str | None = None) -> str:
        return self._call("delete_config", subject)


def serve(registry: Any, host: str, port: int, out: TextIO,
          on_stop: Callable[[], None] | None = None) -> int:
    """Serve the REST API over ``registry`` until SIGINT or SIGTERM (raylog/cli/signals.py);
    then stop the server (and call ``on_stop``) and say how many requests it answered.
    Prints the URL once it listens."""
    from raylog.cli.signals import StopSignals
    from raylog.schemas.rest import RegistryHTTPServer

    try:
        server = RegistryHTTPServer(registry, host, port)
    except OSError as e:
        raise RegistryStoreError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    with StopSignals() as stop:
        try:
            with server.running():
                out.write(f"schema registry listening on {server.url}\n")
                out.flush()
                stop.wait()
        finally:
            if on_stop is not None:
                on_stop()
    out.write(f"schema registry stopped after {server.answered:,} requests\n")
    return 0
