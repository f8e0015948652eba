"""Kafka's error codes by name, as the gateway's handlers answer them.

Which code a raylog error is answered with is decided in one place,
raylog/kafka/error_codes.py (``code_of`` here is it); a client decides what to do from the
code alone: NOT_LEADER_OR_FOLLOWER and LEADER_NOT_AVAILABLE make it refresh its metadata
and retry, UNKNOWN_TOPIC_OR_PARTITION makes it wait for the topic or fail (Kafka's
``Errors.java``). Plain Python.
"""

from __future__ import annotations

import enum

from raylog.kafka.error_codes import kafka_error_code


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
    FENCED_INSTANCE_ID = 82
    # transactions (raylog/kafka/gateway/transactions.py)
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    OPERATION_NOT_ATTEMPTED = 55
    PRODUCER_FENCED = 90
    # logging in (raylog/kafka/gateway/sasl.py)
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    SASL_AUTHENTICATION_FAILED = 58
    # users (raylog/kafka/gateway/scram_users.py)
    CLUSTER_AUTHORIZATION_FAILED = 31
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    # ACLs (raylog/kafka/gateway/access.py, acls.py)
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    SECURITY_DISABLED = 54


def code_of(error: BaseException) -> int:
    """The Kafka code to answer ``error`` with (raylog/kafka/error_codes.py decides)."""
    return kafka_error_code(error)


def refreshes_metadata(code: int) -> bool:
    """Whether an answer with ``code`` means the gateway's own cached metadata of the
    partition is stale (its next request for it asks the controller)."""
    return code in (Code.NOT_LEADER_OR_FOLLOWER, Code.LEADER_NOT_AVAILABLE,
                    Code.FENCED_LEADER_EPOCH, Code.UNKNOWN_LEADER_EPOCH,
                    Code.UNKNOWN_TOPIC_OR_PARTITION)
