"""The transaction coordinator's ``write`` seam over ``__transaction_state``: one record
appended (acks=all) to the partition's leader, durable when :meth:`StateWriter.write`
returns.

The writing is the group coordinator's (raylog/groups/offsets_writer.py): one
:class:`OffsetsWriter` per partition, one batch in flight, each batch numbered as an
idempotent producer's so that a batch sent again after a lost answer (a timeout, a leader
that moved or died) lands once, and the order of the log is the order of the writes. An id's
records all go to one partition, so they land in the order the coordinator decided them.

A write waits up to ``timeout_s``: one not yet taken into a batch by then is withdrawn (never
written) and RequestTimeoutError says so; one on its way gets RequestTimeoutError and may
still reach the log, where the next record of the id supersedes it (the coordinator keeps
nothing of a write that raised). Plain asyncio over an injected ``append``; one event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from raylog.groups.offsets_writer import BACKOFF_S, Append, PartitionWriters
from raylog.groups.store import SettledWrite
from raylog.metadata.topics import TRANSACTION_STATE_TOPIC
from raylog.transactions.log import Record

WRITE_WAIT_S = 30.0  # a step waits this long for its record to be in __transaction_state


class RecordWrite(SettledWrite):
    """One record of __transaction_state: settled with None once durable, or with the
    leader's refusal."""

    def __init__(self, record: Record) -> None:
        super().__init__()
        self.record = record

    def records(self) -> list[Record]:
        return [self.record]

    def durable(self) -> None:
        self.settle(None)

    def failed(self, error: BaseException) -> None:
        self.settle(error)


class StateWriter:
    """The writers of __transaction_state's partitions, each started on first use with
    ``start`` (which runs a coroutine in the background and returns its task)."""

    def __init__(self, append: Append, new_producer_id: Callable[[], int],
                 start: Callable[[Coroutine[Any, Any, None]], object], *,
                 timeout_s: float = WRITE_WAIT_S,
                 backoff_s: tuple[float, float] = BACKOFF_S) -> None:
        self.timeout_s = timeout_s
        self._writers = PartitionWriters(append, new_producer_id, start, backoff_s=backoff_s,
                                         topic=TRANSACTION_STATE_TOPIC)

    async def write(self, partition: int, record: Record) -> None:
        """Append ``record`` to ``partition``; return once it is durable. Raises the
        leader's refusal, or RequestTimeoutError after ``timeout_s``."""
        name = f"{TRANSACTION_STATE_TOPIC}-{partition}"
        await RecordWrite(record).submitted(
            self._writers(partition), self.timeout_s,
            f"{name}: the record was not written within {self.timeout_s:.0f} s; nothing was "
            f"stored",
            f"{name}: the record is still being written after {self.timeout_s:.0f} s; it may "
            f"reach the log, where the next record of the id supersedes it")

    def idle(self) -> bool:
        return self._writers.idle()

    def close(self) -> None:
        """Stop every writer (a coordinator that is replaced: its writes end unsettled)."""
        self._writers.close()
