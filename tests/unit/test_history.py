"""The fault tests' history checker (tests/history.py) finds each anomaly it names, and none
in a history without one."""

from __future__ import annotations

import pytest

from tests.history import Read, Send, check, summary


def acked(producer: int, index: int, partition: int, offset: int, **kw) -> Send:
    return Send(producer, index, b"p%d-%d" % (producer, index), True, partition, offset, **kw)


def read(partition: int, offset: int, value: bytes, reader: int = 0) -> Read:
    return Read(reader, partition, offset, value)


GOOD_SENDS = [acked(0, 0, 0, 0), acked(0, 1, 0, 1), acked(1, 0, 0, 2), acked(1, 1, 1, 0)]
GOOD_READS = [read(0, 0, b"p0-0"), read(0, 1, b"p0-1"), read(0, 2, b"p1-0"),
              read(1, 0, b"p1-1")]


def kinds(sends, reads) -> list[str]:
    return sorted({a.kind for a in check(sends, reads)})


def test_a_clean_history_has_no_anomaly():
    failed = Send(2, 0, b"p2-0", True, error=RuntimeError("refused"))
    assert check([*GOOD_SENDS, failed], GOOD_READS) == []


def test_an_acknowledgement_without_an_offset_needs_the_value_once_in_its_partition():
    unknown = Send(2, 0, b"p2-0", True, 1, -1)
    assert check([*GOOD_SENDS, unknown], [*GOOD_READS, read(1, 1, b"p2-0")]) == []
    assert kinds([*GOOD_SENDS, unknown], GOOD_READS) == ["lost"]
    assert kinds([*GOOD_SENDS, unknown], [*GOOD_READS, read(0, 3, b"p2-0")]) == ["lost"]


def test_rereading_the_same_records_is_no_anomaly():
    again = [Read(1, r.partition, r.offset, r.value) for r in GOOD_READS]
    assert check(GOOD_SENDS, GOOD_READS + again) == []


@pytest.mark.parametrize(("sends", "reads", "kind"), [
    ([*GOOD_SENDS, Send(3, 0, b"p3-0", False)], GOOD_READS, "unresolved"),
    (GOOD_SENDS, GOOD_READS[:-1], "lost"),
    (GOOD_SENDS, [*GOOD_READS[:-1], read(1, 5, b"p1-1")], "lost"),
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
