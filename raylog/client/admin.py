"""The admin client: topics and cluster state, through the controller."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from raylog.arguments import INT32_MAX, check_bool, check_id, check_int, check_options, short_repr
from raylog.client.connection import RaylogCluster, cluster_or_default
from raylog.errors import (
    ClientClosedError,
    ControllerUnavailableError,
    InvalidArgumentError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    RaylogError,
    UnknownGroupError,
    UnknownTopicError,
)
from raylog.topics import (
    canonical_config_name,
    check_user_topic,
    normalize_configs,
    reset_partitions,
    reset_spec,
    topic_names,
    validate_topic_name,
)

CHANGE_RETRY_S = 60.0  # how long a change rides out a controller restart


class Admin:
    """Creates, describes, alters and deletes topics; reports the cluster's state.

    Every call is one request to the controller; changes are durable when they return.
    Arguments are checked before the request: a bad one raises a typed error at once.

    >>> admin = Admin()
    >>> admin.create_topic("pageviews", partitions=6, replication_factor=1)
    >>> admin.list_topics()
    ['pageviews']
    """

    def __init__(self, *, cluster: RaylogCluster | None = None, **settings: Any) -> None:
        check_options("Admin", settings, ["cluster"])
        self._cluster = cluster_or_default(cluster)
        self._closed = False

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise ClientClosedError("the admin client is closed")
        return self._cluster.controller.call(method, *args, **kwargs)

    def _change(self, method: str, *args: Any, done: Callable[[RaylogError], bool] | None = None,
                **kwargs: Any) -> Any:
        """A change, retried while the controller restarts. Every change here is safe to
        repeat; ``done`` recognises the error a repeat gets when the first try had worked."""
        if self._closed:
            raise ClientClosedError("the admin client is closed")
        deadline = time.monotonic() + CHANGE_RETRY_S
        retried = False
        while True:
            try:
                return self._cluster.controller.call(method, *args, retry=False, **kwargs)
            except ControllerUnavailableError:
                if time.monotonic() > deadline:
                    raise
                retried = True
                time.sleep(0.2)
            except RaylogError as e:
                if retried and done is not None and done(e):
                    return None
                raise

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     configs: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create a topic; returns its description once every replica is serving.

        Raises InvalidTopicError, InvalidPartitionsError (beyond the cluster's limits, see
        raylog.metadata.limits), InvalidReplicationFactorError, InvalidConfigError or
        TopicExistsError, creating nothing."""
        check_user_topic(name)
        self._check_partitions(name, partitions)
        check_int("replication factor", replication_factor, 1, INT32_MAX,
                  InvalidReplicationFactorError)
        return self._change("create_topic", name, partitions, replication_factor,
                            normalize_configs(configs), topic_id=uuid.uuid4().hex)

    def _check_partitions(self, name: str, total: object) -> None:
        check_int("partitions", total, 1, INT32_MAX, InvalidPartitionsError)
        if self._cluster.limits is not None:
            self._cluster.limits.check_topic_size(name, total)

    def delete_topic(self, name: str) -> None:
        check_user_topic(name)
        self._change("delete_topic", name, done=lambda e: isinstance(e, UnknownTopicError))
        self._cluster.forget(name)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self._call("list_topics", check_bool("include_internal", include_internal))

    def describe_topic(self, name: str) -> dict[str, Any]:
        return self._call("describe_topics", [validate_topic_name(name)])[0]

    def describe_topics(self, names: str | list[str] | None = None) -> list[dict[str, Any]]:
        """Descriptions of the named topics (one name counts as one topic), or of all."""
        return self._call("describe_topics",
                          None if names is None else topic_names(names, allow_empty=True))

    def add_partitions(self, name: str, total: int) -> dict[str, Any]:
        """Grow a topic to ``total`` partitions (never shrinks)."""
        check_user_topic(name)
        self._check_partitions(name, total)
        out = self._change("add_partitions", name, total, done=lambda e: isinstance(
            e, InvalidPartitionsError) and len(self.describe_topic(name)["partitions"]) == total)
        self._cluster.forget(name)
        return out

    def alter_configs(self, name: str, set_configs: dict[str, Any] | None = None,
                      delete_configs: list[str] | None = None) -> dict[str, Any]:
        """Set and delete (back to default) topic configs; replicas apply them at once.
        Deleting a config that is not set is refused (InvalidConfigError), as Kafka does."""
        validate_topic_name(name)
        if isinstance(delete_configs, str):
            delete_configs = [delete_configs]
        if delete_configs is not None and not isinstance(delete_configs, list | tuple):
            raise InvalidArgumentError(f"delete_configs must be a list of config names, got "
                                       f"{short_repr(delete_configs)}")
        return self._change("alter_configs", name, normalize_configs(set_configs),
                            [canonical_config_name(n) for n in delete_configs or ()])

    # -- consumer groups --------------------------------------------------------------------------

    def list_groups(self) -> list[dict[str, Any]]:
        """Every group with committed offsets or members: id, state, members, generation."""
        return self._call("list_groups")

    def describe_group(self, group_id: str) -> dict[str, Any]:
        """Members and what they own, and per partition: committed offset, end offset, lag."""
        return self._call("describe_group", check_id("group_id", group_id, InvalidArgumentError))

    def delete_group(self, group_id: str) -> None:
        """Forget a group and its committed offsets; it must have no active members."""
        check_id("group_id", group_id, InvalidArgumentError)
        self._change("delete_group", group_id,
                     done=lambda e: isinstance(e, UnknownGroupError))

    def reset_offsets(self, group_id: str, topic: str, to: str | int,
                      partitions: list[int] | None = None) -> dict[int, int]:
        """Set a stopped group's committed offsets of ``topic`` to ``"earliest"``,
        ``"latest"``, the first offset at or after a timestamp (``{"timestamp": ms}``) or an
        offset (an int). Returns partition -> new offset."""
        check_id("group_id", group_id, InvalidArgumentError)
        validate_topic_name(topic)
        spec = reset_spec(to)
        if partitions is not None:
            partitions = reset_partitions(partitions)
        return self._change("reset_offsets", group_id, topic, spec, partitions)

    def cluster_status(self) -> dict[str, Any]:
        return self._call("cluster_status")

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
