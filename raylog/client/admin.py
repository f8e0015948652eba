"""The admin client: topics and cluster state, through the controller."""

from __future__ import annotations

from typing import Any

from raylog.client.connection import RaylogCluster, default_cluster
from raylog.errors import ClientClosedError


class Admin:
    """Creates, describes, alters and deletes topics; reports the cluster's state.

    Every call is one request to the controller; changes are durable when they return.

    >>> admin = Admin()
    >>> admin.create_topic("pageviews", partitions=6, replication_factor=1)
    >>> admin.list_topics()
    ['pageviews']
    """

    def __init__(self, *, cluster: RaylogCluster | None = None) -> None:
        self._cluster = cluster or default_cluster()
        self._closed = False

    def _call(self, method: str, *args: Any, change: bool = False, **kwargs: Any) -> Any:
        if self._closed:
            raise ClientClosedError("the admin client is closed")
        return self._cluster.controller.call(method, *args, retry=not change, **kwargs)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     configs: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create a topic; returns its description once every replica is serving."""
        return self._call("create_topic", name, partitions, replication_factor, configs,
                          change=True)

    def delete_topic(self, name: str) -> None:
        self._call("delete_topic", name, change=True)
        self._cluster.forget(name)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self._call("list_topics", include_internal)

    def describe_topic(self, name: str) -> dict[str, Any]:
        return self._call("describe_topics", [name])[0]

    def describe_topics(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        return self._call("describe_topics", names)

    def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        """Grow a topic to ``total`` partitions (never shrinks)."""
        out = self._call("add_partitions", name, total, change=True)
        self._cluster.forget(name)
        return out

    def alter_configs(self, name: str, set_configs: dict[str, Any] | None = None,
                      delete_configs: list[str] | None = None) -> dict[str, Any]:
        """Set and delete (back to default) topic configs; replicas apply them at once."""
        return self._call("alter_configs", name, set_configs, delete_configs, change=True)

    def cluster_status(self) -> dict[str, Any]:
        return self._call("cluster_status")

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
