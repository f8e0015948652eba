"""Offsets committed inside a transaction (Kafka's TxnOffsetCommit): pending until their
transaction's marker is in the group's partition of ``__consumer_offsets``.

A transactional producer's ``send_offsets_to_transaction`` has the group coordinator append
the group's offset records to the group's ``__consumer_offsets`` partition as a
*transactional* batch carrying the producer's id and epoch (and a sequence of its own in
that partition, so that a batch sent again after a lost answer is not appended twice). They
are held here as *pending* for that producer and partition, not committed: the group's
committed offsets change only when the transaction coordinator's commit marker for the
producer is in that partition (:meth:`TxnOffsets.end` hands them to the coordinator to
apply), and an abort marker drops them. While a partition of a group has pending offsets,
a reader asking for stable offsets is answered UnstableOffsetCommitError (retriable).

The log is the truth: replaying ``__consumer_offsets`` (:meth:`TxnOffsets.replay_batch`)
puts a transactional batch's offsets back as pending and applies the marker found after
it, so a coordinator restarted in the middle of a transaction keeps them pending until
its marker arrives. A marker ends every pending offset of its producer in its partition,
whatever the epoch they were written at (a fence's abort marker carries a newer epoch).

Plain Python, owned by the GroupCoordinator; one event loop, not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from raylog.errors import (
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from raylog.records import Codec, encode
from raylog.records.builder import BatchBuilder
from raylog.types import TopicPartition

Record = tuple[bytes, bytes | None]
# The offsets of one transactional batch, by group: what a marker commits or drops.
GroupOffsets = dict[str, dict[TopicPartition, Any]]


class TxnOffsets:
    """Pending transactional offsets, keyed by (``__consumer_offsets`` partition, producer
    id), then group and partition, later writes over earlier; and, per partition and
    producer, the epoch and next sequence of the producer's batches there.

    Invariant: ``sequences[(p, pid)]`` is (epoch, next sequence) as the partition's leader
    has it after every batch of ``pid`` appended to ``p`` that this object was told of
    (through :meth:`appended` or the replay); a marker of a newer epoch starts it at 0, as
    the leader's producer state does.
    """

    def __init__(self) -> None:
        self.pending: dict[tuple[int, int], GroupOffsets] = {}
        self.sequences: dict[tuple[int, int], tuple[int, int]] = {}

    def next_sequence(self, partition: int, producer_id: int, producer_epoch: int) -> int:
        """The sequence the producer's next batch to ``partition`` takes at its epoch."""
        epoch, sequence = self.sequences.get((partition, producer_id), (-1, 0))
        return sequence if epoch == producer_epoch else 0

    def appended(self, partition: int, producer_id: int, producer_epoch: int,
                 base_sequence: int, count: int, offsets: GroupOffsets) -> None:
        """A transactional batch of ``count`` records is in the log: its offsets pend."""
        self.sequences[(partition, producer_id)] = (producer_epoch, base_sequence + count)
        mine = self.pending.setdefault((partition, producer_id), {})
        for group_id, entries in offsets.items():
            mine.setdefault(group_id, {}).update(entries)

    def end(self, partition: int, producer_id: int, producer_epoch: int, commit: bool
            ) -> GroupOffsets:
        """A marker of the producer is in ``partition``: its pending offsets there leave;
        returned to be applied for a commit (in the order they were written), {} for an
        abort. A marker seen again (a retry, or the replay and the marker writer both
        telling it) finds nothing left."""
        if producer_epoch > self.sequences.get((partition, producer_id), (-1, 0))[0]:
            self.sequences[(partition, producer_id)] = (producer_epoch, 0)
        ended = self.pending.pop((partition, producer_id), {})
        return ended if commit else {}

    def unstable(self, group_id: str, partitions: Iterable[TopicPartition]
                 ) -> list[TopicPartition]:
        """Those of ``partitions`` with offsets of ``group_id`` pending in a transaction."""
        held = self.pending_of(group_id)
        return sorted(tp for tp in partitions if tp in held)

    def pending_of(self, group_id: str) -> dict[TopicPartition, Any]:
        out: dict[TopicPartition, Any] = {}
        for groups in self.pending.values():
            out.update(groups.get(group_id, {}))
        return out



def transactional_batch(records: list[Record], producer_id: int, producer_epoch: int,
                        base_sequence: int, timestamp_ms: int) -> bytes:
    """The batch of a transaction's offset records: the producer's id, epoch and sequence,
    the transactional bit."""
    builder = BatchBuilder(codec=Codec.LZ4)
    for key, value in records:
        builder.append(timestamp_ms, key, value)
    return encode(builder.columns(), codec=Codec.LZ4, producer_id=producer_id,
                  producer_epoch=producer_epoch, base_sequence=base_sequence,
                  first_timestamp=timestamp_ms, transactional=True)


def check_transaction(describe: Mapping[str, Any] | None, transactional_id: str,
                      producer_id: int, producer_epoch: int, group_id: str) -> None:
    """That the producer's transaction is open and holds ``group_id``'s offsets (its
    ``txn_add_offsets`` was answered), from the transaction coordinator's ``describe`` of
    the id (None: unknown there). Raises InvalidProducerIdMappingError for another producer
    or an unknown id, ProducerFencedError for a stale epoch, InvalidTxnStateError when no
    transaction holds the group's offsets."""
    if describe is None or describe["producer_id"] != producer_id:
        raise InvalidProducerIdMappingError(
            f"transactional id {transactional_id!r} does not belong to producer "
            f"{producer_id}" + ("" if describe is None else
                                f" (it is producer {describe['producer_id']}'s)"))
    if describe["producer_epoch"] != producer_epoch:
        raise ProducerFencedError(
            f"transactional id {transactional_id!r}: producer {producer_id} epoch "
            f"{producer_epoch} was fenced; the id is at epoch {describe['producer_epoch']}")
    if describe["state"] != "ONGOING" or group_id not in describe["groups"]:
        raise InvalidTxnStateError(
            f"transactional id {transactional_id!r} ({describe['state']}) holds no offsets "
            f"of group {group_id!r}: add them to the transaction first (txn_add_offsets)")

