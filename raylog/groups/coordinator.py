"""The group coordinator: every consumer group of a cluster and their committed offsets.

Plain Python, hosted by the controller actor. Committed offsets and group records (the
generation and the membership: member ids and session timeouts) are persisted by the host
as records of the compacted internal topic ``__consumer_offsets`` (:meth:`offset_record`,
:meth:`group_record`) *before* they are applied here, and replayed with :meth:`load` and
:meth:`finish_load` when the controller restarts. Who owns which partition is not persisted:
the members a restarted coordinator finds in a group record come back *pending* (see
group.py), rejoin naming what they own, and nothing is granted until all of them have
rejoined or their sessions have run out; so a restart never gives a partition two owners.

A commit is decided in two steps around its persist (raylog/groups/store.py writes it):
:meth:`check_commit` takes a :class:`CommitTicket` when it is accepted, and when its record
is in the log, :meth:`fenced` says whether any of its partitions changed owner meanwhile (or
its member left): only a commit that was not fenced is applied. While a commit's record is
on its way, the store *holds* its partitions (:meth:`hold`): a partition whose owner gave it
up meanwhile is granted to nobody until the store knows the log agrees with memory.

Offsets committed inside a transaction are held apart (:attr:`txn`, txn_offsets.py) until
their transaction's marker is in the group's partition (:meth:`txn_marker`); the replay
takes them back from the log with :meth:`load_batch`.

Records: the key is a JSON list (``["offset", group, topic, partition]`` or ``["group",
group]``), the value a JSON object, of format RECORD_VERSION (0: no ``format_version``
member); a value of a newer format stops the replay with UnsupportedFormatVersionError.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from raylog.errors import (
    CommitFailedError,
    GroupNotEmptyError,
    NotPartitionOwnerError,
    UnknownGroupError,
    UnknownMemberError,
    UnstableOffsetCommitError,
)
from raylog.groups.group import Group, Heartbeat, Member, PendingMember, ownership_mark
from raylog.groups.txn_offsets import GroupOffsets, TxnOffsets
from raylog.metadata.topics import CONSUMER_OFFSETS_TOPIC
from raylog.records.partitioner import key_partition
from raylog.storage.formats import JSON_VERSION_FIELD, json_version
from raylog.types import TopicPartition

OFFSETS_TOPIC_PARTITIONS = 8
RECORD_VERSION = 0  # of the values of __consumer_offsets this raylog writes and reads


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1


Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)


@dataclasses.dataclass(frozen=True, eq=False)
class CommitTicket:
    """A commit the coordinator accepted, as it was when it was checked: the group and member
    objects it was checked against (None for a commit outside any membership) and the
    ownership mark then."""

    group_id: str
    member_id: str | None
    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    group: Group | None
    member: Member | None
    mark: int


class GroupCoordinator:
    """Groups by id, and committed offsets by group and partition. Not safe for concurrent
    use: the controller calls it from one event loop."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self.generations: dict[str, int] = {}  # persisted generation per group
        self._persisted: dict[str, dict[str, Any]] = {}  # group record replayed per group
        # Per group, the partitions whose committed offset is on its way to the log (count).
        self.held: dict[str, collections.Counter[TopicPartition]] = {}
        self.txn = TxnOffsets()  # offsets committed inside transactions not ended yet
        # Per group and partition, where the record of its committed offset is in the log
        # (-1: not known): a transaction's commit applies an offset written after it only.
        self.positions: dict[str, dict[TopicPartition, int]] = {}
        # Called with a group id when what holds grants back in it may have gone (its group
        # record became durable, a held partition was let go): a Kafka member's SyncGroup
        # waiting for its assignment looks again.
        self.grants_may_change: list[Callable[[str], None]] = []

    # -- membership ------------------------------------------------------------------------------

    def join(self, group_id: str, member_id: str | None, client_id: str,
             topics: Iterable[str] | None, pattern: str | None, session_timeout_ms: int,
             assignor: str, existing_topics: Mapping[str, int],
             actor_id: str | None = None, claims: Iterable[TopicPartition] = (),
             kafka: bool = False, instance_id: str | None = None) -> Member:
        group = self.groups.get(group_id)
        if group is None or (not group.members and not group.pending):
            # A group starts (again) above any generation it ever had.
            group = self.groups[group_id] = Group(
                group_id, assignor, max(self.generations.get(group_id, 0),
                                        group.generation if group else 0))
        member_id = member_id or f"{client_id}-{uuid.uuid4().hex[:12]}"
        return group.join(member_id, client_id, topics, pattern, session_timeout_ms,
                          self.clock(), existing_topics, actor_id, claims,
                          self.held.get(group_id, ()), kafka, instance_id)

    def group(self, group_id: str) -> Group:
        try:
            return self.groups[group_id]
        except KeyError:
            # Known from __consumer_offsets (e.g. after a restart): members get
            # UnknownMemberError from it and join again.
            if group_id in self.offsets or group_id in self.generations:
                return self.groups.setdefault(group_id, Group(
                    group_id, generation=self.generations.get(group_id, 0)))
            raise UnknownGroupError(f"unknown consumer group {group_id!r}") from None

    def heartbeat(self, group_id: str, member_id: str, owned: Iterable[TopicPartition]
                  ) -> Heartbeat:
        """A member's heartbeat; grants only to members a durable group record names, and
        never a held partition."""
        return self.group(group_id).heartbeat(member_id, owned, self.clock(),
                                              self.held.get(group_id, ()),
                                              self.generations.get(group_id, 0))

    def membership_durable(self, group_id: str, generation: int) -> None:
        """The group record of ``generation`` is in the log."""
        self.generations[group_id] = max(generation, self.generations.get(group_id, 0))
        self._grants_may_change(group_id)

    def _grants_may_change(self, group_id: str) -> None:
        for call in self.grants_may_change:
            call(group_id)

    def leave(self, group_id: str, member_id: str,
              existing_topics: Mapping[str, int]) -> bool:
        group = self.groups.get(group_id)
        return bool(group and group.remove(member_id, existing_topics))

    def members_of_actor(self, actor_id: str) -> list[tuple[str, str]]:
        return [(g.group_id, m.member_id) for g in self.groups.values()
                for m in g.members.values() if m.actor_id == actor_id]

    def credit(self, ms: int) -> None:
        """The coordinator's host did not run for ``ms`` (its process stopped, its loop
        blocked): members could not be heard meanwhile, and that time does not count against
        their sessions."""
        now = self.clock()
        for group in self.groups.values():
            group.credit(ms, now)

    def expire(self, existing_topics: Mapping[str, int]) -> list[tuple[str, str]]:
        now = self.clock()
        return [(g.group_id, m) for g in self.groups.values()
                for m in g.expire(now, existing_topics)]

    def topics_changed(self, existing_topics: Mapping[str, int]) -> None:
        for group in self.groups.values():
            if group.members:
                group.topics_changed(existing_topics)

    # -- offsets ---------------------------------------------------------------------------------

    def check_commit(self, group_id: str, member_id: str | None, generation: int,
                     offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     instance_id: str | None = None) -> CommitTicket:
        """Accept a commit for persisting, or refuse it (CommitFailedError, RejoinRequired;
        FencedInstanceIdError when a Kafka static member's ``instance_id`` has another
        member id)."""
        mark = ownership_mark()
        if member_id is None and group_id not in self.groups:
            # A commit outside any membership (admin, micro-batches).
            return CommitTicket(group_id, None, dict(offsets), None, None, mark)
        # As for heartbeats: a member of a group known only from disk is told to rejoin.
        group = self.group(group_id)
        if instance_id and member_id is not None:
            group.check_instance(instance_id, member_id)
        group.check_commit(member_id, generation, offsets)
        member = group.members[member_id] if member_id is not None else None
        return CommitTicket(group_id, member_id, dict(offsets), group, member, mark)

    def fenced(self, ticket: CommitTicket) -> CommitFailedError | None:
        """Why an accepted commit must not be applied now (None: it may be): its member
        left the group (or the group was emptied and made anew), or one of its partitions
        changed owner after it was checked."""
        group = self.groups.get(ticket.group_id)
        if ticket.member is not None and (
                group is not ticket.group or
                group.members.get(ticket.member_id) is not ticket.member):
            return UnknownMemberError(
                f"member {ticket.member_id!r} left group {ticket.group_id!r} while its commit "
                f"was being written; the commit is not applied")
        moved = sorted(tp for tp in ticket.offsets
                       if group is not None and group.changed_at.get(tp, 0) > ticket.mark)
        if moved:
            return NotPartitionOwnerError(
                f"{moved} of group {ticket.group_id!r} changed owner while a commit of "
                f"member {ticket.member_id!r} was being written; the commit is not applied")
        return None

    def hold(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Grant none of ``partitions`` (a record of their offsets is on its way) until as
        many :meth:`unhold` calls came."""
        self.held.setdefault(group_id, collections.Counter()).update(partitions)

    def unhold(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        held = self.held.get(group_id)
        if held is None:
            return
        held.subtract(partitions)
        for tp in [tp for tp, n in held.items() if n <= 0]:
            del held[tp]
        if not held:
            del self.held[group_id]
        self._grants_may_change(group_id)

    def apply_commit(self, group_id: str,
                     offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     position: int = -1) -> None:
        """Offsets committed, their record at ``position`` in the log (-1: not known)."""
        self.offsets.setdefault(group_id, {}).update(offsets)
        self.positioned(group_id, offsets, position)

    def positioned(self, group_id: str, partitions: Iterable[TopicPartition],
                   position: int) -> None:
        """The latest record of the offsets of ``partitions`` is at ``position``."""
        self.positions.setdefault(group_id, {}).update(dict.fromkeys(partitions, position))

    def committed(self, group_id: str, partitions: Iterable[TopicPartition],
                  require_stable: bool = False
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The committed offset of each partition (None: none). With ``require_stable``,
        UnstableOffsetCommitError (retriable) while any of them has offsets pending in a
        transaction: its committed offset is about to change or stay, nobody knows yet."""
        partitions = [TopicPartition(*tp) for tp in partitions]
        if require_stable:
            unstable = self.txn.unstable(group_id, partitions)
            if unstable:
                raise UnstableOffsetCommitError(
                    f"group {group_id!r} has offsets of {unstable} pending in an open "
                    f"transaction; ask again once it is committed or aborted")
        mine = self.offsets.get(group_id, {})
        return {tp: mine.get(tp) for tp in partitions}

    def txn_marker(self, partition: int, producer_id: int, producer_epoch: int,
                   commit: bool) -> None:
        """A transaction marker of ``producer_id`` is in ``partition`` of
        __consumer_offsets: the offsets it had pending there are committed or dropped."""
        for group_id, offsets in self.txn.end(partition, producer_id, producer_epoch,
                                              commit).items():
            # As Kafka: an offset whose record is later in the log than the transaction's
            # stays (a plain commit after the transactional one, before its marker).
            written = self.positions.get(group_id, {})
            for tp, (om, position) in offsets.items():
                if position > written.get(tp, -1) or position < 0:
                    self.apply_commit(group_id, {tp: om}, position)

    def check_empty(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and (group.members or group.pending):
            raise GroupNotEmptyError(
                f"group {group_id!r} has {len(group.members) + len(group.pending)} active "
                f"members; stop them first")
        if group is None and group_id not in self.offsets:
            raise UnknownGroupError(f"unknown consumer group {group_id!r}")

    def forget(self, group_id: str) -> None:
        self.groups.pop(group_id, None)
        self.offsets.pop(group_id, None)
        self.positions.pop(group_id, None)
        self.generations.pop(group_id, None)

    def group_ids(self) -> list[str]:
        return sorted(set(self.groups) | set(self.offsets))

    # -- persistence in __consumer_offsets -------------------------------------------------------

    @staticmethod
    def partition_for(group_id: str, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> int:
        """The __consumer_offsets partition that holds a group's records."""
        return key_partition(group_id.encode(), partitions)

    @staticmethod
    def offset_record(group_id: str, tp: TopicPartition,
                      committed: OffsetAndMetadata | None) -> Record:
        key = json.dumps(["offset", group_id, tp.topic, tp.partition]).encode()
        if committed is None:
            return key, None
        return key, json.dumps(committed._asdict()).encode()

    @staticmethod
    def generation_record(group_id: str, generation: int | None,
                          group: Group | None = None) -> Record:
        """The group's record: its generation, assignor and membership (None: deleted)."""
        key = json.dumps(["group", group_id]).encode()
        if generation is None:
            return key, None
        value: dict[str, Any] = {"generation": generation}
        if group is not None:
            value.update(assignor=group.assignor, members=group.membership())
        return key, json.dumps(value).encode()

    def group_record(self, group_id: str) -> Record:
        """The record that persists a group as it is now."""
        group = self.groups[group_id]
        return self.generation_record(group_id, group.generation, group)

    @staticmethod
    def record_value(key: bytes, value: bytes) -> dict[str, Any]:
        """A record's value, decoded; raises UnsupportedFormatVersionError if a newer raylog
        wrote it."""
        fields = json.loads(value)
        json_version(f"{CONSUMER_OFFSETS_TOPIC}: the record of {key[:200]!r}", fields,
                     RECORD_VERSION)
        fields.pop(JSON_VERSION_FIELD, None)
        return fields

    def load(self, key: bytes, value: bytes | None, position: int = -1) -> None:
        """Replay one record of __consumer_offsets (records in offset order), of the batch
        at ``position``."""
        kind, group_id, *rest = json.loads(key)
        if kind == "offset":
            tp = TopicPartition(rest[0], rest[1])
            if value is None:
                self.drop_offset(group_id, tp)
            else:
                self.apply_commit(group_id,
                                  {tp: OffsetAndMetadata(**self.record_value(key, value))},
                                  position)
        elif kind == "group":
            if value is None:
                self.generations.pop(group_id, None)
                self._persisted.pop(group_id, None)
            else:
                record = self.record_value(key, value)
                self.generations[group_id] = record["generation"]
                self._persisted[group_id] = record

    def drop_offset(self, group_id: str, tp: TopicPartition) -> None:
        """A tombstone of the partition's offset is in the log."""
        for by_group in (self.offsets, self.positions):
            mine = by_group.get(group_id, {})
            mine.pop(tp, None)
            if not mine:
                by_group.pop(group_id, None)

    def load_batch(self, partition: int, producer_id: int, producer_epoch: int,
                   base_sequence: int, transactional: bool, marker: bool | None,
                   records: Iterable[Record], position: int = -1) -> None:
        """Replay one batch of ``partition`` (batches in offset order; this one at
        ``position``): a plain batch's records are applied, a transactional one's offsets
        pend for its producer, and a marker (``marker``: whether it commits) ends them."""
        if marker is not None:
            self.txn_marker(partition, producer_id, producer_epoch, marker)
        elif transactional:
            records = list(records)
            self.txn.appended(partition, producer_id, producer_epoch, base_sequence,
                              len(records), self.transactional_offsets(records), position)
        else:
            for key, value in records:
                self.load(key, value, position)

    @staticmethod
    def transactional_offsets(records: Iterable[Record]) -> GroupOffsets:
        """The offsets of a transactional batch's records, by group."""
        out: GroupOffsets = {}
        for key, value in records:
            kind, group_id, *rest = json.loads(key)
            if kind == "offset" and value is not None:
                out.setdefault(group_id, {})[TopicPartition(rest[0], rest[1])] = \
                    OffsetAndMetadata(**GroupCoordinator.record_value(key, value))
        return out

    def finish_load(self) -> None:
        """After the replay: bring back the persisted members of each group, pending.

        A member's session is counted from now (it heartbeated before the restart, so it
        notices a lost session before this runs out); a member that was already pending
        keeps the end it had.
        """
        now = self.clock()
        for group_id, record in self._persisted.items():
            members = record.get("members") or {}
            if not members or group_id in self.groups:
                continue
            pending = [PendingMember(member_id, m["client_id"], m["session_timeout_ms"],
                                     min(m.get("expires_ms", now + m["session_timeout_ms"]),
                                         now + m["session_timeout_ms"]),
                                     m.get("kafka", False), m.get("instance_id"))
                       for member_id, m in members.items()]
            self.groups[group_id] = Group(group_id, record.get("assignor", "cooperative_sticky"),
                                          record["generation"], pending)
        self._persisted.clear()

    def describe(self, group_id: str) -> dict[str, Any]:
        group = self.group(group_id)
        out = group.describe()
        out["offsets"] = {f"{tp.topic}:{tp.partition}": om.offset
                          for tp, om in sorted(self.offsets.get(group_id, {}).items())}
        # Partitions whose offset is on its way to the log (granted to nobody new till then).
        out["held"] = sorted(self.held.get(group_id, ()))
        # Offsets committed inside transactions not ended yet (not committed until then).
        out["pending_transactional"] = {
            f"{tp.topic}:{tp.partition}": om.offset
            for tp, om in sorted(self.txn.pending_of(group_id).items())}
        return out
