"""The compiled per-record work (``_records.c``) behind records_py's interface: the same
Columns in and out, its ValueErrors as CorruptRecordError. Importing this module fails with
ImportError where the extension was not built."""

from __future__ import annotations

from raylog.errors import CorruptRecordError
from raylog.kafka import _records
from raylog.kafka.records_py import Columns


def decode_records(buf: bytes | bytearray | memoryview, count: int) -> Columns:
    """As records_py.decode_records."""
    try:
        return Columns._make(_records.decode(buf, count))
    except ValueError as e:
        raise CorruptRecordError(str(e)) from e


def encode_records(c: Columns) -> bytes:
    """As records_py.encode_records."""
    return _records.encode(*c)
