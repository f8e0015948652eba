"""The users' SCRAM credentials in the compacted internal topic ``__raylog_users``, through
raylog's own clients (record layout: raylog/kafka/auth/credentials.py).

- :class:`UsersTopic`: writes credentials and their deletions (``raylog users``), reads
  every credential back.
- :class:`CredentialFollower`: a listener's :class:`CredentialStore`, kept up to date from
  the topic by a thread of its own. :meth:`~CredentialFollower.start` returns once every
  record written before it has been read (the first login already sees every user), then
  the thread follows: a user added or deleted reaches the listener within one poll
  (``poll_ms``), and a deleted user's next login fails. (A connection that logged in
  before stays logged in: Kafka's brokers do the same without re-authentication.)

The topic is created on first use, as ``_schemas`` is: one partition, replicated as
``__consumer_offsets`` (min(3, live brokers)).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from raylog.errors import CorruptRecordError, RaylogError, RequestTimeoutError
from raylog.kafka.auth.credentials import (
    USERS_TOPIC,
    USERS_TOPIC_CONFIGS,
    CredentialStore,
    encode,
    record_key,
)
from raylog.kafka.auth.scram import Credential, Mechanism
from raylog.types import TopicPartition

logger = logging.getLogger(__name__)

PARTITION = TopicPartition(USERS_TOPIC, 0)
LOAD_TIMEOUT_S = 60.0  # reading the topic up to its end fails after this long


class UsersTopic:
    """``__raylog_users`` on ``cluster`` (a connected RaylogCluster). Not thread-safe: one
    caller at a time."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        cluster.controller.ensure_internal_topic(USERS_TOPIC, 1, USERS_TOPIC_CONFIGS)

    def put(self, user: str, credentials: list[Credential]) -> None:
        """Store ``user``'s credentials (one per mechanism; others it has stay)."""
        self.write([encode(user, credential) for credential in credentials])

    def delete(self, user: str, mechanisms: list[Mechanism]) -> None:
        """Delete ``user``'s credentials of ``mechanisms`` (tombstones)."""
        self.write([(record_key(user, m), None) for m in mechanisms])

    def write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append ``records`` (key, value or None) to the topic, acknowledged by every
        in-sync replica; raises what failed."""
        from raylog.client.producer import Producer

        with Producer(cluster=self.cluster, acks="all", linger_ms=0) as producer:
            futures = [producer.send(USERS_TOPIC, value, key=key, partition=0)
                       for key, value in records]
            producer.flush()
            for future in futures:
                future.result()  # raises what failed: nothing is claimed written then

    def load(self, store: CredentialStore | None = None) -> CredentialStore:
        """Every credential in the topic, up to its end now, into ``store`` (a new one if
        None)."""
        reader = _Reader(self.cluster)
        try:
            return reader.read_to_end(store or CredentialStore())
        finally:
            reader.close()


class _Reader:
    """A consumer of the topic's one partition from its beginning, applying what it reads
    to a store."""

    def __init__(self, cluster: Any) -> None:
        from raylog.client.consumer import Consumer

        # the leader: it knows the high watermark first, so a write is read back soonest
        self.consumer = Consumer(cluster=cluster, auto_offset_reset="earliest",
                                 enable_auto_commit=False, fetch_from_nearest=False)
        self.consumer.assign([PARTITION])
        self.consumer.seek_to_beginning(PARTITION)

    def read_to_end(self, store: CredentialStore) -> CredentialStore:
        end = self.consumer.end_offsets([PARTITION])[PARTITION]
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while self.consumer.position(PARTITION) < end:
            if time.monotonic() > deadline:
                raise RequestTimeoutError(f"{USERS_TOPIC} gave no records up to offset {end} "
                                          f"within {LOAD_TIMEOUT_S:g} s")
            self.apply(store, 200)
        return store

    def apply(self, store: CredentialStore, timeout_ms: int) -> None:
        for record in self.consumer.poll(timeout_ms=timeout_ms):
            try:
                store.apply(record.key, record.value)
            except CorruptRecordError as e:  # someone else's record: skipped, said
                logger.warning("skipping offset %d of %s: %s", record.offset, USERS_TOPIC, e)

    def close(self) -> None:
        self.consumer.close()


class CredentialFollower:
    """:attr:`store`, following ``__raylog_users``. ``start`` and ``close`` from one
    thread; the store is read from any (it locks)."""

    retry_s = 1.0  # after a failed poll

    def __init__(self, cluster: Any, poll_ms: int = 500) -> None:
        self.cluster = cluster
        self.poll_ms = poll_ms
        self.store = CredentialStore()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: _Reader | None = None
        self.topic: UsersTopic | None = None  # for writing, once started

    def start(self) -> CredentialStore:
        """Read the topic to its end, then follow it on a thread; the store."""
        self.topic = UsersTopic(self.cluster)  # creates the topic if missing
        self._reader = _Reader(self.cluster)
        self._reader.read_to_end(self.store)
        logger.info("read %s: %d users", USERS_TOPIC, len(self.store.users()))
        self._thread = threading.Thread(target=self._follow, daemon=True,
                                        name="raylog-users-follower")
        self._thread.start()
        return self.store

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                self._reader.apply(self.store, self.poll_ms)
            except RaylogError as e:  # a leader moving, a broker restarting: try again
                logger.warning("following %s: %s; retrying", USERS_TOPIC, e)
                self._stop.wait(self.retry_s)
            except Exception:  # a bug: said, and retried, since a follower that stopped
                # would keep a deleted user able to log in
                logger.exception("following %s failed; retrying", USERS_TOPIC)
                self._stop.wait(self.retry_s)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._reader is not None:
            self._reader.close()
