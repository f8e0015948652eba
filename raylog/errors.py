"""The typed errors raylog raises.

Every error a user can provoke is a subclass of :class:`RaylogError`. Errors that a client
may retry after refreshing its metadata or waiting carry ``retriable = True``.
"""

from __future__ import annotations


class RaylogError(Exception):
    """Base class of every error raylog raises on purpose."""

    retriable: bool = False


class InvalidConfigError(RaylogError, ValueError):
    """A configuration value (or name) was refused when the config was built."""


class InvalidArgumentError(RaylogError, ValueError, TypeError):
    """An argument of a call has the wrong type or is out of range. A ValueError and a
    TypeError too, as Python's own functions raise one or the other for such mistakes."""


class CorruptRecordError(RaylogError):
    """Bytes that should hold a record batch (or a segment of them) are malformed."""


class InvalidRecordError(RaylogError, ValueError):
    """A record is well formed but not acceptable here (e.g. no key in a compacted topic)."""


class RecordTooLargeError(RaylogError):
    """A record or batch is larger than the configured limit."""


class OffsetOutOfRangeError(RaylogError):
    """An offset lies outside [log start offset, log end offset]."""


class LogClosedError(RaylogError):
    """An operation was attempted on a closed log."""


class StorageError(RaylogError):
    """The local disk refused a write or a file is unusable."""


class CorruptCheckpointError(StorageError):
    """A checkpoint file exists but does not hold what it must (e.g. a leader-epoch cache
    whose epochs or start offsets do not increase)."""


class InvalidTopicError(RaylogError, ValueError):
    """A topic name is not acceptable."""


class TopicExistsError(RaylogError):
    """A topic with that name already exists."""


class UnknownTopicError(RaylogError):
    """No topic has that name."""


class UnknownPartitionError(RaylogError):
    """The topic has no partition with that number."""


class InvalidPartitionsError(RaylogError, ValueError):
    """A partition count is not acceptable."""


class InvalidReplicationFactorError(RaylogError, ValueError):
    """A replication factor is not acceptable for this cluster."""


class NoBrokersError(RaylogError):
    """The cluster has no live broker nodes (nodes with the ``raylog_broker`` resource)."""


class NotLeaderError(RaylogError):
    """The replica asked is not (or no longer) the partition's leader; refresh metadata."""

    retriable = True


class LeaderNotAvailableError(RaylogError):
    """The partition has no live leader right now."""

    retriable = True


class FencedEpochError(RaylogError):
    """A request carried a leader epoch older than the replica's."""

    retriable = True


class UnknownLeaderEpochError(RaylogError):
    """A request carried a leader epoch newer than the replica's: the replica has not heard of
    the new leader yet (or the caller's metadata is ahead of it); retry after a moment."""

    retriable = True


class StaleIsrChangeError(RaylogError):
    """A leader asked for an ISR change based on a partition state that has changed since:
    it learns the new state and asks again if it still should."""

    retriable = True


class NotEnoughReplicasError(RaylogError):
    """``acks=all`` refused: the in-sync replicas are fewer than ``min_insync_replicas``."""

    retriable = True


class NotEnoughReplicasAfterAppendError(NotEnoughReplicasError):
    """``acks=all``: the batch was appended and committed, but the ISR shrank below
    ``min_insync_replicas`` before it was; a retry may write it twice (Kafka's
    NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""


class LeaderEpochRegressionError(RaylogError):
    """A replica was asked to record a leader epoch older than the newest in its log: it
    should have truncated its log first, or the batch comes from a stale leader."""


class RequestTimeoutError(RaylogError):
    """A request did not complete in time."""

    retriable = True


class ClientClosedError(RaylogError):
    """A producer, consumer or admin client was used after ``close()``."""


class NoClusterError(RaylogError):
    """There is no Ray cluster, or no raylog controller on it, to connect to."""


class ClusterAuthenticationError(NoClusterError):
    """The Ray cluster wants a token (Ray's token authentication) this process lacks."""


class ControllerUnavailableError(NoClusterError):
    """The controller restarted during a change; whether the change happened is unknown."""

    retriable = True


class ActorUnavailableError(RaylogError):
    """A replica or controller actor is dead or restarting; retry after refreshing metadata."""

    retriable = True


class CommitFailedError(RaylogError):
    """An offset commit was refused: the committer is not (or no longer) entitled to it."""


class UnknownMemberError(CommitFailedError):
    """The group does not know this member (it left, timed out or died): join again."""


class IllegalGenerationError(CommitFailedError):
    """A commit or request carried a generation older than the member's current one."""


class NotPartitionOwnerError(CommitFailedError):
    """A member committed offsets for a partition it does not own."""


class RejoinRequiredError(RaylogError):
    """The coordinator restarted and knows this member only from its persisted membership:
    join again, naming the partitions it owns, before heartbeats and commits go on."""

    retriable = True


class UnknownGroupError(RaylogError):
    """No consumer group has that id."""


class GroupNotEmptyError(RaylogError):
    """The operation needs a group without active members."""


class IllegalStateError(RaylogError):
    """A call that does not fit the state of what it was made on (e.g. a consumer's assign
    while subscribed, a second ISR change while one is pending)."""


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """A group has no committed offset for a partition and auto_offset_reset is 'none'."""


class InvalidOffsetRangeError(RaylogError, ValueError):
    """An offset range or bound is malformed (e.g. its end is before its start)."""


class InternalError(RaylogError):
    """Something failed unexpectedly inside the cluster (a bug): the message names the
    remote error; its traceback is chained to this one."""


class OutOfOrderSequenceError(RaylogError):
    """A producer's batch was not appended because its sequence is not the next one the
    leader expects: earlier batches of its producer (or producer epoch) did not come in time,
    or it is older than every batch the leader remembers of its producer. Retriable: the
    producer retries it in place while an earlier batch of its own is unresolved (that batch
    is the gap), and otherwise bumps its epoch and sends it again from sequence 0."""

    retriable = True


class InvalidProducerEpochError(RaylogError):
    """A batch carried an older producer epoch than one the partition has already seen: a
    late copy of a batch its producer had given up on (fenced, never appended)."""


class ProduceFailedError(RaylogError):
    """Records sent since the last ``flush`` failed; each record's future holds its error."""


class SourceUnavailableError(RaylogError):
    """A mirror's source cluster (its Flight endpoint) cannot be reached right now."""

    retriable = True


class SourceAuthenticationError(RaylogError):
    """A mirror's source endpoint refused the token it was given (or was given none)."""


class MirrorPositionError(RaylogError):
    """A mirror cannot tell from the target where a partition's copy stopped."""


class UnknownProducerIdError(OutOfOrderSequenceError):
    """A batch that does not start at sequence 0 from a producer id the partition leader has
    no state for: never seen, or its state was lost (a failover that lost an acks=1 tail,
    retention, eviction from the leader's table of producers). Not appended. Retriable as its
    parent: the producer retries in place while an earlier batch of its own is unresolved,
    else bumps its epoch at once (Kafka's UNKNOWN_PRODUCER_ID, KIP-360)."""


class IneligibleReplicaError(RaylogError):
    """An ISR change would admit a replica whose broker is not in the incarnation the leader
    saw catch up: the broker epoch its fetches carried is not the broker's current one (it
    restarted since, and may have lost records), or its broker has none yet (KIP-903). The
    leader asks again once the replica has caught up in its current incarnation."""

    retriable = True


class OffsetNotAvailableError(RaylogError):
    """A replica cannot answer for offsets it holds yet: a new leader whose high watermark
    has not reached the start of its leader epoch (every record below the old leader's high
    watermark is in its log, but it does not know yet which are committed: KIP-207), or a
    range that ends past the high watermark but within the log. Ask again in a moment."""

    retriable = True


class BrokerStalledError(NotLeaderError):
    """The broker asked was stalled (stopped, stuck, paused) long enough that the controller
    may have fenced it, and serves no leader or consumer request until the controller has
    confirmed its state; or a request's processing spanned such a stall and is not answered.
    Refresh metadata and retry (the partition may have another leader by now)."""


class LeadershipLostAfterAppendError(NotLeaderError):
    """The leader appended the batch, then stopped leading before the in-sync replicas had
    it (acks=all): it may be in the new leader's log or not. Retry under the same producer
    fields (the new leader answers a duplicate with its first answer); a producer never
    renumbers such a batch, or it could land twice."""


class BrokerRestartedError(RaylogError):
    """A word of the controller addressed an earlier process of this broker: it restarted
    since the controller last heard from it, and takes nothing meant for the process it
    replaced (the controller takes that one down, then tells this one its full state)."""


class CorruptSnapshotError(StorageError):
    """A snapshot of the controller's metadata log cannot be used: torn (shorter or longer
    than its header says), its checksum does not match, or it does not decode to a state.
    The store then loads the previous snapshot and replays more of the log; it raises this
    only when no usable snapshot covers the events the log no longer holds."""


class UnsupportedMessageFormatError(InvalidRecordError):
    """Kafka records in a message format older than record batches v2 (magic 0 or 1):
    raylog translates only v2 batches, as every Kafka client since 0.11 writes them."""

    kafka_code = 43  # UNSUPPORTED_FOR_MESSAGE_FORMAT


class InvalidKafkaBatchError(InvalidRecordError):
    """A well-framed Kafka batch (its CRC matches) that raylog will not store: offset deltas
    other than 0..n-1, no records, a control batch from a client, a header name that is not
    UTF-8."""

    kafka_code = 87  # INVALID_RECORD


class InvalidTimestampError(InvalidRecordError):
    """A Kafka record's timestamp is negative: raylog's records carry times >= 0 ms."""

    kafka_code = 32  # INVALID_TIMESTAMP


class TransactionsUnsupportedError(RaylogError):
    """A transactional Kafka batch: raylog has no transactions yet (a later issue), so it
    refuses such writes rather than show records a transaction may abort."""

    kafka_code = 48  # INVALID_TXN_STATE


class InconsistentGroupProtocolError(RaylogError):
    """A member cannot join a consumer group as it asks: it speaks another group protocol
    than the group's members (a Kafka client joining a group of raylog's own consumers, or
    the other way round: one group is served one way), or it offers no partition assignment
    strategy raylog's coordinator assigns with (Kafka's INCONSISTENT_GROUP_PROTOCOL)."""

    kafka_code = 23  # INCONSISTENT_GROUP_PROTOCOL


class RebalanceInProgressError(RaylogError):
    """A Kafka member's group is rebalancing (a member joined, left or timed out, or its
    topics changed) and the member has not joined again yet: it rejoins, as Kafka's
    REBALANCE_IN_PROGRESS tells it."""

    kafka_code = 27  # REBALANCE_IN_PROGRESS
    retriable = True


class MemberIdRequiredError(RaylogError):
    """A Kafka client's first JoinGroup (version 4 and later): it is given ``member_id`` and
    joins again with it (Kafka's MEMBER_ID_REQUIRED)."""

    kafka_code = 79  # MEMBER_ID_REQUIRED
    retriable = True

    def __init__(self, message: str, member_id: str) -> None:
        super().__init__(message)
        self.member_id = member_id

    def __reduce__(self) -> tuple:  # crosses Ray with its member id
        return type(self), (str(self), self.member_id)


class FencedInstanceIdError(UnknownMemberError):
    """A Kafka static member's request under a member id its ``group.instance.id`` no longer
    has: a newer incarnation of the instance joined with a new id and took its place
    (KIP-345; Kafka's FENCED_INSTANCE_ID). The old incarnation must stop: it is not in the
    group any more."""

    kafka_code = 82  # FENCED_INSTANCE_ID


# Transactions (issue 26). Kafka's codes are those its clients expect for each case.

class ProducerFencedError(InvalidProducerEpochError):
    """A transactional producer was fenced: another producer initialised the same
    transactional id since (a bumped epoch), so this one is a zombie. It must close; it can
    write nothing more (Kafka's PRODUCER_FENCED)."""

    kafka_code = 90  # PRODUCER_FENCED


class InvalidTxnStateError(RaylogError):
    """A transactional request that the transaction's state does not allow, e.g. adding a
    partition to a transaction that is committing, or committing one that was never begun."""

    kafka_code = 48  # INVALID_TXN_STATE


class InvalidProducerIdMappingError(RaylogError):
    """A transactional request whose producer id is not the one its transactional id has
    (or whose transactional id the coordinator does not know)."""

    kafka_code = 49  # INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(RaylogError, ValueError):
    """A transaction timeout outside (0, the coordinator's transaction.max.timeout.ms]."""

    kafka_code = 50  # INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(RaylogError):
    """The transactional id's previous transaction is still completing (its markers are
    being written): retry shortly."""

    retriable = True
    kafka_code = 51  # CONCURRENT_TRANSACTIONS


class TransactionCoordinatorFencedError(RaylogError):
    """A transaction marker or state write from a coordinator older than the one now in
    charge (a smaller coordinator epoch): the older one must stop."""

    kafka_code = 52  # TRANSACTION_COORDINATOR_FENCED


class TransactionAbortedError(RaylogError):
    """The transaction was aborted (by the producer, an operator, or its timeout); what it
    wrote is never shown to read_committed readers."""


class TransactionalIdNotFoundError(RaylogError):
    """A transactional id the transaction coordinator does not know (never initialised, or
    expired): what ``raylog transactions describe`` and an operator's abort answer for it."""

    kafka_code = 105  # TRANSACTIONAL_ID_NOT_FOUND


class InvalidBatchAttributesError(CorruptRecordError):
    """A batch whose transaction attributes contradict each other or its header: a control
    batch (transaction marker) not marked transactional or holding other than one record, a
    transactional batch without a producer id and epoch, or a producer's batch claiming to be
    a marker (only a transaction coordinator writes those)."""


class CorruptTxnIndexError(CorruptRecordError):
    """An aborted-transaction index file (``.txnindex``) that is not whole entries in order
    within its segment's offsets; the log rebuilds it from the batches, which are the truth."""


class AuthenticationError(RaylogError):
    """A client's SASL authentication failed (a wrong password, an unknown user, a
    malformed or out-of-turn message). The message says why, for the listener's log; the
    client is told only that authentication failed."""

    kafka_code = 58  # SASL_AUTHENTICATION_FAILED


class SecurityConfigError(InvalidConfigError):
    """A Kafka listener's security settings cannot work: an unknown protocol or mechanism,
    a certificate or key file missing or unreadable, a key not matching its certificate.
    Refused when the listener is configured, before it listens."""


class UnstableOffsetCommitError(RaylogError):
    """A group's committed offset of a partition was asked for while offsets committed
    inside a transaction are pending for it (their transaction is neither committed nor
    aborted yet): a consumer starting there would read a stale offset. Retriable: the
    transaction ends, at the latest at its timeout (Kafka's UNSTABLE_OFFSET_COMMIT)."""

    retriable = True
    kafka_code = 88  # UNSTABLE_OFFSET_COMMIT


class UnsupportedFormatVersionError(StorageError):
    """A stored file or record is in a format version newer than this raylog reads: a newer
    raylog wrote it. Nothing is changed: run that raylog again (docs/formats.md says what a
    downgrade may do). Names the file (or the topic and key), the version found and the
    newest this raylog supports."""

    def __init__(self, where: str, found: int, supported: int) -> None:
        super().__init__(f"{where}: format version {found}, but this raylog reads versions up "
                         f"to {supported}: a newer raylog wrote it, run that version (a "
                         f"downgrade past a format change is refused, see docs/formats.md)")
        self.where = where
        self.found = found
        self.supported = supported

    def __reduce__(self) -> tuple:  # crosses Ray with its fields
        return type(self), (self.where, self.found, self.supported)


class UnknownBrokerError(InvalidArgumentError):
    """A request named broker ids the cluster never gave out (or, for a roll, brokers that
    are not alive); the message names every such broker and the cluster's brokers."""

    kafka_code = 39  # INVALID_REPLICA_ASSIGNMENT, as Kafka answers a reassignment to one


class ReassignmentInProgressError(RaylogError):
    """A balance was asked for while partitions are still being moved (by an earlier
    balance, a reassignment or a broker's replacement): plans are made on a settled
    cluster. Retriable: the moves under way end."""

    retriable = True
    kafka_code = 60  # REASSIGNMENT_IN_PROGRESS


class StaleBalancePlanError(RaylogError):
    """A balance plan to execute no longer matches the cluster (a partition's replicas
    changed since it was made, a topic was deleted): nothing of it was started. Make a new
    plan."""


class LastInSyncReplicaError(RaylogError):
    """Draining a broker was refused: for some partitions it is the only live in-sync
    replica, so stopping it would leave them without a leader (and acks=all writes
    refused). Named in the message; ``--force`` (``force=True``) drains anyway."""


class OfflinePartitionsError(RaylogError):
    """A rolling restart was refused before it began: some partitions have no live leader,
    and restarting any broker could only make that worse. Named in the message."""


class DrainTimeoutError(RaylogError):
    """A broker's leaderships could not be moved (and told to every replica) within the
    drain's timeout; nothing was stopped. Retriable: the brokers may be slow."""

    retriable = True


class RollStoppedError(RaylogError):
    """A rolling restart stopped at its first problem; the message names the broker, the
    step and the cause (raised from it), and which brokers were already restarted."""


class RemoteStorageUnavailableError(RaylogError):
    """The object store of tiered segments could not be reached (down, slow, refusing):
    a read of records below the local log start fails with this and may be retried; uploads
    wait and resume by themselves."""

    retriable = True


class RemoteObjectError(CorruptRecordError):
    """An object of a tiered segment in the object store is missing or does not match the
    size and sha256 its remote-log metadata record says; the message names the object."""


class InvalidQuotaError(InvalidConfigError):
    """A client quota was refused: an unknown quota key (Kafka's are producer_byte_rate,
    consumer_byte_rate and request_percentage), a value that is not a positive number (a
    byte rate must be a whole number), or an entity that names no user and no client id.
    Nothing is stored then."""

    kafka_code = 42  # INVALID_REQUEST
