"""A rolling restart's sequence (raylog/client/operations.py) over a fake controller:
each broker drained, restarted, waited for and given its leaderships back, one at a time;
the first problem stops it; waits are bounded (an injected clock)."""

from __future__ import annotations

import pytest

from raylog import Admin
from raylog.client.operations import RollTimeouts, roll, stop_brokers, wait_in_sync
from raylog.errors import (
    DrainTimeoutError,
    InvalidArgumentError,
    LastInSyncReplicaError,
    OfflinePartitionsError,
    RequestTimeoutError,
    RollStoppedError,
)
from tests.unit.client.test_client_arguments import _Cluster, refused


class FakeController:
    """Records the calls; ``lagging`` partitions are out of sync for that many looks."""

    def __init__(self, order=(1, 2, 3), fail: dict | None = None) -> None:
        self.order = list(order)
        self.calls: list[tuple] = []
        self.fail = fail or {}
        self.lagging: list[str] = []
        self.looks_until_sync = 0

    def _call(self, *call):
        self.calls.append(call)
        error = self.fail.get(call)
        if error is not None:
            raise error

    def roll_plan(self, brokers):
        self._call("plan", brokers)
        return {"order": self.order if brokers is None else brokers}

    def sync_state(self):
        self._call("sync")
        if self.looks_until_sync:
            self.looks_until_sync -= 1
            return {"not_in_sync": ["t-0"], "draining": []}
        return {"not_in_sync": [], "draining": []}

    def drain_broker(self, broker, force, timeout_s):
        assert force is False
        self._call("drain", broker)
        return {}

    def restart_broker(self, broker, timeout_s):
        self._call("restart", broker)
        self.looks_until_sync = 3  # it catches up
        return {}

    def elect_leaders(self, names):
        self._call("leaders", names)
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def steps(calls) -> list[tuple]:
    return [c for c in calls if c[0] != "sync"]


def test_each_broker_in_turn_is_drained_restarted_waited_for_and_given_its_leaders_back():
    controller, clock = FakeController(), Clock()
    assert roll(controller, clock=clock, sleep=clock.sleep) == [1, 2, 3]
    assert steps(controller.calls) == [
        ("plan", None),
        ("drain", 1), ("restart", 1), ("leaders", None),
        ("drain", 2), ("restart", 2), ("leaders", None),
        ("drain", 3), ("restart", 3), ("leaders", None)]
    # the leaders moved back only once it was in sync again
    first_leaders = controller.calls.index(("leaders", None))
    assert controller.calls[first_leaders - 1] == ("sync",)
    assert controller.calls[first_leaders - 4:first_leaders] == [("sync",)] * 4


def test_the_first_problem_stops_the_roll_naming_broker_step_and_progress():
    controller, clock = FakeController(fail={("drain", 2): DrainTimeoutError("slow")}), Clock()
    with pytest.raises(RollStoppedError, match=r"stopped at broker 2 \(drain\): slow; "
                                               r"restarted: 1; not yet: 2, 3") as stopped:
        roll(controller, clock=clock, sleep=clock.sleep)
    assert isinstance(stopped.value.__cause__, DrainTimeoutError)
    assert ("restart", 2) not in controller.calls and ("drain", 3) not in controller.calls


def test_a_broker_that_never_catches_up_stops_the_roll_at_its_deadline():
    controller, clock = FakeController(), Clock()
    controller.restart_broker = lambda b, t: setattr(controller, "looks_until_sync", 10**9)
    with pytest.raises(RollStoppedError, match=r"broker 1 \(catch up\): not in sync after "
                                               r"30 s: 1 partitions \(t-0\)"):
        roll(controller, timeouts=RollTimeouts(sync_s=30), clock=clock, sleep=clock.sleep)
    assert clock.now == pytest.approx(30, abs=1)


def test_a_refused_plan_restarts_nothing():
    controller = FakeController(fail={("plan", None): OfflinePartitionsError("t-1")})
    with pytest.raises(OfflinePartitionsError):
        roll(controller)
    assert steps(controller.calls) == [("plan", None)]


def test_waiting_in_sync_names_drained_brokers_too():
    class Drained:
        def sync_state(self):
            return {"not_in_sync": [], "draining": [2]}

    clock = Clock()
    with pytest.raises(RequestTimeoutError, match=r"brokers \[2\] still drained"):
        wait_in_sync(Drained(), 5, clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize("call", [
    lambda a: a.drain_broker(-1),
    lambda a: a.drain_broker("1"),
    lambda a: a.drain_broker(1, force="yes"),
    lambda a: a.drain_broker(1, timeout_s=0),
    lambda a: a.drain_broker(1, timeout_s=float("inf")),
    lambda a: a.restart_broker(True),
    lambda a: a.restart_broker(1, timeout_s=-5),
    lambda a: a.stop_broker(None),
    lambda a: a.resume_broker(1.5),
    lambda a: a.wait_in_sync(0),
    lambda a: a.roll(["0"]),
    lambda a: a.stop_brokers([1, -1]),
    lambda a: a.stop_brokers([1], force=1),
    lambda a: a.stop_brokers([1], timeout_s=0),
])
def test_the_admin_refuses_bad_arguments_before_asking(call):
    # that file's cluster fails the test on any call to the controller
    refused(lambda: call(Admin(cluster=_Cluster())), InvalidArgumentError)


class NodeController:
    """Drains answer; ``refuse`` names the broker whose drain is refused."""

    def __init__(self, refuse: int | None = None) -> None:
        self.calls: list[tuple] = []
        self.refuse = refuse

    def drain_broker(self, broker, force, timeout_s):
        self.calls.append(("drain", broker, force, timeout_s))
        if broker == self.refuse:
            raise LastInSyncReplicaError(f"broker {broker} is the last in-sync replica of t-0")
        return {"broker": broker, "moved": [], "left_isr": [], "still_leading": [],
                "last_in_sync": []}

    def stop_broker(self, broker):
        self.calls.append(("stop", broker))
        return {"broker": broker, "node_id": "n"}

    def resume_broker(self, broker):
        self.calls.append(("resume", broker))
        return {}


def test_a_nodes_brokers_are_all_drained_before_any_is_stopped():
    controller = NodeController()
    stopped = stop_brokers(controller, [4, 2], force=True, timeout_s=9)
    assert controller.calls == [("drain", 4, True, 9), ("drain", 2, True, 9),
                                ("stop", 4), ("stop", 2)]
    assert [s["stopped"]["broker"] for s in stopped] == [4, 2]


def test_a_refused_drain_of_a_nodes_broker_resumes_the_others_and_stops_none():
    controller = NodeController(refuse=2)
    with pytest.raises(LastInSyncReplicaError, match=r"broker 2 "):
        stop_brokers(controller, [4, 2, 5])
    assert controller.calls == [("drain", 4, False, 60.0), ("drain", 2, False, 60.0),
                                ("resume", 4)]
