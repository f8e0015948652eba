"""Transactions: the transaction coordinator's state, plain Python, no Ray
(docs/transactions.md).

- state.py: one transactional id's states, legal transitions and metadata.
- coordinator.py: every transactional id's producer and transaction, each change written to
  ``__transaction_state`` before it is kept.
- log.py: the records of ``__transaction_state`` and the state replayed from them.

Markers, the last stable offset and the aborted-transaction index are the log's
(raylog/records, raylog/replica, raylog/storage; docs/storage.md).
"""
