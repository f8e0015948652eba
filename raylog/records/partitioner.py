"""Choosing a partition for a record: Kafka's murmur2 for keys, sticky choice for no key.

A keyed record goes to ``(murmur2(key) & 0x7FFFFFFF) % num_partitions``, exactly as in the
Java client's default partitioner (``Utils.murmur2`` and ``Utils.toPositive``), so a key lands
on the same partition number as it would in Kafka with the same partition count. The hash is
MurmurHash2 with Kafka's seed ``0x9747b28c``: the key is read as little-endian 32-bit words,
the 1-3 trailing bytes are folded in as one little-endian integer, and the result is read as
a signed 32-bit integer, as Java does.

:func:`key_partition` hashes one key (the producer calls it per record, so it is tuned for
pure Python and keeps a bounded cache); :func:`key_partitions` hashes a whole Arrow array of
keys with numpy and gives null keys partition -1, while :func:`murmur2_array` refuses them
(every int32 is a possible hash, so none can mark a null). A record without a key is placed
by :class:`StickyPartitioner` (KIP-480). Any callable of the :class:`Partitioner` shape can
replace both.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa

from raylog.errors import InvalidPartitionsError, InvalidRecordError

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF
_POSITIVE = 0x7FFFFFFF  # Kafka's toPositive: clear the sign bit rather than abs()

# unpack_from with an "<nI" format reads the n whole words of a key in one C call and
# ignores the trailing bytes, so the body needs no slice. Formats up to 64 words are built once.
_WORD_UNPACKERS = [struct.Struct(f"<{words}I").unpack_from for words in range(65)]

# key -> murmur2(key) & 0x7FFFFFFF. Keys repeat (user ids, order ids), and a dict hit costs a
# tenth of a hash. Cleared when full rather than LRU-evicted: cheaper, and refilled at once.
# Long keys are not kept, which bounds the memory to about _CACHE_ENTRIES * _CACHE_KEY_BYTES.
# Dict get/set/clear are atomic, so concurrent callers at worst lose an entry.
_CACHE_ENTRIES = 65536
_CACHE_KEY_BYTES = 256
_cache: dict[bytes, int] = {}

_BLOCK_ROWS = 32768  # rows hashed per numpy pass in murmur2_array and key_partitions
_FEW_ROWS = 64  # long keys left over that are cheaper to finish one by one
# Keeps the low 0, 1, 2 or 3 bytes of a word: the tail of a key.
_TAIL_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], np.uint32)


class Partitioner(Protocol):
    """A custom partitioner: any callable ``(key, num_partitions) -> partition``.

    ``key`` is the record key or None; the result must lie in ``[0, num_partitions)``.
    Example::

        def by_region(key: bytes | None, num_partitions: int) -> int:
            return 0 if key is None else key_partition(key.split(b":")[0], num_partitions)
    """

    def __call__(self, key: bytes | None, num_partitions: int) -> int: ...


def _murmur2_u32(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as an unsigned 32-bit integer; ``data`` is not checked."""
    n = len(data)
    h = _SEED ^ n
    words = n >> 2
    if words:
        unpack = _WORD_UNPACKERS[words] if words <= 64 else struct.Struct(f"<{words}I").unpack_from
        for k in unpack(data):
            k = k * _M & _MASK32
            # Python ints do not wrap, so each product is masked back to 32 bits.
            h = (h * _M ^ (k ^ k >> 24) * _M) & _MASK32
    if n & 3:
        h = (h ^ int.from_bytes(data[n & ~3 :], "little")) * _M & _MASK32
    h ^= h >> 13
    h = h * _M & _MASK32
    return h ^ h >> 15


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data``: a signed 32-bit int, as ``Utils.murmur2`` returns.

    >>> murmur2(b"foobar")
    -790332482
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"murmur2 hashes bytes, got {type(data).__name__}")
    if isinstance(data, memoryview):
        data = data.tobytes()  # len() of a memoryview counts items, not bytes
    h = _murmur2_u32(data)
    return h - (1 << 32) if h & 0x80000000 else h


def _check_num_partitions(num_partitions: int) -> None:
    if not isinstance(num_partitions, int) or isinstance(num_partitions, bool):
        raise InvalidPartitionsError(
            f"num_partitions must be an int, got {type(num_partitions).__name__}")
    if not 1 <= num_partitions <= _POSITIVE:
        raise InvalidPartitionsError(
            f"num_partitions must be in [1, {_POSITIVE}], got {num_partitions}")


def _positive_hash(key: bytes) -> int:
    """The cache-miss path of key_partition: check the key, hash it, remember it."""
    if not isinstance(key, bytes):
        raise InvalidRecordError(f"a record key must be bytes, got {type(key).__name__}")
    h = _murmur2_u32(key) & _POSITIVE
    if len(key) <= _CACHE_KEY_BYTES:
        if len(_cache) >= _CACHE_ENTRIES:
            _cache.clear()
        _cache[key] = h
    return h


def key_partition(key: bytes, num_partitions: int) -> int:
    """The partition of a keyed record, as Kafka's default partitioner computes it.

    Raises InvalidRecordError when ``key`` is not bytes (None included: keyless records go
    to a :class:`StickyPartitioner`) and InvalidPartitionsError for a bad partition count.

    >>> key_partition(b"foobar", 50)
    16
    """
    try:
        h = _cache[key]
    except KeyError:
        h = _positive_hash(key)
    except TypeError as e:  # an unhashable key: a bytearray, a list
        raise InvalidRecordError(f"a record key must be bytes, got {type(key).__name__}") from e
    if type(num_partitions) is not int or num_partitions < 1:
        _check_num_partitions(num_partitions)
    return h % num_partitions


# --- Arrow arrays of keys ------------------------------------------------------------------


def _chunks(keys: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """The binary chunks of ``keys``, each with 32- or 64-bit offsets."""
    if isinstance(keys, pa.ChunkedArray):
        chunks = list(keys.chunks)
    elif isinstance(keys, pa.Array):
        chunks = [keys]
    else:
        raise TypeError(f"keys must be a pyarrow Array or ChunkedArray, got {type(keys).__name__}")
    t = keys.type
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t)):
        return chunks
    if pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        return [chunk.cast(pa.large_binary()) for chunk in chunks]
    raise TypeError(f"keys must be an Arrow binary or string array, got type {t}")


def _hash_chunk(chunk: pa.Array) -> np.ndarray:
    """Unsigned murmur2 of every row of one binary chunk; null rows get an arbitrary value."""
    n = len(chunk)
    if n == 0:
        return np.empty(0, np.uint32)
    _, offsets_buf, data_buf = chunk.buffers()[:3]
    large = pa.types.is_large_binary(chunk.type) or pa.types.is_large_string(chunk.type)
    offset_type = np.dtype(np.int64 if large else np.int32)
    offsets = np.frombuffer(offsets_buf, offset_type, n + 1, chunk.offset * offset_type.itemsize)
    offsets = offsets.astype(np.int64)

    # words[p] is the little-endian uint32 that starts at byte p of the data buffer: an
    # unaligned, overlapping view (stride 1 byte), so any key's words load without a copy.
    # Only positions up to size - 4 exist; a tail that ends the buffer is read from further
    # left and shifted into place below.
    size = data_buf.size if data_buf is not None else 0
    data: pa.Buffer | np.ndarray = data_buf
    if size < 4:
        data = np.zeros(4, np.uint8)
        if size:
            data[:size] = np.frombuffer(data_buf, np.uint8, size)
    last = max(size, 4) - 4
    words = np.ndarray((last + 1,), np.dtype("<u4"), data, 0, (1,))

    starts = offsets[:-1]
    lengths = np.diff(offsets)
    n_words = lengths >> 2
    h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
    m = np.uint32(_M)

    # Word i of every key at least i + 1 words long. Up to the shortest key every row takes
    # part; after that only the surviving row numbers, a set that shrinks as i grows. When
    # few rows are left, a numpy pass per word costs more than hashing those keys one by one
    # (think of one 100 KB key among short ones), so they are finished in pure Python.
    shortest, longest = int(n_words.min()), int(n_words.max())
    for i in range(shortest):
        k = words[starts + 4 * i] * m
        k ^= k >> np.uint32(24)
        k *= m
        h *= m
        h ^= k
    rows = np.arange(n)
    long_rows = rows[:0]
    for i in range(shortest, longest):
        rows = rows[np.flatnonzero(n_words[rows] > i)]
        if len(rows) <= _FEW_ROWS:
            long_rows = rows
            break
        k = words[starts[rows] + 4 * i] * m
        k ^= k >> np.uint32(24)
        k *= m
        h[rows] = (h[rows] * m) ^ k

    # The 1-3 trailing bytes as one little-endian word, bytes past the key masked off.
    tail_len = lengths & 3
    at = starts + 4 * n_words
    load_at = np.minimum(at, last)
    tail = words[load_at] >> (8 * (at - load_at)).astype(np.uint32)
    tail &= _TAIL_MASKS[tail_len]
    np.copyto(h, (h ^ tail) * m, where=tail_len != 0)

    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    for row in long_rows.tolist():
        h[row] = _murmur2_u32(data_buf[starts[row] : starts[row] + lengths[row]].to_pybytes())
    return h


def _hash_keys(keys: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """Unsigned murmur2 per row, and a boolean null mask (None when there are no nulls)."""
    chunks = _chunks(keys)
    # Blocks of rows whose working arrays stay in the CPU cache run about 1.5x faster.
    hashes = [_hash_chunk(chunk.slice(start, _BLOCK_ROWS))
              for chunk in chunks for start in range(0, len(chunk), _BLOCK_ROWS)]
    h = np.concatenate(hashes) if hashes else np.empty(0, np.uint32)
    if keys.null_count == 0:
        return h, None
    nulls = np.concatenate([chunk.is_null().to_numpy(zero_copy_only=False) for chunk in chunks])
    return h, nulls


def murmur2_array(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Kafka's murmur2 of every key, as an int32 array; ``murmur2_array(a)[i] == murmur2(a[i])``.

    ``keys`` is a binary or string Arrow array (or chunked array); a string hashes as its
    UTF-8 bytes, as Kafka's StringSerializer writes it. A null key has no hash: ValueError.

    >>> murmur2_array(pa.array([b"21", b"abc"])).tolist()
    [-973932308, 479470107]
    """
    h, nulls = _hash_keys(keys)
    if nulls is not None:
        raise ValueError(
            f"murmur2_array: {int(nulls.sum())} null keys (first at row {int(nulls.argmax())})")
    return h.view(np.int32)


def key_partitions(keys: pa.Array | pa.ChunkedArray, num_partitions: int) -> np.ndarray:
    """The partition of every key, as an int32 array: ``key_partition`` per element.

    A null key gets partition -1: such rows are for the sticky partitioner to place.

    >>> key_partitions(pa.array([b"foobar", None]), 50).tolist()
    [16, -1]
    """
    _check_num_partitions(num_partitions)
    h, nulls = _hash_keys(keys)
    partitions = ((h & np.uint32(_POSITIVE)) % np.uint32(num_partitions)).astype(np.int32)
    if nulls is not None:
        partitions[nulls] = -1
    return partitions


# --- records without a key -----------------------------------------------------------------


class StickyPartitioner:
    """Places keyless records as Kafka's clients do since KIP-480: one partition at a time.

    It owns one current partition per topic. Every keyless record of a topic goes to that
    partition until the producer seals the batch it was filling there and calls
    :meth:`next_batch`; then a new partition is drawn at random among the available ones,
    different from the previous one whenever there is another choice. Filling one batch at a
    time gives larger batches and lower latency than spreading records round-robin.

    ``next_batch`` only moves on when ``previous`` is still the current partition, so two
    sealed batches reported for the same partition move it once, as in Kafka's
    StickyPartitionCache. The random source is injected so tests can fix it.

    Not safe to call concurrently: the producer calls it under its own lock.

    Example::

        sticky = StickyPartitioner()
        p = sticky.partition("clicks", 6)  # every keyless record goes to p ...
        p = sticky.next_batch("clicks", 6, previous=p)  # ... until its batch is sealed
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int,
                  available: Sequence[int] | None = None) -> int:
        """The partition for the next keyless record of ``topic``.

        ``available`` lists the partitions that have a leader now (None or empty: all of
        them); it matters only when a partition must be chosen.
        """
        current = self._current.get(topic)
        if current is not None and current < num_partitions:
            return current
        return self._move(topic, num_partitions, current, available)

    def next_batch(self, topic: str, num_partitions: int, previous: int,
                   available: Sequence[int] | None = None) -> int:
        """Move on after the batch for ``previous`` was sealed; return the new partition."""
        current = self._current.get(topic)
        if current is not None and current != previous and current < num_partitions:
            return current
        return self._move(topic, num_partitions, current, available)

    def _move(self, topic: str, num_partitions: int, avoid: int | None,
              available: Sequence[int] | None) -> int:
        _check_num_partitions(num_partitions)
        candidates: Sequence[int] = range(num_partitions)
        if available:
            bad = [p for p in available if not (isinstance(p, int) and 0 <= p < num_partitions)]
            if bad:
                raise InvalidPartitionsError(
                    f"available partitions {bad} are not in [0, {num_partitions})")
            candidates = sorted(set(available))
        if len(candidates) > 1 and avoid in candidates:
            # Uniform over the other candidates: draw from one fewer and skip over ``avoid``.
            i = self._rng.randrange(len(candidates) - 1)
            if i >= candidates.index(avoid):
                i += 1
        else:
            i = self._rng.randrange(len(candidates))
        chosen = candidates[i]
        self._current[topic] = chosen
        return chosen
