"""Small value types the clients hand to users."""

from __future__ import annotations

from typing import NamedTuple

# The two named offsets a partition answers for (``list_offset``, a consumer's
# ``auto_offset_reset``, a read's bounds): its log start, and its high watermark.
EARLIEST = "earliest"
LATEST = "latest"
# A leader's last stable offset (transactions): where a read_committed consumer's "latest" is.
LAST_STABLE = "last_stable"


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class ConsumerGroupMetadata(NamedTuple):
    """What a transactional producer needs of a consumer's group to commit offsets in a
    transaction (``Consumer.group_metadata()``, as Kafka's): the group, and the member and
    generation the group coordinator checks, as for the consumer's own commits."""

    group_id: str
    member_id: str | None
    generation: int


class PreparedTransaction(NamedTuple):
    """A transaction whose producer sent everything and stopped
    (``Producer.prepare_transaction()``), left open to be committed with others by
    ``Admin.commit_transactions`` (all or none)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class NewTopic(NamedTuple):
    """A topic for ``Admin.create_topics``, as kafka-python's ``NewTopic``."""

    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    topic_configs: dict | None = None


class RecordMetadata(NamedTuple):
    """Where a produced record landed. ``offset`` is -1 with ``acks=0``."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    """One record as a consumer sees it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
