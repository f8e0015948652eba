"""The object store a cluster's tiered segments go to, named by a URI, through ``pyarrow.fs``.

``file:///shared/dir`` is a directory every node sees (local disk on one machine, NFS on
many); ``s3://bucket/prefix`` is S3 or any S3-compatible server, with the endpoint and
credentials in ``settings`` (``endpoint_override``, ``access_key``, ``secret_key``,
``region``, ``scheme``: the names of ``pyarrow.fs.S3FileSystem``'s arguments); any other
scheme pyarrow knows (``gs://``, ``hdfs://``, ...) is opened by
``pyarrow.fs.FileSystem.from_uri``.

:class:`ObjectStore` is the seam the rest of the tiered code uses (tests may pass a fake):
whole-object put and get, ranged get, delete of a folder, listing. Writes go to a temporary
name and are moved into place where the filesystem can (``file://``); S3 puts are atomic by
themselves.
"""

from __future__ import annotations

import functools
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from raylog.errors import InvalidConfigError

S3_SETTINGS = ("endpoint_override", "access_key", "secret_key", "session_token", "region",
               "scheme")
# Credentials: never written where others read (a Spark plan, logs); see public_settings.
SECRET_SETTINGS = ("access_key", "secret_key", "session_token")


@dataclass(frozen=True)
class StoreLocation:
    filesystem: Any  # a pyarrow.fs.FileSystem
    prefix: str  # the path inside it, without a trailing slash


def check_location(uri: str, settings: Mapping[str, Any]) -> None:
    """InvalidConfigError for a URI without a scheme, settings for a file:// store, or a
    setting S3 does not take (checked without opening anything)."""
    scheme = urlparse(uri).scheme
    if not scheme:
        raise InvalidConfigError(f"remote storage URI {uri!r} must be a URI with a scheme "
                                 "(file:///path, s3://bucket/prefix, ...)")
    if scheme == "file" and settings:
        raise InvalidConfigError(f"a file:// store takes no settings, got {sorted(settings)}")
    unknown = sorted(set(settings) - set(S3_SETTINGS))
    if scheme == "s3" and unknown:
        raise InvalidConfigError(f"unknown S3 settings {unknown}; known: {list(S3_SETTINGS)}")


def public_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` without credentials (SECRET_SETTINGS): what may name a store in a plan."""
    return {k: v for k, v in settings.items() if k not in SECRET_SETTINGS}


def open_store(uri: str, settings: Mapping[str, Any] | None = None) -> StoreLocation:
    """The filesystem and path prefix ``uri`` names. InvalidConfigError as check_location
    says, or for a URI pyarrow cannot open."""
    from pyarrow import fs  # pyarrow is heavy: imported when a store is opened

    settings = dict(settings or {})
    check_location(uri, settings)
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        path = parsed.path.rstrip("/") or "/"
        os.makedirs(path, exist_ok=True)
        return StoreLocation(fs.LocalFileSystem(), path)
    if parsed.scheme == "s3":
        prefix = f"{parsed.netloc}{parsed.path}".rstrip("/")
        return StoreLocation(fs.S3FileSystem(**settings), prefix)
    try:
        filesystem, path = fs.FileSystem.from_uri(uri)
    except Exception as e:  # pyarrow raises ArrowInvalid, ValueError, OSError by scheme
        raise InvalidConfigError(f"cannot open remote storage {uri!r}: {e}") from e
    return StoreLocation(filesystem, path.rstrip("/"))


class ObjectStore:
    """Whole objects under one prefix of one filesystem. Thread-safe as pyarrow's
    filesystems are; every method raises OSError when the store is unreachable."""

    def __init__(self, location: StoreLocation) -> None:
        self.filesystem = location.filesystem
        self.prefix = location.prefix
        from pyarrow import fs
        self._local = isinstance(self.filesystem, fs.LocalFileSystem)

    @classmethod
    def from_uri(cls, uri: str, settings: Mapping[str, Any] | None = None) -> ObjectStore:
        return cls(open_store(uri, settings))

    def put(self, path: str, data: bytes | memoryview) -> None:
        if self._local:
            parent = path.rsplit("/", 1)[0]
            self.filesystem.create_dir(parent, recursive=True)
            temporary = f"{path}.{uuid.uuid4().hex}.tmp"
            with self.filesystem.open_output_stream(temporary) as out:
                out.write(data)
            self.filesystem.move(temporary, path)
        else:
            with self.filesystem.open_output_stream(path) as out:
                out.write(data)

    def get(self, path: str) -> bytes:
        with self.filesystem.open_input_file(path) as f:
            return f.read()

    def get_range(self, path: str, start: int, length: int) -> bytes:
        with self.filesystem.open_input_file(path) as f:
            return f.read_at(length, start)

    def size(self, path: str) -> int | None:
        """The object's size, None if there is none."""
        from pyarrow import fs
        info = self.filesystem.get_file_info(path)
        return None if info.type == fs.FileType.NotFound else info.size

    def list_folders(self, path: str) -> list[str]:
        """The immediate sub-folders of ``path`` (full paths), sorted; [] if none."""
        from pyarrow import fs
        selector = fs.FileSelector(path, allow_not_found=True, recursive=False)
        return sorted(i.path for i in self.filesystem.get_file_info(selector)
                      if i.type == fs.FileType.Directory)

    def delete_folder(self, path: str) -> None:
        """Remove ``path`` and everything under it; nothing if it is not there."""
        from pyarrow import fs
        if self.filesystem.get_file_info(path).type != fs.FileType.NotFound:
            self.filesystem.delete_dir(path)


def cached_store(uri: str, settings: Mapping[str, Any]) -> ObjectStore:
    """One ObjectStore per store per process: analytics tasks open the store of every piece
    they read, and Ray reuses worker processes across tasks."""
    return _cached_store(uri, json.dumps(dict(settings), sort_keys=True))


@functools.lru_cache(maxsize=8)
def _cached_store(uri: str, settings: str) -> ObjectStore:
    return ObjectStore.from_uri(uri, json.loads(settings))
