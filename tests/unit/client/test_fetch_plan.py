"""The consumer's fetch per serving process (raylog/client/fetch_plan.py), without Ray:
grouping, rotation, and an answer split back per partition, with per-partition errors,
partitions not read, and partitions detached (reset, revoked) while it was out."""

from __future__ import annotations

import pytest

from raylog.client.fetch_plan import BrokerFetch, by_process, rotated
from raylog.errors import ActorUnavailableError, InternalError, NotLeaderError
from raylog.quotas.enforcer import Throttled
from raylog.replica.partition import FetchResult


class State:
    def __init__(self, name: str, offset: int = 0) -> None:
        self.tp = name
        self.fetch_offset = offset
        self.fetch = None


def result(data: bytes) -> FetchResult:
    return FetchResult(data, 10, 0, 10)


def fetch_of(*states: State) -> BrokerFetch:
    return BrokerFetch("host", "ref", list(states), [(1, 0)] * len(states),
                       [True] * len(states), 0.0)


def test_partitions_group_by_the_process_serving_them_in_order():
    assert by_process([("a", 1), ("b", 2), ("a", 3)]) == {"a": [1, 3], "b": [2]}
    assert by_process([]) == {}


@pytest.mark.parametrize("turn, expected", [(0, [1, 2, 3]), (1, [2, 3, 1]), (5, [3, 1, 2])])
def test_each_fetch_starts_at_another_partition(turn, expected):
    assert rotated([1, 2, 3], turn) == expected
    assert rotated([], turn) == []


def test_an_answer_goes_to_each_partition_with_its_own_error():
    a, b, c = State("a"), State("b"), State("c", 5)
    fetch = fetch_of(a, b, c)
    assert a.fetch is fetch and fetch.offsets == [0, 0, 5]
    error = NotLeaderError("moved")
    answers, throttled = fetch.split([result(b"x"), error, None])
    # c was not read (the answer's bytes were spent): nothing for it, free to ask again
    assert [(s.tp, r) for s, r, _ in answers] == [("a", result(b"x")), ("b", error)]
    assert throttled == 0
    assert a.fetch is b.fetch is c.fetch is None


def test_a_held_answer_says_how_long():
    a = State("a")
    answers, throttled = fetch_of(a).split(Throttled([result(b"x")], 25))
    assert [r for _, r, _ in answers] == [result(b"x")] and throttled == 25


def test_a_failed_call_fails_every_partition_in_it():
    a, b = State("a"), State("b")
    error = ActorUnavailableError("gone")
    answers, _ = fetch_of(a, b).split(error)
    assert [(s.tp, r) for s, r, _ in answers] == [("a", error), ("b", error)]


def test_an_answer_of_the_wrong_shape_is_an_internal_error_for_each():
    a, b = State("a"), State("b")
    answers, _ = fetch_of(a, b).split([result(b"x")])
    assert all(isinstance(r, InternalError) for _, r, _ in answers) and len(answers) == 2


def test_a_partition_reset_or_revoked_meanwhile_gets_nothing_of_the_answer():
    a, b, c = State("a"), State("b"), State("c")
    fetch = fetch_of(a, b, c)
    b.fetch = None              # reset (seek) or revoked: detached
    later = fetch_of(c)         # given up and asked again in a newer fetch
    assert fetch.attached() == [a]
    answers, _ = fetch.split([result(b"1"), result(b"2"), result(b"3")])
    assert [s.tp for s, _, _ in answers] == ["a"]
    assert c.fetch is later


def test_detaching_frees_only_its_own_partitions():
    a, b = State("a"), State("b")
    fetch = fetch_of(a, b)
    newer = fetch_of(b)
    fetch.detach()
    assert a.fetch is None and b.fetch is newer
