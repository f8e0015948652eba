"""Where a new follower truncates: the KIP-101 and KIP-279 scenarios, then random histories.

A replica here is a list of per-offset leader epochs (offset i holds a record of epoch
log[i]): within one epoch, offsets are assigned by that epoch's one leader, so an
(offset, epoch) pair names one record, and two logs agree where their epoch lists agree.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st

from raylog.errors import InvalidArgumentError
from raylog.replica.epochs import UNDEFINED, LeaderEpochCache
from raylog.replica.truncation import Ask, Truncate, first_step, next_step


class Replica:
    """A log of per-offset epochs with its leader-epoch cache, kept in step as a replica
    would: assign before append, truncate the cache after the log."""

    def __init__(self, log: list[int] | None = None, high_watermark: int = 0) -> None:
        self.log: list[int] = []
        self.cache = LeaderEpochCache()
        self.high_watermark = high_watermark
        self.append(log or [])

    @property
    def log_end_offset(self) -> int:
        return len(self.log)

    def append(self, epochs: list[int]) -> None:
        for epoch in epochs:
            self.cache.assign(epoch, self.log_end_offset)
            self.log.append(epoch)

    def become_leader(self, epoch: int) -> None:
        self.cache.assign(epoch, self.log_end_offset)  # as Kafka's leader does when elected

    def truncate(self, offset: int) -> None:
        del self.log[offset:]
        self.cache.truncate_from_end(self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """The leader's answer to OffsetsForLeaderEpoch."""
        return self.cache.end_offset_for(epoch, self.log_end_offset)


def become_follower(follower: Replica, leader: Replica) -> list[Ask | Truncate]:
    """Run the protocol to its end against ``leader``, applying each truncation; return the
    steps taken."""
    step = first_step(follower.cache, follower.log_end_offset, follower.high_watermark)
    steps = [step]
    while isinstance(step, Ask):
        follower.truncate(step.truncate_to)
        answer = leader.end_offset_for(step.epoch)
        step = next_step(step.epoch, answer, follower.cache, follower.log_end_offset,
                         follower.high_watermark)
        steps.append(step)
    follower.truncate(step.offset)
    return steps


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# -- KIP-101 ------------------------------------------------------------------------------------

def test_kip101_scenario_1_no_truncation_to_a_lagging_high_watermark():
    # A leads epoch 0 and has m1, m2 committed; B fetched both but learned only HW 1 before it
    # restarted. Truncating to its HW would drop m2, which A acknowledged: if A then dies, m2
    # is gone. Asking A for the end of epoch 0 keeps it.
    a = Replica([0, 0], high_watermark=2)
    b = Replica([0, 0], high_watermark=1)
    assert become_follower(b, a) == [Ask(0, 2), Truncate(2)]
    assert b.log == [0, 0]


def test_kip101_scenario_2_no_divergence_after_a_double_failure():
    # A leads epoch 0 with m1 (offset 0) and m2 (offset 1), B has only m1. Both crash; B comes
    # back first, leads epoch 1 and writes m3 at offset 1. A's HW says keep offset 1 (its m2):
    # the replicas would hold different records at offset 1 for good.
    a = Replica([0, 0], high_watermark=2)
    b = Replica([0])
    b.become_leader(1)
    b.append([1])
    assert become_follower(a, b) == [Ask(0, 2), Truncate(1)]
    assert a.log == [0]
    a.append(b.log[1:])
    assert a.log == b.log == [0, 1]


def test_kip101_fast_leader_failover_leaves_a_divergent_tail():
    # A leads epoch 1 and appends three records nobody fetched; B takes over in epoch 2 and
    # appends its own. A, following B, cuts exactly its unreplicated epoch-1 tail.
    a = Replica([0, 0, 1, 1, 1], high_watermark=2)
    b = Replica([0, 0])
    b.become_leader(2)
    b.append([2, 2, 2, 2])
    assert become_follower(a, b) == [Ask(1, 5), Truncate(2)]
    assert a.log == [0, 0]


def test_a_follower_ahead_in_the_same_epoch_truncates_to_the_leaders_end():
    # B is elected in epoch 3 with less of epoch 2 than A fetched from the old leader.
    a = Replica([0, 2, 2, 2, 2])
    b = Replica([0, 2, 2])
    b.become_leader(3)
    assert become_follower(a, b) == [Ask(2, 5), Truncate(3)]
    assert a.log == [0, 2, 2]


def test_a_follower_behind_keeps_everything():
    a = Replica([0, 2])
    b = Replica([0, 2, 2, 2])
    b.become_leader(3)
    b.append([3])
    assert become_follower(a, b) == [Ask(2, 2), Truncate(2)]
    assert a.log == [0, 2]


def test_a_replica_with_no_epoch_data_truncates_to_its_high_watermark():
    # Kafka's fallback for logs written without leader epochs.
    no_epochs = LeaderEpochCache()  # e.g. five records appended without a leader epoch
    assert first_step(no_epochs, log_end_offset=5, high_watermark=3) == Truncate(3)
    assert first_step(no_epochs, log_end_offset=2, high_watermark=3) == Truncate(2)


def test_a_leader_that_knows_nothing_of_the_epoch_means_the_high_watermark():
    follower = Replica([0, 1, 1, 1], high_watermark=2)
    assert next_step(1, UNDEFINED, follower.cache, 4, 2) == Truncate(2)
    assert next_step(1, (-1, -1), follower.cache, 1, 2) == Truncate(1)


# -- KIP-279 ------------------------------------------------------------------------------------

def test_kip279_logs_diverging_over_several_epochs_take_several_rounds():
    # Epoch 0: A leads, both have two records. Epoch 1: A appends offset 2, unfetched.
    # Epoch 2: B leads a moment and appends offset 2 and 3. Epoch 3: A leads again without
    # ever having followed B, and appends offset 3. B, now following A, asks about epoch 2:
    # A has no epoch 2 and answers (1, 3), the end of its epoch 1. KIP-101's single round
    # would keep B's offset 2, of epoch 2, where A has epoch 1: B must first drop all of
    # epoch 2, then ask about epoch 0.
    a = Replica([0, 0, 1])
    b = Replica([0, 0])
    b.become_leader(2)
    b.append([2, 2])
    a.become_leader(3)
    a.append([3])
    assert a.end_offset_for(2) == (1, 3)
    assert become_follower(b, a) == [Ask(2, 4), Ask(0, 2), Truncate(2)]
    assert b.log == [0, 0]
    assert b.cache.entries == ((0, 0),)


def test_kip279_many_rounds_end_at_the_common_prefix():
    leader = Replica([0, 0, 1, 3, 3, 5])
    follower = Replica([0, 0, 2, 2, 4, 4, 6])
    leader.become_leader(7)
    steps = become_follower(follower, leader)
    assert steps == [Ask(6, 7), Ask(4, 6), Ask(2, 4), Ask(0, 2), Truncate(2)]
    assert follower.log == [0, 0]


def test_a_leader_whose_log_starts_after_the_asked_epoch():
    # Retention removed everything of epochs 0-1 on the leader; its answer about epoch 1 is
    # (1, its first start): the follower keeps nothing from there on.
    leader = Replica([0, 0, 1, 1, 2, 2])
    leader.log[:4] = [None] * 4
    leader.cache.truncate_from_start(4)
    assert leader.end_offset_for(1) == (1, 4)
    follower = Replica([0, 0, 1, 1, 1])
    assert become_follower(follower, leader) == [Ask(1, 5), Truncate(4)]


def test_an_epoch_elected_without_records_is_not_asked_about():
    # B was elected in epoch 2 and wrote nothing before A took over in epoch 3: B's cache
    # ends with (2, 2), at its log end. It asks about epoch 0, that of its last record.
    a = Replica([0, 0, 3])
    b = Replica([0, 0])
    b.become_leader(2)
    assert become_follower(b, a) == [Ask(0, 2), Truncate(2)]
    assert b.cache.entries == ((0, 0),)


def test_a_follower_whose_epochs_all_postdate_the_answer():
    # The follower's first epoch is above the epoch the leader answered with: its end for
    # that epoch is its first start, so it keeps nothing that could differ.
    leader = Replica([1, 1, 1, 1, 1])
    leader.become_leader(4)
    follower = Replica([3, 3])
    assert become_follower(follower, leader) == [Ask(3, 2), Truncate(0)]


# -- bad use ------------------------------------------------------------------------------------

@pytest.mark.parametrize("asked, answer", [(2, (3, 5)), (2, (1, -4)), (2, (-1, 5)),
                                           (2, (-2, -1))])
def test_an_impossible_answer_is_refused(asked, answer):
    follower = Replica([0, 2, 2])
    with pytest.raises(InvalidArgumentError, match="leader answered"):
        next_step(asked, answer, follower.cache, 3, 0)


def test_asking_about_an_epoch_not_the_latest_is_refused():
    # The truncation of an Ask step must be applied before the leader is asked.
    follower = Replica([0, 2, 4])
    with pytest.raises(InvalidArgumentError, match="apply the previous truncation"):
        next_step(2, (2, 2), follower.cache, 3, 0)


# -- random histories ---------------------------------------------------------------------------

REPLICAS = 3
events = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3)),
    st.tuples(st.just("fetch"), st.integers(0, REPLICAS - 1), st.integers(0, 4)),
    st.tuples(st.just("elect"), st.integers(0, REPLICAS - 1), st.integers(0, 3)),
), max_size=50)


@settings(max_examples=400, deadline=None)
@given(events=events)
def test_after_truncation_a_follower_holds_a_prefix_of_its_leader(events):
    """Leaders change at random and often append at once; any replica can be elected
    (unclean elections included: this is about logs agreeing, not about keeping committed
    records); only the leader appends, in its epoch; a follower truncates once after each
    election, before its first fetch, and then copies what follows its log end from the
    leader.

    After the protocol, the follower's log is a prefix of the leader's, and no shorter than
    the longest prefix the two shared: it cuts every divergent record and nothing more.
    """
    replicas = [Replica() for _ in range(REPLICAS)]
    leader, epoch = replicas[0], 0
    leader.become_leader(epoch)
    must_truncate: set[int] = set()
    rounds = 0
    for event in events:
        if event[0] == "append":
            leader.append([epoch] * event[1])
        elif event[0] == "elect":
            epoch += 1
            leader = replicas[event[1]]
            leader.become_leader(epoch)
            leader.append([epoch] * event[2])  # at once: nobody fetched it yet
            must_truncate = {i for i in range(REPLICAS) if replicas[i] is not leader}
        elif replicas[event[1]] is not leader:
            follower = replicas[event[1]]
            if event[1] in must_truncate:
                before = list(follower.log)
                steps = become_follower(follower, leader)
                must_truncate.discard(event[1])
                assert follower.log == leader.log[:follower.log_end_offset]
                assert follower.log_end_offset == common_prefix(before, leader.log)
                assert len(steps) <= epoch + 2  # each round asks about an older epoch
                rounds = max(rounds, len(steps))
            start = follower.log_end_offset
            follower.append(leader.log[start:start + event[2]])
            assert follower.log == leader.log[:follower.log_end_offset]
    target(rounds, label="rounds of the protocol")  # steer towards KIP-279's several rounds
