"""A transactional producer's side of a transaction (Kafka's TransactionManager, reduced).

``TransactionManager`` owns the producer's transactional state: its producer id and epoch
(from the coordinator's ``txn_init_producer_id``, replacing the producer's own random id),
the state of the current transaction (Kafka's client states), the partitions the
coordinator has in it, and the error that ended it. The Producer asks it before each step
and before the first batch to a partition leaves (``ready``); the partitions wanted are
added with ``txn_add_partitions`` by one background thread, one call at a time, so the
producer's sender thread never waits on the controller.

The rules (Kafka's): ``init`` once, first; ``begin`` from READY; sends and offsets only
IN_TRANSACTION; ``commit`` needs every send of the transaction to have succeeded (else the
transaction is ABORTABLE and only ``abort`` is allowed); anything out of order raises
IllegalStateError. A fencing error (ProducerFencedError, InvalidProducerEpochError: another
producer initialised the same transactional id) is FATAL: every later call raises it.

Plain Python over a controller seam (an object with ControllerClient's ``txn_*`` methods)
and an injected clock; thread-safe (its own lock, never held across a controller call).
"""

from __future__ import annotations

import concurrent.futures
import enum
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from raylog.client.remote import in_background
from raylog.errors import (
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
    RaylogError,
    RequestTimeoutError,
)
from raylog.util.backoff import backoff_s

# Errors after which the producer can do nothing more (Kafka's fatal errors).
FATAL = (InvalidProducerEpochError, InvalidProducerIdMappingError, InvalidTxnStateError)

# The pause before retrying an add refused because the previous transaction is still being
# completed (its markers written): constant, not backing off, as Kafka's client does for the
# first add of a transaction (ADD_PARTITIONS_RETRY_BACKOFF_MS, 20 ms). Completing takes tens
# of ms here; doubling pauses (20, 40, 80 ms) held the new transaction's first batches back
# long after it was complete (benchmarks/transactions.py, docs/transactions.md).
ADD_BUSY_PAUSE_S = 0.02


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    PREPARED = "prepared"  # every send succeeded; committed jointly by another party
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE = "abortable error"
    FATAL = "fatal error"


# The states in which the transaction's records still leave (their partitions are added).
SENDING = frozenset({TxnState.IN_TRANSACTION, TxnState.PREPARED, TxnState.COMMITTING})


def fenced(error: BaseException) -> BaseException:
    """The error a fatal one is reported as: a producer whose epoch is refused was fenced."""
    if isinstance(error, InvalidProducerEpochError) and not isinstance(error, ProducerFencedError):
        fenced_error = ProducerFencedError(f"the producer was fenced: {error}")
        fenced_error.__cause__ = error
        return fenced_error
    return error


class TransactionManager:
    """The transactional state of one producer (see the module's docstring).

    ``on_added`` is called (on the background thread, no lock held) after each
    ``txn_add_partitions`` answer, so that the producer sends what waited for it.
    """

    def __init__(self, controller: Any, transactional_id: str, transaction_timeout_ms: int,
                 on_added: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._controller = controller
        self.transactional_id = transactional_id
        self.timeout_ms = transaction_timeout_ms
        self._on_added = on_added
        self._clock = clock
        self._lock = threading.Lock()
        self.state = TxnState.UNINITIALIZED
        self.producer_id = -1
        self.epoch = -1
        self.error: BaseException | None = None  # why the transaction is ABORTABLE or FATAL
        self.started = False    # the coordinator has something of this transaction
        self.added: set[tuple[str, int]] = set()   # partitions the coordinator has in it
        self._wanted: set[tuple[str, int]] = set()  # to add at the next call
        self._asking: set[tuple[str, int]] = set()  # in the call outstanding
        self.refused: dict[tuple[str, int], BaseException] = {}  # adds that failed
        self._adding = False    # a txn_add_partitions call is outstanding
        self.bump_needed = False  # a batch of it failed or was dropped: sequences have holes
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    # -- the caller's steps ------------------------------------------------------------------

    def _check(self, step: str, *allowed: TxnState) -> None:
        """Raise unless the state allows ``step`` (lock held)."""
        if self.state is TxnState.FATAL:
            raise self.error  # type: ignore[misc]
        if self.state not in allowed:
            hint = f": {self.error!r}; abort_transaction() first" if self.error else ""
            raise IllegalStateError(f"{step} is not allowed while the transactional producer "
                                    f"{self.transactional_id!r} is in state "
                                    f"{self.state.value}{hint}")

    def init(self, deadline: float) -> tuple[int, int]:
        """init_transactions(): a producer id and epoch that fence every older producer of
        this transactional id; retried while the previous incarnation's transaction is
        completing (ConcurrentTransactionsError) until ``deadline``."""
        with self._lock:
            self._check("init_transactions()", TxnState.UNINITIALIZED, TxnState.INITIALIZING)
            self.state = TxnState.INITIALIZING
        answer = self._retrying(lambda t: self._controller.txn_init_producer_id(
            self.transactional_id, self.timeout_ms, timeout=t), deadline)
        with self._lock:
            self.producer_id, self.epoch = answer
            self.state = TxnState.READY
        return answer

    def begin(self) -> None:
        with self._lock:
            self._check("begin_transaction()", TxnState.READY)
            self.state = TxnState.IN_TRANSACTION
            self.error = None
            self.started = False
            self.added.clear()
            self._wanted.clear()
            self._asking.clear()
            self.refused.clear()

    def check_send(self) -> None:
        """A send is allowed only inside a transaction that has not failed."""
        with self._lock:
            self._check("send()", TxnState.IN_TRANSACTION)

    def add_offsets(self, group_id: str, member_id: str | None, generation: int,
                    entries: list[tuple[str, int, int, str]], deadline: float) -> None:
        """send_offsets_to_transaction(): the group's offsets partition joins the
        transaction, then the offsets are committed in it (visible once it commits)."""
        with self._lock:
            self._check("send_offsets_to_transaction()", TxnState.IN_TRANSACTION)
            producer = self.producer_id, self.epoch
        self._retrying(lambda t: self._controller.txn_add_offsets(
            self.transactional_id, *producer, group_id, timeout=t), deadline,
            abortable=True)
        with self._lock:
            self.started = True
        self._retrying(lambda t: self._controller.txn_offset_commit(
            self.transactional_id, *producer, group_id, member_id, generation, entries,
            timeout=t), deadline, abortable=True)

    def begin_end(self, commit: bool) -> None:
        """commit_transaction() or abort_transaction() starts: no sends from now on. A
        commit needs a transaction that has not failed; a repeat after a timeout resumes."""
        with self._lock:
            if commit:
                if self.state is TxnState.ABORTABLE:
                    raise IllegalStateError(
                        f"the transaction of {self.transactional_id!r} cannot commit: "
                        f"{self.error!r}; abort_transaction() it") from self.error
                self._check("commit_transaction()", TxnState.IN_TRANSACTION,
                            TxnState.PREPARED, TxnState.COMMITTING)
                self.state = TxnState.COMMITTING
            else:
                self._check("abort_transaction()", TxnState.IN_TRANSACTION,
                            TxnState.PREPARED, TxnState.ABORTABLE, TxnState.ABORTING)
                self.state = TxnState.ABORTING

    def begin_prepare(self) -> None:
        """prepare_transaction() starts: no sends from now on (a repeat resumes)."""
        with self._lock:
            if self.state is TxnState.ABORTABLE:
                raise IllegalStateError(
                    f"the transaction of {self.transactional_id!r} cannot be prepared: "
                    f"{self.error!r}; abort_transaction() it") from self.error
            self._check("prepare_transaction()", TxnState.IN_TRANSACTION, TxnState.PREPARED)
            self.state = TxnState.PREPARED

    def prepared(self) -> tuple[int, int] | None:
        """Once its sends are done: the producer id and epoch of a prepared transaction
        the coordinator holds, None if it holds nothing of it. A failed send makes it
        ABORTABLE instead."""
        with self._lock:
            if self.error is not None:
                self.state = TxnState.ABORTABLE
                raise IllegalStateError(
                    f"the transaction of {self.transactional_id!r} cannot be prepared: a "
                    f"send failed ({self.error!r}); abort_transaction() it") from self.error
            return (self.producer_id, self.epoch) if self.started else None

    def end(self, commit: bool, deadline: float) -> None:
        """Tell the coordinator the outcome (if it has anything of the transaction); READY
        after. A commit whose sends failed becomes ABORTABLE instead."""
        with self._lock:
            if commit and self.error is not None:
                self.state = TxnState.ABORTABLE
                raise IllegalStateError(
                    f"the transaction of {self.transactional_id!r} cannot commit: a send "
                    f"failed ({self.error!r}); abort_transaction() it") from self.error
            producer = self.producer_id, self.epoch
            started = self.started
        if started:
            self._retrying(lambda t: self._controller.txn_end(
                self.transactional_id, *producer, commit, timeout=t), deadline)
        with self._lock:
            if not self.bump_needed:
                self.state = TxnState.READY

    def bump(self, deadline: float) -> tuple[int, int]:
        """After an abort whose sequences have holes: a new epoch from the coordinator
        (naming the current one, KIP-360), so every partition starts again at sequence 0."""
        with self._lock:
            producer = self.producer_id, self.epoch
        answer = self._retrying(lambda t: self._controller.txn_init_producer_id(
            self.transactional_id, self.timeout_ms, *producer, timeout=t), deadline)
        with self._lock:
            self.producer_id, self.epoch = answer
            self.bump_needed = False
            self.state = TxnState.READY
        return answer

    # -- the sender's side -------------------------------------------------------------------

    def ready(self, key: tuple[str, int]) -> bool:
        """Whether batches of partition ``key`` may leave: the coordinator has it in the
        transaction. If not, it is asked for in the background (``on_added`` says when)."""
        with self._lock:
            if key in self.added:
                return True
            if key in self.refused or key in self._asking or self.state is TxnState.FATAL:
                return False
            self._wanted.add(key)
            if self._adding:
                return False
            self._adding = True
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="raylog-txn", initializer=in_background)
            self._pool.submit(self._add_wanted)
        return False

    def _add_wanted(self) -> None:
        """Add the wanted partitions, one call at a time, until none is wanted."""
        while True:
            with self._lock:
                wanted, self._wanted = sorted(self._wanted), set()
                self._asking = set(wanted)
                producer = self.producer_id, self.epoch
                if not wanted or self._closed or self.state not in SENDING:
                    error = self.error or IllegalStateError("no transaction in progress")
                    self.refused.update(dict.fromkeys(wanted, error))
                    self._adding = False
                    break
            try:
                self._retrying(lambda t, w=wanted, p=producer: self._controller.txn_add_partitions(
                    self.transactional_id, *p, self._joining(w), timeout=t),
                    self._clock() + self.timeout_ms / 1000, abortable=True,
                    busy_pause_s=ADD_BUSY_PAUSE_S)
            except Exception as e:
                # Any error, not only the coordinator's: one escaping would leave _adding
                # set, and the partitions' batches held until their delivery timeout.
                with self._lock:
                    if not isinstance(e, RaylogError):
                        self._fail(e)
                    self.refused.update(dict.fromkeys(wanted, self.error or e))
            else:
                with self._lock:
                    self.added.update(wanted)
                    self.started = True
            self._on_added()
        self._on_added()

    def _joining(self, asking: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """``asking``, extended in place by the partitions wanted since it was made: a
        retried add carries them (the first add of a transaction is usually retried while
        the previous one's markers are written, and more partitions are wanted meanwhile)."""
        with self._lock:
            joining = sorted(self._wanted - self._asking)
            self._wanted.clear()
            self._asking.update(joining)
            asking.extend(joining)
        return list(asking)

    def batch_failed(self, error: BaseException) -> None:
        """A batch of the transaction failed: the transaction can only abort (a fenced
        epoch: the producer can do nothing more)."""
        with self._lock:
            self.bump_needed = True
            self._fail(error)

    def batch_dropped(self) -> None:
        """An abort dropped numbered batches: the epoch must move on before the next one."""
        with self._lock:
            self.bump_needed = True

    def _fail(self, error: BaseException) -> None:
        """Record a failure (lock held): FATAL for a fencing error, else ABORTABLE."""
        if self.state is TxnState.FATAL:
            return
        if isinstance(error, FATAL):
            self.state, self.error = TxnState.FATAL, fenced(error)
        elif self.state in SENDING:
            self.error = self.error or error
            if self.state is TxnState.IN_TRANSACTION:
                self.state = TxnState.ABORTABLE

    def close(self) -> None:
        with self._lock:
            self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    # -- calls to the coordinator ------------------------------------------------------------

    def _retrying(self, call: Callable[[float], Any], deadline: float,
                  abortable: bool = False, busy_pause_s: float | None = None) -> Any:
        """``call(timeout)`` until it answers, retrying retriable errors until ``deadline``
        (pausing ``busy_pause_s`` each time the coordinator is completing the previous
        transaction, if given, else backing off). A fencing error makes the producer FATAL;
        with ``abortable`` any other final error makes the transaction ABORTABLE. A timeout
        leaves the state as it is (the caller may repeat the step)."""
        for attempt in itertools.count():
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise RequestTimeoutError(
                    f"the transaction coordinator did not complete a step of "
                    f"{self.transactional_id!r} in time")
            try:
                return call(remaining)
            except RaylogError as e:
                if e.retriable and not isinstance(e, FATAL):
                    pause = (busy_pause_s if busy_pause_s is not None
                             and isinstance(e, ConcurrentTransactionsError)
                             else backoff_s(attempt, 0.02, 1.0))
                    if self._clock() + pause < deadline:
                        time.sleep(pause)
                        continue
                    raise
                with self._lock:
                    if isinstance(e, FATAL):
                        self._fail(e)
                        if self.error is not e:
                            raise self.error from e  # type: ignore[misc]
                    if abortable:
                        self._fail(e)
                raise
