"""The Producer's delivery guarantees without Ray: a fake cluster behind the client wrappers.

The leader is a fake ReplicaClient whose requests are concurrent futures and whose log is a
list guarded by the real ProducerStates; knobs make it hang, drop answers or refuse.
"""

from __future__ import annotations

import concurrent.futures
import gc
import os
import threading
import time
import weakref

import pyarrow as pa
import pytest

import raylog.client.producer as producer_module
from raylog.client.connection import PartitionMetadata, TopicMetadata
from raylog.client.producer import Producer
from raylog.errors import (
    ActorUnavailableError,
    ClientClosedError,
    InternalError,
    InvalidConfigError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProduceFailedError,
    RecordTooLargeError,
    RequestTimeoutError,
)
from raylog.records import parse_header, read_records
from raylog.records.append import PlainSend
from raylog.replica.producer_state import ProducerStates, SequenceGap
from raylog.storage import AppendInfo
from tests.unit import fake_remote
from tests.unit.fake_remote import FakePartition, wait_until


class FakeLeader:
    """A partition leader: appends in producer-sequence order, or misbehaves on request."""

    broker_id = 0
    leader_epoch = 0

    def __init__(self) -> None:
        self.log = FakePartition(0, (0,))  # the log and the producer states
        # "ok", "hang", "die" (append, then lose the answer), "refuse", "minus-one" (answer
        # at offset -1 without appending, as older leaders did for a batch they forgot)
        self.mode = "ok"
        self.delay_s = 0.0  # with "ok": answer this much later
        self.appends = 0
        self.failures = 0  # with "die": how many requests to fail before answering again
        self.hung: list[bytes] = []  # batches whose requests never get an answer
        self.lock = threading.Lock()

    def append(self, data: bytes, acks: object, timeout_ms: int,
               client_id: str | None = None) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self.lock:
            if self.mode == "hang":
                self.hung.append(data)
                return future
            if self.mode == "refuse":
                future.set_exception(RecordTooLargeError("over max.message.bytes"))
                return future
            if self.mode == "minus-one":
                future.set_result(AppendInfo(-1, -1, 0, parse_header(data).record_count))
                return future
            self.appends += 1
            try:
                info = self._append(data)
            except SequenceGap as gap:  # the real leader waits a moment first
                future.set_exception(gap.error("t-0", 0.0))
                return future
            except (InvalidProducerEpochError, OutOfOrderSequenceError) as e:
                future.set_exception(e)
                return future
            if self.mode == "die" and self.failures > 0:
                self.failures -= 1
                future.set_exception(ActorUnavailableError("the replica died"))
                return future
            if self.delay_s:
                threading.Timer(self.delay_s, future.set_result, (info,)).start()
            else:
                future.set_result(info)
        return future

    @property
    def handle(self) -> FakeLeader:  # the host its partition's batches are grouped by
        return self

    def append_batches(self, batches: list, acks: object, timeout_ms: int,
                       client_id: str | None = None,
                       socket: bool = False) -> concurrent.futures.Future:
        """One call carrying several batches: each appended as ``append`` would."""
        return fake_remote.gathered([replica.append(data, acks, timeout_ms)
                                     for replica, data in batches])

    def _append(self, data: bytes) -> AppendInfo:
        return self.log.append(data)

    @property
    def values(self) -> list[bytes | None]:
        return self.log.values

    @property
    def states(self) -> ProducerStates:
        return self.log.states

    def lose_tail(self, count: int) -> None:
        """A failover to a replica that lacks the last ``count`` records (an acks=1 tail),
        whose producer state is what its own log says (here: nothing of this producer)."""
        self.log.lose_tail(count)


class FakeCluster:
    """One partition, led by ``leader`` forever: metadata never changes."""

    def __init__(self, leader: FakeLeader) -> None:
        self.leader = leader

    def topic(self, name: str, refresh: bool = False, timeout: float | None = None
              ) -> TopicMetadata:
        return TopicMetadata(name, "id", (PartitionMetadata(0, 0, 0, (0,), (0,),
                                                            {0: self.leader}),), {},
                             time.monotonic())

    def cached(self, name: str) -> None:
        return None  # nothing newer than what the producer holds

    def refresh_soon(self, name: str, newer_than: float | None = None) -> None:
        pass


@pytest.fixture
def leader(monkeypatch) -> FakeLeader:
    monkeypatch.setattr(producer_module, "when_done", fake_remote.when_done)
    return FakeLeader()


def producer_for(leader: FakeLeader, **settings) -> Producer:
    return Producer(cluster=FakeCluster(leader), **{"linger_ms": 1, "batch_size": 4096,
                                                    **settings})


def test_every_future_fails_by_its_delivery_timeout_when_the_leader_hangs(leader):
    leader.mode = "hang"
    producer = producer_for(leader, delivery_timeout_ms=300, retry_backoff_ms=10)
    futures = [producer.send("t", b"v%d" % i) for i in range(200)]
    started = time.monotonic()
    for future in futures:  # queued behind the in-flight limit, or in flight: all end
        assert isinstance(future.exception(timeout=5), RequestTimeoutError)
    assert time.monotonic() - started < 5
    producer.close()


def test_flush_raises_for_failures_nobody_looked_at(leader):
    leader.mode = "refuse"
    producer = producer_for(leader)
    seen = producer.send("t", b"seen")
    with pytest.raises(RecordTooLargeError):
        seen.result(timeout=5)
    producer.flush()  # the only failure was looked at
    producer.send("t", b"unseen")
    with pytest.raises(ProduceFailedError, match="1 records in 1 batches failed"):
        producer.flush()
    producer.flush()  # reported once
    producer.close()


def test_close_with_a_timeout_resolves_every_future(leader):
    leader.mode = "hang"
    producer = producer_for(leader, delivery_timeout_ms=60_000)
    futures = [producer.send("t", b"v%d" % i) for i in range(50)]
    with pytest.raises(RequestTimeoutError):
        producer.close(timeout=0.2)
    assert all(isinstance(f.exception(timeout=1), ClientClosedError) for f in futures)


class CountingRef:
    """A request whose answer counts its reads, as Ray's are: the future Ray completes for
    ``when_done`` reads (fetches and deserializes) it once, each ``ray.get`` once more."""

    def __init__(self, answer: concurrent.futures.Future) -> None:
        self.answer = answer
        self.reads = 0

    def read(self) -> object:
        self.reads += 1
        return self.answer.result()

    def future(self) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def completed(_: concurrent.futures.Future) -> None:
            try:
                future.set_result(self.read())
            except Exception as e:
                future.set_exception(e)

        self.answer.add_done_callback(completed)
        return future


def test_each_append_answer_is_read_once(monkeypatch):
    """The answer the callback was woken with is the one used: no second read of it."""
    refs: list[CountingRef] = []

    class Leader(FakeLeader):
        def append_batches(self, batches: list, acks: object, timeout_ms: int,
                           client_id: str | None = None, socket: bool = False) -> CountingRef:
            refs.append(CountingRef(super().append_batches(batches, acks, timeout_ms)))
            return refs[-1]

    # Ray's when_done (remote.py's), and any ray.get of the producer's reads the ref again.
    monkeypatch.setattr(producer_module, "resolve", lambda ref, timeout=None: ref.read(),
                        raising=False)
    leader = Leader()
    producer = producer_for(leader)
    futures = [producer.send("t", b"v%d" % i) for i in range(50)]
    producer.flush()
    assert [f.result(timeout=5).offset for f in futures] == list(range(50))
    assert refs and [ref.reads for ref in refs] == [1] * len(refs)
    leader.mode = "refuse"  # an error is read once too, and raised as the leader's
    with pytest.raises(RecordTooLargeError):
        producer.send("t", b"refused").result(timeout=5)
    assert refs[-1].reads == 1
    producer.close()


def test_lost_answers_are_retried_without_duplicates_or_reordering(leader):
    leader.mode, leader.failures = "die", 7
    producer = producer_for(leader, retry_backoff_ms=1, max_in_flight_requests_per_partition=3)
    futures = []
    for i in range(300):
        futures.append(producer.send("t", b"%05d" % i))
        if i % 25 == 0:
            producer.flush()  # several flushes: batches of a few records each
    producer.flush()
    assert [f.result(1).offset for f in futures] == list(range(300))
    assert leader.values == [b"%05d" % i for i in range(300)]
    producer.close()


def test_a_hung_batch_expires_and_the_partition_goes_on_under_a_new_epoch(leader):
    leader.mode = "hang"
    producer = producer_for(leader, delivery_timeout_ms=200, retry_backoff_ms=1)
    lost = producer.send("t", b"lost")
    assert isinstance(lost.exception(timeout=5), RequestTimeoutError)
    leader.mode = "ok"
    after = producer.send("t", b"after")
    assert after.result(timeout=5).offset == 0
    with pytest.raises(InvalidProducerEpochError):  # the lost batch's late copy is fenced
        leader._append(leader.hung[0])
    assert leader.values == [b"after"]
    producer.close()


def test_a_busy_partition_gets_fewer_larger_batches_not_a_queue_of_small_ones(leader):
    """Under backpressure a lingering batch stays open and fills (as Kafka's accumulator
    does) instead of being sealed every linger_ms into a queue that outgrows the timeout."""
    leader.delay_s = 0.05  # each append takes 50 ms; one at a time
    producer = producer_for(leader, linger_ms=1, max_in_flight_requests_per_partition=1,
                            batch_size=1 << 20)
    futures = []
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        futures.append(producer.send("t", b"v%06d" % len(futures)))
        time.sleep(0.0002)
    producer.flush()
    assert [f.result(0).offset for f in futures] == list(range(len(futures)))
    assert leader.appends <= 0.5 / 0.05 + 5  # about one batch per answer, not per linger_ms
    producer.close()


def test_after_a_failover_that_lost_its_state_the_producer_bumps_its_epoch_at_once(leader):
    """The new leader knows nothing of this producer (its acks=1 batches were lost with the
    old leader): the next batch is ahead of anything it could take. The producer bumps its
    epoch and goes on at once, long before its delivery timeout."""
    producer = producer_for(leader, acks=1, delivery_timeout_ms=120_000)
    for i in range(3):
        producer.send("t", b"early-%d" % i).result(timeout=5)
    leader.lose_tail(3)
    after = producer.send("t", b"after")
    assert after.result(timeout=5).offset == 0  # not after 120 s of OutOfOrderSequence
    assert leader.values == [b"after"]
    (state,) = leader.states._producers.values()
    assert state.epoch == 1  # bumped
    producer.close()


def test_an_answer_at_a_negative_offset_is_a_failure_never_an_acknowledgement(leader):
    leader.mode = "minus-one"
    producer = producer_for(leader)
    future = producer.send("t", b"v")
    assert isinstance(future.exception(timeout=5), InternalError)
    leader.mode = "ok"
    assert producer.send("t", b"w").result(timeout=5).offset == 0  # it goes on
    producer.close()


def test_an_idempotent_producer_keeps_no_more_in_flight_than_a_leader_remembers():
    with pytest.raises(InvalidConfigError, match="at most 5"):
        Producer(cluster=FakeCluster(FakeLeader()), max_in_flight_requests_per_partition=6)
    Producer(cluster=FakeCluster(FakeLeader()), acks=0,
             max_in_flight_requests_per_partition=6).close()  # nothing to remember


class RecordingCondition:
    """The sender's condition, recording the timeout of each of its waits."""

    def __init__(self, condition: threading.Condition) -> None:
        self._condition = condition
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return self._condition.wait(timeout)

    def notify(self, n: int = 1) -> None:
        self._condition.notify(n)

    def notify_all(self) -> None:
        self._condition.notify_all()


def test_an_idle_sender_sleeps_until_an_event_instead_of_waking_on_a_timer(leader):
    producer = producer_for(leader, linger_ms=5)
    wake = RecordingCondition(producer._wake)
    producer._wake = wake
    producer.send("t", b"a").result(timeout=10)
    # Every batch acknowledged: no linger, retry, deadline or request left to look at, so
    # the sender waits for an event with no timeout: however long the producer stays idle,
    # it does not wake (a timer design waits a finite interval, again and again).
    wait_until(lambda: wake.waits and wake.waits[-1] is None)
    with producer._lock:
        assert len(producer._alarms) == 0 and producer._sleeping_until == float("inf")
    idle_waits = len(wake.waits)
    # An event wakes it: a record opens a batch, whose linger it waits for, then its answer.
    producer.send("t", b"b").result(timeout=10)
    wait_until(lambda: wake.waits[-1] is None and len(wake.waits) > idle_waits)
    assert any(w is not None and w <= 0.005 for w in wake.waits[idle_waits:])  # the linger
    producer.close()
    assert leader.values == [b"a", b"b"]


def test_flush_waits_for_the_batches_it_covers_not_for_later_ones(leader):
    """Another thread keeps sending while one flushes: the flush ends once what was sent
    before it is acknowledged, although the producer never runs empty."""
    leader.delay_s = 0.05  # something is always in flight
    producer = producer_for(leader, linger_ms=1)
    first = producer.send("t", b"before")
    stop = threading.Event()

    def keep_sending() -> None:
        while not stop.is_set():
            producer.send("t", b"later")
            time.sleep(0.001)

    sender = threading.Thread(target=keep_sending)
    sender.start()
    try:
        wait_until(lambda: len(leader.values) > 3)
        producer.flush(timeout=60)
        assert first.done() and first.result().offset == 0
    finally:
        stop.set()
        sender.join()
        producer.close()


@pytest.fixture(params=["compiled", "python"])
def send_path(request, monkeypatch) -> str:
    """The producer's send as one C call (PlainSend, _append.c), or its Python fast path."""
    if request.param == "compiled" and PlainSend is None:
        # CI installs the project, which builds it: there its absence is a failure.
        missing = ("raylog.records._append (the C helper) is not built (pip install -e . or "
                   "PYTHONPATH=$PWD python -m raylog.kafka.build) or RAYLOG_PURE_PYTHON is set")
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    if request.param == "python":
        monkeypatch.setattr(producer_module, "PlainSend", None)
    return request.param


def test_plain_records_and_the_others_interleave_in_order_on_either_send_path(leader,
                                                                              send_path):
    producer = producer_for(leader, batch_size=4096)
    assert (type(producer.send).__name__ == "PlainSend") == (send_path == "compiled")
    sent, futures = [], []
    for i in range(400):
        value = b"v%04d" % i
        kwargs = {}
        if i % 9 == 4:
            kwargs["key"] = b"k%d" % i
        elif i % 9 == 7:
            kwargs["headers"] = [("h", b"%d" % i)]
        elif i % 9 == 8:
            kwargs["timestamp"] = 1_000 + i
        before = time.time_ns() // 1_000_000
        futures.append(producer.send("t", value, **kwargs))
        sent.append((value, kwargs, before, time.time_ns() // 1_000_000))
    producer.flush()
    records = [r for batch in leader.log.batches for r in read_records(batch)]
    assert len(records) == len(sent) and leader.appends > 1  # several batches
    for offset, (record, (value, kwargs, before, after), future) in enumerate(
            zip(records, sent, futures, strict=True)):
        assert (record.offset, record.value) == (offset, value)
        assert record.key == kwargs.get("key")
        assert list(record.headers) == kwargs.get("headers", [])
        if "timestamp" in kwargs:
            assert record.timestamp == kwargs["timestamp"]
        else:
            assert before <= record.timestamp <= after
        metadata = future.result(0)
        assert (metadata.offset, metadata.timestamp) == (offset, record.timestamp)
    producer.close()
    with pytest.raises(ClientClosedError):  # the sticky batches went with close
        producer.send("t", b"late")


def test_threads_sending_at_once_land_each_record_once_in_their_order(leader, send_path):
    """The compiled send takes no lock; records with headers, on the locked path, land in
    the same batches meanwhile."""
    producer = producer_for(leader, batch_size=4096)
    futures: dict[bytes, object] = {}

    def sender(thread: int) -> None:
        for i in range(3000):
            value = b"%d-%05d" % (thread, i)
            headers = [("h", None)] if i % 7 == 0 else None
            futures[value] = producer.send("t", value, headers=headers)

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    producer.flush()
    assert sorted(leader.values) == sorted(futures)
    for thread in range(4):
        mine = [v for v in leader.values if v.startswith(b"%d-" % thread)]
        assert mine == sorted(mine)
    assert all(leader.values[f.result(0).offset] == v for v, f in futures.items())
    producer.close()


def test_a_closed_producer_is_collected(leader, send_path):
    """The compiled send refers back to its producer (its fallback): the collector must see
    through it."""
    producer = producer_for(leader)
    producer.send("t", b"v").result(timeout=5)
    producer.close()
    gone = weakref.ref(producer)
    del producer
    gc.collect()
    assert gone() is None


def test_a_subclass_send_is_not_hidden_by_the_c_send(leader, send_path):
    class Counting(Producer):
        sent = 0

        def send(self, topic, value=None, **kwargs):
            Counting.sent += 1
            return super().send(topic, value, **kwargs)

    producer = Counting(cluster=FakeCluster(leader), linger_ms=1, batch_size=4096)
    try:
        futures = [producer.send("t", b"v%d" % i) for i in range(50)]
        assert Counting.sent == 50
        assert [f.result(timeout=10).offset for f in futures] == list(range(50))
    finally:
        producer.close()


def test_the_c_send_never_falls_back_on_the_python_shortcut(leader, send_path, monkeypatch):
    """The C call takes no lock, so what it declines (keyword arguments, a batch's first
    record, a full batch) must skip send()'s Python shortcut, which writes a batch's columns
    field by field under the lock: it goes to the general path."""
    shortcut_calls = []
    python_send = Producer.send

    def recorded(self, *args, **kwargs):
        shortcut_calls.append(args)
        return python_send(self, *args, **kwargs)

    monkeypatch.setattr(Producer, "send", recorded)
    producer = producer_for(leader)
    try:
        futures = [producer.send("t", b"a%d" % i) for i in range(20)]
        futures += [producer.send("t", value=b"k%d" % i) for i in range(20)]
        offsets = sorted(f.result(timeout=10).offset for f in futures)
        assert offsets == list(range(40))
        assert (shortcut_calls == []) == (send_path == "compiled")
    finally:
        producer.close()


def test_send_batch_hands_the_leader_buffers_and_a_retry_resends_them_once(leader):
    """send_batch encodes into pooled buffers (payload.encode_buffer), which reach the
    leader as they are; an attempt whose answer is lost is resent and lands once."""
    sent = []
    append = leader.append

    def recording(data, *args, **kwargs):
        sent.append(data)
        return append(data, *args, **kwargs)

    leader.append = recording
    leader.mode, leader.failures = "die", 1
    producer = producer_for(leader, retry_backoff_ms=10)
    values = [b"row-%d" % i for i in range(300)]
    batches = producer.send_batch("t", pa.table({"value": values})).result(timeout=10)
    assert sum(rows for _, _, rows in batches) == 300
    assert leader.values == values  # each row once, in order
    assert sent and all(isinstance(data, pa.Buffer) for data in sent)
    sent_bytes = [data.to_pybytes() for data in sent]
    assert sent_bytes.count(sent_bytes[0]) == 2  # the retry: the same batch again
    producer.close()
