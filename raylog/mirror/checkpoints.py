"""The checkpoint topic on the target, and turning a group's checkpoint into its offsets.

``_mirror.<alias>.checkpoints`` (one partition, compacted) holds what
:mod:`.translation` describes: each mirrored partition's offset syncs, and each source
group's committed offsets with their target translation. The mirror writes it every
``checkpoint_interval_ms`` and when it stops; :func:`translate_group` (``raylog groups
translate``) reads it and commits a group's translated offsets on the target, so that the
group's consumers resume there where they stopped on the source.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable

from raylog.client.admin import Admin
from raylog.client.connection import RaylogCluster, cluster_or_default
from raylog.client.consumer import Consumer
from raylog.client.producer import Producer
from raylog.errors import TopicExistsError, UnknownTopicError
from raylog.mirror.naming import check_alias, checkpoints_topic, remote_topic
from raylog.mirror.translation import Checkpoints
from raylog.types import TopicPartition

READ_TIMEOUT_S = 60.0


class CheckpointStore:
    """Reads and appends the checkpoint topic of one alias on the target. Not safe for
    concurrent use."""

    def __init__(self, cluster: RaylogCluster, alias: str, replication_factor: int = 1) -> None:
        self.cluster = cluster
        self.topic = checkpoints_topic(alias)
        self.replication_factor = replication_factor
        self._producer: Producer | None = None

    def ensure(self) -> None:
        """Create the topic if it is not there."""
        admin = Admin(cluster=self.cluster)
        if self.topic in admin.list_topics():
            return
        with contextlib.suppress(TopicExistsError):  # another mirror of this alias made it
            admin.create_topic(self.topic, 1, self.replication_factor,
                               {"cleanup.policy": "compact"})

    def load(self) -> Checkpoints:
        return read_checkpoints(self.cluster, self.topic)

    def write(self, records: Iterable[tuple[bytes, bytes]]) -> None:
        """Append ``(key, value)`` records and wait until the in-sync replicas have them."""
        if self._producer is None:
            self._producer = Producer(cluster=self.cluster, acks="all", linger_ms=0)
        for key, value in records:
            self._producer.send(self.topic, value, key=key)
        self._producer.flush()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()


def read_checkpoints(cluster: RaylogCluster, topic: str) -> Checkpoints:
    """Everything the checkpoint topic holds now, folded per key."""
    found = Checkpoints()
    tp = TopicPartition(topic, 0)
    with Consumer(cluster=cluster, auto_offset_reset="earliest",
                  max_poll_records=10_000) as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        deadline = time.monotonic() + READ_TIMEOUT_S
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=200):
                found.add(record.key, record.value, record.timestamp)
    return found


def translate_group(group_id: str, alias: str, *, cluster: RaylogCluster | None = None,
                    dry_run: bool = False) -> dict[TopicPartition, tuple[int, int]]:
    """Commit on the target the offsets of ``group_id`` that the mirror of ``alias``
    translated from the source's at its last checkpoint, so the group's consumers can
    resume on the remote topics (``<alias>.<topic>``) where they stopped on the source.
    The group must have no active members on the target (GroupNotEmptyError).

    Returns (remote topic, partition) -> (source offset, target offset). With ``dry_run``
    nothing is committed. Raises UnknownTopicError when the alias has no checkpoints, or
    the group none in them.

    >>> translate_group("reports", "east")
    {TopicPartition(topic='east.pageviews', partition=0): (1200, 1180), ...}
    """
    check_alias(alias)
    cluster = cluster_or_default(cluster)
    topic = checkpoints_topic(alias)
    admin = Admin(cluster=cluster)
    if topic not in admin.list_topics():
        raise UnknownTopicError(f"no checkpoints of alias {alias!r} on this cluster ({topic} "
                                f"does not exist): is a mirror of {alias!r} running into it?")
    offsets = read_checkpoints(cluster, topic).group_offsets(group_id)
    if not offsets:
        raise UnknownTopicError(f"the checkpoints of {alias!r} hold no offsets of group "
                                f"{group_id!r}: it has committed none on the source for the "
                                f"mirrored topics, or no checkpoint was written since")
    plan = {TopicPartition(remote_topic(alias, t), p): pair
            for (t, p), pair in sorted(offsets.items())}
    if not dry_run:
        for tp, (_, target) in plan.items():
            admin.reset_offsets(group_id, tp.topic, target, [tp.partition])
    return plan
