"""Clients: producer, consumer and admin, and the connection they share."""

from raylog.client.admin import Admin
from raylog.client.connection import RaylogCluster, init
from raylog.client.consumer import Consumer, ConsumerConfig
from raylog.client.producer import Producer, ProducerConfig
from raylog.types import (
    ConsumerRecord,
    NewTopic,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRecord",
    "NewTopic",
    "OffsetAndTimestamp",
    "Producer",
    "ProducerConfig",
    "RaylogCluster",
    "RecordMetadata",
    "TopicPartition",
    "init",
]
