"""The shared checks of arguments and settings: types, ranges, ids, unknown names."""

from __future__ import annotations

import dataclasses
import math

import pytest

from raylog.errors import InvalidArgumentError, InvalidConfigError, RaylogError
from raylog.util.arguments import (
    INT32_MAX,
    INT64_MAX,
    MAX_ID_LENGTH,
    build_config,
    check_bool,
    check_id,
    check_int,
    check_int_fields,
    check_options,
    check_timeout,
    short_repr,
    unknown_name,
)


def test_invalid_argument_error_is_a_value_and_a_type_error():
    """Code that caught what Python raises for such mistakes keeps working."""
    assert issubclass(InvalidArgumentError, RaylogError)
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidArgumentError, TypeError)


@pytest.mark.parametrize(("name", "valid", "hint"), [
    ("linger", ["linger_ms", "batch_size"], "did you mean 'linger_ms'?"),
    ("lingerms", ["linger_ms", "batch_size"], "did you mean 'linger_ms'?"),
    ("group", ["group_id", "client_id"], "did you mean 'group_id'?"),
    ("zzz", ["cluster"], "valid: cluster"),
    (7, ["b", "a"], "valid: a, b"),
])
def test_unknown_names_come_with_the_closest_valid_one(name, valid, hint):
    message = unknown_name("Producer option", name, valid)
    assert message == f"unknown Producer option {name!r} ({hint})"


def test_check_options_refuses_the_first_unknown_name():
    check_options("Admin", {"cluster": None}, ["cluster"])
    with pytest.raises(InvalidConfigError, match=r"unknown Admin option 'clustr' "
                                                 r"\(did you mean 'cluster'\?\)"):
        check_options("Admin", {"cluster": None, "clustr": 1}, ["cluster"])


@dataclasses.dataclass(frozen=True)
class _Config:
    linger_ms: int = 5


def test_build_config_names_unknown_settings_and_accepts_the_owners_others():
    assert build_config(_Config, "Thing", {"linger_ms": 7}).linger_ms == 7
    with pytest.raises(InvalidConfigError, match=r"unknown Thing option 'linger' "
                                                 r"\(did you mean 'linger_ms'\?\)"):
        build_config(_Config, "Thing", {"linger": 7})
    with pytest.raises(InvalidConfigError, match=r"did you mean 'cluster'"):
        build_config(_Config, "Thing", {"clustre": 1}, also_valid=("cluster",))


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1], -1])
def test_check_int_refuses_non_integers_and_values_below_the_minimum(value):
    with pytest.raises(InvalidArgumentError, match=r"count must be an integer >= 0, got "):
        check_int("count", value)


def test_check_int_bounds_and_error_type():
    assert check_int("n", 0) == 0
    assert check_int("n", INT64_MAX) == INT64_MAX
    with pytest.raises(InvalidArgumentError, match=rf"n must be an integer <= {INT64_MAX}"):
        check_int("n", INT64_MAX + 1)
    with pytest.raises(InvalidConfigError, match=r"n must be an integer <= 9, got 10"):
        check_int("n", 10, 1, 9, InvalidConfigError)


@dataclasses.dataclass
class _Settings:
    count: int = 1
    wait_ms: int = 0
    timeout_ms: int | None = None
    name: str = "x"
    memory: int = 1


def test_check_int_fields_applies_minimum_optional_skip_and_maximums():
    check_int_fields(_Settings(), skip=("name",), zero_ok=("wait_ms",),
                     optional=("timeout_ms",), maximums={"memory": INT64_MAX})
    check_int_fields(_Settings(memory=INT64_MAX), skip=("name",), zero_ok=("wait_ms",),
                     optional=("timeout_ms",), maximums={"memory": INT64_MAX})
    for bad, message in [({"count": 0}, "count must be an integer >= 1, got 0"),
                         ({"wait_ms": -1}, "wait_ms must be an integer >= 0, got -1"),
                         ({"count": INT32_MAX + 1}, f"count must be an integer <= {INT32_MAX}"),
                         ({"timeout_ms": "5"}, "timeout_ms must be an integer >= 1, got '5'")]:
        with pytest.raises(InvalidConfigError, match=message):
            check_int_fields(_Settings(**bad), skip=("name",), zero_ok=("wait_ms",),
                             optional=("timeout_ms",))


@pytest.mark.parametrize("seconds", [None, 0, 0.5, 3, 1e9])
def test_timeouts_accept_none_and_finite_non_negative_numbers(seconds):
    assert check_timeout("timeout", seconds) == seconds


@pytest.mark.parametrize("seconds", [-1, -0.1, math.inf, math.nan, True, "1", [1]])
def test_timeouts_refuse_the_rest(seconds):
    with pytest.raises(InvalidArgumentError, match=r"timeout must be None or a number"):
        check_timeout("timeout", seconds)


@pytest.mark.parametrize("value", [0, 1, None, "true"])
def test_check_bool_takes_only_bools(value):
    with pytest.raises(InvalidArgumentError, match=r"flag must be True or False"):
        check_bool("flag", value)
    assert check_bool("flag", True) is True


@pytest.mark.parametrize(("value", "message"), [
    ("", "must be a non-empty string"),
    (None, "must be a non-empty string"),
    (5, "must be a non-empty string"),
    ("g" * (MAX_ID_LENGTH + 1), f"the limit is {MAX_ID_LENGTH}"),
    ("bad\udc80id", "is not valid Unicode"),
])
def test_ids_must_be_short_non_empty_unicode_strings(value, message):
    with pytest.raises(InvalidConfigError, match=message):
        check_id("group_id", value)


def test_ids_may_be_any_encodable_text():
    for value in ["reports", "g" * MAX_ID_LENGTH, "rapports-été", "报告"]:
        assert check_id("group_id", value) == value


def test_messages_quote_huge_values_briefly():
    assert len(short_repr("x" * 10**6)) < 80
    with pytest.raises(InvalidArgumentError) as info:
        check_int("n", "x" * 10**6)
    assert len(str(info.value)) < 120
