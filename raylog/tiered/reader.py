"""Reading tiered segments back for fetches below the local log start, through a bounded
cache of verified objects (one per replica-host process).

Every object is checked against its record (size and sha256) before a byte of it is
served: a missing or corrupt one raises RemoteObjectError naming it (and is not cached); a
store that cannot be reached raises RemoteStorageUnavailableError (retriable). The cache
holds whole segment files, least recently used first out, up to ``max_bytes``.

Thread-safe: fetches read on worker threads, under one lock for the cache's bookkeeping
(never held while the store is read).
"""

from __future__ import annotations

import collections
import threading

from raylog.errors import RemoteObjectError, RemoteStorageUnavailableError
from raylog.records.header import iter_headers
from raylog.replica.producer_state import ProducerStates, snapshot_json
from raylog.storage.txn_index import AbortedTxn, decode_entries
from raylog.tiered.layout import PRODUCER_SNAPSHOT, SEGMENT, TXN_INDEX, RemoteSegment, digest
from raylog.tiered.store import ObjectStore

DEFAULT_CACHE_BYTES = 256 << 20


class RemoteReader:
    """Batches of remote segments, from ``store``, with a cache of ``max_bytes``."""

    def __init__(self, store: ObjectStore, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self._cache: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def object(self, segment: RemoteSegment, name: str = SEGMENT) -> bytes:
        """One object of ``segment``, verified against its record."""
        path = f"{segment.folder(self.store.prefix)}/{name}"
        with self._lock:
            data = self._cache.get(path)
            if data is not None:
                self._cache.move_to_end(path)
                self.hits += 1
                return data
            self.misses += 1
        data = fetch_verified(self.store, segment, name)
        self._keep(path, data)
        return data

    def _keep(self, path: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        with self._lock:
            if path in self._cache:
                return
            self._cache[path] = data
            self._bytes += len(data)
            while self._bytes > self.max_bytes:
                _, dropped = self._cache.popitem(last=False)
                self._bytes -= len(dropped)

    def read(self, segment: RemoteSegment, offset: int, max_bytes: int,
             max_offset: int | None = None) -> bytes:
        """Whole batches of ``segment`` from the one holding ``offset``, up to ``max_bytes``
        (at least one batch) and below ``max_offset``; b"" past the segment's end."""
        data = self.object(segment)
        start = end = None
        for position, header in iter_headers(data, verify=False):
            if max_offset is not None and header.base_offset >= max_offset:
                break
            if start is None:
                if header.next_offset <= offset:
                    continue
                start = position
            elif position + header.size - start > max_bytes:
                break
            end = position + header.size
        if start is None:
            return b""
        return data[start:end]

    def aborted(self, segment: RemoteSegment) -> list[AbortedTxn]:
        """The aborted transactions whose abort markers lie in ``segment`` (its verified
        ``txn.index``; none if it has no such object)."""
        if TXN_INDEX not in segment.files:
            return []
        data = self.object(segment, TXN_INDEX)
        return decode_entries(data)

    @property
    def cached_bytes(self) -> int:
        return self._bytes


def fetch_verified(store: ObjectStore, segment: RemoteSegment, name: str = SEGMENT) -> bytes:
    """Object ``name`` of ``segment``, checked against the size and sha256 its record holds:
    RemoteObjectError (naming the object) if it is missing or differs, the retriable
    RemoteStorageUnavailableError if the store cannot be read."""
    path = f"{segment.folder(store.prefix)}/{name}"
    expected = segment.files.get(name)
    if expected is None:
        raise RemoteObjectError(f"{path}: the record of remote segment {segment.key()} "
                                f"lists no object {name!r}")
    try:
        data = store.get(path)
    except FileNotFoundError as e:
        raise RemoteObjectError(f"{path} is missing from the object store") from e
    except OSError as e:
        try:
            missing = store.size(path) is None
        except OSError:
            missing = False
        if missing:  # S3 filesystems report a missing key as a plain OSError
            raise RemoteObjectError(f"{path} is missing from the object store") from e
        raise RemoteStorageUnavailableError(f"cannot read {path}: {e}") from e
    if len(data) != expected.size:
        raise RemoteObjectError(f"{path} is corrupt: it holds {len(data)} bytes; its record "
                                f"says {expected.size}")
    if digest(data) != expected.sha256:
        raise RemoteObjectError(f"{path} is corrupt: sha256 {digest(data)} is not the "
                                f"recorded {expected.sha256}")
    return data


def load_producer_snapshot(store: ObjectStore, segment: RemoteSegment) -> ProducerStates | None:
    """The producer state as of ``segment``'s end offset (after its last batch), from its
    verified ``producer.snapshot``; None if its upload has none (uploads of before it).
    RemoteObjectError if the object is missing, differs from its record or is no snapshot
    (UnsupportedFormatVersionError if a newer raylog wrote it); the retriable
    RemoteStorageUnavailableError if the store cannot be read.

    What a replica whose local log starts above 0 could load instead of an empty state (not
    used so yet: the replica rebuilds from its own log and snapshots)."""
    if PRODUCER_SNAPSHOT not in segment.files:
        return None
    data = fetch_verified(store, segment, PRODUCER_SNAPSHOT)
    path = f"{segment.folder(store.prefix)}/{PRODUCER_SNAPSHOT}"
    try:
        return ProducerStates.from_json(snapshot_json(data, path))
    except (ValueError, TypeError, KeyError) as e:
        raise RemoteObjectError(f"{path} is not a producer snapshot: {e}") from e
