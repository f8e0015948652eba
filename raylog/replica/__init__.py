"""One partition replica: plain Python, no Ray (docs/replication.md).

- partition.py: a replica as leader or follower over its log: appends, fetches, the high
  watermark, truncation, reads; the broker's hosts (actors/hosting.py) hold one per replica.
- producer_state.py: the leader's view of each idempotent producer's sequences and epochs,
  snapshotted beside the log.
- epochs.py: the leader-epoch cache beside each replica's log.
- truncation.py: where a replica that becomes follower truncates its log (KIP-101, KIP-279).
- isr.py: the leader's view of its followers: ISR, high watermark, acks=all.
- lock_waits.py: the replicas a broker opens again once another process of its own (one
  being replaced) lets go of their directory.
"""
