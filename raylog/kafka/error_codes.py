"""The Kafka error code each of raylog's typed errors stands for, for answers on the wire.

Errors added for Kafka carry their code as a ``kafka_code`` class attribute; raylog's older
errors are mapped here, by class, the nearest subclass winning (BrokerStalledError is a
NotLeaderError: NOT_LEADER_OR_FOLLOWER). Anything else is UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from raylog import errors as e

NONE = 0
UNKNOWN_SERVER_ERROR = -1

_CODES: dict[type[BaseException], int] = {
    e.OffsetOutOfRangeError: 1,  # OFFSET_OUT_OF_RANGE
    e.CorruptRecordError: 2,  # CORRUPT_MESSAGE
    e.UnknownTopicError: 3,  # UNKNOWN_TOPIC_OR_PARTITION
    e.UnknownPartitionError: 3,
    e.LeaderNotAvailableError: 5,  # LEADER_NOT_AVAILABLE
    e.NotLeaderError: 6,  # NOT_LEADER_OR_FOLLOWER
    e.ActorUnavailableError: 6,  # the replica's host is down: refresh metadata, retry
    e.RequestTimeoutError: 7,  # REQUEST_TIMED_OUT
    e.NoBrokersError: 8,  # BROKER_NOT_AVAILABLE
    e.RecordTooLargeError: 10,  # MESSAGE_TOO_LARGE
    e.InvalidTopicError: 17,  # INVALID_TOPIC_EXCEPTION
    e.NotEnoughReplicasError: 19,  # NOT_ENOUGH_REPLICAS
    e.NotEnoughReplicasAfterAppendError: 20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    e.IllegalGenerationError: 22,  # ILLEGAL_GENERATION
    e.UnknownMemberError: 25,  # UNKNOWN_MEMBER_ID
    e.NotPartitionOwnerError: 22,  # ILLEGAL_GENERATION: the member rejoins
    e.RejoinRequiredError: 27,  # REBALANCE_IN_PROGRESS: the member joins again
    e.TopicExistsError: 36,  # TOPIC_ALREADY_EXISTS
    e.InvalidPartitionsError: 37,  # INVALID_PARTITIONS
    e.InvalidReplicationFactorError: 38,  # INVALID_REPLICATION_FACTOR
    e.InvalidConfigError: 40,  # INVALID_CONFIG
    e.InvalidArgumentError: 42,  # INVALID_REQUEST
    e.OutOfOrderSequenceError: 45,  # OUT_OF_ORDER_SEQUENCE_NUMBER
    e.InvalidProducerEpochError: 47,  # INVALID_PRODUCER_EPOCH
    e.StorageError: 56,  # KAFKA_STORAGE_ERROR
    e.UnknownProducerIdError: 59,  # UNKNOWN_PRODUCER_ID
    e.GroupNotEmptyError: 68,  # NON_EMPTY_GROUP
    e.UnknownGroupError: 69,  # GROUP_ID_NOT_FOUND
    e.FencedEpochError: 74,  # FENCED_LEADER_EPOCH
    e.UnknownLeaderEpochError: 75,  # UNKNOWN_LEADER_EPOCH
    e.OffsetNotAvailableError: 78,  # OFFSET_NOT_AVAILABLE
    e.InvalidRecordError: 87,  # INVALID_RECORD
}


def kafka_error_code(error: BaseException) -> int:
    """The Kafka error code for ``error``: its ``kafka_code`` if it has one, else that of
    its nearest mapped class, else UNKNOWN_SERVER_ERROR (-1).

    >>> kafka_error_code(e.NotLeaderError("moved"))
    6
    """
    code = getattr(error, "kafka_code", None)
    if isinstance(code, int):
        return code
    for cls in type(error).__mro__:
        if cls in _CODES:
            return _CODES[cls]
    return UNKNOWN_SERVER_ERROR
