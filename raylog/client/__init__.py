"""Clients: producer, consumer and admin, and the connection they share.

They find raylog's actors by name and never start them (``raylog.init`` does: raylog/session.py).
"""

from raylog.client.admin import Admin
from raylog.client.connection import RaylogCluster
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
]
