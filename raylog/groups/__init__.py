"""Consumer groups: plain Python, no Ray (docs/groups.md).

- group.py: one group's members, target assignment and ownership.
- coordinator.py: every consumer group of a cluster and their committed offsets.
- assignors.py: range, round-robin and cooperative-sticky assignment.
- store.py: what the coordinator writes to ``__consumer_offsets``, and when it becomes true.
- offsets_writer.py: the coordinator's appends to one partition of ``__consumer_offsets``.
- classic.py: Kafka's classic group protocol (JoinGroup rounds, SyncGroup, Heartbeat) over
  the coordinator, for Kafka clients' members (docs/kafka-groups.md).

The controller's group service (actors/groups.py) hosts the coordinator.
"""
