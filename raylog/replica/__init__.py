"""Replication rules: plain Python, no Ray (docs/replication.md).

- epochs.py: the leader-epoch cache beside each replica's log.
- truncation.py: where a replica that becomes follower truncates its log (KIP-101, KIP-279).
- isr.py: the leader's view of its followers: ISR, high watermark, acks=all.

The replica actor does not use them yet.
"""
