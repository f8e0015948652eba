"""The records of ``__transaction_state``, and the coordinator's state replayed from them.

``__transaction_state`` is a compacted internal topic keyed by transactional id: each
record is a transactional id's whole :class:`TransactionMetadata` after a step, so the last
record of a key is its state, and a tombstone (value None) says the id expired. All records
of an id go to one partition (:func:`partition_for`, the hash groups use for
``__consumer_offsets``), so their order in the log is the order the coordinator decided.

The key is ``["txn", transactional_id]`` as JSON; it never changes (compaction keeps one
record per key, so a key must read the same in every version). The value is a JSON object
with a ``version``: version 1 holds::

    {"version": 1, "producer_id": int, "producer_epoch": int, "last_producer_epoch": int,
     "previous_producer_id": int, "timeout_ms": int, "state": "ONGOING",
     "partitions": [[topic, partition], ...], "groups": [group id, ...],
     "start_ms": int, "update_ms": int}

(``state`` is a TransactionState's name; times in ms since the epoch.)

A joint commit's decision (:class:`JointCommit`, the commit point of several ids'
transactions) is a record of its own key, ``["joint_commit", write_id]``, in the partition
:func:`partition_for` gives the write id; its value (``DECISION_VERSION`` 1)::

    {"version": 1, "members": [[transactional_id, producer_id, producer_epoch], ...],
     "decided_ms": int}

A tombstone of that key retracts a decision whose write was not known to have landed (its
members were held meanwhile), or removes one whose members all committed. Compaction keeps
the last record of each key, so a decision stays in the log until that tombstone: replayed
with its members' records, it is finished by whichever coordinator reads it. (A raylog
older than joint commits stops its load on such a key, as on any record it cannot read.)

A value of a newer version is refused with UnsupportedFormatVersionError (a newer raylog
wrote it), one of another version, or a record that is not this, with
CorruptRecordError when loaded: the coordinator must not start on a state it cannot read
(skipping a record could drop a decided commit whose markers are not all written).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from raylog.errors import CorruptRecordError
from raylog.metadata.topics import TRANSACTION_STATE_TOPIC
from raylog.records.partitioner import key_partition
from raylog.storage.formats import check_version
from raylog.transactions.state import (
    PERSISTED,
    JointCommit,
    Member,
    TransactionMetadata,
    TransactionState,
)
from raylog.types import TopicPartition

TRANSACTION_STATE_PARTITIONS = 8  # as __consumer_offsets (Kafka's default is 50)
VALUE_VERSION = 1  # the newest this raylog writes and reads (1 is the first ever written)
DECISION_VERSION = 1  # the newest joint-commit decision this raylog writes and reads
_KIND = "txn"
_DECISION_KIND = "joint_commit"

Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)


class Loaded(NamedTuple):
    """What a replay of __transaction_state holds: the live transactional ids, and the
    joint commits decided and not yet removed."""

    transactions: dict[str, TransactionMetadata]
    decisions: dict[str, JointCommit]


def partition_for(transactional_id: str, partitions: int = TRANSACTION_STATE_PARTITIONS
                  ) -> int:
    """The partition of __transaction_state that holds a transactional id's records."""
    return key_partition(transactional_id.encode(), partitions)


def encode_key(transactional_id: str) -> bytes:
    return json.dumps([_KIND, transactional_id]).encode()


def encode(metadata: TransactionMetadata) -> Record:
    """The record that persists ``metadata``."""
    if metadata.state not in PERSISTED:
        raise ValueError(f"{metadata.state.name} is never written to "
                         f"{TRANSACTION_STATE_TOPIC}")
    value = {
        "version": VALUE_VERSION,
        "producer_id": metadata.producer_id,
        "producer_epoch": metadata.producer_epoch,
        "last_producer_epoch": metadata.last_producer_epoch,
        "previous_producer_id": metadata.previous_producer_id,
        "timeout_ms": metadata.timeout_ms,
        "state": metadata.state.name,
        "partitions": [list(tp) for tp in sorted(metadata.partitions)],
        "groups": sorted(metadata.groups),
        "start_ms": metadata.start_ms,
        "update_ms": metadata.update_ms,
    }
    return encode_key(metadata.transactional_id), json.dumps(value).encode()


def tombstone(transactional_id: str) -> Record:
    """The record that removes an expired transactional id."""
    return encode_key(transactional_id), None


def decision_key(write_id: str) -> bytes:
    return json.dumps([_DECISION_KIND, write_id]).encode()


def encode_decision(decision: JointCommit) -> Record:
    """The record of a joint commit's decision: the commit point of all its members."""
    value = {
        "version": DECISION_VERSION,
        "members": [list(m) for m in decision.members],
        "decided_ms": decision.decided_ms,
    }
    return decision_key(decision.write_id), json.dumps(value).encode()


def decision_tombstone(write_id: str) -> Record:
    """The record that retracts or removes a joint commit's decision."""
    return decision_key(write_id), None


def _decode_any_key(key: bytes) -> tuple[str, str]:
    try:
        kind, name = json.loads(key)
    except (ValueError, TypeError) as e:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC}: unreadable key "
                                 f"{key[:80]!r}: {e}") from e
    if kind not in (_KIND, _DECISION_KIND) or not isinstance(name, str) or not name:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC}: {key[:80]!r} is not the key "
                                 f"of a transactional id or of a joint commit")
    return kind, name


def decode_key(key: bytes) -> str:
    kind, transactional_id = _decode_any_key(key)
    if kind != _KIND:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC}: {key[:80]!r} is not the key "
                                 f"of a transactional id")
    return transactional_id


def _fields(what: str, value: bytes, newest: int) -> dict[str, Any]:
    """A record's JSON value, checked to be of version ``newest`` (a newer one is
    UnsupportedFormatVersionError, anything else CorruptRecordError)."""
    try:
        fields = json.loads(value)
    except ValueError as e:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC}: {what} is not JSON: {e}") from e
    version = fields.get("version") if isinstance(fields, dict) else None
    if type(version) is int:
        check_version(f"{TRANSACTION_STATE_TOPIC}: {what}", version, newest)
    if version != newest:
        raise CorruptRecordError(
            f"{TRANSACTION_STATE_TOPIC}: {what} has version {version!r}; this raylog reads "
            f"version {newest}: it is not a transaction record")
    return fields


def decode_decision(key: bytes, value: bytes) -> JointCommit:
    """The decision a joint commit's record holds (its value not None)."""
    kind, write_id = _decode_any_key(key)
    what = f"the joint commit {write_id!r}"
    if kind != _DECISION_KIND:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC}: {key[:80]!r} is not the key "
                                 f"of a joint commit")
    fields = _fields(what, value, DECISION_VERSION)
    try:
        members = []
        for tid, pid, epoch in fields["members"]:
            if not isinstance(tid, str) or type(pid) is not int or type(epoch) is not int:
                raise TypeError(f"member {[tid, pid, epoch]!r}")
            members.append(Member(tid, pid, epoch))
        if not members:
            raise ValueError("no members")
        return JointCommit(write_id, tuple(members), _integer(fields, "decided_ms"))
    except (KeyError, ValueError, TypeError) as e:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC}: {what} is malformed: "
                                 f"{e!r}") from e


def decode(key: bytes, value: bytes) -> TransactionMetadata:
    """The metadata a record holds (its value not None)."""
    transactional_id = decode_key(key)
    fields = _fields(f"the record of {transactional_id!r}", value, VALUE_VERSION)
    try:
        return _metadata(transactional_id, fields)
    except (KeyError, ValueError, TypeError) as e:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC}: the record of "
                                 f"{transactional_id!r} is malformed: {e!r}") from e


def _integer(fields: dict[str, Any], name: str) -> int:
    value = fields[name]
    if type(value) is not int:
        raise TypeError(f"{name} is {value!r}, not an integer")
    return value


def _metadata(transactional_id: str, fields: dict[str, Any]) -> TransactionMetadata:
    state = TransactionState[fields["state"]]
    if state not in PERSISTED:
        raise ValueError(f"state {state.name} is never written")
    partitions = []
    for topic, partition in fields["partitions"]:
        if not isinstance(topic, str) or type(partition) is not int:
            raise TypeError(f"partition {[topic, partition]!r}")
        partitions.append(TopicPartition(topic, partition))
    groups = fields["groups"]
    if not all(isinstance(g, str) for g in groups):
        raise TypeError(f"groups {groups!r}")
    return TransactionMetadata(
        transactional_id, _integer(fields, "producer_id"), _integer(fields, "producer_epoch"),
        _integer(fields, "last_producer_epoch"), _integer(fields, "timeout_ms"), state,
        frozenset(partitions), frozenset(groups), _integer(fields, "start_ms"),
        _integer(fields, "update_ms"), _integer(fields, "previous_producer_id"))


def load(records: Iterable[Record]) -> Loaded:
    """Replay records of __transaction_state in offset order (within each partition: the
    records of one key are all in one): every live transactional id's metadata and every
    joint commit decided (the last record of each key wins, a tombstone removes it). Those
    whose end was decided but not completed are the new coordinator's ``pending_markers()``
    and ``finish_decisions()``. Raises CorruptRecordError on any record it cannot read
    (nothing is loaded then)."""
    loaded = Loaded({}, {})
    for key, value in records:
        kind, name = _decode_any_key(key)
        found = loaded.transactions if kind == _KIND else loaded.decisions
        if value is None:
            found.pop(name, None)
        elif kind == _KIND:
            found[name] = decode(key, value)
        else:
            found[name] = decode_decision(key, value)
    return loaded
