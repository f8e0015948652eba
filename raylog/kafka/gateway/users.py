"""The users' SCRAM credentials in the compacted internal topic ``__raylog_users``, through
raylog's own clients (record layout: raylog/kafka/auth/credentials.py); the same machinery
keeps the ACLs of ``__raylog_acls`` (raylog/kafka/auth/acls.py; :func:`acl_follower`).

- :class:`InternalTopic`: a compacted one-partition internal topic, written (acks=all) and
  read back into anything with ``apply(key, value)``.
- :class:`Follower`: such a store kept up to date from its topic by a thread of its own.

- :class:`UsersTopic`: writes credentials and their deletions (``raylog users``), reads
  every credential back.
- :func:`credential_follower`: a listener's :class:`CredentialStore`, kept up to date from
  the topic by a thread of its own. :meth:`Follower.start` returns once every
  record written before it has been read (the first login already sees every user), then
  the thread follows: a user added or deleted reaches the listener within one poll
  (``poll_ms``), and a deleted user's next login fails; the listener, watching the store,
  closes the connections that logged in with a deleted credential
  (raylog/kafka/gateway/listener.py).

The topic is created on first use, as ``_schemas`` is: one partition, replicated as
``__consumer_offsets`` (min(3, live brokers)).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from raylog.errors import CorruptRecordError, RaylogError, RequestTimeoutError
from raylog.kafka.auth.acls import ACLS_TOPIC, ACLS_TOPIC_CONFIGS, Authorizer
from raylog.kafka.auth.credentials import (
    USERS_TOPIC,
    USERS_TOPIC_CONFIGS,
    CredentialStore,
    encode,
    record_key,
)
from raylog.kafka.auth.scram import Credential, Mechanism
from raylog.kafka.gateway.access import Access
from raylog.types import TopicPartition

logger = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 60.0  # reading the topic up to its end fails after this long


class InternalTopic:
    """A compacted internal topic of one partition (a subclass names it: ``name``,
    ``configs``) on ``cluster`` (a connected RaylogCluster), created if missing. Not
    thread-safe: one caller at a time."""

    name: str
    configs: dict[str, str]

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        cluster.controller.ensure_internal_topic(self.name, 1, self.configs)

    def write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append ``records`` (key, value or None) to the topic, acknowledged by every
        in-sync replica; raises what failed."""
        from raylog.client.producer import Producer

        with Producer(cluster=self.cluster, acks="all", linger_ms=0) as producer:
            futures = [producer.send(self.name, value, key=key, partition=0)
                       for key, value in records]
            producer.flush()
            for future in futures:
                future.result()  # raises what failed: nothing is claimed written then

    def load(self, store: Any) -> Any:
        """Every record of the topic, up to its end now, applied to ``store``."""
        reader = _Reader(self.cluster, self.name)
        try:
            return reader.read_to_end(store)
        finally:
            reader.close()


class AclsTopic(InternalTopic):
    """``__raylog_acls``: the ACL bindings (``raylog acls``, CreateAcls/DeleteAcls)."""

    name = ACLS_TOPIC
    configs = ACLS_TOPIC_CONFIGS


class UsersTopic(InternalTopic):
    """``__raylog_users`` on ``cluster`` (a connected RaylogCluster). Not thread-safe: one
    caller at a time."""

    name = USERS_TOPIC
    configs = USERS_TOPIC_CONFIGS

    def put(self, user: str, credentials: list[Credential]) -> None:
        """Store ``user``'s credentials (one per mechanism; others it has stay)."""
        self.write([encode(user, credential) for credential in credentials])

    def delete(self, user: str, mechanisms: list[Mechanism]) -> None:
        """Delete ``user``'s credentials of ``mechanisms`` (tombstones)."""
        self.write([(record_key(user, m), None) for m in mechanisms])

    def load(self, store: CredentialStore | None = None) -> CredentialStore:
        """Every credential in the topic, up to its end now, into ``store`` (a new one if
        None)."""
        return super().load(store or CredentialStore())


class _Reader:
    """A consumer of a topic's one partition from its beginning, applying what it reads
    to a store."""

    def __init__(self, cluster: Any, topic: str) -> None:
        from raylog.client.consumer import Consumer

        self.partition = TopicPartition(topic, 0)
        # the leader: it knows the high watermark first, so a write is read back soonest
        self.consumer = Consumer(cluster=cluster, auto_offset_reset="earliest",
                                 enable_auto_commit=False, fetch_from_nearest=False)
        self.consumer.assign([self.partition])
        self.consumer.seek_to_beginning(self.partition)

    def read_to_end(self, store: Any) -> Any:
        end = self.consumer.end_offsets([self.partition])[self.partition]
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while self.consumer.position(self.partition) < end:
            if time.monotonic() > deadline:
                raise RequestTimeoutError(f"{self.partition.topic} gave no records up to "
                                          f"offset {end} within {LOAD_TIMEOUT_S:g} s")
            self.apply(store, 200)
        return store

    def apply(self, store: Any, timeout_ms: int) -> None:
        for record in self.consumer.poll(timeout_ms=timeout_ms):
            try:
                store.apply(record.key, record.value)
            except CorruptRecordError as e:  # someone else's record: skipped, said
                logger.warning("skipping offset %d of %s: %s", record.offset,
                               self.partition.topic, e)

    def close(self) -> None:
        self.consumer.close()


class Follower:
    """:attr:`store` (anything with ``apply(key, value)``, locking itself), following the
    internal topic ``topic`` (an :class:`InternalTopic` subclass).
    ``start`` and ``close`` from one thread; the store is read from any."""

    retry_s = 1.0  # after a failed poll

    def __init__(self, cluster: Any, topic: type[InternalTopic], store: Any,
                 poll_ms: int = 500) -> None:
        self.cluster = cluster
        self.poll_ms = poll_ms
        self.store = store
        self.name = topic.name
        self._topic_class = topic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: _Reader | None = None
        self.topic: InternalTopic | None = None  # for writing, once started

    def start(self) -> Any:
        """Read the topic to its end, then follow it on a thread; the store."""
        self.topic = self._topic_class(self.cluster)  # creates the topic if missing
        self._reader = _Reader(self.cluster, self.topic.name)
        self._reader.read_to_end(self.store)
        logger.info("read %s", self.name)
        self._thread = threading.Thread(target=self._follow, daemon=True,
                                        name=f"raylog-follower-{self.name}")
        self._thread.start()
        return self.store

    def _follow(self) -> None:
        name = self.name
        while not self._stop.is_set():
            try:
                self._reader.apply(self.store, self.poll_ms)
            except RaylogError as e:  # a leader moving, a broker restarting: try again
                logger.warning("following %s: %s; retrying", name, e)
                self._stop.wait(self.retry_s)
            except Exception:  # a bug: said, and retried, since a follower that stopped
                # would keep a deleted user able to log in, a removed ACL in force
                logger.exception("following %s failed; retrying", name)
                self._stop.wait(self.retry_s)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._reader is not None:
            self._reader.close()


def credential_follower(cluster: Any, poll_ms: int = 500) -> Follower:
    """A listener's CredentialStore following ``__raylog_users``: :meth:`Follower.start`
    returns once every record written before it has been read (the first login already
    sees every user); a user added or deleted reaches the listener within one poll."""
    return Follower(cluster, UsersTopic, CredentialStore(), poll_ms)


def acl_follower(cluster: Any, authorizer: Authorizer, poll_ms: int = 500) -> Follower:
    """``authorizer`` following ``__raylog_acls``: an ACL added or removed anywhere is in
    force on the listener within one poll."""
    return Follower(cluster, AclsTopic, authorizer, poll_ms)


def start_access(cluster: Any, security: Any,
                 poll_ms: int = 500) -> tuple[Follower | None, Access | None]:
    """The ACL follower and :class:`Access` of a listener with ``security`` (a
    ListenerSecurity), started (blocking: it reads ``__raylog_acls`` first); (None, None)
    when its authorizer is off. The caller closes the follower."""
    if not security.authorizer:
        return None, None
    follower = acl_follower(cluster, Authorizer(security.super_users,
                                                security.allow_everyone_if_no_acl_found),
                            poll_ms)
    follower.start()
    return follower, Access(follower.store, follower.topic.write)
