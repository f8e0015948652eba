"""The cluster's object store for tiered segments: a cluster setting in the controller's
environment, served to every broker by the controller (``remote_storage``).

Set where the head node's ``ray start`` runs (as ``RAYLOG_DATA_DIR`` and the replication
settings of raylog/metadata/settings.py are), then restart the controller:

- ``RAYLOG_REMOTE_STORAGE_URI``: ``file:///shared/dir`` (a directory every broker node and
  analytics task sees), ``s3://bucket/prefix``, or any URI ``pyarrow.fs`` opens.
- ``RAYLOG_REMOTE_STORAGE_SETTINGS``: a JSON object of the store's settings, for S3
  ``endpoint_override``, ``access_key``, ``secret_key``, ``session_token``, ``region``,
  ``scheme`` (raylog/tiered/store.py).

Unset, the cluster has no store and a topic asking for ``remote.storage.enable`` is
refused. Plain Python.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from raylog.errors import InvalidConfigError
from raylog.tiered.store import check_location
from raylog.util.arguments import settings_from_environ

URI_ENV = "RAYLOG_REMOTE_STORAGE_URI"
SETTINGS_ENV = "RAYLOG_REMOTE_STORAGE_SETTINGS"


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)  # a JSONDecodeError is a ValueError: the variable is named
    if not isinstance(value, dict):
        raise ValueError("not an object")
    return value


@dataclasses.dataclass(frozen=True)
class RemoteStorageSettings:
    """Where tiered segments go: ``uri`` (None: the cluster has no store) and the store's
    ``settings``. Checked when built: a URI with a scheme, settings the scheme takes."""

    uri: str | None = None
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.uri is None:
            if self.settings:
                raise InvalidConfigError(f"{SETTINGS_ENV} is set but {URI_ENV} is not")
            return
        try:
            check_location(self.uri, self.settings)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"{URI_ENV} / {SETTINGS_ENV}: {e}") from e

    @property
    def configured(self) -> bool:
        return self.uri is not None

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "settings": dict(self.settings)}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> RemoteStorageSettings:
        values = settings_from_environ(environ, {
            "uri": (URI_ENV, str, "a URI"),
            "settings": (SETTINGS_ENV, _json_object, "a JSON object of settings")})
        return cls(**values)
