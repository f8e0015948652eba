"""The producer's per-record append: _append.c and its pure-Python twin behave alike, and
PlainSend appends only what the producer's fast path would, handing everything else to its
fallback unchanged.

The C module is compiled here from its source (as test_build does for _records.c), so these
tests run against it whether or not the checkout was installed."""

from __future__ import annotations

import importlib.util
import time
import types

import pyarrow as pa
import pytest

from raylog.kafka.build import build
from raylog.records import append, append_py

OVERHEAD = 24


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> types.ModuleType:
    built = build(tmp_path_factory.mktemp("append"), "raylog.records._append")
    spec = importlib.util.spec_from_file_location("raylog.records._append", built)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["c", "python"])
def twin(request, compiled) -> types.ModuleType:
    return compiled if request.param == "c" else append_py


def columns_of(module: types.ModuleType, room: int):
    class Builder(module.Columns):  # as BatchBuilder subclasses it
        __slots__ = ("extra",)

    columns = Builder()
    columns.room = room
    return columns


def state(c) -> tuple:
    return c.room, c.plain, c.timestamps, c.values, c.keys, c.headers, len(c)


def test_put_fills_the_columns_alike_in_c_and_in_python(compiled):
    steps = [(10, 1, None, b"a", None), (12, 2, None, None, None),
             (15, 3, b"k", b"b", None), (20, 4, None, b"c", [("h", b"x")]),
             (3, 5, None, b"d", None), (1, 6, None, b"too big", None)]
    twins = [columns_of(compiled, 60), columns_of(append_py, 60)]
    for step in steps:
        counts = [c._put(*step) for c in twins]
        assert counts[0] == counts[1]
        assert state(twins[0]) == state(twins[1])
    assert state(twins[0]) == (
        0, False, [1, 2, 3, 4, 5], [b"a", None, b"b", b"c", b"d"],
        [None, None, b"k", None, None], [None, None, None, [("h", b"x")], None], 5)


def test_an_empty_batch_takes_a_record_larger_than_its_room(twin):
    columns = columns_of(twin, 10)
    assert columns._put(50, 1, None, b"x" * 26, None) == 1
    assert columns.room == -40
    assert columns._put(1, 2, None, b"", None) == 0
    assert columns.values == [b"x" * 26]


def test_a_record_slot_keeps_its_batch_index_and_timestamp(twin):
    class Future(twin.RecordSlot):
        __slots__ = ()

    result = object()
    slot = Future(result, 7, 1234)
    assert (slot._batch, slot._index, slot._timestamp) == (result, 7, 1234)


class Batch:
    def __init__(self, builder, result) -> None:
        self.builder, self.result = builder, result


class Calls:
    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return "fallback"


def plain_send(compiled, room: int = 1000):
    class Future(compiled.RecordSlot):
        __slots__ = ()

    columns = columns_of(compiled, room)
    result = object()
    sticky = {"t": Batch(columns, result)}
    fallback = Calls()
    return compiled.PlainSend(sticky, fallback, Future, OVERHEAD), sticky, columns, result, \
        fallback, Future


def test_plain_send_appends_a_keyless_value_to_the_sticky_batch_and_stamps_it_now(compiled):
    send, _, columns, result, fallback, future_type = plain_send(compiled)
    before = time.time_ns() // 1_000_000
    futures = [send("t", b"v%d" % i) for i in range(3)]
    after = time.time_ns() // 1_000_000
    assert not fallback.calls
    assert columns.values == [b"v0", b"v1", b"v2"]
    assert columns.room == 1000 - 3 * (OVERHEAD + 2)
    assert [type(f) for f in futures] == [future_type] * 3
    assert [(f._batch, f._index) for f in futures] == [(result, 0), (result, 1), (result, 2)]
    assert [f._timestamp for f in futures] == columns.timestamps
    assert before <= columns.timestamps[0] <= columns.timestamps[-1] <= after


class Text(str):
    pass


class Data(bytes):
    pass


@pytest.mark.parametrize("args,kwargs", [
    (("t", b"v"), {"key": b"k"}),          # keyword arguments
    (("t", b"v", b"k"), {}),               # a key
    (("t",), {}),                          # no value
    (("other", b"v"), {}),                 # no sticky batch for the topic
    ((Text("t"), b"v"), {}),               # a str subclass (its hash may run Python)
    (("t", bytearray(b"v")), {}),          # not bytes
    (("t", Data(b"v")), {}),
    (("t", None), {}),                     # a tombstone
    (("t", b"v" * 1000), {}),              # no room
])
def test_plain_send_hands_every_other_call_to_its_fallback_unchanged(compiled, args, kwargs):
    send, _, columns, _, fallback, _ = plain_send(compiled)
    assert send(*args, **kwargs) == "fallback"
    assert fallback.calls == [(args, kwargs)]
    assert columns.values == []


def test_plain_send_leaves_a_batch_with_keys_to_the_fallback(compiled):
    send, _, columns, _, fallback, _ = plain_send(compiled)
    columns._put(30, 1, b"k", b"v", None)
    assert send("t", b"w") == "fallback"
    assert fallback.calls == [(("t", b"w"), {})]
    assert columns.values == [b"v"]


def test_plain_send_raises_what_its_fallback_raises(compiled):
    def fallback(*args):
        raise LookupError("no such topic")

    class Future(compiled.RecordSlot):
        __slots__ = ()

    send = compiled.PlainSend({}, fallback, Future, OVERHEAD)
    with pytest.raises(LookupError, match="no such topic"):
        send("t", b"v")


def test_plain_send_refuses_a_future_type_that_is_not_a_record_slot(compiled):
    with pytest.raises(TypeError, match="RecordSlot"):
        compiled.PlainSend({}, print, object, OVERHEAD)


@pytest.mark.parametrize("values", [
    [b"a", b"", b"bcd" * 50, b"\x00"],
    [b"a", None, b""],                      # a null: left to pa.array
    [],
])
def test_plain_columns_are_the_buffers_of_pa_array(compiled, values):
    timestamps = [1_700_000_000_000 + i for i in range(len(values))]
    buffers = compiled.plain_columns(timestamps, values)
    if None in values:
        assert buffers is None
        return
    stamps, offsets, data = map(pa.py_buffer, buffers)
    n = len(values)
    assert pa.Array.from_buffers(pa.int64(), n, [None, stamps]).equals(
        pa.array(timestamps, pa.int64()))
    assert pa.Array.from_buffers(pa.binary(), n, [None, offsets, data]).equals(
        pa.array(values, pa.binary()))


def test_arrays_gives_what_pa_array_gives():
    for values in ([b"x", b"", b"yz"], [b"x", None]):
        stamps, got = append.arrays([5, 6, 7][:len(values)], values)
        assert stamps.equals(pa.array([5, 6, 7][:len(values)], pa.int64()))
        assert got.equals(pa.array(values, pa.binary()))


def test_plain_columns_refuses_lists_of_different_lengths(compiled):
    with pytest.raises(ValueError, match="differ"):
        compiled.plain_columns([1, 2], [b"a"])
