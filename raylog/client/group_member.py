"""The consumer-group half of the Consumer: subscribe, rebalances, commits.

Kept apart from the fetching half (consumer.py); ``Consumer`` mixes it in. It relies on the
consumer's ``config``, ``_cluster``, ``_assigned`` (partition -> fetch state with a
``position``), ``_paused``, ``_check_open``, ``_meta`` and the per-partition state class,
and keeps its own state on the consumer (:meth:`GroupMixin._init_group`).

``poll`` never waits on the coordinator (the controller): what it would wait for runs on a
background thread, one call at a time, and poll picks the outcome up later. A revoked
partition stops being read at once and is reported released once its final commit ended;
a granted one is taken once its committed offset is known; a member that lost everything
rejoins from its heartbeat thread. So a hung controller stops no fetching of what the
member owns, and the member gives everything up when its session would have run out.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from raylog.client.membership import Membership
from raylog.client.remote import in_background
from raylog.errors import (
    IllegalGenerationError,
    IllegalStateError,
    InvalidArgumentError,
    NotPartitionOwnerError,
    RaylogError,
    RejoinRequiredError,
    UnknownMemberError,
)
from raylog.metadata.topics import topic_names, topic_partition, topic_partitions, topic_pattern
from raylog.types import ConsumerGroupMetadata, TopicPartition
from raylog.util.arguments import check_int
from raylog.util.backoff import retry_backoff

logger = logging.getLogger(__name__)

LISTENER_EVENTS = ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost")


def _checked_offsets(offsets: object) -> dict[TopicPartition, int]:
    """Offsets to commit: a dict of TopicPartition (or pair) to the next offset to read."""
    if not isinstance(offsets, Mapping):
        raise InvalidArgumentError(f"offsets to commit must be a dict of TopicPartition to "
                                   f"offset, got {type(offsets).__name__}")
    return {topic_partition(tp): check_int(f"the offset of {tp}", offset)
            for tp, offset in offsets.items()}


class GroupMixin:
    """Group membership and offset commits for :class:`raylog.client.consumer.Consumer`."""

    def _init_group(self) -> None:
        """The group half's state (Consumer.__init__ calls this)."""
        self._membership: Membership | None = None
        self._listener: Any = None
        self._last_auto_commit = time.monotonic()
        # One background thread for every group call poll must not wait for: commit_async,
        # auto-commits, a revoked partition's final commit, committed offsets to start from.
        self._committer: concurrent.futures.ThreadPoolExecutor | None = None
        self._auto_commit: concurrent.futures.Future | None = None  # the one under way
        # A revoked partition whose final commit is on its way -> that commit: not read any
        # more, still owned (reported) until the commit ended.
        self._releasing: dict[TopicPartition, concurrent.futures.Future] = {}
        # Granted partitions waiting for their committed offsets: (partitions, the
        # generation when asked, the lookup).
        self._taking: tuple[frozenset[TopicPartition], int, concurrent.futures.Future] | None \
            = None
        # Set when something a poll with nothing in flight waits for happened: the
        # coordinator's answer changed what the member owns, or a background call ended.
        self._news = threading.Event()

    def _background(self, call: Any, *args: Any) -> concurrent.futures.Future:
        if self._committer is None:
            self._committer = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="raylog-commit", initializer=in_background)
        future = self._committer.submit(call, *args)
        future.add_done_callback(lambda _: self._news.set())
        return future

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None,
                  listener: Any = None) -> None:
        """Join the consumer group ``group_id`` for these topics (or a regex ``pattern``).

        The group's coordinator assigns partitions; each is owned by one member at a time.
        ``listener`` may define ``on_partitions_revoked(partitions)`` (called before a
        partition is given up: commit there) and ``on_partitions_assigned(partitions)``.
        Assignment happens inside ``poll``. A string is one topic name.
        """
        self._check_open()
        if self.config.group_id is None:
            raise IllegalStateError("subscribe() needs a group_id")
        if (topics is None) == (pattern is None):
            raise InvalidArgumentError("subscribe() takes topics or a pattern, not both or "
                                       "neither")
        if pattern is not None:
            topic_pattern(pattern)
        names = sorted(set(topic_names(topics, "subscribe()"))) if topics is not None else None
        for event in LISTENER_EVENTS:
            if getattr(listener, event, None) is not None and \
                    not callable(getattr(listener, event)):
                raise InvalidArgumentError(f"the listener's {event} must be callable")
        if self._membership is not None:
            self.unsubscribe()
        self._assigned = {}
        self._releasing = {}
        self._taking = None
        self._listener = listener
        self._membership = Membership(
            self._cluster.controller, self.config.group_id, self.config.client_id, names,
            pattern, session_timeout_ms=self.config.session_timeout_ms,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignor=self.config.partition_assignment_strategy, on_news=self._news.set)

    def unsubscribe(self) -> None:
        """Give up every partition (running the listener, committing with auto-commit) and
        leave the group."""
        if self._membership is None:
            return
        try:
            self._revoke(set(self._assigned), wait=True)
        finally:
            # Final commits of partitions revoked before: each ends by its own deadline.
            concurrent.futures.wait(list(self._releasing.values()))
            self._releasing = {}
            self._taking = None
            membership, self._membership = self._membership, None
            membership.close()

    def _listen(self, event: str, partitions: set[TopicPartition]) -> None:
        callback = getattr(self._listener, event, None)
        if event == "on_partitions_lost" and callback is None:
            callback = getattr(self._listener, "on_partitions_revoked", None)  # as Kafka's
        if partitions and callback is not None:
            callback(sorted(partitions))

    def _drop(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            state = self._assigned.pop(tp, None)
            if state is not None:
                state.abandon()  # its answer, if any, goes unread
            self._paused.discard(tp)

    def _revoke(self, partitions: set[TopicPartition], wait: bool = False) -> None:
        """Give partitions up: run the listener, stop reading them, and with auto-commit
        commit their positions: before returning with ``wait``, else in the background,
        the partitions staying owned (``_releasing``) until the commit ended."""
        if not partitions:
            return
        try:
            self._listen("on_partitions_revoked", partitions)
            if self.config.enable_auto_commit:
                positions = self._positions(partitions)
                if wait:
                    self._commit_quietly(positions)
                elif positions:
                    commit = self._background(self._commit_quietly, positions)
                    self._releasing.update(dict.fromkeys(partitions, commit))
        finally:
            self._drop(partitions)

    def _holding(self) -> set[TopicPartition]:
        """What the member reads or has not finished giving up."""
        return self._assigned.keys() | self._releasing.keys()

    def _released(self) -> bool:
        """Forget the releasing partitions whose final commit ended; whether there were."""
        done = [tp for tp, commit in self._releasing.items() if commit.done()]
        for tp in done:
            del self._releasing[tp]
        return bool(done)

    def _lose(self, partitions: set[TopicPartition]) -> None:
        """Partitions that are no longer this member's: stop reading them at once (their
        prefetched records go too) and tell the listener; nothing is committed for them."""
        if not partitions:
            return
        self._drop(partitions)
        logger.warning("group %s: lost %d partitions", self.config.group_id, len(partitions))
        self._listen("on_partitions_lost", partitions)

    def _apply_membership(self) -> None:
        """Apply what the coordinator said: lose, revoke, then take granted partitions.
        Never waits on the coordinator."""
        membership = self._membership
        released = self._released()
        todo = membership.latest()
        if todo.lost_all:
            try:
                self._lose(set(self._assigned))
            finally:
                self._releasing = {}  # their commits may land or be refused: not ours now
                self._taking = None
                membership.report((), released=False)
                membership.rejoin()  # the heartbeat thread joins; nothing is owned until then
            return
        for tp in todo.lost:
            self._releasing.pop(tp, None)
        lost = self._assigned.keys() & todo.lost
        current = self._assigned.keys() - lost
        revoked = current & todo.revoke | (current - todo.owned)
        try:
            self._lose(lost)
            self._revoke(revoked)
        finally:
            if lost or revoked or released:
                membership.report(self._holding(), released=True)
        self._take(todo.owned - todo.revoke - self._holding())

    def _take(self, granted: set[TopicPartition]) -> None:
        """Start reading granted partitions once their committed offsets are known: looked
        up in the background, and used only if no rebalance happened meanwhile (a partition
        may have been someone else's in between)."""
        membership = self._membership
        if self._taking is not None:
            asked, generation, lookup = self._taking
            if not lookup.done():
                return
            self._taking = None
            try:
                committed = lookup.result()
            except RaylogError as e:
                logger.info("group %s: looking up committed offsets failed: %r; asking again",
                            self.config.group_id, e)
                committed = None
            taken = asked & granted if committed is not None and \
                generation == membership.generation else set()
            for tp in sorted(taken):
                state = self._assigned[tp] = self._new_state(tp)
                if committed.get(tp) is not None:
                    state.reset(committed[tp])
            if taken:
                membership.report(self._holding(), released=False)
                self._listen("on_partitions_assigned", set(taken))
            granted = granted - taken
        if granted:
            for topic in {tp.topic for tp in granted}:
                self._meta(topic)  # metadata of a new topic: asked for meanwhile
            self._taking = (frozenset(granted), membership.generation,
                            self._background(self.committed, granted))

    def _group_identity(self) -> tuple[str | None, int]:
        if self._membership is None:
            return None, -1
        return self._membership.member_id, self._membership.generation

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._assigned[tp].position for tp in partitions
                if tp in self._assigned and self._assigned[tp].position is not None}

    def _commit_positions(self, partitions: Iterable[TopicPartition]) -> None:
        self._commit_quietly(self._positions(partitions))

    def _commit_quietly(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            self.commit(offsets)
        except RaylogError as e:
            logger.warning("auto-commit for group %s failed: %r", self.config.group_id, e)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group, member and generation, for a transactional producer's
        ``send_offsets_to_transaction`` (the group checks them as for ``commit``)."""
        self._check_open()
        if self.config.group_id is None:
            raise IllegalStateError("group_metadata() needs a group_id")
        return ConsumerGroupMetadata(self.config.group_id, *self._group_identity())

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit offsets (default: the positions of every assigned partition), durably.

        The offset is the next one to read, as in Kafka. Raises CommitFailedError subclasses
        (IllegalGenerationError, NotPartitionOwnerError, UnknownMemberError) when the group
        refuses it; nothing is stored then.
        """
        self._check_open()
        if self.config.group_id is None:
            raise IllegalStateError("commit() needs a group_id")
        offsets = self._positions(self._assigned) if offsets is None else offsets
        entries = [(*tp, offset, "") for tp, offset in _checked_offsets(offsets).items()]
        if not entries:
            return
        membership = self._membership
        deadline = time.monotonic() + self.config.default_api_timeout_ms / 1000
        backoff = retry_backoff(self.config.retry_backoff_ms)
        rejoined = refreshed = False
        while True:
            member_id, generation = self._group_identity()
            try:
                self._cluster.controller.commit_offsets(
                    self.config.group_id, member_id, generation, entries,
                    timeout=max(deadline - time.monotonic(), 0.001))
                return
            except RejoinRequiredError:
                # The coordinator restarted and the heartbeat thread has not rejoined yet.
                if rejoined or membership is None:
                    raise
                rejoined = True
                membership.rejoin_claiming()
            except IllegalGenerationError:
                # A rebalance moved the group on; the next heartbeat brings the generation.
                if membership is None:
                    raise
                if refreshed:
                    # Refused again at the generation just learned: fenced. Whatever the
                    # member holds may be someone else's by now.
                    membership.lose_all()
                    raise
                refreshed = True
                try:
                    membership.refresh()
                except RaylogError as e:  # say, the controller is restarting
                    if not e.retriable or time.monotonic() + backoff.peek() > deadline:
                        raise
                    time.sleep(backoff.next())
            except UnknownMemberError:
                if membership is not None:
                    membership.lose_all()  # poll gives everything up before rejoining
                raise
            except NotPartitionOwnerError:
                # (a revoked partition's final commit counts: it is still held; lookups
                # only, this may run on the commit thread)
                if membership is not None and all(
                        tp in self._assigned or tp in self._releasing
                        for tp in map(topic_partition, offsets)):
                    membership.lose_all()  # the coordinator disagrees about what we own
                raise
            except RaylogError as e:
                # Say, the coordinator restarted and its offsets topic is not served yet.
                if not e.retriable or time.monotonic() + backoff.peek() > deadline:
                    raise
                logger.info("commit for group %s: %r; retrying", self.config.group_id, e)
                time.sleep(backoff.next())

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None,
                     callback: Any = None) -> concurrent.futures.Future:
        """Commit in the background; ``callback(offsets, error)`` runs when it is done."""
        self._check_open()
        offsets = self._positions(self._assigned) if offsets is None else \
            _checked_offsets(offsets)
        if callback is not None and not callable(callback):
            raise InvalidArgumentError(f"callback must be callable, got {callback!r}")
        future = self._background(self.commit, offsets)
        if callback is not None:
            future.add_done_callback(lambda f: callback(offsets, f.exception()))
        return future

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition (None if it has none)."""
        self._check_open()
        if self.config.group_id is None:
            raise IllegalStateError("committed() needs a group_id")
        found = self._cluster.controller.committed_offsets(
            self.config.group_id,
            [tuple(tp) for tp in topic_partitions(partitions, "committed()")],
            timeout=self.config.default_api_timeout_ms / 1000)
        return {TopicPartition(*tp): (om[0] if om else None) for tp, om in found.items()}

    def _maybe_auto_commit(self) -> None:
        if self.config.group_id is None or not self.config.enable_auto_commit:
            return
        if (time.monotonic() - self._last_auto_commit) * 1000 < \
                self.config.auto_commit_interval_ms:
            return
        if self._auto_commit is not None and not self._auto_commit.done():
            return  # the last one is still under way (the coordinator is slow): no pile-up
        self._last_auto_commit = time.monotonic()
        if self._assigned:
            self._auto_commit = self.commit_async(self._positions(self._assigned))

