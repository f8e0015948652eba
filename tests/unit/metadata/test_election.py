"""The controller's leader and ISR rules (raylog/metadata/election.py)."""

from __future__ import annotations

import random

import pytest

from raylog.errors import (
    FencedEpochError,
    IneligibleReplicaError,
    InvalidArgumentError,
    StaleIsrChangeError,
)
from raylog.metadata import election
from raylog.metadata.election import Change
from raylog.metadata.state import PartitionState


def state(replicas=(1, 2, 3), leader=1, epoch=5, isr=None, partition_epoch=7):
    return PartitionState(0, list(replicas), leader, epoch,
                          list(replicas if isr is None else isr), partition_epoch)


BROKER_EPOCHS = {1: 11, 2: 12, 3: 13, 4: 14}  # each broker's running process's


def alter_isr(p: PartitionState, leader: int, leader_epoch: int, partition_epoch: int,
              isr, live, member_epochs=None) -> Change:
    """election.alter_isr from a leader that saw each member fetch in its broker's current
    process (unless ``member_epochs`` says otherwise)."""
    return election.alter_isr(
        p, leader, leader_epoch, partition_epoch, isr, live,
        member_epochs={b: BROKER_EPOCHS[b] for b in isr} if member_epochs is None
        else member_epochs,
        broker_epochs={b: BROKER_EPOCHS[b] for b in live})


def apply(p: PartitionState, change: Change | None) -> PartitionState:
    if change is None:
        return p
    return PartitionState(p.partition, change.replicas or list(p.replicas), change.leader,
                          change.leader_epoch, list(change.isr), p.partition_epoch + 1)


# -- a broker goes ---------------------------------------------------------------------------

def test_a_follower_that_goes_leaves_the_isr_and_the_leader_stays():
    change = election.broker_down(state(), 2, live={1, 3}, unclean=False)
    assert change == Change(1, 5, [1, 3])


def test_a_leader_that_goes_is_replaced_by_the_first_live_isr_member():
    change = election.broker_down(state(isr=[1, 3, 2]), 1, live={2, 3}, unclean=False)
    assert change == Change(2, 6, [3, 2])


def test_a_dead_isr_member_is_never_elected():
    change = election.broker_down(state(), 1, live={3}, unclean=False)
    assert change.leader == 3 and change.leader_epoch == 6


def test_the_last_isr_member_stays_in_the_isr_and_the_partition_has_no_leader():
    change = election.broker_down(state(isr=[1]), 1, live={2, 3}, unclean=False)
    assert change == Change(None, 6, [1])


def test_unclean_election_takes_a_live_replica_outside_the_isr_as_the_whole_isr():
    change = election.broker_down(state(isr=[1]), 1, live={2, 3}, unclean=True)
    assert change == Change(2, 6, [2], unclean=True)


def test_a_broker_that_is_not_a_replica_changes_nothing():
    assert election.broker_down(state(), 4, live={1, 2, 3}, unclean=False) is None


def test_a_follower_outside_the_isr_that_goes_changes_nothing():
    assert election.broker_down(state(isr=[1, 2]), 3, live={1, 2}, unclean=False) is None


def test_with_no_leader_a_going_isr_member_leaves_unless_last():
    p = state(leader=None, isr=[2, 3])
    assert election.broker_down(p, 2, live={1}, unclean=False) == Change(None, 5, [3])
    assert election.broker_down(state(leader=None, isr=[3]), 3, live={1}, unclean=False) \
        is None


# -- a broker comes back ---------------------------------------------------------------------

def test_the_last_isr_member_coming_back_leads_again_with_a_new_epoch():
    p = state(leader=None, isr=[1])
    assert election.broker_up(p, 1, live={1, 2}, unclean=False) == Change(1, 6, [1])


def test_a_replica_outside_the_isr_coming_back_does_not_lead_cleanly():
    p = state(leader=None, isr=[1])
    assert election.broker_up(p, 2, live={2, 3}, unclean=False) is None
    assert election.broker_up(p, 2, live={2, 3}, unclean=True) == \
        Change(2, 6, [2], unclean=True)


def test_a_partition_with_a_leader_is_left_alone_when_a_broker_comes_back():
    assert election.broker_up(state(isr=[1]), 2, live={1, 2}, unclean=True) is None


# -- the leader changes its ISR --------------------------------------------------------------

def test_the_leader_shrinks_and_expands_its_isr():
    p = state(isr=[1, 2])
    assert alter_isr(p, 1, 5, 7, [1], live={1, 2, 3}) == Change(1, 5, [1])
    assert alter_isr(p, 1, 5, 7, [3, 1, 2], live={1, 2, 3}) == \
        Change(1, 5, [1, 2, 3])


def test_an_isr_change_from_a_stale_leader_is_fenced():
    with pytest.raises(FencedEpochError):
        alter_isr(state(), 1, 4, 7, [1, 2], live={1, 2, 3})
    with pytest.raises(FencedEpochError):
        alter_isr(state(), 2, 5, 7, [2], live={1, 2, 3})


def test_an_isr_change_based_on_an_older_partition_epoch_is_refused():
    with pytest.raises(StaleIsrChangeError):
        alter_isr(state(), 1, 5, 6, [1, 2], live={1, 2, 3})


@pytest.mark.parametrize("isr", [[2, 3], [1, 4], []])
def test_an_isr_without_the_leader_or_with_strangers_is_refused(isr):
    with pytest.raises(InvalidArgumentError):
        alter_isr(state(), 1, 5, 7, isr, live={1, 2, 3, 4})


def test_a_dead_broker_cannot_join_the_isr():
    with pytest.raises(InvalidArgumentError, match="not alive"):
        alter_isr(state(isr=[1]), 1, 5, 7, [1, 2], live={1})


def test_a_member_that_caught_up_in_an_earlier_process_of_its_broker_cannot_join():
    """KIP-903: the leader saw broker 2 catch up at broker epoch 9, but broker 2 has started
    again since (its epoch is 12): the new process may have lost records."""
    p = state(isr=[1])
    with pytest.raises(IneligibleReplicaError, match=r"broker 2 .* broker epoch 9"):
        alter_isr(p, 1, 5, 7, [1, 2, 3], live={1, 2, 3}, member_epochs={2: 9, 3: 13})
    with pytest.raises(IneligibleReplicaError, match="broker 2"):
        alter_isr(p, 1, 5, 7, [1, 2], live={1, 2, 3}, member_epochs={})  # none named
    # A broker whose new process is not recorded yet has no current epoch at all.
    with pytest.raises(IneligibleReplicaError, match="current one is None"):
        election.alter_isr(p, 1, 5, 7, [1, 2], {1, 2}, member_epochs={2: 12},
                           broker_epochs={1: 11})
    assert alter_isr(p, 1, 5, 7, [1, 2, 3], live={1, 2, 3}, member_epochs={2: 12, 3: 13}) \
        == Change(1, 5, [1, 2, 3])


def test_members_already_in_the_isr_are_not_asked_for_their_broker_epoch():
    assert alter_isr(state(isr=[1, 2]), 1, 5, 7, [1, 2, 3], live={1, 2, 3},
                     member_epochs={3: 13}) == Change(1, 5, [1, 2, 3])


def test_a_repeat_of_a_change_already_made_succeeds_with_the_partition_as_it_is():
    """The controller committed the leader's change (partition epoch 7 -> 8) and died before
    answering: the leader asks again, based on 7. The ISR is already what it asks for, so
    the answer is success, changing nothing; another ISR from an older epoch is stale."""
    p = state(isr=[1, 2, 3], partition_epoch=8)
    assert alter_isr(p, 1, 5, 7, [3, 1, 2], live={1, 2, 3}) == Change(1, 5, [1, 2, 3])
    with pytest.raises(StaleIsrChangeError):
        alter_isr(p, 1, 5, 7, [1, 2], live={1, 2, 3})
    with pytest.raises(FencedEpochError):  # from a leader that was replaced: never
        alter_isr(state(leader=2, epoch=6, partition_epoch=8), 1, 5, 7, [1, 2, 3],
                  live={1, 2, 3})


# -- preferred leader and reassignment -------------------------------------------------------

def test_the_preferred_replica_takes_over_when_it_is_in_the_isr_and_alive():
    p = state(leader=2)
    assert election.preferred_leader(p, live={1, 2, 3}) == Change(1, 6, [1, 2, 3])
    assert election.preferred_leader(p, live={2, 3}) is None
    assert election.preferred_leader(state(leader=2, isr=[2, 3]), live={1, 2, 3}) is None
    assert election.preferred_leader(state(), live={1, 2, 3}) is None


def test_a_reassignment_adds_waits_moves_leadership_then_drops():
    p = state(replicas=(1, 2), leader=1, isr=[1, 2])
    live = {1, 2, 3, 4}
    p = apply(p, step := election.reassign(p, [3, 4], live))
    assert step.replicas == [1, 2, 3, 4] and p.isr == [1, 2]
    assert election.reassign(p, [3, 4], live) is None  # new replicas not caught up yet
    p.isr = [1, 2, 3, 4]
    p = apply(p, election.reassign(p, [3, 4], live))
    assert (p.leader, p.leader_epoch) == (3, 6)
    p = apply(p, election.reassign(p, [3, 4], live))
    assert (p.replicas, p.isr, p.leader) == ([3, 4], [3, 4], 3)
    assert election.reassign(p, [3, 4], live) is None


# -- a model check: clean elections never choose a replica missing committed records ----------

@pytest.mark.parametrize("seed", range(30))
def test_random_histories_never_elect_a_replica_without_every_committed_record(seed):
    """Brokers die and come back and records are committed by the ISR of the moment, while
    the leader shrinks and expands the ISR the way a leader would. A replica has every
    committed record while it was in the ISR at each commit or has caught up since. Clean
    elections must only ever choose such a replica; the ISR is never empty and holds the
    leader."""
    rng = random.Random(seed)
    brokers = [1, 2, 3]
    p = state(replicas=brokers, leader=1, epoch=0, isr=brokers, partition_epoch=0)
    live = set(brokers)
    complete = set(brokers)  # replicas holding every committed record
    for _ in range(300):
        action = rng.choice(["die", "return", "commit", "catch-up", "shrink"])
        before = (p.leader, p.leader_epoch)
        if action == "die" and live:
            b = rng.choice(sorted(live))
            live.discard(b)
            p = apply(p, election.broker_down(p, b, live, unclean=False))
        elif action == "return" and set(brokers) - live:
            b = rng.choice(sorted(set(brokers) - live))
            live.add(b)
            p = apply(p, election.broker_up(p, b, live, unclean=False))
        elif action == "commit" and p.leader is not None:
            complete &= set(p.isr)  # every ISR member has it; the others do not
        elif action == "catch-up" and p.leader is not None:
            joiner = rng.choice(sorted(live - set(p.isr))) if live - set(p.isr) else None
            if joiner is not None:
                complete.add(joiner)  # it fetched everything from the leader
                p = apply(p, alter_isr(p, p.leader, p.leader_epoch,
                                                p.partition_epoch, [*p.isr, joiner], live))
        elif action == "shrink" and p.leader is not None and len(p.isr) > 1:
            lagging = rng.choice([b for b in p.isr if b != p.leader])
            p = apply(p, alter_isr(
                p, p.leader, p.leader_epoch, p.partition_epoch,
                [b for b in p.isr if b != lagging], live))
        assert p.isr and set(p.isr) <= set(brokers)
        if p.leader is not None:
            assert p.leader in p.isr and p.leader in live
            if (p.leader, p.leader_epoch) != before:
                assert p.leader in complete, (seed, p)
        assert p.leader_epoch >= before[1]
