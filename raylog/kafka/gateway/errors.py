"""Kafka's error codes, and the code each raylog error is answered with.

A Kafka client decides what to do from the code alone: NOT_LEADER_OR_FOLLOWER and
LEADER_NOT_AVAILABLE make it refresh its metadata and retry, UNKNOWN_TOPIC_OR_PARTITION
makes it wait for the topic or fail, and so on (Kafka's ``Errors.java``). So the mapping
below keeps raylog's meaning: a retriable raylog error becomes a retriable Kafka code.
An error that carries its own code (``kafka_code``, as the records translation's do) is
answered with it. Plain Python.
"""

from __future__ import annotations

import enum

from raylog import errors as e


class Code(enum.IntEnum):
    """The Kafka error codes the gateway answers with (Kafka's names)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_NOT_AVAILABLE = 15
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78
    INVALID_RECORD = 87
    RESOURCE_NOT_FOUND = 91
    # consumer groups (raylog/kafka/gateway/groups.py)
    COORDINATOR_LOAD_IN_PROGRESS = 14
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79


# Most specific first: the first class an error is an instance of gives its code.
_CODES: tuple[tuple[type[BaseException], Code], ...] = (
    # consumer groups (raylog/kafka/gateway/groups.py)
    (e.UnknownMemberError, Code.UNKNOWN_MEMBER_ID),
    (e.IllegalGenerationError, Code.ILLEGAL_GENERATION),
    (e.NotPartitionOwnerError, Code.ILLEGAL_GENERATION),  # the member rejoins
    (e.RebalanceInProgressError, Code.REBALANCE_IN_PROGRESS),
    (e.RejoinRequiredError, Code.REBALANCE_IN_PROGRESS),
    (e.MemberIdRequiredError, Code.MEMBER_ID_REQUIRED),
    (e.InconsistentGroupProtocolError, Code.INCONSISTENT_GROUP_PROTOCOL),
    (e.GroupNotEmptyError, Code.NON_EMPTY_GROUP),
    (e.UnknownGroupError, Code.GROUP_ID_NOT_FOUND),
    (e.UnknownTopicError, Code.UNKNOWN_TOPIC_OR_PARTITION),
    (e.UnknownPartitionError, Code.UNKNOWN_TOPIC_OR_PARTITION),
    (e.InvalidTopicError, Code.INVALID_TOPIC_EXCEPTION),
    (e.TopicExistsError, Code.TOPIC_ALREADY_EXISTS),
    (e.InvalidPartitionsError, Code.INVALID_PARTITIONS),
    (e.InvalidReplicationFactorError, Code.INVALID_REPLICATION_FACTOR),
    (e.NoBrokersError, Code.INVALID_REPLICATION_FACTOR),
    (e.InvalidConfigError, Code.INVALID_CONFIG),
    (e.NotLeaderError, Code.NOT_LEADER_OR_FOLLOWER),  # BrokerStalledError too
    (e.LeaderNotAvailableError, Code.LEADER_NOT_AVAILABLE),
    (e.ActorUnavailableError, Code.NOT_LEADER_OR_FOLLOWER),
    (e.FencedEpochError, Code.FENCED_LEADER_EPOCH),
    (e.UnknownLeaderEpochError, Code.UNKNOWN_LEADER_EPOCH),
    (e.NotEnoughReplicasAfterAppendError, Code.NOT_ENOUGH_REPLICAS_AFTER_APPEND),
    (e.NotEnoughReplicasError, Code.NOT_ENOUGH_REPLICAS),
    (e.RequestTimeoutError, Code.REQUEST_TIMED_OUT),
    (e.RecordTooLargeError, Code.MESSAGE_TOO_LARGE),
    (e.CorruptRecordError, Code.CORRUPT_MESSAGE),
    (e.InvalidRecordError, Code.INVALID_RECORD),
    (e.OffsetNotAvailableError, Code.OFFSET_NOT_AVAILABLE),
    (e.OffsetOutOfRangeError, Code.OFFSET_OUT_OF_RANGE),
    (e.UnknownProducerIdError, Code.UNKNOWN_PRODUCER_ID),
    (e.OutOfOrderSequenceError, Code.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (e.InvalidProducerEpochError, Code.INVALID_PRODUCER_EPOCH),
    (e.StorageError, Code.KAFKA_STORAGE_ERROR),
    (e.NoClusterError, Code.REQUEST_TIMED_OUT),  # the controller restarts: try again
    (e.InvalidArgumentError, Code.INVALID_REQUEST),
)


def code_of(error: BaseException) -> Code:
    """The Kafka code to answer ``error`` with (UNKNOWN_SERVER_ERROR for anything else)."""
    own = getattr(error, "kafka_code", None)
    if isinstance(own, int):
        return Code(own) if own in Code._value2member_map_ else own  # type: ignore[return-value]
    for cls, code in _CODES:
        if isinstance(error, cls):
            return code
    return Code.UNKNOWN_SERVER_ERROR


def refreshes_metadata(code: int) -> bool:
    """Whether an answer with ``code`` means the gateway's own cached metadata of the
    partition is stale (its next request for it asks the controller)."""
    return code in (Code.NOT_LEADER_OR_FOLLOWER, Code.LEADER_NOT_AVAILABLE,
                    Code.FENCED_LEADER_EPOCH, Code.UNKNOWN_LEADER_EPOCH,
                    Code.UNKNOWN_TOPIC_OR_PARTITION)
