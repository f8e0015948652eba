"""The Kafka error code of each typed error the gateway may answer with."""

from __future__ import annotations

import pytest

from raylog import errors
from raylog.kafka.error_codes import UNKNOWN_SERVER_ERROR, kafka_error_code


@pytest.mark.parametrize(("error", "code"), [
    (errors.NotLeaderError, 6),
    (errors.BrokerStalledError, 6),  # a NotLeaderError: the nearest mapped class wins
    (errors.CorruptRecordError, 2),
    (errors.UnknownTopicError, 3),
    (errors.NotEnoughReplicasError, 19),
    (errors.NotEnoughReplicasAfterAppendError, 20),
    (errors.OutOfOrderSequenceError, 45),
    (errors.UnknownProducerIdError, 59),  # an OutOfOrderSequenceError, mapped on its own
    (errors.InvalidProducerEpochError, 47),
    (errors.RecordTooLargeError, 10),
    (errors.FencedEpochError, 74),
    (errors.InvalidRecordError, 87),
    (errors.UnsupportedMessageFormatError, 43),
    (errors.InvalidKafkaBatchError, 87),
    (errors.InvalidTimestampError, 32),
    (errors.TransactionsUnsupportedError, 48),
    (errors.CorruptSnapshotError, 56),  # a StorageError
    (errors.InternalError, UNKNOWN_SERVER_ERROR),
    (ValueError, UNKNOWN_SERVER_ERROR),
])
def test_codes(error, code):
    assert kafka_error_code(error("x")) == code


def test_the_kafka_errors_carry_their_code_as_a_class_attribute():
    assert errors.UnsupportedMessageFormatError.kafka_code == 43
    assert isinstance(errors.InvalidKafkaBatchError("x"), errors.InvalidRecordError)
