"""Every client call to the controller has a deadline, and metadata refreshes asked for by
threads that must not wait are made on one background thread per connection, coalesced
(issue 22, item 8). Fake controller handles behind the real ControllerClient and
RaylogCluster (tests/unit/fake_remote.py); no Ray."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from raylog import Admin, TopicPartition
from raylog.client import admin as admin_module
from raylog.client import remote
from raylog.client.connection import MetadataRefresher
from raylog.client.remote import ControllerClient
from raylog.errors import (
    ActorUnavailableError,
    ControllerUnavailableError,
    NoClusterError,
    RequestTimeoutError,
    UnknownTopicError,
)
from tests.unit import fake_remote
from tests.unit.fake_remote import FakeController

BOUND_S = 5.0  # generous: what must end within a fraction of a second ends within this


@pytest.fixture
def controller(monkeypatch) -> FakeController:
    fake_remote.install(monkeypatch)
    controller = FakeController()
    controller.add_topic("t", 1)
    yield controller
    controller.cont()
    for broker in controller.brokers.values():
        broker.cont()


def ended_within(bound_s: float, call) -> BaseException | None:
    """Run ``call`` on a thread; fail unless it ends within ``bound_s``; its error."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as e:  # handed to the test
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound_s)
    assert outcome, f"still waiting after {bound_s} s"
    return outcome[0]


def test_a_read_of_a_hung_controller_fails_at_its_deadline(controller):
    controller.stop()
    client = ControllerClient(controller)
    error = ended_within(BOUND_S, lambda: client.metadata(["t"], timeout=0.2))
    assert isinstance(error, RequestTimeoutError) and error.retriable
    assert "metadata" in str(error)


def test_a_change_cut_off_by_its_deadline_has_an_unknown_outcome(controller):
    """A change the hung controller may still make when it resumes: the caller is told to
    check before repeating it (Admin does)."""
    controller.stop()
    client = ControllerClient(controller, timeout=0.2)
    error = ended_within(BOUND_S, lambda: client.heartbeat("g", "m", []))
    assert isinstance(error, ControllerUnavailableError)


def test_a_timeout_the_controller_answers_is_passed_on_as_it_is(monkeypatch):
    """A group write that timed out inside the controller (it answered): not the client's
    deadline, and not an unknown outcome of a change the controller never answered."""
    fake_remote.install(monkeypatch)

    class TimedOut:
        _method_name = "heartbeat"

        def remote(self, *args):
            return fake_remote.failed(RequestTimeoutError("the group is still loading"))

    handle = type("Handle", (), {"heartbeat": TimedOut()})()
    with pytest.raises(RequestTimeoutError, match="still loading"):
        ControllerClient(handle).heartbeat("g", "m", [])


def test_retries_of_an_unavailable_controller_stay_within_the_deadline(monkeypatch):
    fake_remote.install(monkeypatch)

    class Restarting:
        _method_name = "metadata"

        def remote(self, *args):
            return fake_remote.failed(ActorUnavailableError("restarting"))

    handle = type("Handle", (), {"metadata": Restarting()})()
    error = ended_within(BOUND_S, lambda: ControllerClient(handle).metadata(["t"],
                                                                            timeout=0.5))
    assert isinstance(error, NoClusterError)
    assert remote.CONTROLLER_RETRIES > 5  # so the deadline, not the count, ended it


def test_an_admin_call_to_a_hung_leader_ends_by_its_deadline(controller, monkeypatch):
    fake_remote.install(monkeypatch, admin_module)
    monkeypatch.setattr(admin_module, "CHANGE_RETRY_S", 0.3)
    admin = Admin(cluster=fake_remote.fake_cluster(controller))
    assert admin.delete_records({TopicPartition("t", 0): 0}) == {TopicPartition("t", 0): 0}
    controller.brokers[1].stop()
    error = ended_within(BOUND_S, lambda: admin.delete_records({TopicPartition("t", 0): 0}))
    assert isinstance(error, RequestTimeoutError)


def test_the_connection_has_one_refresh_outstanding_however_many_ask(controller):
    """Clients ask for refreshes of three topics over and over while the controller hangs:
    one request waits on it; when it answers, one more round brings what was asked for
    meanwhile, and the cache holds the answers."""
    for name in ("u", "v"):
        controller.add_topic(name, 1)
    cluster = fake_remote.fake_cluster(controller)
    controller.stop()
    for _ in range(100):
        for name in ("t", "u", "v"):
            cluster.refresh_soon(name)
    wait(lambda: controller.held == 1)
    time.sleep(0.3)  # more rounds would have started by now
    assert controller.held == 1
    controller.cont()
    wait(lambda: all(cluster.cached(n) is not None for n in ("t", "u", "v")))
    assert controller.calls <= 2


def test_a_refresh_asked_for_newer_than_the_cache_is_made_else_not(controller):
    cluster = fake_remote.fake_cluster(controller)
    meta = cluster.topic("t")
    calls = controller.calls
    cluster.refresh_soon("t", newer_than=meta.fetched_at)  # the cache is that new
    time.sleep(0.3)
    assert controller.calls == calls
    controller.partitions[("t", 0)].fail_over(2)
    cluster.refresh_soon("t", newer_than=time.monotonic())
    wait(lambda: cluster.cached("t").partitions[0].leader_epoch == 1)


def test_an_answer_never_replaces_one_asked_for_after_it(controller):
    """An answer from before a failover arrives after a fresh one (two requests answered
    out of order): the cache keeps the fresh one (entries are stamped when asked for)."""
    cluster = fake_remote.fake_cluster(controller)
    held_back = concurrent.futures.Future()
    made: list[str] = []

    class Metadata:
        _method_name = "metadata"

        def remote(self, names):
            made.append("call")
            if len(made) == 1:
                return held_back  # the first request's answer comes last
            return fake_remote.answered(controller._metadata(names))

    cluster.controller.handle = type("Handle", (), {"metadata": Metadata()})()
    before = controller._metadata(["t"])  # leader epoch 0
    slow = threading.Thread(target=lambda: cluster.topic("t", refresh=True))
    slow.start()
    wait(lambda: len(made) == 1)
    controller.partitions[("t", 0)].fail_over(2)
    assert cluster.topic("t", refresh=True).partitions[0].leader_epoch == 1
    held_back.set_result(before)
    slow.join(BOUND_S)
    assert cluster.cached("t").partitions[0].leader_epoch == 1


def test_the_refresher_drops_a_topic_the_controller_refuses_and_keeps_the_others():
    loaded: list[list[str]] = []

    def load(names: list[str]) -> None:
        loaded.append(list(names))
        if "gone" in names:
            raise UnknownTopicError("no topic 'gone'")

    refresher = MetadataRefresher(load, min_interval_s=0.01)
    gate = threading.Event()
    original = refresher._round

    def gated_round(names):
        gate.wait(BOUND_S)
        original(names)

    refresher._round = gated_round
    refresher.request("a")
    refresher.request("gone")
    refresher.request("b")
    gate.set()
    wait(lambda: any(names == ["b"] for names in loaded))
    assert ["gone"] in loaded and any("a" in names for names in loaded)


def test_the_refresher_asks_again_after_a_retriable_failure_with_a_backoff():
    attempts: list[float] = []

    def load(names: list[str]) -> None:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise RequestTimeoutError("the controller did not answer")

    refresher = MetadataRefresher(load, min_interval_s=0.05)
    refresher.request("t")
    wait(lambda: len(attempts) == 3)
    time.sleep(0.3)
    assert len(attempts) == 3  # answered: not asked again
    assert attempts[2] - attempts[1] >= attempts[1] - attempts[0]  # the backoff grows


def wait(condition, timeout: float = BOUND_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)
