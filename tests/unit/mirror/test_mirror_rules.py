"""The mirror's plain rules: names and filters, numbering and position recovery, offset
translation, checkpoints, backoff, tickets. No Ray, no Flight."""

from __future__ import annotations

import random

import pytest

from raylog.errors import (
    InvalidArgumentError,
    InvalidTopicError,
    MirrorPositionError,
    OffsetOutOfRangeError,
    SourceUnavailableError,
    UnknownTopicError,
)
from raylog.mirror import protocol
from raylog.mirror.naming import (
    TopicFilter,
    check_alias,
    checkpoints_topic,
    config_changes,
    remote_topic,
    source_topic,
)
from raylog.mirror.position import (
    MIRROR_EPOCH,
    MIRROR_ID_BIT,
    PartitionPosition,
    resume_offset,
    source_next_offset,
    source_range,
)
from raylog.mirror.protocol import Ticket
from raylog.mirror.retry import Backoff, Retrying
from raylog.mirror.translation import (
    Checkpoints,
    OffsetSyncs,
    group_key,
    group_value,
    sync_key,
    sync_value,
)
from raylog.records.header import BatchHeader
from raylog.replica.producer_state import ProducerStates
from raylog.storage import AppendInfo

# -- names and filters -----------------------------------------------------------------------------


def test_remote_topics_carry_the_alias():
    assert remote_topic("east", "orders") == "east.orders"
    assert source_topic("east", "east.orders.v2") == "orders.v2"
    assert source_topic("east", "west.orders") is None
    assert checkpoints_topic("east") == "_mirror.east.checkpoints"
    with pytest.raises(InvalidTopicError, match="longer than 249"):
        remote_topic("east", "x" * 247)


@pytest.mark.parametrize("alias", ["", "a.b", "a b", "x" * 65, None, 3])
def test_a_bad_alias_is_refused_by_name(alias):
    with pytest.raises(InvalidArgumentError, match="alias"):
        check_alias(alias)


def test_the_filter_takes_allowed_topics_and_never_internal_or_looping_ones():
    f = TopicFilter(["orders.*", "clicks"], ["orders-test"], "east", "west")
    assert f.wants("orders") and f.wants("orders-eu") and f.wants("clicks")
    assert not f.wants("orders-test") and not f.wants("pageviews")
    assert not f.wants("__consumer_offsets") and not f.wants("_mirror.x.checkpoints")
    everything = TopicFilter(None, None, "east", "west")
    # A topic that came from the target (west.x), however many hops ago, goes no further.
    assert not everything.wants("west.orders") and not everything.wants("north.west.orders")
    assert everything.wants("orders.west") and everything.wants("north.orders")
    # Without the target's alias only the internal topics are skipped.
    assert TopicFilter(None, None, "east").wants("west.orders")


def test_bad_patterns_and_equal_aliases_are_refused():
    with pytest.raises(InvalidArgumentError, match=r"allow pattern '\(' is not"):
        TopicFilter(["("], None, "east")
    with pytest.raises(InvalidArgumentError, match="cannot both be called"):
        TopicFilter(None, None, "east", "east")


def test_configs_follow_the_source_except_the_targets_own():
    source = {"retention_ms": 1000, "min_insync_replicas": 2, "cleanup_policy": "compact"}
    target = {"retention_ms": 5, "segment_bytes": 10, "min_insync_replicas": 3}
    assert config_changes(source, target) == (
        {"retention_ms": 1000, "cleanup_policy": "compact"}, ["segment_bytes"])
    assert config_changes(source, {**source, "min_insync_replicas": 1}) == ({}, [])


# -- numbering and recovery ------------------------------------------------------------------------

def _header(stamp, records: int, base_offset: int = 0) -> BatchHeader:
    """The header a target batch numbered by ``stamp`` would carry."""
    return BatchHeader(base_offset, 0, 0, 1, 0, 0, 0, records - 1, 0, 0, stamp.producer_id,
                       stamp.producer_epoch, stamp.base_sequence, records)


def test_a_gap_free_source_is_one_run_of_consecutive_sequences():
    position = PartitionPosition.fresh(0)
    stamps = [position.stamp(0, 10, 10), position.stamp(10, 15, 5), position.stamp(15, 40, 25)]
    assert [s.base_sequence for s in stamps] == [0, 10, 15]
    assert len({s.producer_id for s in stamps}) == 1
    assert [s.new_run for s in stamps] == [True, False, False]
    assert all(s.producer_epoch == MIRROR_EPOCH for s in stamps)
    assert source_next_offset(_header(stamps[-1], 25)) == 40


def test_gaps_and_compacted_batches_start_new_runs_that_still_say_where_they_end():
    position = PartitionPosition.fresh(100)
    first = position.stamp(120, 130, 10)        # retention moved the start: a gap
    compacted = position.stamp(130, 150, 4)     # 4 records left of 20 offsets
    after = position.stamp(150, 160, 10)
    gap = position.stamp(170, 171, 1)           # whole batches compacted away
    assert [s.new_run for s in (first, compacted, after, gap)] == [True, True, False, True]
    assert source_next_offset(_header(first, 10)) == 130
    assert source_next_offset(_header(compacted, 4)) == 150
    assert source_next_offset(_header(after, 10)) == 160
    assert source_next_offset(_header(gap, 1)) == 171
    ids = [s.producer_id for s in (first, compacted, gap)]
    assert ids == sorted(set(ids)), "producer ids grow: never reused within a partition"


def test_a_run_ends_before_its_sequences_overflow():
    position = PartitionPosition(10, run_start=0, next_sequence=10)
    position.next_sequence = 2**31 - 5
    position.next_source = position.run_start + position.next_sequence
    start = position.next_source
    stamp = position.stamp(start, start + 10, 10)
    assert stamp.new_run and stamp.base_sequence == 0
    assert source_next_offset(_header(stamp, 10)) == start + 10


def test_a_restarted_mirror_numbers_every_batch_as_before():
    """Recovery from the target's last batch gives the same numbering as the mirror that
    was running: a batch sent again is a duplicate to the leader, not a second copy."""
    batches = [(0, 10, 10), (10, 20, 10), (25, 40, 3), (40, 50, 10), (50, 60, 10)]
    running = PartitionPosition.fresh(0)
    stamps = [running.stamp(*b) for b in batches]
    for crash_after in range(1, len(batches)):
        restarted = PartitionPosition.after(_header(stamps[crash_after - 1],
                                                    batches[crash_after - 1][2]))
        assert restarted.next_source == batches[crash_after - 1][1]
        again = [restarted.stamp(*b) for b in batches[crash_after:]]
        assert [(s.producer_id, s.base_sequence) for s in again] == \
            [(s.producer_id, s.base_sequence) for s in stamps[crash_after:]]


def test_the_leader_appends_each_mirrored_batch_once_through_resends():
    """The target leader's own sequence rules against a mirror that resends what was in
    flight when it crashed: duplicates are answered, not appended."""
    leader = ProducerStates()
    position = PartitionPosition.fresh(0)
    log: list[BatchHeader] = []
    rng = random.Random(7)
    source = 0
    sent: list[BatchHeader] = []
    for _ in range(200):
        records = rng.randint(1, 5)
        gap = rng.choice([0, 0, 0, 3])
        span = records + rng.choice([0, 0, 2])
        stamp = position.stamp(source + gap, source + gap + span, records)
        source += gap + span
        header = _header(stamp, records, base_offset=len(log))
        sent.append(header)
        for copy in (header, *([header] if rng.random() < 0.3 else [])):  # resends
            if leader.check(copy) is None:
                leader.accept(copy, AppendInfo(len(log), len(log), 0, records))
                log.append(copy)
    assert [(h.producer_id, h.base_sequence) for h in log] == \
        [(h.producer_id, h.base_sequence) for h in sent]
    assert source_next_offset(log[-1]) == source


def test_a_target_batch_says_where_a_group_resumes():
    position = PartitionPosition.fresh(100)
    first = _header(position.stamp(100, 110, 10), 10, base_offset=0)    # a new run
    more = _header(position.stamp(110, 120, 10), 10, base_offset=10)    # continues it
    sparse = _header(position.stamp(130, 150, 4), 4, base_offset=20)   # compacted
    assert source_range(more) == (110, 120, True)
    assert source_range(first) == (100, 110, False)
    assert resume_offset(more, 115) == 15          # exact inside a continuing batch
    assert resume_offset(first, 105) == 0          # a run's first batch is read again
    assert resume_offset(more, 125) == 20          # in a gap: the next batch
    assert resume_offset(sparse, 149) == 20 and resume_offset(sparse, 150) == 24


def test_a_batch_from_anyone_else_is_no_position():
    header = BatchHeader(7, 0, 0, 1, 0, 0, 0, 0, 0, 0, 12345, 0, 0, 1)
    with pytest.raises(MirrorPositionError, match="not written by a mirror"):
        PartitionPosition.after(header)
    with pytest.raises(MirrorPositionError):
        source_next_offset(header._replace(producer_id=MIRROR_ID_BIT | 5))  # wrong epoch


def test_a_batch_behind_the_position_is_refused():
    position = PartitionPosition.fresh(10)
    with pytest.raises(ValueError, match="does not follow"):
        position.stamp(5, 15, 10)


# -- translation and checkpoints -------------------------------------------------------------------

def test_consecutive_batches_make_one_linear_point():
    syncs = OffsetSyncs()
    for start in range(0, 100, 10):
        syncs.add(start, start + 10, start + 1000, start + 1010)
    assert syncs.points == [[0, 1000, 100]]
    assert [syncs.translate(o) for o in (0, 37, 100, 150)] == [1000, 1037, 1100, 1100]


def test_gaps_translate_conservatively_never_past_a_record_not_read():
    syncs = OffsetSyncs()
    syncs.add(0, 10, 0, 10)
    syncs.add(20, 40, 10, 14)   # compacted: 4 records of 20 offsets
    syncs.add(40, 50, 14, 24)
    assert syncs.translate(5) == 5
    assert syncs.translate(10) == 10   # the end of the first run
    assert syncs.translate(15) == 10   # inside the gap: resume at the compacted batch
    assert syncs.translate(30) == 10   # inside the compacted batch: read it again
    assert syncs.translate(40) == 14 and syncs.translate(45) == 19
    assert syncs.translate(-1) is None


def test_a_restart_that_learns_an_older_range_keeps_the_points_monotone():
    syncs = OffsetSyncs([(0, 0, 50)])
    syncs.add(20, 30, 20, 30)
    assert syncs.points == [[0, 0, 50], [20, 20, 10]]
    assert syncs.translate(25) == 25 and syncs.translate(45) == 30
    syncs.add(10, 15, 10, 15)   # further back than the newest point: it goes
    assert syncs.points == [[0, 0, 50], [10, 10, 5]]
    older = OffsetSyncs([(100, 90, 10)])
    older.merge([[0, 0, 50], [200, 1, 1]])
    assert older.points == [[0, 0, 50], [100, 90, 10]]


def test_translations_read_from_the_target_are_kept_in_order():
    syncs = OffsetSyncs([(300, 300, 50)])
    assert syncs.translate(200) is None
    syncs.learn(200, 198)
    syncs.learn(200, 198)
    assert syncs.points == [[200, 198, 0], [300, 300, 50]]
    assert syncs.translate(200) == 198 and syncs.translate(250) == 198
    assert syncs.translate(320) == 320


def test_checkpoint_records_fold_to_the_newest_per_key():
    checkpoints = Checkpoints()
    syncs = OffsetSyncs([(0, 0, 10)])
    checkpoints.add(sync_key("orders", 0), sync_value(syncs))
    checkpoints.add(group_key("g"), group_value("g", {("orders", 0): (5, 5)}))
    checkpoints.add(group_key("g"), group_value("g", {("orders", 0): (8, 8),
                                                      ("orders", 1): (3, 2)}), 77)
    checkpoints.add(b"future:kind", b"whatever")
    checkpoints.add(b"group:broken", b"{not json")
    assert checkpoints.syncs == {("orders", 0): [[0, 0, 10]]}
    assert checkpoints.group_offsets("g") == {("orders", 0): (8, 8), ("orders", 1): (3, 2)}
    assert checkpoints.groups["g"]["at_ms"] == 77
    assert checkpoints.group_offsets("other") is None
    checkpoints.add(group_key("g"), None)   # a tombstone
    assert checkpoints.group_offsets("g") is None


# -- backoff ---------------------------------------------------------------------------------------

def test_backoff_doubles_up_to_its_maximum_with_jitter():
    assert [Backoff(1, 8, jitter=0).next() for _ in range(1)] == [1]
    backoff = Backoff(1, 8, jitter=0.2, rng=random.Random(1))
    waits = [backoff.next() for _ in range(6)]
    for wait, base in zip(waits, [1, 2, 4, 8, 8, 8], strict=True):
        assert 0.8 * base <= wait <= 1.2 * base
    backoff.reset()
    assert backoff.next() <= 1.2


def test_retrying_reports_each_failure_and_gives_up_at_its_deadline():
    now = [0.0]
    said: list[str] = []
    calls = []

    def failing():
        calls.append(now[0])
        raise SourceUnavailableError("the source x is unreachable")

    retrying = Retrying(Backoff(1, 4, jitter=0), said.append, give_up_after_s=10,
                        clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    with pytest.raises(SourceUnavailableError):
        retrying.call("reading the source", failing)
    assert calls == [0, 1, 3, 7]
    assert said[0] == "reading the source: the source x is unreachable; trying again in 1.0 s"
    with pytest.raises(UnknownTopicError):  # not retriable: at once
        retrying.call("x", lambda: (_ for _ in ()).throw(UnknownTopicError("gone")))
    answers = iter([SourceUnavailableError("down"), "up"])

    def flaky():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert Retrying(Backoff(1, 4, jitter=0), said.append, sleep=lambda s: None).call(
        "x", flaky) == "up"


# -- tickets and errors ----------------------------------------------------------------------------

def test_tickets_round_trip_and_bad_ones_are_refused_by_name():
    ticket = Ticket("orders", 2, 100, end=200, format="records")
    assert Ticket.decode(ticket.encode()) == ticket
    for raw, match in [(b"nope", "JSON object"), (b'{"topic": "x"}', "JSON object"),
                       (b'{"topic": "x", "partition": 0, "offset": 5, "end": 4}', "end"),
                       (b'{"topic": "x", "partition": 0, "offset": 0, "format": "csv"}',
                        "format"),
                       (b'{"topic": "a b", "partition": 0, "offset": 0}', "characters")]:
        with pytest.raises((InvalidArgumentError, InvalidTopicError), match=match):
            Ticket.decode(raw)


def test_errors_travel_as_their_type():
    error = protocol.error_from("offset 5 is out of range. Detail: Failed",
                                protocol.error_info(OffsetOutOfRangeError("x")))
    assert isinstance(error, OffsetOutOfRangeError) and str(error) == "offset 5 is out of range"
    assert protocol.error_from("x", b'{"error": "ValueError"}') is None
    assert protocol.error_from("x", b"garbage") is None
