"""Cluster metadata: the event-sourced state the controller owns, its log, and placement."""

from raylog.metadata.placement import assign_replicas
from raylog.metadata.state import MetadataState, PartitionState, TopicState
from raylog.metadata.store import MetadataStore

__all__ = ["MetadataState", "MetadataStore", "PartitionState", "TopicState", "assign_replicas"]
