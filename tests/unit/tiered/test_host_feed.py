"""A tiered host's remote-log metadata feed (actors/tiered.py's TieredHost._feed): a thread
reading the metadata topic with raylog's Consumer. An error it did not expect (a bug, ours
or Ray's: an AssertionError inside Ray's generator ``next`` once killed it for good, and the
metadata never loaded) is logged, and the feed goes on with a new consumer from where it
had applied."""

from __future__ import annotations

import threading
import types

import pytest

import raylog.client.connection as connection_module
import raylog.client.consumer as consumer_module
from actors.tiered import TieredHost


class _FlakyConsumer:
    """The first one made fails its first poll as Ray's ``next`` did; later ones work."""

    made: list[_FlakyConsumer] = []

    def __init__(self, **settings) -> None:
        self.seeks: list[int] = []
        self.closed = False
        self.fails = not _FlakyConsumer.made
        _FlakyConsumer.made.append(self)

    def assign(self, tps) -> None:
        self.tps = tps

    def seek(self, tp, offset: int) -> None:
        self.seeks.append(offset)

    def end_offsets(self, tps) -> dict:
        return dict.fromkeys(tps, 0)  # nothing to load: loaded at the first good poll

    def poll(self, timeout_ms: int) -> list:
        if self.fails:
            self.fails = False
            raise AssertionError  # what Ray's _next_sync raised
        return []

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def feed(monkeypatch):
    _FlakyConsumer.made = []
    controller = types.SimpleNamespace(ensure_internal_topic=lambda *args: None)
    monkeypatch.setattr(connection_module, "default_cluster",
                        lambda: types.SimpleNamespace(controller=controller))
    monkeypatch.setattr(consumer_module, "Consumer", _FlakyConsumer)
    host = TieredHost(lambda: 7, lambda: None, lambda tp: None)
    thread = threading.Thread(target=host._feed, daemon=True)
    thread.start()
    yield host
    host._stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_an_unexpected_error_in_the_feed_is_survived_with_a_new_consumer(feed):
    assert feed.loaded.wait(timeout=10), "the feed died of the error"
    assert isinstance(feed._feed_error, AssertionError)
    first, second = _FlakyConsumer.made[:2]
    assert first.closed  # given up, not leaked
    assert second.seeks == [0]  # from where the feed had applied
