"""One replica of one partition: its log, its role (leader or follower), the leader epoch and
the high watermark, and the replication rules that move them.

Plain Python: the broker actor hosts one :class:`Partition` per replica it holds and does
only the Ray and asyncio work around them (waiting for acknowledgements, long polls, the
fetcher that copies a leader's batches, asking the controller to change the ISR).

The controller decides who leads (:class:`LeaderAndIsr`, applied by :meth:`Partition.apply`).

- As **leader** a replica appends producers' batches (stamping its epoch), serves fetches
  below the high watermark, and tracks its followers (a :class:`ReplicaSet`): their log ends,
  the ISR it proposes to change, and the high watermark, the lowest log end in the ISR. Its
  own log counts up to ``log.committable_end_offset``: with ``flush.messages=1`` only what
  is synced, as a follower's fetch reports only what it synced (its log syncs each append
  before the next fetch is sent), so that acks=all means on disk at every in-sync replica.
- As **follower** it first truncates whatever it holds that the leader does not (asking the
  leader where its epochs ended, KIP-101/KIP-279: :meth:`truncation_step`), then appends the
  leader's batches as they are (:meth:`append_replicated`), with the leader's high watermark.
- Either may serve consumers below its own high watermark (a follower: reads from the
  nearest replica, KIP-392). Every request carries the leader epoch the caller knows: an
  older one is fenced (FencedEpochError), a newer one not yet known here is
  UnknownLeaderEpochError; both tell the caller to refresh its metadata.
- The high watermark a reader sees never goes back (KIP-207): a follower never lowers its
  own, and a new leader, whose high watermark lags the old leader's until its followers have
  fetched, answers offset lookups with OffsetNotAvailableError (retriable) until it has
  reached the start of its leader epoch, and range reads between its high watermark and its
  log end likewise: the records are here, and committed, but it cannot tell yet.

Transactions (docs/storage.md, "Transactions in the log"): leaders and followers alike
apply every batch, markers included, to the producer state, which knows each producer's
ongoing transaction; the **last stable offset** is the high watermark or the first offset
of the earliest ongoing transaction, whichever is lower. A transaction coordinator ends a
transaction here with :meth:`Partition.write_marker`; abort markers are indexed in the
log's aborted-transaction index. Reads take an isolation level: ``read_uncommitted`` (the
default) reads below the high watermark; ``read_committed`` reads below the last stable
offset, and either gets the aborted transactions of its range (:meth:`Partition.fetch`, for
clients that filter, as Kafka's fetch) or has their batches dropped here
(:meth:`Partition.read_table`, :meth:`Partition.read_batches`). Markers are never a record.

Producer state (the idempotent producer's sequences) and the leader-epoch cache follow the
log: both are rebuilt from the batches after a truncation; producer state is snapshotted at
segment rolls so that opening a large log does not read every batch header.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any, NamedTuple

import pyarrow as pa

from raylog.errors import (
    CorruptRecordError,
    FencedEpochError,
    InvalidArgumentError,
    InvalidBatchAttributesError,
    LeadershipLostAfterAppendError,
    NotLeaderError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from raylog.metadata.topics import REPLICATION_DEFAULTS, log_config
from raylog.records import TABLE_SCHEMA, parse_header, read_table
from raylog.records.control import Marker, MarkerType, control_batch, read_marker
from raylog.records.header import BatchHeader, check_crcs, iter_headers
from raylog.replica.epochs import LEADER_EPOCH_FILE, EpochEndOffset, LeaderEpochCache
from raylog.replica.isr import NO_BROKER_EPOCH, ReplicaSet
from raylog.replica.producer_state import REFUSED_FOR_GOOD, ProducerSnapshots, ProducerStates
from raylog.replica.truncation import Ask, Truncate, first_step, next_step
from raylog.storage import AppendInfo, PartitionLog
from raylog.storage.txn_index import AbortedTxn, aborted_or_control, without_batches
from raylog.types import EARLIEST, LAST_STABLE, LATEST
from raylog.util.clocks import wall_clock_ms


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"  # not told yet, or the partition has no leader


@dataclasses.dataclass(frozen=True)
class LeaderAndIsr:
    """What the controller tells a replica about its partition (Kafka's LeaderAndIsr)."""

    leader: int | None
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LeaderAndIsr:
        return cls(d["leader"], d["leader_epoch"], d["partition_epoch"],
                   tuple(d["replicas"]), tuple(d["isr"]))


@dataclasses.dataclass(frozen=True)
class AlterIsr:
    """One ISR change a leader asks the controller for (Kafka's AlterPartition): the ISR it
    wants, the leader and partition epochs it is based on, and the broker epoch each joining
    member fetched at. Sent again as it is while its outcome is unknown."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    broker_epochs: dict[int, int]  # joining members only
    replica_set: ReplicaSet = dataclasses.field(compare=False, repr=False)


class Transition(enum.Enum):
    """What :meth:`Partition.apply` did."""

    STALE = "stale"            # older than what the replica knows: ignored
    UNCHANGED = "unchanged"    # the same state again
    UPDATED = "updated"        # same leader and epoch; ISR or replicas changed
    LEADER = "leader"          # became leader at a new epoch
    FOLLOWER = "follower"      # follows a (new) leader: truncate, then fetch
    OFFLINE = "offline"        # the partition has no leader


READ_UNCOMMITTED = "read_uncommitted"  # below the high watermark, aborted records too
READ_COMMITTED = "read_committed"  # below the last stable offset, never an aborted record
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


class FetchResult(NamedTuple):
    """Batches from one partition and where the partition stands. A read_committed fetch
    also says the last stable offset and the aborted transactions overlapping what it may
    return (None for read_uncommitted; -1 where not said)."""

    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    aborted: tuple[AbortedTxn, ...] | None = None


class RemoteRange(NamedTuple):
    """What a tiered log's object store holds of a range read that starts below the local
    log start (actors/tiered.py reads it through the fetch path's verified remote read):
    the stored batches from the one holding the range's start, whole and as stored
    (markers and aborted transactions' batches still in), the offset from which the local
    log serves the rest (the end of the last batch read), and, for read_committed, the
    aborted transactions the remote ``txn.index`` objects list from the range's start on."""

    chunks: tuple[bytes, ...]
    until: int
    aborted: tuple[AbortedTxn, ...] = ()


class Partition:
    """A partition replica: leader, follower or offline, at a leader epoch, over one log.

    Invariants: ``log_start_offset <= high_watermark <= log_end_offset``; consumers never see
    records at or above the high watermark; offsets are assigned only by a leader, once; a
    follower's log is, after its truncation, a prefix of its leader's plus what it fetched.
    Time comes from ``clock`` (ms). Not safe for concurrent use: the broker serializes calls.
    """

    def __init__(self, topic: str, partition: int, log: PartitionLog, replica_id: int,
                 configs: dict[str, Any] | None = None,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.replica_id = replica_id
        self.clock = clock
        self.configs = {**REPLICATION_DEFAULTS, **(configs or {})}
        self.role = Role.OFFLINE
        self.leader_id: int | None = None
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.replica_set: ReplicaSet | None = None  # a leader's view of its followers
        self.last_truncation: int | None = None  # where records were last cut as follower
        self.snapshots = ProducerSnapshots(log.directory)
        # Recovery may have cut the log below a snapshot taken before a crash: that snapshot
        # describes records the log no longer has, and would turn a retry of one of them into
        # a false duplicate (as Kafka does, such snapshots go).
        self.snapshots.remove_above(log.log_end_offset)
        self.producers = ProducerStates()
        self._load_producers()
        # Which leader epoch wrote which offsets, beside the log (rebuilt from its batch
        # headers if the file is missing or damaged): what a follower's truncation asks.
        self.epochs = LeaderEpochCache.open(
            log.directory / LEADER_EPOCH_FILE, log.log_start_offset, log.log_end_offset,
            lambda: log.verified_headers(log.log_start_offset))
        self._snapshot_segment = log.active_segment.base_offset

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    # -- what the controller says --------------------------------------------------------------

    def apply(self, state: LeaderAndIsr) -> Transition:
        """Take the controller's word on leader, epochs, replicas and ISR. Stale words (an
        older partition epoch) are ignored; so is a leader epoch older than this replica's.
        The one step that can fail (writing the epoch cache of a new leader, say on a full
        disk) comes before any state changes: a failed apply leaves the replica as it was."""
        if state.partition_epoch < self.partition_epoch or state.leader_epoch < self.leader_epoch:
            return Transition.STALE
        if state.partition_epoch == self.partition_epoch and \
                state.leader_epoch == self.leader_epoch:
            return Transition.UNCHANGED
        leads = state.leader == self.replica_id
        same_epoch = state.leader_epoch == self.leader_epoch
        if leads and not (same_epoch and self.role is Role.LEADER):
            # As Kafka: the new epoch starts at the log end, so the leader can answer about
            # it before it writes anything.
            self.epochs.assign(state.leader_epoch, self.log_end_offset)
        self.partition_epoch = state.partition_epoch
        self.replicas, self.isr = tuple(state.replicas), tuple(state.isr)
        if leads:
            if same_epoch and self.role is Role.LEADER:
                self.replica_set.set_replicas(self.replicas)
                self._set_hw(self.replica_set.isr_changed(self.isr,
                                                          self.log.committable_end_offset))
                return Transition.UPDATED
            self._become_leader(state.leader_epoch)
            return Transition.LEADER
        was = (self.role, self.leader_id, self.leader_epoch)
        self.leader_id, self.leader_epoch = state.leader, state.leader_epoch
        self.replica_set = None
        self.role = Role.OFFLINE if state.leader is None else Role.FOLLOWER
        if (self.role, self.leader_id, self.leader_epoch) == was:
            return Transition.UPDATED
        return Transition.OFFLINE if state.leader is None else Transition.FOLLOWER

    def _become_leader(self, leader_epoch: int) -> None:
        """(The epoch cache has the new epoch already: see :meth:`apply`.)"""
        self.role = Role.LEADER
        self.leader_id, self.leader_epoch = self.replica_id, leader_epoch
        end = self.log_end_offset
        self.replica_set = ReplicaSet(
            self.replica_id, self.replicas, self.isr, leader_epoch, end,
            min(self.log.high_watermark, end), clock=self.clock,
            replica_lag_time_max_ms=self.configs["replica_lag_time_max_ms"])
        self._set_hw(self.replica_set.advance_high_watermark(self.log.committable_end_offset))

    def _set_hw(self, offset: int) -> None:
        self.log.update_high_watermark(offset)

    # -- checks --------------------------------------------------------------------------------

    def check_epoch(self, leader_epoch: object) -> None:
        """Refuse a request made at another leader epoch than this replica's."""
        if type(leader_epoch) is not int:
            raise InvalidArgumentError(f"{self.name}: requests must carry the leader epoch "
                                       f"(an int), got {leader_epoch!r}")
        if leader_epoch < self.leader_epoch:
            raise FencedEpochError(f"{self.name}: request at leader epoch {leader_epoch}, "
                                   f"replica {self.replica_id} is at {self.leader_epoch}")
        if leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"{self.name}: request at leader epoch {leader_epoch}, replica "
                f"{self.replica_id} knows only {self.leader_epoch} so far")

    def check_leader(self, leader_epoch: object) -> None:
        self.check_epoch(leader_epoch)
        if self.role is not Role.LEADER:
            raise NotLeaderError(f"replica {self.replica_id} is not the leader of {self.name} "
                                 f"(leader: {self.leader_id})")

    def check_serving(self, leader_epoch: object) -> None:
        """Whether this replica may serve consumers: a leader, or an in-sync follower (one
        the controller took out of the ISR may be far behind, or cut off from its leader:
        the caller is sent to the leader)."""
        self.check_epoch(leader_epoch)
        if self.role is Role.OFFLINE:
            raise NotLeaderError(f"{self.name} has no leader right now")
        if self.role is Role.FOLLOWER and self.replica_id not in self.isr:
            raise NotLeaderError(f"replica {self.replica_id} of {self.name} is not in sync; "
                                 f"read from the leader ({self.leader_id})")

    # -- as leader -----------------------------------------------------------------------------

    def append(self, batch: bytes, acks: int | str = 1, leader_epoch: int | None = None,
               checked: pa.Table | Exception | None = None) -> AppendInfo:
        """Append a producer batch as leader, in its producer's sequence order
        (``checked``: its payload checked ahead, PartitionLog.append's).

        Raises SequenceGap when the producer's earlier batches are not here (the caller may
        wait for them a moment and try again, then fails the batch with the gap's error:
        a gap is never accepted), OutOfOrderSequenceError for a sequence older than what is
        remembered of its producer, NotLeaderError, FencedEpochError, NotEnoughReplicasError
        (acks=all with too small an ISR) or the log's own errors. A batch already appended (a
        retry) is not appended again: its first answer returns; a batch already refused for
        good is refused again. An acks=all append is answered by the caller once
        :meth:`acks_all_done`.
        """
        self.check_leader(leader_epoch)
        if acks in ("all", -1):
            self.replica_set.check_enough_replicas(self.configs["min_insync_replicas"])
        header = parse_header(batch)
        if header.control:
            raise InvalidBatchAttributesError(
                f"{self.name}: a producer's batch claims to be a transaction marker; only a "
                f"transaction coordinator writes those (write_marker)")
        duplicate = self.producers.check(header)
        if duplicate is not None:
            return duplicate  # a retry of a batch already appended: answer it again
        try:
            # Before the append, as Kafka does: the cache may name an epoch the log lacks
            # (harmless, cut back on open), never the other way round.
            self.epochs.assign(self.leader_epoch, self.log_end_offset)
            info = self.log.append(batch, self.leader_epoch, checked=checked)
        except REFUSED_FOR_GOOD as e:
            # Refused for good: its sequence is spent, or the producer's next batches would
            # wait for it forever. Unless the bytes were damaged on the way (a CRC fails):
            # then its producer id and sequence are not to be trusted either.
            if not isinstance(e, CorruptRecordError) or _intact(header, batch):
                self.producers.refuse(header, e)
            raise
        self.producers.accept(header, info)
        self._after_append()
        self._set_hw(self.replica_set.advance_high_watermark(self.log.committable_end_offset))
        return info

    def write_marker(self, producer_id: int, producer_epoch: int, marker_type: MarkerType,
                     coordinator_epoch: int, leader_epoch: int | None = None,
                     timestamp: int | None = None) -> AppendInfo | None:
        """End ``producer_id``'s transaction here, as leader: append a commit or abort
        marker (Kafka's WriteTxnMarkers). An abort is indexed in the aborted-transaction
        index. Returns where the marker landed, or None when there was nothing to end (the
        producer is known here at ``producer_epoch`` with no transaction open: a retry of a
        marker already written, which is not written twice). Markers are written as acks=all
        writes: the caller answers once :meth:`acks_all_done` for its offset.

        Raises ProducerFencedError (a producer epoch older than the producer's here),
        TransactionCoordinatorFencedError (a coordinator epoch older than the producer's last
        marker's), InvalidArgumentError, NotLeaderError, the epoch errors,
        NotEnoughReplicasError, or the log's.
        """
        self.check_leader(leader_epoch)
        if marker_type not in (MarkerType.ABORT, MarkerType.COMMIT) or \
                type(coordinator_epoch) is not int:
            raise InvalidArgumentError(f"{self.name}: a marker is MarkerType.ABORT or COMMIT "
                                       f"with an int coordinator epoch, got {marker_type!r}, "
                                       f"{coordinator_epoch!r}")
        self.replica_set.check_enough_replicas(self.configs["min_insync_replicas"])
        marker = Marker(MarkerType(marker_type), coordinator_epoch)
        if not self.producers.check_marker(producer_id, producer_epoch, marker):
            return None
        batch = control_batch(marker.type, producer_id=producer_id,
                              producer_epoch=producer_epoch,
                              coordinator_epoch=coordinator_epoch,
                              timestamp=self.clock() if timestamp is None else timestamp)
        self.epochs.assign(self.leader_epoch, self.log_end_offset)
        info = self.log.append(batch, self.leader_epoch, verify_payload=False)
        self._apply(parse_header(batch), info, marker)
        self._after_append()
        self._set_hw(self.replica_set.advance_high_watermark(self.log.committable_end_offset))
        return info

    def _apply(self, header: BatchHeader, info: AppendInfo, marker: Marker | None) -> None:
        """Producer state takes an appended batch; an abort marker is indexed."""
        aborted = self.producers.accept(header, info, marker)
        if aborted is not None:
            self.log.add_aborted(aborted)

    def acks_all_done(self, last_offset: int) -> bool:
        """Whether an acks=all append ending at ``last_offset`` can be answered (raises
        NotEnoughReplicasAfterAppendError if the ISR shrank below min.insync.replicas
        meanwhile, LeadershipLostAfterAppendError, a NotLeaderError, if this replica no
        longer leads)."""
        if self.role is not Role.LEADER:
            raise LeadershipLostAfterAppendError(
                f"replica {self.replica_id} stopped leading {self.name} before the batch was "
                f"committed")
        return self.replica_set.acks_all_done(last_offset, self.configs["min_insync_replicas"])

    def follower_fetched(self, follower: int, leader_epoch: int, offset: int,
                         broker_epoch: int = NO_BROKER_EPOCH) -> int:
        """A follower fetches from ``offset`` (its log end), from its broker's process at
        ``broker_epoch``: record it, move the high watermark; return it. Raises the epoch
        errors, NotLeaderError, and OffsetOutOfRangeError outside [log start, log end] (the
        follower then truncates to the log end, or starts over at the log start)."""
        self.check_leader(leader_epoch)
        log = self.log
        if not log.log_start_offset <= offset <= log.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self.name}: replica {follower} fetches from {offset}, outside the "
                f"leader's log [{log.log_start_offset}, {log.log_end_offset}]")
        self._set_hw(self.replica_set.follower_fetched(
            follower, offset, log.log_end_offset, broker_epoch,
            committable_end=log.committable_end_offset))
        return log.high_watermark

    def read_for_follower(self, offset: int, max_bytes: int) -> FetchResult:
        """Batches from ``offset`` up to the log end (followers copy what is not committed
        yet: that is how it gets committed)."""
        log = self.log
        return FetchResult(log.read(offset, max_bytes), log.high_watermark,
                           log.log_start_offset, log.log_end_offset)

    def isr_change_wanted(self) -> frozenset[int] | None:
        """The ISR a leader should propose now, if any: lagging members out, or caught-up
        followers in. None while a change is pending or nothing is due."""
        if self.role is not Role.LEADER:
            return None
        replicas = self.replica_set
        out = replicas.isr_to_shrink(self.log_end_offset)
        if out:
            return replicas.isr - out
        joining = replicas.isr_to_expand()
        if joining:
            return replicas.isr | joining
        return None

    def propose_isr_change(self) -> AlterIsr | None:
        """The ISR change to ask the controller for now (:meth:`isr_change_wanted`), made
        pending (the high watermark counts both ISRs until it is answered); None if there is
        none."""
        wanted = self.isr_change_wanted()
        if wanted is None:
            return None
        replicas = self.replica_set
        replicas.propose_isr(wanted)
        return AlterIsr(self.topic, self.partition, self.replica_id, self.leader_epoch,
                        self.partition_epoch, tuple(sorted(wanted)),
                        replicas.broker_epochs(wanted - replicas.isr), replicas)

    def isr_change_pending(self, request: AlterIsr) -> bool:
        """Whether ``request`` still waits for its answer: this replica leads as when it was
        proposed and has not learned its outcome otherwise (the controller's word on a newer
        partition state says where the ISR stands, whatever became of it)."""
        replicas = self.replica_set
        return self.role is Role.LEADER and replicas is request.replica_set and \
            self.partition_epoch == request.partition_epoch and \
            replicas.pending_isr == frozenset(request.isr)

    def isr_change_answered(self, request: AlterIsr, state: LeaderAndIsr | None,
                            refused: bool = False) -> None:
        """The controller answered ``request``: made (or found already made), or
        ``refused``; ``state`` is the partition's state as it answered (None for a partition
        it no longer has). The state is taken as any word of the controller is, and the
        change is no longer pending: the ISR is what the controller said. Members it was to
        add are not proposed again before they fetch again. Only for an answer that came: a
        request whose outcome is unknown stays pending and is asked again."""
        if refused:
            request.replica_set.expansion_refused(request.broker_epochs)
        if state is not None:
            self.apply(state)
        if self.isr_change_pending(request):
            self._set_hw(request.replica_set.isr_change_failed(self.log.committable_end_offset))

    def end_offset_for_epoch(self, leader_epoch: int, epoch: int) -> EpochEndOffset:
        """Kafka's OffsetForLeaderEpoch as a leader answers it, for a follower at
        ``leader_epoch``: the largest epoch at or below ``epoch`` this log holds and the
        offset where it ended (for the latest epoch, the log end)."""
        self.check_leader(leader_epoch)
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    def delete_records(self, offset: int, leader_epoch: int | None = None) -> int:
        """Kafka's DeleteRecords, on the leader: records below ``offset`` (-1: the high
        watermark) become unreadable, here at once and on followers as they fetch (they
        follow the leader's log start). Returns the new log start (Kafka's low watermark).
        OffsetOutOfRangeError outside [log start, high watermark], changing nothing."""
        self.check_leader(leader_epoch)
        if type(offset) is not int or offset < -1:
            raise InvalidArgumentError(f"delete_records takes an offset >= 0 or -1 (the high "
                                       f"watermark), got {offset!r}")
        start = self.log.delete_records(self.log.high_watermark if offset == -1 else offset)
        self.epochs.truncate_from_start(start)
        return start

    def list_offset(self, spec: str | int, leader_epoch: int | None = None
                    ) -> tuple[int, int] | None:
        """(offset, timestamp) for ``"earliest"`` (the log start), ``"latest"`` (the high
        watermark), ``"last_stable"`` (the last stable offset), all with timestamp -1, or a
        timestamp in ms: the first record at or after it below the high watermark, None if
        there is none. Leaders only, and only once their high watermark reached the start of
        their leader epoch: before, OffsetNotAvailableError (KIP-207; a new leader's high
        watermark lags the old one's until its followers have fetched, and an answer from it
        would send readers back)."""
        self.check_leader(leader_epoch)
        start = self.replica_set.epoch_start_offset
        if self.log.high_watermark < start:
            raise OffsetNotAvailableError(
                f"{self.name}: leader {self.replica_id} at epoch {self.leader_epoch} does not "
                f"know yet where committed records end: its high watermark "
                f"{self.log.high_watermark} is below its epoch's start offset {start}")
        if spec == EARLIEST:
            return self.log.log_start_offset, -1
        if spec == LATEST:
            return self.log.high_watermark, -1
        if spec == LAST_STABLE:  # a read_committed consumer's "latest"
            return self.last_stable_offset, -1
        if type(spec) is not int:
            raise InvalidArgumentError(f"offset spec must be 'earliest', 'latest', "
                                       f"'last_stable' or a timestamp, got {spec!r}")
        return self.log.offsets_for_time(spec, max_offset=self.log.high_watermark)

    # -- as follower ---------------------------------------------------------------------------

    def truncation_step(self, asked: tuple[int, tuple[int, int]] | None = None
                        ) -> Ask | Truncate:
        """The next step of a new follower's truncation: the first (``asked`` None), or the one
        after the leader answered ``(epoch, end_offset)`` about ``asked[0]``. Apply an Ask's
        ``truncate_to`` (or a Truncate's offset) with :meth:`truncate` before going on."""
        log = self.log
        if asked is None:
            return first_step(self.epochs, log.log_end_offset, log.high_watermark)
        return next_step(asked[0], asked[1], self.epochs, log.log_end_offset,
                         log.high_watermark)

    def truncate(self, offset: int) -> None:
        """Remove every record at or above ``offset``; the epoch cache and producer state
        follow (producer state from the newest snapshot below, then the log)."""
        log = self.log
        end = log.log_end_offset
        self.snapshots.remove_above(offset)
        # Even with nothing to cut: a log that closed itself (a sync it could not undo, see
        # PartitionLog.append) raises here, so its follower never fetches again, which
        # would report records it could not sync.
        log.truncate_to(offset)
        if offset < end:
            self.producers = ProducerStates()
            self._load_producers()
            self.last_truncation = log.log_end_offset
        self.epochs.truncate_from_end(log.log_end_offset)

    def restart_at(self, offset: int) -> None:
        """Drop the whole log and start over at ``offset`` (the leader's log start is past
        this replica's log end)."""
        self.snapshots.remove_all()
        self.log.restart_at(offset)
        self.epochs.clear()
        self.producers = ProducerStates()
        self._snapshot_segment = offset

    def append_replicated(self, data: bytes, leader_hw: int, leader_log_start: int
                          ) -> AppendInfo | None:
        """Append batches fetched from the leader, offsets and epochs as they are; take the
        leader's high watermark (up to this log's end) and its log start. With
        ``flush.messages=1`` the batches are on disk when it returns (or nothing is
        appended: StorageError), so the next fetch, which reports this log's end to the
        leader, reports only synced records."""
        if self.role is not Role.FOLLOWER:
            raise NotLeaderError(f"{self.name}: replica {self.replica_id} is not a follower")
        batches = list(iter_headers(data, verify=True))
        for _, header in batches:
            if header.leader_epoch > self.epochs.latest_epoch:
                self.epochs.assign(header.leader_epoch, header.base_offset)
        # Markers read before anything is written: one that does not read is refused whole.
        markers = [read_marker(header, data, pos) if header.control else None
                   for pos, header in batches]
        info = self.log.append_stored(data, batches)
        for (_, header), marker in zip(batches, markers, strict=True):
            self._apply(header, AppendInfo(header.base_offset, header.last_offset,
                                           header.max_timestamp, header.record_count), marker)
        if batches:
            self._after_append()
        if leader_log_start > self.log.log_start_offset and self.log.advance_log_start(
                leader_log_start):
            self.epochs.truncate_from_start(self.log.log_start_offset)
        # Never lower: a new leader's high watermark lags the old one's for a moment
        # (KIP-207), and what this replica already showed readers as committed is.
        self._set_hw(max(self.log.high_watermark, min(leader_hw, self.log_end_offset)))
        return info

    # -- for consumers, on leaders and followers -----------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided: the high watermark, or the first offset
        of the earliest ongoing transaction if lower (never below the log start)."""
        log = self.log
        first = self.producers.first_unstable_offset()
        if first is None:
            return log.high_watermark
        return max(min(log.high_watermark, first), log.log_start_offset)

    def fetch(self, offset: int, max_bytes: int, leader_epoch: int | None = None,
              isolation: str = READ_UNCOMMITTED) -> FetchResult:
        """Batches from ``offset`` below the high watermark (consumers' view): nothing for an
        offset between the high watermark and the log end, OffsetOutOfRangeError outside
        [log start, log end].

        ``read_committed``: below the last stable offset instead, with the last stable
        offset and the aborted transactions overlapping [offset, last stable offset) in the
        result, for the reader to drop their batches (and, as always, the markers)."""
        _check_isolation(isolation)
        self.check_serving(leader_epoch)
        log = self.log
        # Between a follower's high watermark and its log end there is nothing to read yet;
        # beyond its log end or below its start, it cannot tell (it may only lag): out of
        # range, and the consumer asks the leader before deciding anything.
        if isolation == READ_UNCOMMITTED:
            data = log.read(offset, max_bytes, max_offset=log.high_watermark)
            return FetchResult(data, log.high_watermark, log.log_start_offset,
                               log.log_end_offset)
        stable = self.last_stable_offset
        data = log.read(offset, max_bytes, max_offset=stable)
        aborted = tuple(log.aborted_transactions(offset, stable)) if data else ()
        return FetchResult(data, log.high_watermark, log.log_start_offset, log.log_end_offset,
                           stable, aborted)

    def read_table(self, start: int, end: int, leader_epoch: int | None = None,
                   isolation: str = READ_UNCOMMITTED, remote: RemoteRange | None = None
                   ) -> pa.Table:
        """Records at offsets [start, end) as one Arrow table (TABLE_SCHEMA).

        Raises OffsetOutOfRangeError if ``start`` is below the log start or ``end`` above the
        high watermark (of this replica: a follower may be behind its leader).
        ``read_committed``: ``end`` may reach the last stable offset only (between it and the
        log end: OffsetNotAvailableError, retriable), and the records of aborted
        transactions are left out. ``remote``: of a tiered log, what the object store holds
        of the range below the local log start (its start was checked against the remote
        log's); the local log serves the rest from ``remote.until``.
        """
        # records.read_table skips markers itself: only aborted batches need taking out.
        tables = [read_table(chunk, start, end) for chunk in
                  self._readable(start, end, leader_epoch, isolation, markers_read=True,
                                 remote=remote)]
        if not tables:
            return TABLE_SCHEMA.empty_table()
        return pa.concat_tables(tables)

    def read_batches(self, start: int, end: int, leader_epoch: int | None = None,
                     isolation: str = READ_UNCOMMITTED, remote: RemoteRange | None = None
                     ) -> bytes:
        """The stored batches holding offsets [start, end), whole and as they are on disk
        (the first and last may hold offsets outside the range: the reader trims them), for
        readers that check and decode batches themselves (the Spark connector).

        Transaction markers (control batches) are left out: the connector would read their
        record as data; with ``read_committed``, so are the batches of aborted transactions.
        Raises as :meth:`read_table` does; ``remote`` as there.
        """
        return b"".join(self._readable(start, end, leader_epoch, isolation, remote=remote))

    def awaits_high_watermark(self, end: int) -> bool:
        """Whether a range read ending at ``end`` is worth waiting for here: the high
        watermark is short of it, and this replica is a follower (it fetches what its
        leader has) or a leader that holds those records and only does not know yet that
        they are committed (a new leader, KIP-207)."""
        if self.high_watermark >= end:
            return False
        return self.role is Role.FOLLOWER or (
            self.role is Role.LEADER and end <= self.log_end_offset)

    def _readable(self, start: int, end: int, leader_epoch: int | None,
                  isolation: str = READ_UNCOMMITTED, markers_read: bool = False,
                  remote: RemoteRange | None = None) -> list[bytes]:
        """The chunks of batches holding [start, end), without markers (and, for
        read_committed, without aborted transactions' batches). ``markers_read``: the
        caller's reader skips markers itself, so with no aborted batch to drop the chunks
        are returned as read, without a pass over their headers. ``remote``: the store's
        part below the local log start (:class:`RemoteRange`), put before the local one."""
        _check_isolation(isolation)
        self.check_serving(leader_epoch)
        log = self.log
        committed = isolation == READ_COMMITTED
        bound = self.last_stable_offset if committed else log.high_watermark
        # With a remote part, the store was the judge of the range's start.
        floor = log.log_start_offset if remote is None else start
        if floor <= start <= end and bound < end <= log.log_end_offset:
            raise OffsetNotAvailableError(
                f"{self.name}: range [{start}, {end}) is in the log of replica "
                f"{self.replica_id}, but its " + (
                    f"last stable offset is still {bound} (a transaction is open)" if committed
                    else f"high watermark is still {bound}"))
        if not floor <= start <= end <= log.high_watermark:
            raise OffsetOutOfRangeError(
                f"{self.name}: range [{start}, {end}) is outside the readable "
                f"[{log.log_start_offset}, {log.high_watermark}) of replica {self.replica_id}")
        local_from = start if remote is None else max(start, remote.until)
        if local_from < min(end, log.log_start_offset):
            raise OffsetOutOfRangeError(
                f"{self.name}: the store's part of [{start}, {end}) ends at {local_from}, "
                f"below the local log start {log.log_start_offset}")
        aborted: list[AbortedTxn] | tuple[()] = ()
        if committed:
            # The remote part's transactions may end in the local log: look from its start.
            aborted = log.aborted_transactions(
                local_from if remote is None else log.log_start_offset, end)
            if remote is not None:
                aborted = [*remote.aborted, *aborted]
        chunks = [*(remote.chunks if remote is not None else ()),
                  *(log.read_range(local_from, end) if local_from < end else ())]
        if markers_read and not aborted:
            return chunks
        drop = aborted_or_control(aborted)
        return [without_batches(chunk, drop) for chunk in chunks]

    # -- upkeep --------------------------------------------------------------------------------

    def enforce_retention(self, copied_below: int | None = None) -> int:
        """Delete the segments past retention (below the high watermark only); the epoch
        cache forgets what the log no longer holds. Returns the segments deleted.

        A tiered log (``remote_storage_enable``) keeps its local tail by
        ``local_retention_*`` instead, and deletes only segments wholly below
        ``copied_below`` (their copy in the object store is recorded finished; None:
        nothing is copied, nothing goes). Whole-log retention is the remote side's."""
        config = self.log.config
        if config.remote_storage_enable:
            if copied_below is None:
                return 0
            deleted = self.log.enforce_retention(
                max_offset=min(self.log.high_watermark, copied_below),
                limits=config.local_retention)
        else:
            deleted = self.log.enforce_retention(max_offset=self.log.high_watermark)
        if deleted:
            self.epochs.truncate_from_start(self.log.log_start_offset)
        return deleted

    def update_configs(self, configs: dict[str, Any]) -> None:
        """Apply altered topic configs; the log uses them from its next operation."""
        self.configs = {**REPLICATION_DEFAULTS, **configs}
        self.log.config = log_config(configs)
        if self.replica_set is not None:
            self.replica_set.replica_lag_time_max_ms = self.configs["replica_lag_time_max_ms"]

    def close(self) -> None:
        """Snapshot producer state at the log end (a clean reopen replays nothing), close."""
        self.snapshots.write(self.log_end_offset, self.producers)
        self.log.close()

    def describe(self) -> dict[str, Any]:
        log = self.log
        out = {
            "topic": self.topic, "partition": self.partition, "replica": self.replica_id,
            "role": self.role.value, "leader": self.leader_id,
            "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch,
            "replicas": list(self.replicas), "isr": list(self.isr),
            "log_start_offset": log.log_start_offset, "log_end_offset": log.log_end_offset,
            "high_watermark": log.high_watermark, "size_bytes": log.size_bytes,
            "segments": len(log.segments), "directory": str(log.directory),
            "leader_epochs": [list(entry) for entry in self.epochs.entries],
            "last_truncation": self.last_truncation,
            "last_stable_offset": self.last_stable_offset,
            "ongoing_transactions": self.producers.ongoing,  # producer id -> first offset
        }
        if self.replica_set is not None:
            out["followers"] = {r: dataclasses.asdict(self.replica_set.follower(r))
                                for r in self.replicas if r != self.replica_id}
            pending = self.replica_set.pending_isr
            out["pending_isr"] = None if pending is None else sorted(pending)
        return out

    # -- internals -----------------------------------------------------------------------------

    def _after_append(self) -> None:
        """Snapshot producer state when the log has rolled a segment since the last one."""
        active = self.log.active_segment.base_offset
        if active != self._snapshot_segment:
            self._snapshot_segment = active
            # A reopen replays only what follows the snapshot, so the entries of the abort
            # markers before it must be on disk first.
            self.log.sync_txn_indexes()
            self.snapshots.write(self.log_end_offset, self.producers)

    def _load_producers(self) -> None:
        """Producer state from the newest snapshot at or below the log end, then the batches
        after it; the aborted transactions those batches end are put back in the index if a
        crash lost them. A damaged index file (emptied on open) costs a replay of the whole
        log instead: the log is the truth."""
        log = self.log
        found = self.snapshots.load(log.log_end_offset)
        start = log.log_start_offset
        if found is not None and found[0] >= start and not log.txn_index_damaged:
            start, self.producers = found
        else:
            self.producers = ProducerStates()
        log.restore_aborted(self.producers.rebuild(log.replay(start)))
        log.txn_index_damaged = False


def _intact(header: BatchHeader, batch: bytes) -> bool:
    """Whether both CRCs of ``batch`` match: what is malformed is its producer's doing."""
    try:
        check_crcs(header, batch, 0)
    except CorruptRecordError:
        return False
    return True


def _check_isolation(isolation: object) -> None:
    if isolation not in ISOLATION_LEVELS:
        raise InvalidArgumentError(f"isolation must be one of {ISOLATION_LEVELS}, "
                                   f"got {isolation!r}")
