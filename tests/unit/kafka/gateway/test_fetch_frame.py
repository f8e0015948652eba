"""Fetch's answer encoded by hand (fetch_frame) is, byte for byte, kafka-python's encoding
of the same answer, in every version the listener serves."""

from __future__ import annotations

import pytest

from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.fetch_frame import MAX_VERSION, MIN_VERSION, FetchAnswer, Partition
from raylog.kafka.gateway.protocol import encode_response, response_class

# (topic, [(partition, error code, high watermark, log start, record pieces)]): several
# topics, an error, a partition with no records, records in several pieces, a records
# length whose varint takes 1, 2 and 3 bytes, a name that is not ASCII
TOPICS = [
    ("orders", [(0, Code.NONE, 10, 2, [b"abc", b"defg"]),
                (3, Code.NOT_LEADER_OR_FOLLOWER, -1, -1, []),
                (5, Code.NONE, 7, 7, [])]),
    ("caf\u00e9", [(1, Code.NONE, 5, 0, [b"x" * 61, b"y" * 300]),
                   (2, Code.NONE, 1 << 40, 3, [b"z" * 20_000])]),
]


def kafka_pythons(version: int, correlation_id: int) -> bytes:
    cls = response_class(1, version)
    topic_cls = cls.FetchableTopicResponse
    part_cls = topic_cls.PartitionData
    answer = cls(throttle_time_ms=0, error_code=Code.NONE, session_id=0, responses=[
        topic_cls(topic=name, partitions=[part_cls(
            partition_index=index, error_code=code, high_watermark=hw, last_stable_offset=hw,
            log_start_offset=start, aborted_transactions=None, preferred_read_replica=-1,
            records=b"".join(pieces)) for index, code, hw, start, pieces in parts])
        for name, parts in TOPICS])
    return b"".join(bytes(piece) for piece in encode_response(answer, version, correlation_id))


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_the_hand_encoded_answer_is_kafka_pythons(version):
    answer = FetchAnswer(version, [(name, [Partition(*p) for p in parts])
                                   for name, parts in TOPICS])
    pieces = encode_response(answer, version, 4242)
    assert b"".join(pieces) == kafka_pythons(version, 4242)
    # the records are written as they were given, not copied
    given = [id(piece) for _, parts in TOPICS for *_, records in parts for piece in records]
    assert set(given) <= {id(piece) for piece in pieces}


@pytest.mark.parametrize("version", [MIN_VERSION, MAX_VERSION])
def test_an_answer_with_no_topics(version):
    assert b"".join(FetchAnswer(version, []).frame(1)) == \
        b"".join(bytes(p) for p in encode_response(
            response_class(1, version)(throttle_time_ms=0, error_code=0, session_id=0,
                                       responses=[]), version, 1))


# read_committed: (partition, high watermark, last stable offset, aborted transactions)
COMMITTED = [(0, 20, 12, [(7, 3), (1 << 50, 9)]), (1, 5, 5, [])]


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_a_read_committed_answer_carries_the_lso_and_aborted_transactions(version):
    answer = FetchAnswer(version, [("t", [
        Partition(index, Code.NONE, hw, 0, [b"r" * 70], last_stable_offset=lso,
                  aborted=aborted) for index, hw, lso, aborted in COMMITTED])])
    cls = response_class(1, version)
    topic_cls = cls.FetchableTopicResponse
    part_cls = topic_cls.PartitionData
    aborted_cls = part_cls.AbortedTransaction
    expected = cls(throttle_time_ms=0, error_code=Code.NONE, session_id=0, responses=[
        topic_cls(topic="t", partitions=[part_cls(
            partition_index=index, error_code=Code.NONE, high_watermark=hw,
            last_stable_offset=lso, log_start_offset=0, aborted_transactions=[
                aborted_cls(producer_id=pid, first_offset=first) for pid, first in aborted],
            preferred_read_replica=-1, records=b"r" * 70)
            for index, hw, lso, aborted in COMMITTED])])
    assert b"".join(encode_response(answer, version, 7)) == \
        b"".join(bytes(p) for p in encode_response(expected, version, 7))
