"""How Ray Data reads and offset lookups ride out a moving leader
(raylog.integrations.ray_data.read_retrying): no Ray cluster, the attempts are plain functions."""

from __future__ import annotations

import pytest

from raylog.errors import (
    ActorUnavailableError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
)
from raylog.integrations import ray_data as data


def test_retriable_failures_are_asked_again_with_fresh_metadata(monkeypatch):
    monkeypatch.setattr(data, "RETRY_BACKOFF_S", (0.001, 0.001))
    failures = [ActorUnavailableError("the old leader is gone"),
                OffsetNotAvailableError("the new leader's high watermark is behind")]
    refreshes = []

    def attempt(refresh: bool) -> str:
        refreshes.append(refresh)
        if failures:
            raise failures.pop(0)
        return "read"

    assert data.read_retrying("reading", attempt, timeout_s=60) == "read"
    assert refreshes == [False, True, True]  # the first with the cached metadata


def test_other_failures_are_raised_at_once():
    calls = []

    def attempt(refresh: bool) -> None:
        calls.append(refresh)
        raise OffsetOutOfRangeError("past the end")

    with pytest.raises(OffsetOutOfRangeError):
        data.read_retrying("reading", attempt)
    assert calls == [False]


def test_past_its_time_the_last_retriable_failure_is_raised(monkeypatch):
    monkeypatch.setattr(data, "RETRY_BACKOFF_S", (0.001, 0.001))

    def attempt(refresh: bool) -> None:
        raise OffsetNotAvailableError("still behind")

    with pytest.raises(OffsetNotAvailableError, match="still behind"):
        data.read_retrying("reading", attempt, timeout_s=0.05)
