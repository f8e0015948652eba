"""The client of a cluster's schema registry (the actor in ``actors/schema_registry.py``).

:class:`SchemaRegistry` has the methods of :class:`raylog.schemas.registry.Registry`;
every call goes to the cluster's one registry actor, found by name (the controller starts it
on first use), and comes back as the registry's typed error when refused. The REST server
(``raylog registry``) and the ``raylog schemas`` commands use it; so can Python code::

    >>> registry = SchemaRegistry()
    >>> registry.register("users-value", open("user.avsc").read())
    {'id': 1, 'version': 1}

Safe to use from several threads (the actor serializes what it is asked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from raylog.client.connection import RaylogCluster, cluster_or_default
from raylog.client.remote import resolve
from raylog.errors import ActorUnavailableError
from raylog.util.cluster_names import NAMESPACE, REGISTRY_NAME

REQUEST_TIMEOUT_S = 60.0
CALL_ATTEMPTS = 3  # a call that finds the actor restarting is tried again this often


class SchemaRegistry:
    """The cluster's schema registry, as :class:`raylog.schemas.registry.Registry`."""

    def __init__(self, cluster: RaylogCluster | None = None) -> None:
        self._cluster = cluster_or_default(cluster)  # connects this process if it is not yet
        self.handle = self._find()

    def _find(self) -> ray.actor.ActorHandle:
        """The registry actor, by name; asks the controller to start it if there is none."""
        try:
            return ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE)
        except ValueError:
            name = self._cluster.controller.schema_registry()
            return ray.get_actor(name, namespace=NAMESPACE)

    def _call(self, call: Callable[[ray.actor.ActorHandle], ray.ObjectRef]) -> Any:
        """``call(handle)`` (one remote method call) and its answer; a registry actor that is
        restarting or gone is found again and asked again."""
        for attempt in range(CALL_ATTEMPTS):
            try:
                return resolve(call(self.handle), REQUEST_TIMEOUT_S)
            except ActorUnavailableError:
                if attempt == CALL_ATTEMPTS - 1:
                    raise
                self.handle = self._find()  # restarted or gone: find it again
        raise AssertionError("unreachable")

    def ready(self) -> dict[str, Any]:
        """Load the registry (replaying ``_schemas``); its size."""
        return self._call(lambda actor: actor.ready.remote())

    def register(self, subject: str, schema: str, schema_type: str | None = None,
                 references: list | None = None, normalize: bool = False) -> dict[str, Any]:
        return self._call(lambda actor: actor.register.remote(
            subject, schema, schema_type, references, normalize))

    def lookup(self, subject: str, schema: str, schema_type: str | None = None,
               references: list | None = None, deleted: bool = False,
               normalize: bool = False) -> dict[str, Any]:
        return self._call(lambda actor: actor.lookup.remote(
            subject, schema, schema_type, references, deleted, normalize))

    def schema(self, schema_id: int) -> dict[str, Any]:
        return self._call(lambda actor: actor.schema.remote(schema_id))

    def versions_of_id(self, schema_id: int, deleted: bool = False) -> list[dict[str, Any]]:
        return self._call(lambda actor: actor.versions_of_id.remote(schema_id, deleted))

    def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        return self._call(lambda actor: actor.subjects.remote(deleted, prefix))

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        return self._call(lambda actor: actor.versions.remote(subject, deleted))

    def version(self, subject: str, spec: object, deleted: bool = False) -> dict[str, Any]:
        return self._call(lambda actor: actor.version.remote(subject, spec, deleted))

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        return self._call(lambda actor: actor.delete_subject.remote(subject, permanent))

    def delete_version(self, subject: str, spec: object, permanent: bool = False) -> int:
        return self._call(lambda actor: actor.delete_version.remote(subject, spec, permanent))

    def check(self, subject: str, schema: str, spec: object | None = None,
              schema_type: str | None = None, references: list | None = None) -> list[str]:
        return self._call(lambda actor: actor.check.remote(
            subject, schema, spec, schema_type, references))

    def config(self, subject: str | None = None, default_to_global: bool = False) -> str:
        return self._call(lambda actor: actor.config.remote(subject, default_to_global))

    def set_config(self, subject: str | None, level: object) -> str:
        return self._call(lambda actor: actor.set_config.remote(subject, level))

    def delete_config(self, subject: str | None = None) -> str:
        return self._call(lambda actor: actor.delete_config.remote(subject))
