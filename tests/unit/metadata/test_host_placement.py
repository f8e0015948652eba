"""Which of a broker node's processes serves each replica (raylog/metadata/hosts.py)."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidConfigError
from raylog.metadata.hosts import (
    DEDICATED,
    PROCESSES_ENV,
    HostLease,
    HostPlacement,
    configured_processes,
    default_processes,
    is_dedicated,
)
from raylog.metadata.topics import normalize_configs


def tps(n: int, topic: str = "t") -> list[tuple[str, int]]:
    return [(topic, i) for i in range(n)]


def test_one_host_takes_everything() -> None:
    placement = HostPlacement(1)
    assert {placement.place(tp, leader=i % 2 == 0) for i, tp in enumerate(tps(10))} == {0}


def test_replicas_spread_evenly_and_leaders_too() -> None:
    placement = HostPlacement(2)
    placement.place_all([(tp, i < 4, False) for i, tp in enumerate(tps(8))])
    assert placement.load(0) == placement.load(1)
    on = [placement.on_host(h) for h in (0, 1)]
    assert len(on[0]) == len(on[1]) == 4
    leaders = [sum(1 for tp in on[h] if tp[1] < 4) for h in (0, 1)]
    assert leaders == [2, 2]


def test_a_leader_weighs_more_than_a_follower() -> None:
    placement = HostPlacement(2)
    assert placement.place(("a", 0), leader=True) == 0
    # Host 0 has one leader (load 2): two followers go to host 1 before host 0 gets more.
    assert placement.place(("b", 0), leader=False) == 1
    assert placement.place(("b", 1), leader=False) == 1
    assert placement.place(("b", 2), leader=False) == 0


def test_placement_is_deterministic() -> None:
    wanted = [(tp, tp[1] % 3 == 0, False) for tp in tps(20)]
    first, second = HostPlacement(3), HostPlacement(3)
    assert first.place_all(wanted) == second.place_all(list(reversed(wanted)))


def test_a_replica_never_moves_when_roles_change_or_hosts_fill() -> None:
    placement = HostPlacement(2)
    where = placement.place_all([(tp, False, False) for tp in tps(6)])
    for tp in tps(6):  # every replica becomes leader: still where it was
        assert placement.place(tp, leader=True) == where[tp]
    assert placement.load(0) == placement.load(1) == (6, 3)


def test_new_replicas_go_to_the_emptier_host_when_others_leave() -> None:
    placement = HostPlacement(2)
    where = placement.place_all([(tp, False, False) for tp in tps(4)])
    for tp in [tp for tp, host in where.items() if host == 0]:
        assert placement.release(tp) == 0
    assert placement.load(0) == (0, 0)
    assert [placement.place(tp, False) for tp in tps(2, "new")] == [0, 0]


def test_a_dedicated_replica_gets_its_own_host_and_frees_nothing_shared() -> None:
    placement = HostPlacement(2)
    assert placement.place(("hot", 0), leader=True, dedicated=True) == DEDICATED
    assert placement.load(0) == placement.load(1) == (0, 0)
    assert placement.release(("hot", 0)) == DEDICATED
    assert placement.host_of(("hot", 0)) is None


def test_a_replica_made_dedicated_leaves_its_shared_host() -> None:
    placement = HostPlacement(2)
    assert placement.place(("t", 0), leader=True) == 0
    assert placement.place(("t", 0), leader=True, dedicated=True) == DEDICATED
    assert placement.load(0) == (0, 0)
    assert placement.place(("t", 0), leader=True) == 0


def test_placement_needs_a_host() -> None:
    with pytest.raises(ValueError):
        HostPlacement(0)


def test_processes_from_the_environment_or_half_the_cores() -> None:
    assert configured_processes({PROCESSES_ENV: "3"}) == 3
    assert configured_processes({PROCESSES_ENV: " 1 "}) == 1
    assert configured_processes({}, cpus=8) == 4
    assert configured_processes({}, cpus=2) == 1
    assert configured_processes({}, cpus=1) == 1
    assert default_processes(None) == 1
    for bad in ("0", "-2", "two", "1.5"):
        with pytest.raises(InvalidConfigError, match=PROCESSES_ENV):
            configured_processes({PROCESSES_ENV: bad})


def test_the_dedicated_topic_config() -> None:
    assert is_dedicated(normalize_configs({"raylog.replica.dedicated": "true"}))
    assert not is_dedicated(normalize_configs({"raylog.replica.dedicated": False}))
    assert not is_dedicated(normalize_configs({}))
    for bad in ("yes", 1, "1", None):
        with pytest.raises(InvalidConfigError, match="dedicated"):
            normalize_configs({"raylog.replica.dedicated": bad})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_host_serves_while_its_broker_renews_its_lease() -> None:
    clock = Clock()
    lease = HostLease(3.0, clock)
    assert lease.problem() is None
    clock.now += 2.9
    assert lease.problem() is None
    clock.now += 0.2  # 3.1 s without a renewal: its broker may have been fenced
    assert "not renewed" in lease.problem()
    lease.renew(broker_serving=True)
    assert lease.problem() is None


def test_a_host_serves_nothing_while_its_broker_waits_for_confirmation() -> None:
    lease = HostLease(3.0, Clock())
    lease.renew(broker_serving=False)
    assert "confirm" in lease.problem()
    lease.renew(broker_serving=True)
    assert lease.problem() is None
