"""Broker sessions (raylog/metadata/sessions.py) and their setting: when the controller
fences a broker, why its own pauses never count against the brokers, when a broker knows it
may have been fenced, and what Ray's "unavailable" means for a broker's process."""

from __future__ import annotations

import pytest

from raylog.errors import BrokerStalledError, InvalidConfigError, NotLeaderError
from raylog.metadata.sessions import (
    BrokerSessions,
    OwnStalls,
    ProcessFate,
    StallGuard,
    after_unavailable,
    heartbeat_interval_s,
    stall_threshold_s,
)
from raylog.metadata.settings import SESSION_TIMEOUT_ENV, ReplicationSettings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run_checks(sessions: BrokerSessions, clock: Clock, seconds: float,
               heartbeats: dict[int, float] | None = None) -> list[int]:
    """Advance ``seconds`` in checks every ``check_s``; brokers in ``heartbeats`` answer
    every so many seconds. Every broker fenced meanwhile, in order."""
    fenced, step, next_beat = [], sessions.check_s, dict.fromkeys(heartbeats or {}, 0.0)
    elapsed = 0.0
    while elapsed < seconds - 1e-9:
        clock.now += step
        elapsed += step
        for broker, every in (heartbeats or {}).items():
            if elapsed >= next_beat[broker]:
                sessions.heard(broker)
                next_beat[broker] = elapsed + every
        fenced += sessions.expired()
    return fenced


# -- the controller's side -----------------------------------------------------------------------

def test_a_broker_not_heard_from_for_a_session_is_fenced_once():
    clock = Clock()
    sessions = BrokerSessions(9.0, 0.25, clock=clock)
    sessions.heard(1)
    sessions.heard(2)
    assert run_checks(sessions, clock, 8.5, heartbeats={2: 2.25}) == []
    assert run_checks(sessions, clock, 1.0, heartbeats={2: 2.25}) == [1]
    assert not sessions.tracked(1)
    assert run_checks(sessions, clock, 30, heartbeats={2: 2.25}) == []  # reported once
    sessions.heard(1)  # it answered again: a new session
    assert sessions.tracked(1) and sessions.silent_s(1) == 0


def test_heartbeats_at_the_interval_keep_a_session_alive_through_slow_deliveries():
    clock = Clock()
    timeout = 9.0
    sessions = BrokerSessions(timeout, 0.25, clock=clock)
    sessions.heard(1)
    # Answers a heartbeat late by a third of the session each time: still alive.
    every = heartbeat_interval_s(timeout) + timeout / 3
    assert run_checks(sessions, clock, 120, heartbeats={1: every}) == []


def test_a_forgotten_broker_never_expires():
    clock = Clock()
    sessions = BrokerSessions(9.0, 0.25, clock=clock)
    sessions.heard(1)
    sessions.forget(1)  # went down by Ray's word
    assert run_checks(sessions, clock, 60) == []


def test_the_controllers_own_stall_is_not_counted_against_the_brokers():
    clock = Clock()
    sessions = BrokerSessions(9.0, 0.25, clock=clock)
    sessions.heard(1)
    sessions.heard(2)
    run_checks(sessions, clock, 2.0)
    clock.now += 30.0  # the controller stopped (SIGSTOP) for longer than a session
    assert sessions.expired() == []
    assert sessions.stalled_s == pytest.approx(30.0 - 0.25)  # beyond a normal check
    # The brokers' answers, read now, renew the sessions; one that stays silent is fenced
    # once it has been silent a whole session of the controller's own running time.
    sessions.heard(2)
    # Broker 1 was silent 2 s before, a check's 0.25 s of the stall: 6.75 s to go.
    assert run_checks(sessions, clock, 6.5, heartbeats={2: 2.25}) == []
    assert run_checks(sessions, clock, 0.5, heartbeats={2: 2.25}) == [1]


def test_a_controller_lagging_below_the_stall_threshold_still_fences():
    """Lags shorter than the threshold are not credited: a hung broker is fenced on time."""
    clock = Clock()
    sessions = BrokerSessions(9.0, 0.25, stall_s=1.0, clock=clock)
    sessions.heard(1)
    fenced, elapsed = [], 0.0
    while not fenced:
        clock.now += 0.9  # every check late
        elapsed += 0.9
        fenced = sessions.expired()
    assert fenced == [1] and elapsed < 9.0 + 2 * 0.9  # credited, it would take 4 times that


# -- the broker's side ---------------------------------------------------------------------------

def test_a_stall_long_enough_to_be_fenced_is_always_seen_by_the_broker():
    """The reasoning of the thresholds: a broker's last answer is at most one heartbeat
    interval before it stalls, so a stall shorter than (session - interval) cannot get it
    fenced; the broker's threshold is well below that, with room for delays."""
    for session in (1.0, 9.0, 30.0, 120.0):
        fenced_after = session - heartbeat_interval_s(session)
        assert stall_threshold_s(session) <= fenced_after / 2
        assert stall_threshold_s(session) >= session / 4  # a slow moment is not a stall


def test_a_brief_stall_goes_on_serving():
    clock = Clock()
    guard = StallGuard(3.0, clock=clock)
    since = guard.check()
    clock.now += 2.5  # a slow moment, well under the session
    guard.check_since(since)
    assert guard.check() == since and guard.serving


def test_after_a_long_stall_nothing_is_served_until_the_controller_confirms():
    clock = Clock()
    stalls = []
    guard = StallGuard(3.0, clock=clock, on_stall=lambda: stalls.append(guard.generation))
    guard.check()
    clock.now += 15.0  # SIGSTOP
    with pytest.raises(BrokerStalledError) as refused:
        guard.check()
    assert isinstance(refused.value, NotLeaderError) and refused.value.retriable
    assert stalls == [1]  # the broker starts asking the controller
    clock.now += 0.1
    with pytest.raises(BrokerStalledError):  # still not confirmed
        guard.check()
    guard.confirmed(1)
    assert guard.serving
    guard.check()


def test_a_request_spanning_a_stall_is_not_answered():
    clock = Clock()
    guard = StallGuard(3.0, clock=clock)
    since = guard.check()
    clock.now += 10.0  # stopped while the request waited (an acks=all append, a long poll)
    with pytest.raises(BrokerStalledError, match="while the request"):
        guard.check_since(since)
    # Even once confirmed, a request let in before the stall is not answered.
    guard.confirmed(guard.generation)
    with pytest.raises(BrokerStalledError):
        guard.check_since(since)


def test_a_confirmation_asked_before_a_later_stall_does_not_count():
    clock = Clock()
    guard = StallGuard(3.0, clock=clock)
    clock.now += 5.0
    guard.observe()
    asked = guard.generation  # the broker asks the controller about stall 1 ...
    clock.now += 5.0
    guard.observe()  # ... and stalls again before the answer comes
    guard.confirmed(asked)
    assert not guard.serving
    guard.confirmed(guard.generation)
    assert guard.serving


def test_the_ticker_notices_a_stall_before_any_request():
    clock = Clock()
    stalls = []
    guard = StallGuard(3.0, clock=clock, on_stall=lambda: stalls.append(True))
    for _ in range(20):
        clock.now += 0.25
        assert not guard.observe()
    clock.now += 4.0
    assert guard.observe() and stalls == [True] and not guard.serving


# -- Ray's "unavailable" ---------------------------------------------------------------------------

@pytest.mark.parametrize(("state", "pid", "fate"), [
    ("ALIVE", 100, ProcessFate.SAME),            # out of reach for a moment: not down
    ("ALIVE", 200, ProcessFate.RESTARTED),       # another process answers for it now
    ("RESTARTING", 100, ProcessFate.RESTARTED),  # Ray restarts it: the old one died
    ("PENDING_CREATION", None, ProcessFate.RESTARTED),
    ("DEAD", 100, ProcessFate.DEAD),
    (None, None, ProcessFate.UNKNOWN),           # no record: its session decides
])
def test_what_an_unavailable_broker_process_became(state, pid, fate):
    assert after_unavailable(state, pid, 100) is fate


def test_without_a_known_process_id_an_alive_actor_is_the_same():
    assert after_unavailable("ALIVE", 200, None) is ProcessFate.SAME


# -- the setting ----------------------------------------------------------------------------------

def test_the_session_timeout_is_a_cluster_setting_in_milliseconds():
    assert ReplicationSettings.from_environ({}).broker_session_timeout_ms == 9000
    settings = ReplicationSettings.from_environ({SESSION_TIMEOUT_ENV: " 4500 "})
    assert settings.broker_session_timeout_s == 4.5


@pytest.mark.parametrize("text", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_session_timeout_is_refused_by_name(text):
    with pytest.raises(InvalidConfigError, match=SESSION_TIMEOUT_ENV):
        ReplicationSettings.from_environ({SESSION_TIMEOUT_ENV: text})


def test_the_first_check_credits_nothing():
    clock = Clock()
    sessions = BrokerSessions(9.0, 0.25, clock=clock)
    clock.now += 30.0  # the controller started long before it checks for the first time
    sessions.heard(1)
    sessions.expired()
    assert sessions.stalled_s == 0


def test_own_stalls_credits_only_gaps_longer_than_its_threshold():
    clock = Clock()
    stalls = OwnStalls(1.0, 2.0, clock)
    assert stalls.since_last() == 0.0          # the first call credits nothing
    clock.now += 1.5
    assert stalls.since_last() == 0.0          # late, but not a stall
    clock.now += 12.0
    assert stalls.since_last() == 11.0         # all but the expected interval
    assert stalls.total_s == 11.0
