"""Produce requests decoded by hand (produce_frame) give what kafka-python's decoder gives
for the same frame, in every version the hand decoder reads, with the records left in the
frame; a frame it cannot read raises MalformedRequest, as kafka-python's refusal does."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import ProduceRequest

from raylog.kafka.gateway import produce_frame
from raylog.kafka.gateway.protocol import MalformedRequest, decode_request

# several topics and partitions, null and empty records, records whose compact length
# takes 1, 2 and 3 bytes, names that are not ASCII
TOPICS = [
    ("orders", [(0, b"abc"), (3, None), (5, b"")]),
    ("caf\u00e9", [(1, b"x" * 130), (2, b"z" * 20_000)]),
    ("empty", []),
]


def frame(version: int, transactional_id: str | None = None, acks: int = -1,
          client_id: str | None = "rdkafka", topics=TOPICS) -> bytes:
    cls = ProduceRequest[version]
    topic_cls = cls.TopicProduceData
    part_cls = topic_cls.PartitionProduceData
    request = cls(transactional_id=transactional_id, acks=acks, timeout_ms=30_000,
                  topic_data=[topic_cls(name=name, partition_data=[
                      part_cls(index=index, records=records) for index, records in parts])
                      for name, parts in topics])
    request.with_header(correlation_id=77, client_id=client_id)
    return bytes(request.encode(header=True))


def fields(body) -> tuple:
    return (body.transactional_id, body.acks, body.timeout_ms,
            [(t.name, [(p.index, None if p.records is None else bytes(p.records))
                       for p in t.partition_data]) for t in body.topic_data])


VERSIONS = range(produce_frame.MIN_VERSION, produce_frame.MAX_VERSION + 1)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "tx-\u00e9"])
@pytest.mark.parametrize("client_id", [None, "rdkafka", ""])
def test_decodes_as_kafka_python_does(version, transactional_id, client_id):
    data = frame(version, transactional_id, 1, client_id)
    assert produce_frame.decodes(0, version)
    ours, theirs = produce_frame.decode(data), decode_request(data)
    assert (ours.api_key, ours.api_version, ours.correlation_id, ours.client_id) == \
        (theirs.api_key, theirs.api_version, theirs.correlation_id, theirs.client_id) == \
        (0, version, 77, client_id)
    assert fields(ours.body) == fields(theirs.body)
    assert ours.body.version == version


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_records_are_views_of_the_frame(version):
    data = bytearray(frame(version))
    records = produce_frame.decode(data).body.topic_data[1].partition_data[1].records
    assert isinstance(records, memoryview)
    data[data.index(b"z" * 20_000)] = ord("!")  # the view sees a change of the frame
    assert bytes(records[:1]) == b"!"


def test_other_keys_and_versions_are_left_to_kafka_python():
    assert not produce_frame.decodes(0, 2)
    assert not produce_frame.decodes(0, 12)
    assert not produce_frame.decodes(1, 5)


def tagged(version: int) -> bytes:
    """A v9+ frame with unknown tagged fields in the header, each struct and the body."""
    empty = frame(version, topics=[("t", [(0, b"ab")])])
    # header: fixed 8 bytes, client_id (2 + 7), then its tag section
    pos = 8 + 2 + len("rdkafka")
    assert empty[pos] == 0
    tag = b"\x01\x05\x02xy"  # one field: tag 5, 2 bytes
    out = bytearray(empty[:pos]) + tag
    rest = empty[pos + 1:]
    # body: transactional_id (null: 0), acks, timeout, topics count, name, partitions count,
    # index, records (compact: 3 then "ab"), then partition, topic and body tag sections
    assert rest.endswith(b"\x03ab\x00\x00\x00")
    return bytes(out + rest[:-3] + tag * 3)


@pytest.mark.parametrize("version", [9, 11])
def test_unknown_tagged_fields_are_skipped(version):
    data = tagged(version)
    ours = produce_frame.decode(data)
    assert fields(ours.body) == fields(decode_request(data).body) == \
        (None, -1, 30_000, [("t", [(0, b"ab")])])
    assert ours.client_id == "rdkafka"


@pytest.mark.parametrize("version", [3, 9])
def test_bytes_after_the_body_are_ignored_as_kafka_python_does(version):
    data = frame(version) + b"junk"
    assert fields(produce_frame.decode(data).body) == fields(decode_request(data).body)


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_a_truncated_frame_is_malformed(version):
    data = frame(version)
    for cut in (3, 9, 20, len(data) // 2, len(data) - 20_001, len(data) - 1):
        with pytest.raises(MalformedRequest):
            produce_frame.decode(data[:cut])


@pytest.mark.parametrize("version", [3, 9])
def test_records_longer_than_the_frame_are_malformed(version):
    data = bytearray(frame(version, topics=[("t", [(0, b"ab")])]))
    if version >= produce_frame.FLEXIBLE_FROM:
        data[data.index(b"\x03ab")] = 0x10  # 15 bytes, 2 there
    else:
        pos = data.index(b"\x00\x00\x00\x02ab")
        data[pos + 3] = 0x10
    with pytest.raises(MalformedRequest):
        produce_frame.decode(bytes(data))


def test_negative_sizes_other_than_null_are_malformed():
    data = bytearray(frame(3, topics=[("t", [(0, b"ab")])]))
    pos = data.index(b"\x00\x00\x00\x02ab")
    data[pos:pos + 4] = b"\xff\xff\xff\xfe"  # records of length -2
    with pytest.raises(MalformedRequest):
        produce_frame.decode(bytes(data))
    data = bytearray(frame(3, topics=[("t", [(0, b"ab")])]))
    pos = data.index(b"\x00\x01t")
    data[pos:pos + 2] = b"\xff\xfe"  # a topic name of length -2
    with pytest.raises(MalformedRequest):
        produce_frame.decode(bytes(data))


def test_a_name_that_is_not_utf8_is_malformed():
    data = bytearray(frame(3, topics=[("t", [(0, b"ab")])]))
    data[data.index(b"\x00\x01t") + 2] = 0xFF
    with pytest.raises(MalformedRequest):
        produce_frame.decode(bytes(data))
    with pytest.raises(MalformedRequest):
        decode_request(bytes(data))
