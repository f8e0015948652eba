"""``@checked``: calls whose arguments do not fit the annotations are refused, typed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from raylog.errors import InvalidArgumentError
from raylog.types import TopicPartition
from raylog.util.typecheck import checked, matches


@pytest.mark.parametrize(("value", "hint", "expected"), [
    (1, int, True), (True, int, False), (1.5, int, False), ("1", int, False),
    (1, float, True), (1.5, float, True), (False, float, False),
    (True, bool, True), (1, bool, False),
    ("a", str, True), (b"a", str, False),
    (None, None, True), (0, None, False),
    (None, str | None, True), ("a", str | None, True), (1, str | None, False),
    (["a", "b"], list[str], True), (["a", 1], list[str], False), ("ab", list[str], False),
    ((), list[str], False), ([], list[str], True),
    (("t", 0), tuple[str, int], True), (["t", 0], tuple[str, int], True),
    (TopicPartition("t", 0), tuple[str, int], True), (("t",), tuple[str, int], False),
    (("t", "0"), tuple[str, int], False), ((1, 2, 3), tuple[int, ...], True),
    ([("t", 0, 5, "")], list[tuple[str, int, int, str]], True),
    ([("t", 0, 5)], list[tuple[str, int, int, str]], False),
    ({"a": 1}, dict[str, Any], True), ({1: 1}, dict[str, Any], False),
    ("notadict", dict[str, Any] | None, False), ({"a": 1}, Mapping[str, int], True),
    ([1], Iterable[str], True), (5, Iterable[str], False),
    (object(), Any, True),
])
def test_matches(value, hint, expected):
    assert matches(value, hint) is expected


@checked
def _create(name: str, partitions: int = 1, configs: dict[str, Any] | None = None) -> str:
    return f"{name}:{partitions}"


@checked
async def _delete(self: object, names: list[str]) -> list[str]:
    return names


def test_a_good_call_runs():
    assert _create("t", 3) == "t:3"
    assert _create(name="t", configs={"a": 1}) == "t:1"
    assert asyncio.run(_delete(None, ["t"])) == ["t"]


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    (("t", "3"), {}, r"_create: partitions must be int, got '3'"),
    (("t", True), {}, r"partitions must be int, got True"),
    ((5,), {}, r"name must be str, got 5"),
    (("t",), {"configs": "notadict"}, r"configs must be dict\[str, Any\] \| None"),
    (("t", 1, {}, 4), {}, r"_create: too many positional arguments"),
    ((), {"nmae": "t"}, r"_create: "),
])
def test_a_bad_call_is_refused_before_the_body_runs(args, kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        _create(*args, **kwargs)


def test_async_functions_stay_async_and_are_checked():
    assert asyncio.iscoroutinefunction(_delete)
    with pytest.raises(InvalidArgumentError, match=r"names must be list\[str\], got 'topic'"):
        asyncio.run(_delete(None, "topic"))


def test_annotations_it_cannot_resolve_are_not_checked():
    def function(value: NoSuchType) -> None:  # noqa: F821
        return value

    assert checked(function)(object()) is not None
