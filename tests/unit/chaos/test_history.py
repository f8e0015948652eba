"""The fault tests' history checker (tests/history.py) finds each anomaly it names on a
handcrafted bad history, and none in a history without one."""

from __future__ import annotations

import pytest

from tests.history import (
    Owned,
    Processed,
    Read,
    Send,
    check,
    check_group,
    interval_reads,
    ownership,
    regressions,
    stalls,
    summary,
)


def acked(producer: int, index: int, partition: int, offset: int, **kw) -> Send:
    return Send(producer, index, b"p%d-%d" % (producer, index), True, partition, offset, **kw)


def read(partition: int, offset: int, value: bytes, reader: object = 0) -> Read:
    return Read(reader, partition, offset, value)


GOOD_SENDS = [acked(0, 0, 0, 0), acked(0, 1, 0, 1), acked(1, 0, 0, 2), acked(1, 1, 1, 0)]
GOOD_READS = [read(0, 0, b"p0-0"), read(0, 1, b"p0-1"), read(0, 2, b"p1-0"),
              read(1, 0, b"p1-1")]


def kinds(sends, reads, **kw) -> list[str]:
    return sorted({a.kind for a in check(sends, reads, **kw)})


def test_a_clean_history_has_no_anomaly():
    failed = Send(2, 0, b"p2-0", True, error=RuntimeError("refused"))
    timely = acked(2, 1, 1, 1, sent_at=10.0, resolved_at=33.0, deadline=30.0)  # within slack
    assert check([*GOOD_SENDS, failed, timely], [*GOOD_READS, read(1, 1, b"p2-1")],
                 complete_readers=[0]) == []


def test_an_acknowledgement_at_a_negative_offset_is_an_anomaly_even_when_the_value_is_there():
    unknown = Send(2, 0, b"p2-0", True, 1, -1)
    assert kinds([*GOOD_SENDS, unknown], [*GOOD_READS, read(1, 1, b"p2-0")]) == ["negative_ack"]
    # ... and a lost one besides when the value is nowhere (issue 22, item 1).
    assert kinds([*GOOD_SENDS, unknown], GOOD_READS) == ["lost", "negative_ack"]
    assert kinds([*GOOD_SENDS, Send(2, 0, b"p2-0", True, 1, None)],
                 [*GOOD_READS, read(1, 1, b"p2-0")]) == ["negative_ack"]


def test_rereading_the_same_records_is_no_anomaly():
    again = [Read(1, r.partition, r.offset, r.value) for r in GOOD_READS]
    assert check(GOOD_SENDS, GOOD_READS + again) == []


def test_a_future_resolved_late_is_named_with_how_late():
    late = acked(2, 0, 1, 1, sent_at=0.0, resolved_at=40.0, deadline=20.0)
    found = check([*GOOD_SENDS, late], [*GOOD_READS, read(1, 1, b"p2-0")], slack_s=5,
                  origin=-10.0)
    assert [a.kind for a in found] == ["late_resolution"]
    assert "20.0 s after its deadline (t+30.0 s)" in found[0].detail
    failed_late = Send(2, 0, b"p2-0", True, error=RuntimeError("x"), sent_at=0.0,
                       resolved_at=40.0, deadline=20.0)
    assert kinds([*GOOD_SENDS, failed_late], GOOD_READS) == ["late_resolution"]


def test_a_read_pass_that_is_not_complete_may_have_holes():
    partial = [read(0, 0, b"p0-0"), read(0, 2, b"p1-0"), read(1, 0, b"p1-1")]
    assert check(GOOD_SENDS[2:], partial) == []
    assert kinds(GOOD_SENDS[2:], partial, complete_readers=[0]) == ["log_gap"]


@pytest.mark.parametrize(("sends", "reads", "kind"), [
    ([*GOOD_SENDS, Send(3, 0, b"p3-0", False)], GOOD_READS, "unresolved"),
    ([*GOOD_SENDS, acked(3, 0, 1, 1, sent_at=0.0, resolved_at=99.0, deadline=1.0)],
     [*GOOD_READS, read(1, 1, b"p3-0")], "late_resolution"),
    ([*GOOD_SENDS, acked(3, 0, 1, -1)], [*GOOD_READS, read(1, 1, b"p3-0")], "negative_ack"),
    (GOOD_SENDS, GOOD_READS[:-1], "lost"),
    (GOOD_SENDS, [*GOOD_READS[:-1], read(1, 5, b"p1-1")], "misplaced"),
    ([*GOOD_SENDS[:-1], acked(1, 1, 1, 0, key_partition=0)], GOOD_READS, "misplaced"),
    (GOOD_SENDS, [*GOOD_READS, read(1, 1, b"p0-0")], "duplicate"),
    (GOOD_SENDS, [*GOOD_READS, read(0, 1, b"other", reader=1)], "inconsistent_offset"),
    (GOOD_SENDS, [GOOD_READS[1], GOOD_READS[0], *GOOD_READS[2:]], "nonmonotonic_read"),
    ([acked(0, 0, 0, 1), acked(0, 1, 0, 0), *GOOD_SENDS[2:]],
     [read(0, 0, b"p0-1"), read(0, 1, b"p0-0"), *GOOD_READS[2:]], "reordered"),
    ([*GOOD_SENDS, Send(2, 0, b"p2-0", True, error=RuntimeError("x"), must_succeed=True)],
     GOOD_READS, "late_failure"),
])
def test_each_anomaly_is_found(sends, reads, kind):
    found = kinds(sends, reads)
    assert kind in found, found
    assert kind in summary(check(sends, reads))


def test_the_log_going_back_in_one_pass_is_found_and_named():
    log = [read(0, 0, b"p0-0", "final"), read(0, 2, b"p1-0", "final"),
           read(0, 1, b"p0-1", "final"), read(1, 0, b"p1-1", "final")]
    found = check(GOOD_SENDS, log, complete_readers=["final"])
    assert [a.kind for a in found] == ["nonmonotonic_read"]
    assert "offset 1 after 2" in found[0].detail


# -- consumer groups -------------------------------------------------------------------------

def handoff(revoked_at: float, assigned_at: float) -> list[Owned]:
    """Member a owns partition 0 from 1.0, hands it to b."""
    return [Owned("a", 0, "assigned", 1.0), Owned("a", 0, "revoked", revoked_at),
            Owned("b", 0, "assigned", assigned_at)]


SEEN = {"a": 10.0, "b": 10.0}


def group_kinds(events, processed=(), last_seen=SEEN, **kw) -> list[str]:
    return sorted({a.kind for a in check_group(events, processed, last_seen, **kw)})


def test_a_clean_handoff_is_no_overlap():
    processed = [Processed("a", 0, 0, b"x", 1.5), Processed("b", 0, 1, b"y", 3.0)]
    assert check_group(handoff(2.0, 2.5), processed, SEEN) == []


def test_an_assignment_before_the_old_owner_let_go_is_two_owners():
    found = check_group(handoff(3.0, 2.5), [], SEEN)
    assert [a.kind for a in found] == ["two_owners"]
    assert "0.500 s together" in found[0].detail


def test_a_lost_partition_ends_when_its_owner_last_delivered_records():
    # a last delivered records at 2.0 (its poll before returned) and heard at 3.0 that it
    # lost the partition: b took it at 2.5, after a's last delivery: no overlap. Had a
    # delivered records at 2.75, b's taking it at 2.5 would be.
    events = [Owned("a", 0, "assigned", 1.0), Owned("a", 0, "lost", 3.0, since=2.0),
              Owned("b", 0, "assigned", 2.5)]
    assert check_group(events, [], SEEN) == []
    events[1] = Owned("a", 0, "lost", 3.0, since=2.75)
    assert group_kinds(events) == ["two_owners"]


def test_a_member_that_died_owned_its_partitions_until_last_seen_alive():
    events = [Owned("a", 0, "assigned", 1.0), Owned("b", 0, "assigned", 5.0)]
    assert check_group(events, [], {"a": 4.0, "b": 10.0}) == []
    assert group_kinds(events, last_seen={"a": 6.0, "b": 10.0}) == ["two_owners"]
    intervals, _ = ownership(events, {"a": 4.0, "b": 10.0})
    assert [(i.member, i.start, i.end, i.how) for i in intervals] == \
        [("a", 1.0, 4.0, "last seen alive"), ("b", 5.0, 10.0, "last seen alive")]


def test_the_same_member_owning_again_is_no_overlap():
    events = [Owned("a", 0, "assigned", 1.0), Owned("a", 0, "revoked", 2.0),
              Owned("a", 0, "assigned", 3.0)]
    assert check_group(events, [], SEEN) == []


def test_reading_outside_ownership_is_found():
    processed = [Processed("a", 0, 7, b"x", 2.2)]  # after its revoke at 2.0
    assert group_kinds(handoff(2.0, 2.5), processed) == ["unowned_read"]
    assert group_kinds([], [Processed("c", 1, 0, b"x", 1.0)]) == ["unowned_read"]


def test_a_listener_told_twice_it_gained_a_partition_is_found():
    events = [Owned("a", 0, "assigned", 1.0), Owned("a", 0, "assigned", 2.0)]
    assert group_kinds(events) == ["listener_order"]


def test_a_committed_offset_going_back_is_found():
    committed = [(1.0, 0, 10), (2.0, 0, 20), (2.5, 1, 5), (3.0, 0, 20), (4.0, 0, 15)]
    found = check_group([], [], {}, committed=committed)
    assert [a.kind for a in found] == ["commit_regressed"]
    assert "committed offset 15 at 4.000 after 20" in found[0].detail


def test_records_below_the_final_commit_that_nobody_processed_were_skipped():
    events = [Owned("a", 0, "assigned", 1.0)]
    log = [read(0, o, b"v%d" % o, "final") for o in range(4)]
    processed = [Processed("a", 0, o, b"v%d" % o, 2.0) for o in (0, 1, 3)]
    assert group_kinds(events, processed, log=log, final_committed={0: 1}) == []
    found = check_group(events, processed, SEEN, log=log, final_committed={0: 4})
    assert [a.kind for a in found] == ["group_skipped"]
    assert "offsets [2]" in found[0].detail


def test_a_member_going_back_within_one_ownership_is_found_and_across_two_is_not():
    events = [Owned("a", 0, "assigned", 1.0), Owned("a", 0, "revoked", 2.0),
              Owned("a", 0, "assigned", 3.0)]
    intervals, _ = ownership(events, {"a": 10.0})
    again = [Processed("a", 0, 5, b"x5", 1.5), Processed("a", 0, 4, b"x4", 3.5)]
    assert check([], interval_reads(again, intervals)) == []
    back = [Processed("a", 0, 5, b"x5", 3.5), Processed("a", 0, 4, b"x4", 3.6)]
    assert kinds([], interval_reads(back, intervals)) == ["nonmonotonic_read"]


def test_a_partition_without_acknowledgements_for_too_long_stalled():
    sends = [acked(0, i, i % 2, i // 2, resolved_at=float(t))
             for i, t in enumerate([1, 1, 2, 2, 3, 20, 21, 21])]
    # partition 0 acknowledged at 1, 2, 3, 21; partition 1 at 1, 2, 20, 21
    found = stalls(sends, limit_s=15, origin=1.0)
    assert [a.kind for a in found] == ["stalled", "stalled"]
    assert found[0].detail == ("partition 0: no acknowledgement for 18.0 s (limit 15 s), "
                               "from t+2.0 to t+20.0 s")
    assert stalls(sends, limit_s=18) == []


def test_an_end_offset_going_back_is_found():
    samples = [(1.0, 0, 10), (1.2, 1, 3), (1.4, 0, 12), (1.6, 0, 11), (1.8, 0, 13)]
    found = regressions("end_offset_regressed", "end offset", samples)
    assert [(a.kind, a.detail) for a in found] == [
        ("end_offset_regressed", "partition 0: end offset 11 at 1.600 after 12 at 1.400")]
    assert regressions("end_offset_regressed", "end offset", samples[:3]) == []


def test_a_stall_excused_in_part_counts_only_the_rest():
    sends = [acked(0, 0, 0, 0, resolved_at=0.0), acked(0, 1, 0, 1, resolved_at=30.0),
             acked(0, 2, 1, 0, resolved_at=0.0), acked(0, 3, 1, 1, resolved_at=30.0)]
    # partition 0 could not be served from 5 to 25: 10 s of its 30 s gap count
    found = stalls(sends, limit_s=15, excused=[(0, 5.0, 25.0)])
    assert [a.detail.split(":")[0] for a in found] == ["partition 1"]
    found = stalls(sends, limit_s=15, excused=[(0, 20.0, 25.0)])
    assert "(limit 15 s, 5.0 s of it excused)" in found[0].detail
