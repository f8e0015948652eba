"""The pure-Python twin of ``_append.c``: a batch's record columns and a record's place in
its batch, with the same names and behaviour (no ``PlainSend``: without the extension the
producer's own ``send`` takes its fast path in Python, under its lock)."""

from __future__ import annotations

from typing import Any


class Columns:
    """A batch's record columns: ``timestamps`` and ``values`` lists, ``keys`` and
    ``headers`` (None until a record has one, then a list with an entry per record),
    ``room`` (record bytes the batch can still take) and ``plain`` (no record had a key or
    headers so far). Not safe for concurrent use."""

    __slots__ = ("headers", "keys", "plain", "room", "timestamps", "values")

    def __init__(self) -> None:
        self.room = 0
        self.plain = True
        self.timestamps: list[int] = []
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] | None = None
        self.headers: list[list[tuple[str, bytes | None]] | None] | None = None

    def __len__(self) -> int:
        return len(self.values)

    def _put(self, size: int, timestamp: int, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes | None]] | None) -> int:
        """Add one record's columns (checked by the caller; ``headers`` None or non-empty);
        the records now held, or 0, adding nothing, when the batch holds a record and
        ``size`` exceeds its room."""
        values = self.values
        if size > self.room and values:
            return 0
        self.room -= size
        self.timestamps.append(timestamp)
        if key is not None or self.keys is not None:
            if self.keys is None:
                self.keys = [None] * len(values)
                self.plain = False
            self.keys.append(key)
        if headers is not None or self.headers is not None:
            if self.headers is None:
                self.headers = [None] * len(values)
                self.plain = False
            self.headers.append(headers)
        values.append(value)
        return len(values)


class RecordSlot:
    """A record's place in its batch: the batch's shared result, its index, its timestamp."""

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: Any, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp
