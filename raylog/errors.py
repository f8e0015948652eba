"""The typed errors raylog raises.

Every error a user can provoke is a subclass of :class:`RaylogError`. Errors that a client
may retry after refreshing its metadata or waiting carry ``retriable = True``.
"""

from __future__ import annotations


class RaylogError(Exception):
    """Base class of every error raylog raises on purpose."""

    retriable: bool = False


class InvalidConfigError(RaylogError, ValueError):
    """A configuration value was refused when the config was built."""


class CorruptRecordError(RaylogError):
    """Bytes that should hold a record batch (or a segment of them) are malformed."""


class InvalidRecordError(RaylogError, ValueError):
    """A record is well formed but not acceptable here (e.g. no key in a compacted topic)."""


class RecordTooLargeError(RaylogError):
    """A record or batch is larger than the configured limit."""


class OffsetOutOfRangeError(RaylogError):
    """An offset lies outside [log start offset, log end offset]."""


class LogClosedError(RaylogError):
    """An operation was attempted on a closed log."""


class StorageError(RaylogError):
    """The local disk refused a write or a file is unusable."""
