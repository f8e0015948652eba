"""From a user's Arrow table to per-partition payload columns, each fitting one batch."""

from __future__ import annotations

import itertools
import random
import time
from collections import defaultdict

import pyarrow as pa
import pytest

from raylog.client.tables import payload_table, split_for_partitions
from raylog.errors import InvalidRecordError, UnknownPartitionError
from raylog.records import PAYLOAD_SCHEMA, Codec, encode
from raylog.records.builder import BATCH_OVERHEAD
from raylog.records.partitioner import StickyPartitioner, key_partition
from raylog.records.payload import HEADERS_TYPE

NOW = 1_700_000_000_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- payload_table -------------------------------------------------------------------------------


@pytest.mark.parametrize("value_type", [pa.string(), pa.large_string(), pa.binary(),
                                        pa.large_binary()])
def test_value_column_of_any_string_or_binary_type(value_type):
    raw = ["a", "bé", None] if pa.types.is_string(value_type) or \
        pa.types.is_large_string(value_type) else [b"a", "bé".encode(), None]
    out = payload_table(pa.table({"value": pa.array(raw, value_type), "timestamp": [1, 2, 3]}))
    assert out.schema == PAYLOAD_SCHEMA
    assert out.column("value").to_pylist() == [b"a", "bé".encode(), None]


def test_without_key_column_every_key_is_null():
    out = payload_table(pa.table({"value": [b"a", b"b"]}))
    assert out.column("key").to_pylist() == [None, None]
    assert out.column("key").type == pa.binary()


def test_key_column_is_kept_with_its_nulls():
    out = payload_table(pa.table({"value": [b"a", b"b", b"c"], "key": ["k1", None, "k3"]}))
    assert out.column("key").to_pylist() == [b"k1", None, b"k3"]


def test_record_batches_are_accepted():
    batch = pa.record_batch({"value": [b"a"], "key": [b"k"], "timestamp": [5]})
    out = payload_table(batch)
    assert out.to_pylist() == [{"timestamp": 5, "key": b"k", "value": b"a", "headers": []}]


def test_extra_columns_are_ignored():
    out = payload_table(pa.table({"value": [b"a"], "user_id": [7], "partition": [0]}))
    assert out.schema == PAYLOAD_SCHEMA


@pytest.mark.parametrize("int_type", [pa.int64(), pa.int32(), pa.uint64(), pa.int16()])
def test_integer_timestamps_are_ms(int_type):
    out = payload_table(pa.table({"value": [b"a", b"b"],
                                  "timestamp": pa.array([0, 30_000], int_type)}))
    assert out.column("timestamp").to_pylist() == [0, 30_000]


@pytest.mark.parametrize(("unit", "per_ms"), [("s", None), ("ms", 1), ("us", 1_000),
                                              ("ns", 1_000_000)])
@pytest.mark.parametrize("tz", [None, "UTC", "Europe/Paris"])
def test_timestamp_types_become_ms(unit, per_ms, tz):
    raw = NOW // 1000 if per_ms is None else NOW * per_ms
    out = payload_table(pa.table({"value": [b"a"],
                                  "timestamp": pa.array([raw], pa.timestamp(unit, tz=tz))}))
    assert out.column("timestamp").to_pylist() == [NOW]


def test_sub_millisecond_timestamps_are_cut_to_ms():
    """A pandas/numpy datetime64[ns] (e.g. from ``pd.Timestamp.now()``) rarely falls on a
    whole millisecond; records carry ms, so the sub-ms part must go, not the whole call."""
    ts = pa.array([NOW * 1_000_000 + 123_456, NOW * 1_000_000 + 999_999], pa.timestamp("ns"))
    out = payload_table(pa.table({"value": [b"a", b"b"], "timestamp": ts}))
    assert out.column("timestamp").to_pylist() == [NOW, NOW]
    us = pa.array([NOW * 1_000 + 1], pa.timestamp("us"))
    assert payload_table(pa.table({"value": [b"a"], "timestamp": us})) \
        .column("timestamp").to_pylist() == [NOW]


@pytest.mark.parametrize("ts_type", [pa.int64(), pa.timestamp("ms"), pa.timestamp("ns")])
def test_null_timestamps_are_filled_with_now(ts_type):
    before = now_ms()
    column = pa.array([None, NOW, None], pa.timestamp("ms")).cast(ts_type)
    out = payload_table(pa.table({"value": [b"a", b"b", b"c"], "timestamp": column}))
    after = now_ms()
    got = out.column("timestamp").to_pylist()
    assert got[1] == NOW
    assert before <= got[0] <= after
    assert got[2] == got[0]
    assert out.column("timestamp").null_count == 0


def test_without_timestamp_column_every_row_gets_now():
    before = now_ms()
    out = payload_table(pa.table({"value": [b"a", b"b"]}))
    after = now_ms()
    got = out.column("timestamp").to_pylist()
    assert got[0] == got[1]
    assert before <= got[0] <= after


def test_negative_timestamps_are_refused():
    with pytest.raises(InvalidRecordError, match=r"'timestamp' has negative values"):
        payload_table(pa.table({"value": [b"a", b"b"], "timestamp": [5, -1]}))


@pytest.mark.parametrize("column", [
    pa.array(["2024-01-01"]),
    pa.array([1.5]),
    pa.array([1], pa.date32()),
    pa.array([True]),
])
def test_timestamps_of_other_types_are_refused(column):
    with pytest.raises(InvalidRecordError, match=r"column 'timestamp' must hold ms since the "
                                                 r"epoch or timestamps, got"):
        payload_table(pa.table({"value": [b"a"], "timestamp": column}))


def test_integer_timestamps_beyond_int64_are_refused_as_invalid_records():
    column = pa.array([2**63 + 5], pa.uint64())
    with pytest.raises(InvalidRecordError, match=r"timestamp"):
        payload_table(pa.table({"value": [b"a"], "timestamp": column}))


def test_an_empty_table_with_a_timestamp_column_gives_an_empty_payload():
    table = pa.table({"value": pa.array([], pa.binary()), "timestamp": pa.array([], pa.int64())})
    out = payload_table(table)
    assert out.num_rows == 0
    assert out.schema == PAYLOAD_SCHEMA


def test_an_empty_table_without_timestamps_gives_an_empty_payload():
    out = payload_table(pa.table({"value": pa.array([], pa.binary())}))
    assert out.num_rows == 0
    assert out.schema == PAYLOAD_SCHEMA


def test_headers_column_is_kept():
    headers = [[{"key": "trace", "value": b"t1"}, {"key": "n", "value": None}], [], None]
    out = payload_table(pa.table({"value": [b"a", b"b", b"c"], "headers": headers}))
    assert out.column("headers").type == HEADERS_TYPE
    assert out.column("headers").to_pylist() == [
        [{"key": "trace", "value": b"t1"}, {"key": "n", "value": None}], [], None]


def test_without_headers_column_every_row_has_empty_headers():
    out = payload_table(pa.table({"value": [b"a", b"b"]}))
    assert out.column("headers").to_pylist() == [[], []]


def test_a_table_without_value_column_is_refused_naming_the_columns():
    with pytest.raises(InvalidRecordError, match=r"needs a 'value' column; it has "
                                                 r"\['key', 'payload'\]"):
        payload_table(pa.table({"key": [b"k"], "payload": [b"v"]}))


@pytest.mark.parametrize(("columns", "name"), [
    ({"value": [1, 2]}, "value"),
    ({"value": [[1], [2]]}, "value"),
    ({"value": [b"a", b"b"], "key": [1.5, 2.5]}, "key"),
    ({"value": [b"a", b"b"], "key": [[b"k"], [b"j"]]}, "key"),
    ({"value": [b"a", b"b"], "headers": [1, 2]}, "headers"),
    ({"value": [b"a", b"b"], "headers": [["x"], ["y"]]}, "headers"),
])
def test_uncastable_columns_are_refused_naming_the_column(columns, name):
    with pytest.raises(InvalidRecordError, match=rf"column '{name}' of type .* cannot be used as"):
        payload_table(pa.table(columns))


@pytest.mark.parametrize("thing", [{"value": [b"a"]}, [b"a"], None])
def test_non_tables_are_refused(thing):
    with pytest.raises(InvalidRecordError, match=r"expected a pyarrow Table"):
        payload_table(thing)


# -- split_for_partitions ------------------------------------------------------------------------


def split(table, n, batch_size=1 << 20, partition=None, seed=7, sticky=None):
    sticky = sticky or StickyPartitioner(random.Random(seed))
    return split_for_partitions(table, n, batch_size, partition=partition, sticky=sticky,
                                topic="t")


def rows_by_partition(pieces) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = defaultdict(list)
    for part, chunk in pieces:
        out[part].extend(chunk.column("value").to_pylist())
    return dict(out)


def all_values(pieces) -> list[bytes]:
    return sorted(v for _, chunk in pieces for v in chunk.column("value").to_pylist())


def values(n: int) -> list[bytes]:
    return [b"value-%05d" % i for i in range(n)]


def test_pieces_are_payload_columns():
    pieces = split(pa.table({"value": values(5), "key": [b"k"] * 5}), 3)
    assert pieces
    for part, chunk in pieces:
        assert isinstance(part, int)
        assert chunk.schema == PAYLOAD_SCHEMA


def test_an_explicit_partition_takes_every_row_in_order():
    table = pa.table({"value": values(50), "key": [b"k%d" % i for i in range(50)],
                      "partition": [0] * 50})
    pieces = split(table, 4, partition=2)
    assert {part for part, _ in pieces} == {2}
    assert rows_by_partition(pieces) == {2: values(50)}


def test_a_partition_column_places_each_row():
    parts = [i % 3 for i in range(30)]
    table = pa.table({"value": values(30), "key": [b"ignored"] * 30,
                      "partition": pa.array(parts, pa.int8())})
    by_part = rows_by_partition(split(table, 3))
    assert by_part == {p: [v for v, q in zip(values(30), parts, strict=True) if q == p]
                       for p in range(3)}


def test_keyed_rows_go_to_their_murmur2_partition():
    n, keys = 7, [b"user-%d" % (i * 37 % 101) for i in range(300)]
    table = pa.table({"value": values(300), "key": keys})
    expected = {v: key_partition(k, n) for v, k in zip(values(300), keys, strict=True)}
    pieces = split(table, n)
    seen = 0
    for part, chunk in pieces:
        for key, value in zip(chunk.column("key").to_pylist(), chunk.column("value").to_pylist(),
                              strict=True):
            assert part == expected[value] == key_partition(key, n)
            seen += 1
    assert seen == 300


def test_string_keys_hash_as_their_utf8_bytes():
    keys = [f"ключ-{i}" for i in range(40)]
    pieces = split(pa.table({"value": values(40), "key": keys}), 5)
    for part, chunk in pieces:
        for key in chunk.column("key").to_pylist():
            assert part == key_partition(key, 5)


def test_keyless_rows_move_between_partitions_batch_by_batch():
    table = pa.table({"value": [b"x" * 100] * 400})
    batch_size = BATCH_OVERHEAD + 4096
    pieces = split(table, 5, batch_size=batch_size, seed=11)
    assert len(pieces) > 5

    reference = StickyPartitioner(random.Random(11))
    expected = []
    for _ in pieces:
        part = reference.partition("t", 5)
        expected.append(part)
        reference.next_batch("t", 5, part)
    assert [part for part, _ in pieces] == expected
    for (a, _), (b, _) in itertools.pairwise(pieces):
        assert a != b


def test_keyless_rows_continue_the_sticky_partitioners_state():
    sticky = StickyPartitioner(random.Random(3))
    current = sticky.partition("t", 4)
    pieces = split(pa.table({"value": values(3)}), 4, sticky=sticky)
    assert [part for part, _ in pieces] == [current]
    assert sticky.partition("t", 4) != current


def test_keyed_and_keyless_rows_mixed():
    keys = [b"k%d" % i if i % 3 else None for i in range(90)]
    table = pa.table({"value": values(90), "key": keys})
    pieces = split(table, 4)
    keyless = {v for v, k in zip(values(90), keys, strict=True) if k is None}
    sticky_parts = set()
    for part, chunk in pieces:
        chunk_keys = chunk.column("key").to_pylist()
        if chunk_keys[0] is None:
            assert all(k is None for k in chunk_keys)
            assert set(chunk.column("value").to_pylist()) <= keyless
            sticky_parts.add(part)
        else:
            assert all(k is not None and key_partition(k, 4) == part for k in chunk_keys)
    assert sticky_parts
    assert all_values(pieces) == values(90)


def test_a_minus_one_in_the_partition_column_leaves_the_row_to_the_sticky_partitioner():
    table = pa.table({"value": values(4), "partition": [1, -1, 1, -1]})
    sticky = StickyPartitioner(random.Random(5))
    expected_sticky = StickyPartitioner(random.Random(5)).partition("t", 3)
    pieces = split(table, 3, sticky=sticky)
    assert pieces[0][0] == 1
    assert pieces[0][1].column("value").to_pylist() == [values(4)[0], values(4)[2]]
    assert pieces[1][0] == expected_sticky
    assert pieces[1][1].column("value").to_pylist() == [values(4)[1], values(4)[3]]


def random_table(rows: int, seed: int, keyed: bool, headers: bool) -> pa.Table:
    rng = random.Random(seed)
    columns = {
        "value": [rng.randbytes(rng.randrange(0, 3000)) if rng.random() > 0.05 else None
                  for _ in range(rows)],
        "timestamp": [NOW + i for i in range(rows)],
    }
    if keyed:
        columns["key"] = [b"key-%d" % rng.randrange(50) if rng.random() > 0.2 else None
                          for _ in range(rows)]
    if headers:
        columns["headers"] = pa.array(
            [[{"key": f"h{j}", "value": rng.randbytes(rng.randrange(200))}
              for j in range(rng.randrange(4))] for _ in range(rows)], HEADERS_TYPE)
    columns["id"] = list(range(rows))
    return pa.table(columns)


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("batch_size", [BATCH_OVERHEAD + 2000, 16 << 10, 256 << 10])
def test_every_chunk_encodes_within_batch_size(keyed, headers, batch_size):
    table = random_table(600, seed=batch_size + keyed + 2 * headers, keyed=keyed,
                         headers=headers)
    pieces = split(table, 6, batch_size=batch_size)
    for _, chunk in pieces:
        for codec in (Codec.LZ4, Codec.NONE):
            size = len(encode(chunk, codec=codec))
            assert size <= batch_size or chunk.num_rows == 1, (size, batch_size, chunk.num_rows)
    assert sum(chunk.num_rows for _, chunk in pieces) == 600


def test_chunks_without_headers_stay_within_batch_size_when_other_rows_have_headers():
    """Rows 0-499 carry a header each, rows 500-999 none. A chunk of the later rows holds no
    header, yet each must still encode within batch_size."""
    rows = 1000
    headers = pa.array([[{"key": "trace", "value": b"t" * 20}] if i < 500 else []
                        for i in range(rows)], HEADERS_TYPE)
    table = pa.table({"value": [b"v" * 40] * rows, "headers": headers})
    batch_size = BATCH_OVERHEAD + 4000
    pieces = split(table, 1, batch_size=batch_size)
    sizes = [len(encode(chunk, codec=Codec.NONE)) for _, chunk in pieces]
    assert max(sizes) <= batch_size, sizes


def test_a_row_larger_than_the_batch_gets_a_chunk_of_its_own():
    table = pa.table({"value": [b"a", b"x" * 50_000, b"b"]})
    pieces = split(table, 1, batch_size=BATCH_OVERHEAD + 10_000)
    assert [chunk.column("value").to_pylist() for _, chunk in pieces] == [
        [b"a"], [b"x" * 50_000], [b"b"]]


@pytest.mark.parametrize("keyed", [False, True])
def test_rows_keep_their_order_within_each_partition_and_appear_once(keyed):
    table = random_table(800, seed=99, keyed=keyed, headers=False)
    pieces = split(table, 5, batch_size=32 << 10)
    # The payload has no id column; rows are told apart by their timestamp (NOW + row).
    ids_by_part: dict[int, list[int]] = defaultdict(list)
    for part, chunk in pieces:
        ids_by_part[part].extend(ts - NOW for ts in chunk.column("timestamp").to_pylist())
    everything = sorted(i for ids in ids_by_part.values() for i in ids)
    assert everything == list(range(800))
    if keyed:
        keys = table.column("key").to_pylist()
        for part, ids in ids_by_part.items():
            keyed_ids = [i for i in ids if keys[i] is not None]
            assert keyed_ids == sorted(keyed_ids)
            assert all(key_partition(keys[i], 5) == part for i in keyed_ids)
    else:
        for ids in ids_by_part.values():
            assert ids == sorted(ids)


def test_chunks_of_one_partition_follow_each_other_in_row_order():
    table = pa.table({"value": [b"v" * 500] * 200, "key": [b"same"] * 200,
                      "timestamp": [NOW + i for i in range(200)]})
    pieces = split(table, 3, batch_size=BATCH_OVERHEAD + 8000)
    assert len(pieces) > 1
    assert len({part for part, _ in pieces}) == 1
    ts = [t for _, chunk in pieces for t in chunk.column("timestamp").to_pylist()]
    assert ts == [NOW + i for i in range(200)]


def test_an_empty_table_gives_no_pieces():
    assert split(pa.table({"value": pa.array([], pa.binary())}), 3) == []


@pytest.mark.parametrize("partition", [3, 10, -1, -5])
def test_an_explicit_partition_out_of_range_is_refused(partition):
    with pytest.raises(UnknownPartitionError, match=r"topic 't' has partitions 0..2"):
        split(pa.table({"value": values(3)}), 3, partition=partition)


@pytest.mark.parametrize("parts", [[0, 3, 1], [0, -2, 1], [7, 7, 7]])
def test_a_partition_column_out_of_range_is_refused(parts):
    with pytest.raises(UnknownPartitionError, match=r"topic 't' has partitions 0..2; rows ask"):
        split(pa.table({"value": values(3), "partition": parts}), 3)


@pytest.mark.parametrize("column", [pa.array([0, None, 1]), pa.array([0.0, 1.0, 2.0]),
                                    pa.array(["0", "1", "2"])])
def test_a_partition_column_must_hold_integers_without_nulls(column):
    with pytest.raises(InvalidRecordError, match=r"column 'partition' must hold integers"):
        split(pa.table({"value": values(3), "partition": column}), 3)
