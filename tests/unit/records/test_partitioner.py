"""Partitioning: Kafka-compatible murmur2 (scalar and vectorized), the sticky partitioner."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raylog.records.partitioner as partitioner_module
from raylog.errors import InvalidPartitionsError, InvalidRecordError
from raylog.records.partitioner import (
    StickyPartitioner,
    key_partition,
    key_partitions,
    murmur2,
    murmur2_array,
)

# Apache Kafka, clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java,
# testMurmur2: the hashes the Java client's Utils.murmur2 returns.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka, src/rdmurmur2.c, unittest_murmur2: its "java_murmur2_results", the Java
# client's hashes as unsigned hex. Together they cover every tail length (0-3 extra bytes).
_UNALIGNED = b"PreAmbleWillBeRemoved,ThePrePartThatIs"
LIBRDKAFKA_VECTORS = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    _UNALIGNED: 0x78424F1C,
    _UNALIGNED[1:]: 0x4A62B377,
    _UNALIGNED[2:]: 0xE0E4E09E,
    _UNALIGNED[3:]: 0x62B8B43F,
    b"": 0x106E08D9,
}

BINARY_TYPES = [pa.binary(), pa.large_binary()]
keys_strategy = st.lists(st.binary(max_size=40), max_size=60)
optional_keys_strategy = st.lists(st.none() | st.binary(max_size=40), max_size=60)


def int32(x: int) -> int:
    """Java's (int) cast: the low 32 bits of x as a signed integer."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def reference_murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 step by step, one byte at a time, with Java's int arithmetic.

    Deliberately naive (no struct, no word tricks), to check the tuned code against.
    """
    m, r = int32(0x5BD1E995), 24
    length = len(data)
    h = int32(0x9747B28C ^ length)
    for i in range(length // 4):
        b = data[4 * i : 4 * i + 4]
        k = int32(b[0] + (b[1] << 8) + (b[2] << 16) + (b[3] << 24))
        k = int32(k * m)
        k = int32(k ^ ((k & 0xFFFFFFFF) >> r))  # Java's k >>> r
        k = int32(k * m)
        h = int32(int32(h * m) ^ k)
    rest, end = length % 4, length & ~3
    if rest >= 3:
        h = int32(h ^ (data[end + 2] << 16))
    if rest >= 2:
        h = int32(h ^ (data[end + 1] << 8))
    if rest >= 1:
        h = int32(h ^ data[end])
        h = int32(h * m)
    h = int32(h ^ ((h & 0xFFFFFFFF) >> 13))
    h = int32(h * m)
    return int32(h ^ ((h & 0xFFFFFFFF) >> 15))


def expected_partition(key: bytes, num_partitions: int) -> int:
    """Kafka's BuiltInPartitioner.partitionForKey: toPositive(murmur2(key)) % n."""
    return (reference_murmur2(key) & 0x7FFFFFFF) % num_partitions


# --- scalar murmur2 ------------------------------------------------------------------------


@pytest.mark.parametrize("data,expected", KAFKA_VECTORS.items(), ids=lambda v: repr(v)[:20])
def test_murmur2_matches_kafka_utils_test(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    assert reference_murmur2(data) == expected


@pytest.mark.parametrize("data,unsigned", LIBRDKAFKA_VECTORS.items(), ids=lambda v: repr(v)[:20])
def test_murmur2_matches_librdkafka_java_results(data: bytes, unsigned: int) -> None:
    assert murmur2(data) == int32(unsigned)
    assert reference_murmur2(data) == int32(unsigned)


@pytest.mark.parametrize("length", range(21))
def test_murmur2_every_length_up_to_20(length: int) -> None:
    # Every tail length, with bytes >= 0x80 (sign-extended in Java before the & 0xff).
    data = bytes((0x80 + 37 * i) & 0xFF for i in range(length))
    assert murmur2(data) == reference_murmur2(data)
    assert murmur2(b"x" * length) == reference_murmur2(b"x" * length)


@pytest.mark.parametrize("length", [255, 256, 257, 258, 259, 1000, 65537])
def test_murmur2_long_keys(length: int) -> None:
    # Past 64 words the body is unpacked with a format built on the spot.
    data = random.Random(length).randbytes(length)
    assert murmur2(data) == reference_murmur2(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100))
def test_murmur2_equals_reference(data: bytes) -> None:
    result = murmur2(data)
    assert result == reference_murmur2(data)
    assert -(2**31) <= result < 2**31


def test_murmur2_accepts_bytes_like() -> None:
    assert murmur2(bytearray(b"foobar")) == KAFKA_VECTORS[b"foobar"]
    assert murmur2(memoryview(b"xxfoobar")[2:]) == KAFKA_VECTORS[b"foobar"]


@pytest.mark.parametrize("bad", ["foobar", None, 21, [1, 2]])
def test_murmur2_refuses_non_bytes(bad: object) -> None:
    with pytest.raises(TypeError, match="murmur2 hashes bytes"):
        murmur2(bad)  # type: ignore[arg-type]


# --- key_partition -------------------------------------------------------------------------


def test_key_partition_kafka_examples() -> None:
    assert key_partition(b"foobar", 50) == 16  # toPositive(-790332482) % 50
    for key in KAFKA_VECTORS:
        for n in (1, 2, 3, 12, 50, 1000, 2**31 - 1):
            assert key_partition(key, n) == expected_partition(key, n)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(1, 10_000))
def test_key_partition_in_range_and_stable(key: bytes, num_partitions: int) -> None:
    first = key_partition(key, num_partitions)
    assert 0 <= first < num_partitions
    assert first == expected_partition(key, num_partitions)
    assert key_partition(key, num_partitions) == first  # now from the cache
    assert key_partition(bytes(bytearray(key)), num_partitions) == first  # an equal new object


def test_key_partition_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partitioner_module, "_CACHE_ENTRIES", 8)
    monkeypatch.setattr(partitioner_module, "_cache", {})
    keys = [b"key-%d" % i for i in range(100)]
    for _ in range(2):
        for key in keys:
            assert key_partition(key, 7) == expected_partition(key, 7)
            assert len(partitioner_module._cache) <= 8
    long_key = b"k" * (partitioner_module._CACHE_KEY_BYTES + 1)
    assert key_partition(long_key, 7) == expected_partition(long_key, 7)
    assert long_key not in partitioner_module._cache


@pytest.mark.parametrize("bad", [None, "foobar", bytearray(b"foobar"), 7, [b"a"]])
def test_key_partition_refuses_non_bytes_keys(bad: object) -> None:
    with pytest.raises(InvalidRecordError, match="key must be bytes"):
        key_partition(bad, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3", None])
def test_key_partition_refuses_bad_partition_counts(bad: object) -> None:
    key_partition(b"warm", 3)  # the check must also run when the key is cached
    for key in (b"warm", b"cold-%r" % (bad,)):
        with pytest.raises(InvalidPartitionsError, match="num_partitions"):
            key_partition(key, bad)  # type: ignore[arg-type]
    assert issubclass(InvalidPartitionsError, ValueError)


# --- murmur2_array and key_partitions -------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(keys_strategy, st.sampled_from(BINARY_TYPES))
def test_murmur2_array_equals_scalar(keys: list[bytes], type_: pa.DataType) -> None:
    result = murmur2_array(pa.array(keys, type_))
    assert result.dtype == "int32"
    assert result.tolist() == [murmur2(k) for k in keys]


@settings(max_examples=200, deadline=None)
@given(keys_strategy, st.data(), st.sampled_from(BINARY_TYPES))
def test_murmur2_array_of_a_slice(keys: list[bytes], data: st.DataObject,
                                  type_: pa.DataType) -> None:
    start = data.draw(st.integers(0, len(keys)))
    length = data.draw(st.integers(0, len(keys) - start))
    sliced = pa.array(keys, type_).slice(start, length)
    expected = [murmur2(k) for k in keys[start : start + length]]
    assert murmur2_array(sliced).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(keys_strategy, max_size=5), st.sampled_from(BINARY_TYPES))
def test_murmur2_array_of_a_chunked_array(chunks: list[list[bytes]], type_: pa.DataType) -> None:
    chunked = pa.chunked_array([pa.array(chunk, type_) for chunk in chunks], type_)
    expected = [murmur2(k) for chunk in chunks for k in chunk]
    assert murmur2_array(chunked).tolist() == expected


def test_murmur2_array_kafka_vectors() -> None:
    keys = list(KAFKA_VECTORS) + list(LIBRDKAFKA_VECTORS)
    expected = list(KAFKA_VECTORS.values()) + [int32(v) for v in LIBRDKAFKA_VECTORS.values()]
    assert murmur2_array(pa.array(keys)).tolist() == expected


def test_murmur2_array_blocks_and_long_keys() -> None:
    # More rows than one numpy block, mostly short keys, a few long ones finished one by one,
    # and one at the very end of the data buffer with a 3-byte tail.
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randint(0, 24)) for _ in range(70_000)]
    for row in (5, 33_000, 50_001):
        keys[row] = rng.randbytes(rng.randint(300, 5000))
    keys.append(rng.randbytes(4003))
    for type_ in BINARY_TYPES:
        assert murmur2_array(pa.array(keys, type_)).tolist() == [murmur2(k) for k in keys]


def test_murmur2_array_of_strings_hashes_utf8() -> None:
    words = ["21", "abc", "", "grüße", "日本語のキー"]
    expected = [murmur2(w.encode()) for w in words]
    for type_ in (pa.string(), pa.large_string(), pa.string_view()):
        assert murmur2_array(pa.array(words, type_)).tolist() == expected


def test_murmur2_array_of_other_binary_layouts() -> None:
    keys = [b"21", b"ab", b"\x00\xff"]
    expected = [murmur2(k) for k in keys]
    assert murmur2_array(pa.array(keys, pa.binary(2))).tolist() == expected
    assert murmur2_array(pa.array(keys, pa.binary_view())).tolist() == expected


def test_murmur2_array_empty_inputs() -> None:
    for empty in (pa.array([], pa.binary()), pa.chunked_array([], pa.binary()),
                  pa.array([b"abcdef"]).slice(1, 0)):
        result = murmur2_array(empty)
        assert result.dtype == "int32" and len(result) == 0
    assert key_partitions(pa.array([], pa.large_binary()), 3).tolist() == []


def test_murmur2_array_refuses_null_keys() -> None:
    with pytest.raises(ValueError, match="1 null keys"):
        murmur2_array(pa.array([b"a", None, b"b"]))
    with pytest.raises(ValueError, match="null keys"):
        murmur2_array(pa.chunked_array([[b"a"], [None]], pa.binary()))


@settings(max_examples=200, deadline=None)
@given(optional_keys_strategy, st.integers(1, 1000), st.integers(1, 4))
def test_key_partitions_equals_key_partition(keys: list[bytes | None], num_partitions: int,
                                             n_chunks: int) -> None:
    cut = len(keys) // n_chunks or 1
    chunks = [keys[i : i + cut] for i in range(0, len(keys), cut)]
    expected = [-1 if k is None else key_partition(k, num_partitions) for k in keys]
    for type_ in BINARY_TYPES:
        array = pa.array(keys, type_)
        assert key_partitions(array, num_partitions).tolist() == expected
        chunked = pa.chunked_array([pa.array(c, type_) for c in chunks], type_)
        assert key_partitions(chunked, num_partitions).tolist() == expected
        assert key_partitions(array.slice(1), num_partitions).tolist() == expected[1:]


def test_key_partitions_all_null() -> None:
    assert key_partitions(pa.nulls(3, pa.binary()), 5).tolist() == [-1, -1, -1]


@pytest.mark.parametrize("bad", [pa.array([1, 2, 3]), [b"a", b"b"], b"ab", None])
def test_hashing_arrays_refuses_non_binary_input(bad: object) -> None:
    with pytest.raises(TypeError, match="keys must be"):
        murmur2_array(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keys must be"):
        key_partitions(bad, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -4, 2**31, 1.5, False])
def test_key_partitions_refuses_bad_partition_counts(bad: object) -> None:
    with pytest.raises(InvalidPartitionsError, match="num_partitions"):
        key_partitions(pa.array([b"a"]), bad)  # type: ignore[arg-type]


# --- StickyPartitioner ---------------------------------------------------------------------


def test_sticky_sticks_until_next_batch() -> None:
    sticky = StickyPartitioner(random.Random(1))
    first = sticky.partition("t", 8)
    assert 0 <= first < 8
    assert all(sticky.partition("t", 8) == first for _ in range(100))
    second = sticky.next_batch("t", 8, previous=first)
    assert second != first
    assert all(sticky.partition("t", 8) == second for _ in range(100))


@pytest.mark.parametrize("num_partitions", [2, 3, 10])
def test_sticky_always_moves_to_another_partition(num_partitions: int) -> None:
    sticky = StickyPartitioner(random.Random(num_partitions))
    seen = set()
    current = sticky.partition("t", num_partitions)
    for _ in range(300):
        following = sticky.next_batch("t", num_partitions, previous=current)
        assert following != current and 0 <= following < num_partitions
        assert sticky.partition("t", num_partitions) == following
        seen.add(following)
        current = following
    assert seen == set(range(num_partitions))


def test_sticky_single_partition() -> None:
    sticky = StickyPartitioner(random.Random(0))
    assert sticky.partition("t", 1) == 0
    for _ in range(5):
        assert sticky.next_batch("t", 1, previous=0) == 0
    assert sticky.partition("t", 1) == 0


def test_sticky_moves_once_for_a_stale_previous() -> None:
    sticky = StickyPartitioner(random.Random(3))
    first = sticky.partition("t", 5)
    second = sticky.next_batch("t", 5, previous=first)
    # Another batch of the old partition sealed: the topic already moved on.
    assert sticky.next_batch("t", 5, previous=first) == second
    assert sticky.partition("t", 5) == second


def test_sticky_next_batch_before_partition() -> None:
    sticky = StickyPartitioner(random.Random(4))
    chosen = sticky.next_batch("t", 4, previous=2)
    assert chosen != 2 and 0 <= chosen < 4
    assert sticky.partition("t", 4) == chosen


def test_sticky_topics_are_independent() -> None:
    sticky = StickyPartitioner(random.Random(5))
    a, b = sticky.partition("a", 100), sticky.partition("b", 100)
    sticky.next_batch("a", 100, previous=a)
    assert sticky.partition("b", 100) == b


def test_sticky_chooses_among_available_partitions() -> None:
    sticky = StickyPartitioner(random.Random(6))
    assert sticky.partition("t", 10, available=[7]) == 7
    assert sticky.next_batch("t", 10, previous=7, available=[7]) == 7  # no other choice
    current = 7
    for _ in range(50):
        current = sticky.next_batch("t", 10, previous=current, available=[2, 7, 7])
        assert current in (2, 7)
    assert sticky.next_batch("t", 10, previous=current, available=[2, 7]) != current
    # None or empty: every partition is a candidate.
    assert 0 <= sticky.next_batch("t", 10, previous=current, available=[]) < 10


def test_sticky_follows_a_smaller_partition_count() -> None:
    sticky = StickyPartitioner(random.Random(8))
    assert sticky.partition("t", 10, available=[9]) == 9
    assert sticky.partition("t", 20) == 9  # more partitions: stay
    assert 0 <= sticky.partition("t", 4) < 4  # the current one is gone: move


@pytest.mark.parametrize("bad", [0, -1, 1.0])
def test_sticky_refuses_bad_partition_counts(bad: object) -> None:
    sticky = StickyPartitioner()
    with pytest.raises(InvalidPartitionsError, match="num_partitions"):
        sticky.partition("t", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidPartitionsError, match="num_partitions"):
        sticky.next_batch("t", bad, previous=0)  # type: ignore[arg-type]


def test_sticky_refuses_unknown_available_partitions() -> None:
    with pytest.raises(InvalidPartitionsError, match=r"available partitions \[5\]"):
        StickyPartitioner().partition("t", 5, available=[1, 5])
