"""Fixtures the listener's unit tests share."""

from __future__ import annotations

import pytest

from tests.unit.kafka.gateway.fake_backend import FakeBackend


@pytest.fixture
def backend() -> FakeBackend:
    """A fake cluster with one topic, "orders", of two partitions."""
    fake = FakeBackend()
    fake.add_topic("orders", partitions=2)
    return fake
