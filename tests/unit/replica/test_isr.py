"""The leader's view of its followers: caught-up times, ISR changes, the high watermark, acks."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylog.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    OffsetOutOfRangeError,
)
from raylog.replica.isr import NO_BROKER_EPOCH, ReplicaSet
from tests.unit.logutil import FakeClock

LAG_MS = 10_000
EPOCH = 7  # a follower's broker epoch (the controller's, for its broker's running process)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000)


def replica_set(clock, *, isr=(1, 2, 3), replicas=(1, 2, 3), epoch_start=100, hw=100,
                **kwargs) -> ReplicaSet:
    return ReplicaSet(1, replicas, isr, leader_epoch=4, epoch_start_offset=epoch_start,
                      high_watermark=hw, clock=clock, replica_lag_time_max_ms=LAG_MS, **kwargs)


# -- construction -------------------------------------------------------------------------------

@pytest.mark.parametrize("lag", [0, -5, 1.5, "30000", None])
def test_a_bad_lag_time_is_refused_with_its_name(clock, lag):
    with pytest.raises(InvalidConfigError, match="replica_lag_time_max_ms"):
        ReplicaSet(1, [1], [1], 0, 0, 0, clock=clock, replica_lag_time_max_ms=lag)


@pytest.mark.parametrize("replicas, isr", [([1, 2, 2], [1]), ([2, 3], [2]), ([1, 2], [2]),
                                           ([1, 2], [1, 5])])
def test_bad_replicas_or_isr_are_refused(clock, replicas, isr):
    with pytest.raises(InvalidArgumentError):
        ReplicaSet(1, replicas, isr, 0, 0, 0, clock=clock)


def test_fetches_from_strangers_or_past_the_log_end_are_refused(clock):
    replicas = replica_set(clock)
    with pytest.raises(InvalidArgumentError, match="not a follower"):
        replicas.follower_fetched(9, 100, 120)
    with pytest.raises(InvalidArgumentError, match="not a follower"):
        replicas.follower_fetched(1, 100, 120)  # the leader itself
    with pytest.raises(OffsetOutOfRangeError):
        replicas.follower_fetched(2, 121, 120)
    with pytest.raises(OffsetOutOfRangeError):
        replicas.follower_fetched(2, -1, 120)


# -- caught up ----------------------------------------------------------------------------------

def test_a_fetch_at_the_leaders_log_end_is_caught_up_now(clock):
    replicas = replica_set(clock)
    clock.advance(500)
    replicas.follower_fetched(2, 120, leader_log_end=120)
    assert replicas.follower(2).last_caught_up_ms == clock.now
    assert replicas.follower(2).log_end_offset == 120


def test_a_fetch_reaching_the_previous_fetchs_log_end_was_caught_up_then(clock):
    # The leader keeps appending: the follower never sees the log end of its own fetch, but
    # each fetch covers what the previous one saw, so it was caught up at the previous fetch.
    replicas = replica_set(clock, isr=(1, 2), replicas=(1, 2))
    start = clock.now
    replicas.follower_fetched(2, 100, leader_log_end=110)
    assert replicas.follower(2).last_caught_up_ms == start  # as of the election
    clock.advance(300)
    first = clock.now
    replicas.follower_fetched(2, 105, leader_log_end=130)   # behind what it saw last time
    assert replicas.follower(2).last_caught_up_ms == start
    clock.advance(300)
    replicas.follower_fetched(2, 130, leader_log_end=150)   # reached it
    assert replicas.follower(2).last_caught_up_ms == first
    for _ in range(100):
        clock.advance(LAG_MS // 4)
        end = replicas.follower(2).last_fetch_leader_log_end
        replicas.follower_fetched(2, end, leader_log_end=end + 50)
    assert replicas.isr_to_shrink(leader_log_end=end + 50) == set()


def test_a_caught_up_time_never_goes_back(clock):
    replicas = replica_set(clock)
    replicas.follower_fetched(2, 120, 120)
    caught_up = clock.now
    clock.advance(50)
    replicas.follower_fetched(2, 120, 140)  # reaches the previous fetch's end (time caught_up)
    assert replicas.follower(2).last_caught_up_ms == caught_up


# -- shrinking ----------------------------------------------------------------------------------

def test_a_follower_leaves_after_the_lag_time_without_catching_up(clock):
    replicas = replica_set(clock)
    replicas.follower_fetched(2, 120, 120)
    replicas.follower_fetched(3, 120, 120)
    clock.advance(LAG_MS)
    replicas.follower_fetched(2, 120, 150)  # was caught up at its previous fetch, LAG_MS ago
    assert replicas.isr_to_shrink(150) == set()  # exactly the lag time: still in
    clock.advance(1)
    assert replicas.isr_to_shrink(150) == {2, 3}
    replicas.follower_fetched(3, 150, 150)
    assert replicas.isr_to_shrink(150) == {2}


def test_a_follower_at_the_leaders_log_end_stays_however_long_ago(clock):
    # An idle partition: nothing to fetch, so nothing shows the follower caught up lately.
    replicas = replica_set(clock)
    replicas.follower_fetched(2, 120, 120)
    replicas.follower_fetched(3, 120, 120)
    clock.advance(10 * LAG_MS)
    assert replicas.isr_to_shrink(120) == set()
    assert replicas.isr_to_shrink(121) == {2, 3}


def test_isr_members_that_never_fetch_have_the_lag_time_from_the_election(clock):
    replicas = replica_set(clock)
    clock.advance(LAG_MS)
    assert replicas.isr_to_shrink(100) == set()
    clock.advance(1)
    assert replicas.isr_to_shrink(100) == {2, 3}


def test_the_leader_never_shrinks_itself_and_followers_out_of_the_isr_are_not_listed(clock):
    replicas = replica_set(clock, isr=(1, 2))
    clock.advance(LAG_MS + 1)
    assert replicas.isr_to_shrink(100) == {2}


# -- expanding ----------------------------------------------------------------------------------

def test_a_follower_joins_at_the_high_watermark_and_the_epoch_start(clock):
    replicas = replica_set(clock, isr=(1, 2), epoch_start=130, hw=100)
    assert replicas.isr_to_expand() == set()  # not fetched yet
    replicas.follower_fetched(3, 110, 140, EPOCH)
    assert replicas.high_watermark == 100  # 2 has not fetched in this epoch
    assert replicas.isr_to_expand() == set()  # past the HW, not at this epoch's start
    replicas.follower_fetched(3, 130, 140, EPOCH)
    assert replicas.isr_to_expand() == {3}
    assert replicas.broker_epochs({3}) == {3: EPOCH}  # what the expansion tells


def test_a_follower_below_the_high_watermark_does_not_join(clock):
    replicas = replica_set(clock, isr=(1, 2), epoch_start=100, hw=100)
    replicas.follower_fetched(2, 140, 140, EPOCH)
    assert replicas.high_watermark == 140
    replicas.follower_fetched(3, 139, 140, EPOCH)
    assert replicas.isr_to_expand() == set()
    replicas.follower_fetched(3, 140, 140, EPOCH)
    assert replicas.isr_to_expand() == {3}


def test_a_follower_whose_broker_does_not_know_its_broker_epoch_never_joins(clock):
    # The controller could not tell which process of its broker caught up: it would refuse.
    replicas = replica_set(clock, isr=(1, 2), epoch_start=100, hw=100)
    replicas.follower_fetched(3, 100, 100, NO_BROKER_EPOCH)
    assert replicas.isr_to_expand() == set()
    replicas.follower_fetched(3, 100, 100, EPOCH)
    assert replicas.isr_to_expand() == {3}


def test_a_refused_member_is_not_proposed_again_before_it_fetches_again(clock):
    # Its broker is fenced (stopped): every proposal would be refused, and each one holds the
    # high watermark for the members of both ISRs while it is out.
    replicas = replica_set(clock, isr=(1, 2), epoch_start=100, hw=100)
    replicas.follower_fetched(3, 100, 100, EPOCH)
    assert replicas.isr_to_expand() == {3}
    replicas.propose_isr({1, 2, 3})
    replicas.expansion_refused({3})
    replicas.isr_change_failed(100)
    assert replicas.isr_to_expand() == set()
    replicas.follower_fetched(3, 100, 100, EPOCH)  # there again
    assert replicas.isr_to_expand() == {3}


def test_a_fetch_at_another_broker_epoch_starts_the_follower_over(clock):
    """KIP-903: follower 3 caught up, left the ISR, and its broker restarted with a shorter
    log (it lost its page cache). What its former process showed no longer counts: it joins
    again only once it reached the high watermark in its new process."""
    replicas = replica_set(clock, isr=(1, 2), epoch_start=100, hw=100)
    replicas.follower_fetched(2, 140, 140, EPOCH)
    replicas.follower_fetched(3, 140, 140, EPOCH)
    clock.advance(LAG_MS)
    # Until the restarted process fetches, the leader can only name what it saw, at the
    # old broker epoch: the controller, which recorded the new one, refuses that.
    assert replicas.isr_to_expand() == {3}
    assert replicas.broker_epochs({3}) == {3: EPOCH}
    replicas.follower_fetched(3, 90, 140, EPOCH + 1)
    state = replicas.follower(3)
    assert (state.log_end_offset, state.broker_epoch, state.last_caught_up_ms) == \
        (90, EPOCH + 1, None)
    assert replicas.isr_to_expand() == set()
    replicas.follower_fetched(3, 139, 140, EPOCH + 1)
    assert replicas.isr_to_expand() == set()
    replicas.follower_fetched(3, 140, 140, EPOCH + 1)
    assert replicas.isr_to_expand() == {3}
    assert replicas.broker_epochs({3}) == {3: EPOCH + 1}


def test_an_isr_member_that_fetches_at_another_broker_epoch_is_caught_up_only_from_then(clock):
    # Its caught-up time from the election (or its former process) is gone with the rest:
    # it stays in the ISR only if it reaches the leader's log end in its new process.
    replicas = replica_set(clock)
    replicas.follower_fetched(2, 140, 140, EPOCH)
    replicas.follower_fetched(3, 140, 140, EPOCH)
    replicas.follower_fetched(3, 120, 140, EPOCH + 1)
    assert replicas.isr_to_shrink(140) == {3}
    assert replicas.high_watermark == 140  # never back, though 3 lost records


# -- ISR changes --------------------------------------------------------------------------------

def test_one_change_at_a_time_and_nothing_proposed_meanwhile(clock):
    replicas = replica_set(clock, isr=(1, 2))
    replicas.follower_fetched(3, 100, 100)
    replicas.propose_isr({1, 2, 3})
    assert replicas.pending_isr == {1, 2, 3} and replicas.isr == {1, 2}
    clock.advance(LAG_MS + 1)
    assert replicas.isr_to_shrink(100) == set() and replicas.isr_to_expand() == set()
    with pytest.raises(IllegalStateError, match="pending"):
        replicas.propose_isr({1})
    assert replicas.isr_change_failed(100) == 100
    assert replicas.pending_isr is None
    assert replicas.isr_to_shrink(100) == {2}


@pytest.mark.parametrize("isr", [{2, 3}, {1, 4}, set()])
def test_an_isr_without_the_leader_or_with_strangers_is_refused(clock, isr):
    replicas = replica_set(clock)
    with pytest.raises(InvalidArgumentError):
        replicas.propose_isr(isr)
    assert replicas.pending_isr is None
    with pytest.raises(InvalidArgumentError):
        replicas.isr_changed(isr, 100)


def test_a_joining_follower_holds_the_high_watermark_before_the_controller_confirms(clock):
    replicas = replica_set(clock, isr=(1, 2))
    replicas.follower_fetched(2, 100, 100, EPOCH)
    replicas.follower_fetched(3, 100, 100, EPOCH)
    replicas.propose_isr(replicas.isr | replicas.isr_to_expand())
    replicas.follower_fetched(2, 150, 150, EPOCH)
    assert replicas.high_watermark == 100  # 3 is in the maximal ISR already
    replicas.follower_fetched(3, 120, 150, EPOCH)
    assert replicas.high_watermark == 120
    assert replicas.isr_changed({1, 2, 3}, 150) == 120
    assert replicas.isr == {1, 2, 3} and replicas.pending_isr is None


def test_a_leaving_follower_holds_the_high_watermark_until_it_is_gone(clock):
    replicas = replica_set(clock)
    replicas.follower_fetched(2, 100, 100)
    replicas.follower_fetched(3, 100, 100)
    clock.advance(LAG_MS + 1)
    replicas.follower_fetched(2, 150, 150)
    assert replicas.isr_to_shrink(150) == {3}
    replicas.propose_isr({1, 2})
    assert replicas.advance_high_watermark(150) == 100
    assert replicas.isr_changed({1, 2}, 150) == 150


def test_a_joined_follower_is_caught_up_as_of_joining(clock):
    replicas = replica_set(clock, isr=(1,), replicas=(1, 2))
    replicas.follower_fetched(2, 100, 120)  # at the HW, behind the log end: never caught up
    assert replicas.follower(2).last_caught_up_ms is None
    replicas.propose_isr({1, 2})
    replicas.isr_changed({1, 2}, 120)
    assert replicas.follower(2).last_caught_up_ms == clock.now
    assert replicas.isr_to_shrink(120) == set()


def test_the_controllers_isr_decides(clock):
    replicas = replica_set(clock)
    replicas.propose_isr({1, 2})
    replicas.isr_changed({1, 3}, 100)
    assert replicas.isr == {1, 3} and replicas.pending_isr is None


# -- the high watermark -------------------------------------------------------------------------

def test_the_high_watermark_is_the_lowest_log_end_in_the_isr(clock):
    replicas = replica_set(clock)
    assert replicas.follower_fetched(2, 130, 140) == 100  # 3 has not fetched in this epoch
    assert replicas.follower_fetched(3, 120, 140) == 120
    assert replicas.advance_high_watermark(140) == 120
    assert replicas.follower_fetched(3, 140, 140) == 130
    assert replicas.follower_fetched(2, 140, 150) == 140


def test_the_high_watermark_ignores_followers_out_of_the_isr(clock):
    replicas = replica_set(clock, isr=(1, 2))
    replicas.follower_fetched(3, 0, 120)
    assert replicas.follower_fetched(2, 120, 120) == 120


def test_a_leader_alone_commits_at_its_log_end(clock):
    replicas = replica_set(clock, isr=(1,), replicas=(1,), hw=0, epoch_start=0)
    assert replicas.advance_high_watermark(7) == 7


def test_the_high_watermark_never_goes_back(clock):
    replicas = replica_set(clock)
    replicas.follower_fetched(2, 140, 140)
    replicas.follower_fetched(3, 140, 140)
    assert replicas.high_watermark == 140
    assert replicas.follower_fetched(3, 110, 140) == 140  # 3 restarted and lost records
    assert replicas.advance_high_watermark(130) == 140


# -- acks ---------------------------------------------------------------------------------------

def test_acks_all_is_refused_before_the_append_with_too_small_an_isr(clock):
    replicas = replica_set(clock, isr=(1, 2))
    assert replicas.enough_replicas(2) and not replicas.enough_replicas(3)
    replicas.check_enough_replicas(2)
    with pytest.raises(NotEnoughReplicasError, match="min_insync_replicas=3"):
        replicas.check_enough_replicas(3)


def test_an_acks_all_append_completes_when_the_high_watermark_passes_it(clock):
    replicas = replica_set(clock, isr=(1, 2))
    # The leader appended offsets 100..109 (log end 110).
    assert not replicas.is_committed(109)
    assert not replicas.acks_all_done(109, 2)
    replicas.follower_fetched(2, 109, 110)
    assert not replicas.acks_all_done(109, 2)
    replicas.follower_fetched(2, 110, 110)
    assert replicas.is_committed(109) and replicas.acks_all_done(109, 2)
    assert replicas.is_committed(99)


def test_an_append_committed_after_the_isr_shrank_says_so(clock):
    replicas = replica_set(clock, isr=(1, 2))
    replicas.follower_fetched(2, 100, 110)
    clock.advance(LAG_MS + 1)
    replicas.propose_isr({1})
    replicas.isr_changed({1}, 110)  # the leader is alone: offsets up to 109 are committed
    assert replicas.is_committed(109)
    with pytest.raises(NotEnoughReplicasAfterAppendError, match="written"):
        replicas.acks_all_done(109, 2)
    assert replicas.acks_all_done(109, 1)


# -- properties ---------------------------------------------------------------------------------

FOLLOWERS = (2, 3, 4)
actions = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 20)),
    st.tuples(st.just("fetch"), st.sampled_from(FOLLOWERS), st.integers(0, 30)),
    st.tuples(st.just("tick"), st.integers(0, LAG_MS)),
    st.tuples(st.just("shrink")),
    st.tuples(st.just("expand")),
    st.tuples(st.just("confirm")),
    st.tuples(st.just("refuse")),
), max_size=60)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=actions, isr=st.sets(st.sampled_from(FOLLOWERS)))
def test_the_high_watermark_never_passes_an_isr_member_and_never_decreases(clock, actions, isr):
    """Followers fetch forward (each from where it is, at most to the leader's log end), the
    leader appends, time passes, and the leader shrinks and expands the ISR by its own rules
    through the controller, which confirms or refuses. Every step keeps the high watermark
    at most the log end of each member of the ISR (confirmed or proposed) and of the leader,
    and never lower than it was."""
    replicas = ReplicaSet(1, (1, *FOLLOWERS), {1, *isr}, leader_epoch=2, epoch_start_offset=0,
                          high_watermark=0, clock=clock, replica_lag_time_max_ms=LAG_MS)
    log_end, ends, hw = 0, dict.fromkeys(FOLLOWERS, 0), 0
    for action in actions:
        kind = action[0]
        if kind == "append":
            log_end += action[1]
            replicas.advance_high_watermark(log_end)
        elif kind == "fetch":
            ends[action[1]] = min(ends[action[1]] + action[2], log_end)
            replicas.follower_fetched(action[1], ends[action[1]], log_end, EPOCH)
        elif kind == "tick":
            clock.advance(action[1])
        elif replicas.pending_isr is not None:
            if kind == "confirm":
                replicas.isr_changed(replicas.pending_isr, log_end)
            elif kind == "refuse":
                replicas.isr_change_failed(log_end)
        elif kind == "shrink" and replicas.isr_to_shrink(log_end):
            replicas.propose_isr(replicas.isr - replicas.isr_to_shrink(log_end))
        elif kind == "expand" and replicas.isr_to_expand():
            replicas.propose_isr(replicas.isr | replicas.isr_to_expand())
        assert hw <= replicas.high_watermark <= log_end
        hw = replicas.high_watermark
        for member in replicas.maximal_isr - {1}:
            if replicas.follower(member).log_end_offset is not None:
                assert hw <= ends[member]
        if replicas.isr == {1} and replicas.pending_isr is None:
            assert hw == log_end  # alone, the leader commits what it appends
