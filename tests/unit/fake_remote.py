"""A raylog cluster faked behind the client's wrapper seam (raylog/client/remote.py), no Ray.

The clients run unchanged over the real ``RaylogCluster``, ``ControllerClient`` and
``ReplicaClient``; only the actor handles under them are fakes, whose remote calls return
``concurrent.futures.Future``s, and the few functions of remote.py that touch Ray
(``resolve``, ``wait_done``, ``when_done``) are swapped for ones that read those futures
(:func:`install`). Knobs make the controller or a broker hang as a stopped (SIGSTOP)
process does: calls are taken and not answered until it is continued, then answered in
order as if just received.

A partition is one shared log (:class:`FakePartition`): the brokers are its replicas and
replication is instant, so a failover keeps every append; ``lose_tail`` models one that
does not. A broker serves a partition only at the partition's current leader epoch, as the
real ones do, with the real ``ProducerStates`` for the producer's sequence rules.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from raylog.client import connection as connection_module
from raylog.client import membership as membership_module
from raylog.client import remote as remote_module
from raylog.client.connection import RaylogCluster
from raylog.client.remote import Answer
from raylog.errors import (
    ActorUnavailableError,
    FencedEpochError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RaylogError,
    RequestTimeoutError,
    UnknownMemberError,
    UnknownTopicError,
)
from raylog.quotas.enforcer import unwrap as unwrap_throttled
from raylog.records import parse_header, read_records, stamp
from raylog.replica.fetch_stream import ends_stream, next_reads
from raylog.replica.partition import FetchResult
from raylog.replica.producer_state import ProducerStates, SequenceGap
from raylog.storage import AppendInfo


def resolve(ref: concurrent.futures.Future, timeout: float | None = None) -> Any:
    try:
        return ref.result(timeout)
    except concurrent.futures.TimeoutError as e:
        raise RequestTimeoutError(f"no answer within {timeout} s") from e


def wait_done(refs: list, timeout: float) -> list:
    streams = [r for r in refs if isinstance(r, FakeStream)]
    futures = [r for r in refs if not isinstance(r, FakeStream)]
    if not streams:
        done, _ = concurrent.futures.wait(futures, timeout=timeout,
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        return list(done)
    deadline = time.monotonic() + timeout
    while True:  # a stream is ready when its next answer is there, or it has ended
        out = [s for s in streams if s.ready()]
        left = max(deadline - time.monotonic(), 0.0)
        done, _ = concurrent.futures.wait(futures, timeout=0 if out else min(left, 0.005),
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        out += list(done)
        if out or left == 0:
            return out
        if not futures:
            time.sleep(min(left, 0.005))


def cancel(stream: FakeStream) -> None:
    stream.cancelled = True


def when_done(ref: concurrent.futures.Future, callback: Callable[[Any, Answer], None]) -> None:
    ref.add_done_callback(lambda _: callback(ref, Answer(ref)))


def wait_until(condition: Callable[[], object], timeout_s: float = 30.0) -> None:
    """Wait for ``condition()`` to hold, failing the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def answered(value: Any) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(value)
    return future


def gathered(futures: list[concurrent.futures.Future]) -> concurrent.futures.Future:
    """One produce call's answer made of its batches' (a broker's ``produce_batches``): the
    list of each one's result or error, in order, once all are answered; the call's own
    failure if one of them is ActorUnavailableError (the process died: no answer at all)."""
    call: concurrent.futures.Future = concurrent.futures.Future()
    left = [len(futures)]
    lock = threading.Lock()

    def done(_: concurrent.futures.Future) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        errors = [f.exception() for f in futures]
        died = next((e for e in errors if isinstance(e, ActorUnavailableError)), None)
        if died is not None:
            call.set_exception(died)
        else:
            call.set_result([e if e is not None else f.result()
                             for f, e in zip(futures, errors, strict=True)])

    for future in futures:
        future.add_done_callback(done)
    return call


def failed(error: BaseException) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_exception(error)
    return future


def install(monkeypatch, *modules: types.ModuleType) -> None:
    """Read fake futures where remote.py (and each of ``modules``, which imported its
    functions by name) would wait on Ray; let the connection's metadata refresher and a
    group member's heartbeat thread run although Ray is not initialized."""
    for module in (remote_module, *modules):
        for name, fake in (("resolve", resolve), ("wait_done", wait_done),
                           ("when_done", when_done), ("cancel", cancel),
                           ("own_actor", lambda handle: False),
                           ("route_of", lambda handle: _BY_CALLS)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, fake)
    ray_up = types.SimpleNamespace(is_initialized=lambda: True)
    monkeypatch.setattr(connection_module, "ray", ray_up)
    monkeypatch.setattr(membership_module, "ray", ray_up)
    monkeypatch.setattr(membership_module, "current_actor", lambda: None)


class _ByCalls:
    """A fake host's route: every call and stream by its (fake) actor calls; the data socket
    has tests of its own (tests/unit/client/test_host_socket.py)."""

    def produce(self, items: list, acks: object, timeout_ms: int, client_id: str | None,
                by_ray: Callable[[], Any]) -> Any:
        return by_ray()

    def connected(self) -> None:
        return None  # streams by their (fake) Ray calls too


_BY_CALLS = _ByCalls()


class Stoppable:
    """An actor process that can be stopped: while stopped, calls are held unanswered; when
    continued, each is served in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[tuple[concurrent.futures.Future, Callable[[], Any]]] | None = None
        self.calls = 0

    def call(self, serve: Callable[[], Any], delay_s: float = 0.0
             ) -> concurrent.futures.Future:
        """``serve()``'s outcome as the call's answer, ``delay_s`` later (a long poll)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self.calls += 1
            if self._held is not None:
                self._held.append((future, serve))
                return future
        if delay_s > 0:
            threading.Timer(delay_s, _answer, (future, serve)).start()
        else:
            _answer(future, serve)
        return future

    def stop(self) -> None:
        with self._lock:
            if self._held is None:
                self._held = []

    def cont(self) -> None:
        with self._lock:
            held, self._held = self._held or [], None
        for future, serve in held:
            _answer(future, serve)

    @property
    def held(self) -> int:
        with self._lock:
            return len(self._held or ())


def _answer(future: concurrent.futures.Future, serve: Callable[[], Any]) -> None:
    try:
        future.set_result(serve())
    except Exception as e:  # the actor's error is the call's answer
        future.set_exception(e)


class _Method:
    def __init__(self, process: Stoppable, serve: Callable[..., Any]) -> None:
        self._process = process
        self._serve = serve
        self._method_name = serve.__name__.lstrip("_")

    def remote(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        return self._process.call(lambda: self._serve(*args, **kwargs))


class _LongPoll(_Method):
    """A fetch that finds nothing to read is answered after its ``max_wait_ms``."""

    def remote(self, topic: str, partition: int, leader_epoch: int, offset: int,
               max_bytes: int, max_wait_ms: int, min_bytes: int, *isolation: str,
               **kwargs: Any) -> concurrent.futures.Future:
        args = topic, partition, leader_epoch, offset, max_bytes, max_wait_ms, min_bytes, \
            *isolation
        empty = len(self._process.partitions[(topic, partition)].values) <= offset
        return self._process.call(lambda: self._serve(*args, **kwargs),
                                  max_wait_ms / 1000 if empty else 0.0)


class _LongPollMany(_Method):
    """A fetch of several partitions that finds nothing to read in any is answered after
    its ``max_wait_ms``."""

    def remote(self, reads: list[tuple], max_bytes: int, max_wait_ms: int, min_bytes: int,
               *rest: Any, **kwargs: Any) -> concurrent.futures.Future:
        partitions = self._process.partitions
        empty = all(len(partitions[(t, p)].values) <= offset for t, p, _, offset, _ in reads)
        return self._process.call(
            lambda: self._serve(reads, max_bytes, max_wait_ms, min_bytes, *rest, **kwargs),
            max_wait_ms / 1000 if empty else 0.0)


class FakeStream:
    """A streaming call's ObjectRefGenerator, faked: its answers (done futures) in order,
    taken with ``next``; StopIteration once it has ended and all were taken. At most
    ``ahead`` answers wait untaken (Ray's generator backpressure); ``cancelled`` ends it."""

    def __init__(self, ahead: int) -> None:
        self.ahead = ahead
        self.items: list[concurrent.futures.Future] = []
        self.taken = 0
        self.finished = False
        self.cancelled = False
        self._changed = threading.Condition()

    def ready(self) -> bool:
        with self._changed:
            return self.taken < len(self.items) or self.finished

    def __next__(self) -> concurrent.futures.Future:
        with self._changed:
            if self.taken < len(self.items):
                self.taken += 1
                self._changed.notify_all()
                return self.items[self.taken - 1]
            if self.finished:
                raise StopIteration
            raise AssertionError("next() of a stream with no answer ready")

    def push(self, item: concurrent.futures.Future) -> None:
        with self._changed:
            self.items.append(item)

    def finish(self) -> None:
        with self._changed:
            self.finished = True

    def wait_room(self) -> None:
        """Until fewer than ``ahead`` answers wait untaken, or it is cancelled."""
        with self._changed:
            while len(self.items) - self.taken >= self.ahead and not self.cancelled:
                self._changed.wait(0.01)


class _StreamMany:
    """``fetch_stream``: the broker's ``fetch_many`` (a long poll, stopped and dead as the
    broker is) again and again on a thread, each answer pushed to a FakeStream, the reads
    moved and the stream ended by the real rules (raylog/replica/fetch_stream.py)."""

    def __init__(self, broker: FakeBroker, lifetime_s: float = 30.0) -> None:
        self._broker = broker
        self.lifetime_s = lifetime_s
        self.streams: list[FakeStream] = []

    def options(self, **options: Any) -> _StreamMany:
        self._ahead = options.get("_generator_backpressure_num_objects") or 1_000_000
        return self

    def remote(self, reads: list[tuple], *args: Any, **kwargs: Any) -> FakeStream:
        stream = FakeStream(getattr(self, "_ahead", 1_000_000))
        stream.partitions = [(t, p) for t, p, *_ in reads]
        self.streams.append(stream)
        threading.Thread(target=self._run, args=(stream, reads, args, kwargs),
                         daemon=True).start()
        return stream

    def _run(self, stream: FakeStream, reads: list[tuple], args: tuple, kwargs: dict) -> None:
        ends = time.monotonic() + self.lifetime_s
        try:
            while not stream.cancelled:
                stream.wait_room()
                if stream.cancelled:
                    return
                call = self._broker.fetch_many.remote(reads, *args, **kwargs)
                try:
                    answer = call.result(60)
                except Exception as e:  # the call failed whole: the stream's last answer
                    stream.push(failed(e))
                    return
                stream.push(answered(answer))
                answers, throttled = unwrap_throttled(answer)
                if throttled or ends_stream(answers) or time.monotonic() >= ends:
                    return
                reads = next_reads(reads, answers)
        finally:
            stream.finish()

    @property
    def running(self) -> int:
        return sum(not s.finished for s in self.streams)


class FakePartition:
    """One partition's log, shared by its replicas: stamped batches, the leader, its epoch
    and the leader's producer states."""

    def __init__(self, leader: int, replicas: tuple[int, ...]) -> None:
        self.leader: int | None = leader
        self.leader_epoch = 0
        self.replicas = replicas
        self.batches: list[bytes] = []
        self.values: list[bytes | None] = []
        self.states = ProducerStates()
        self.aborted: list = []  # AbortedTxn entries a read_committed fetch lists
        self.lock = threading.Lock()

    def fail_over(self, to: int | None) -> None:
        with self.lock:
            self.leader = to
            self.leader_epoch += 1

    def lose_tail(self, count: int) -> None:
        """A failover to a replica lacking the last ``count`` records (whole batches), whose
        producer state is what its own log says (here: nothing)."""
        with self.lock:
            end = len(self.values) - count
            del self.values[end:]
            self.batches = [b for b in self.batches if parse_header(b).base_offset < end]
            self.states = ProducerStates()

    def append(self, data: bytes) -> AppendInfo:
        with self.lock:
            header = parse_header(data)
            duplicate = self.states.check(header)
            if duplicate is not None:
                return duplicate
            base = len(self.values)
            self.values.extend(r.value for r in read_records(data))
            stamped = bytearray(data)
            stamp(stamped, base, self.leader_epoch)
            self.batches.append(bytes(stamped))
            info = AppendInfo(base, len(self.values) - 1, 0, header.record_count)
            self.states.accept(header, info)
            return info

    def read(self, offset: int, isolation: str = "read_uncommitted") -> FetchResult:
        """What the leader answers; read_committed: the test's ``aborted`` transactions too
        (the LSO is the log end here: the tests end their transactions first)."""
        with self.lock:
            end = len(self.values)
            if not 0 <= offset <= end:
                raise OffsetOutOfRangeError(f"offset {offset} outside [0, {end}]")
            data = b"".join(b for b in self.batches
                            if parse_header(b).next_offset > offset)
            if isolation == "read_committed":
                return FetchResult(data, end, 0, end, end, tuple(self.aborted))
            return FetchResult(data, end, 0, end)


class FakeBroker(Stoppable):
    """A broker actor: serves produce, fetch and list_offset for the partitions it leads at
    their current epoch. ``swallow``: append what is produced but never answer (a leader
    that hangs right after its append was replicated); ``dead``: every call fails at once
    with ActorUnavailableError (the process is gone)."""

    def __init__(self, broker_id: int, partitions: dict[tuple[str, int], FakePartition]
                 ) -> None:
        super().__init__()
        self.broker_id = broker_id
        self.partitions = partitions
        self.swallow = False
        self.dead = False
        # each produce_batches call's batches: (topic, partition, bytes)
        self.produce_calls: list[list[tuple[str, int, int]]] = []
        self.produce = _Method(self, self._produce)
        self.produce_batches = _Method(self, self._produce_batches)
        self.fetch = _LongPoll(self, self._fetch)
        self.fetch_many = _LongPollMany(self, self._fetch_many)
        self.fetch_stream = _StreamMany(self)
        self.list_offset = _Method(self, self._list_offset)
        self.delete_records = _Method(self, self._delete_records)

    def call(self, serve: Callable[[], Any], delay_s: float = 0.0
             ) -> concurrent.futures.Future:
        if self.dead:
            return failed(ActorUnavailableError(f"broker {self.broker_id} died"))
        if self.swallow:
            with contextlib.suppress(RaylogError):  # its answer, error or not, goes nowhere
                serve()
            with self._lock:
                self.calls += 1
            return concurrent.futures.Future()
        return super().call(serve, delay_s)

    def _leading(self, topic: str, partition: int, leader_epoch: int) -> FakePartition:
        p = self.partitions[(topic, partition)]
        if leader_epoch < p.leader_epoch:
            raise FencedEpochError(f"epoch {leader_epoch} < {p.leader_epoch}")
        if p.leader != self.broker_id:
            raise NotLeaderError(f"broker {self.broker_id} does not lead {topic}-{partition}")
        return p

    def _produce(self, topic: str, partition: int, leader_epoch: int, batch: bytes,
                 acks: object, timeout_ms: int, client_id: str | None = None) -> AppendInfo:
        p = self._leading(topic, partition, leader_epoch)
        try:
            return p.append(batch)
        except SequenceGap as gap:  # the real leader waits a moment first
            raise gap.error(f"{topic}-{partition}", 0.0) from None

    def _produce_batches(self, batches: list[tuple[str, int, int, bytes]], acks: object,
                         timeout_ms: int, client_id: str | None = None
                         ) -> list[AppendInfo | RaylogError]:
        """Each batch as ``produce`` would answer it (a test's replacement of it too), in
        order: the broker's own."""
        self.produce_calls.append([(topic, partition, len(batch))
                                   for topic, partition, _, batch in batches])
        answers: list[AppendInfo | RaylogError] = []
        for topic, partition, leader_epoch, batch in batches:
            try:
                answers.append(self.produce._serve(topic, partition, leader_epoch, batch, acks,
                                                   timeout_ms))
            except RaylogError as e:
                answers.append(e)
        return answers

    def _fetch(self, topic: str, partition: int, leader_epoch: int, offset: int,
               max_bytes: int, max_wait_ms: int, min_bytes: int,
               isolation: str = "read_uncommitted",
               client_id: str | None = None) -> FetchResult:
        return self._leading(topic, partition, leader_epoch).read(offset, isolation)

    def _fetch_many(self, reads: list[tuple], max_bytes: int, max_wait_ms: int,
                    min_bytes: int, isolation: str = "read_uncommitted",
                    client_id: str | None = None) -> list[FetchResult | RaylogError]:
        """Each partition's read or error, as the real one answers (no byte budget here)."""
        answers: list[FetchResult | RaylogError] = []
        for topic, partition, leader_epoch, offset, _ in reads:
            try:
                answers.append(self._fetch(topic, partition, leader_epoch, offset, 0, 0, 0,
                                           isolation))
            except RaylogError as e:
                answers.append(e)
        return answers

    def _delete_records(self, topic: str, partition: int, leader_epoch: int, offset: int
                        ) -> int:
        self._leading(topic, partition, leader_epoch)
        return offset  # the new log start (nothing is deleted here)

    def _list_offset(self, topic: str, partition: int, leader_epoch: int,
                     spec: str | int) -> tuple[int, int]:
        p = self._leading(topic, partition, leader_epoch)
        return (0 if spec == "earliest" else len(p.values)), -1


class FakeController(Stoppable):
    """The controller actor: metadata of topics of FakePartitions over FakeBrokers (a broker
    not alive has no handle in the answers), and a group coordinator that grants every
    partition of the subscribed topics to whoever joined and keeps committed offsets."""

    def __init__(self) -> None:
        super().__init__()
        self.brokers: dict[int, FakeBroker] = {}
        self.alive: set[int] = set()
        self.topics: dict[str, list[FakePartition]] = {}
        self.partitions: dict[tuple[str, int], FakePartition] = {}
        self.members: dict[str, list[str]] = {}  # member id -> its topics
        self.revoke: set[tuple[str, int]] = set()  # what heartbeats tell members to give up
        self.generation = 0
        self.committed: dict[tuple[str, int], int] = {}
        for method in (self._metadata, self._join_group, self._heartbeat, self._leave_group,
                       self._commit_offsets, self._committed_offsets):
            setattr(self, method.__name__[1:], _Method(self, method))

    def _join_group(self, group_id, member_id, client_id, topics, pattern, session_timeout_ms,
                    assignor, actor, claims) -> dict[str, Any]:
        self.members[member_id] = topics
        self.generation += 1
        return {"member_id": member_id, "generation": self.generation,
                "owned": [tuple(c) for c in claims]}

    def _grant(self, member_id: str) -> list[tuple[str, int]]:
        return [(t, i) for t in self.members[member_id] for i in range(len(self.topics[t]))]

    def _heartbeat(self, group_id, member_id, owned) -> dict[str, Any]:
        if member_id not in self.members:
            raise UnknownMemberError(f"no member {member_id}")
        return {"generation": self.generation, "owned": self._grant(member_id),
                "revoke": sorted(self.revoke), "pending": False}

    def _leave_group(self, group_id, member_id) -> None:
        self.members.pop(member_id, None)

    def _commit_offsets(self, group_id, member_id, generation, entries) -> None:
        for topic, partition, offset, _ in entries:
            self.committed[(topic, partition)] = offset

    def _committed_offsets(self, group_id, partitions, require_stable=True) -> dict:
        return {tuple(tp): ((self.committed[tuple(tp)], "", 0)
                            if tuple(tp) in self.committed else None) for tp in partitions}

    def add_topic(self, name: str, partitions: int, replicas: tuple[int, ...] = (1, 2, 3)
                  ) -> list[FakePartition]:
        for b in replicas:
            if b not in self.brokers:
                self.brokers[b] = FakeBroker(b, self.partitions)
                self.alive.add(b)
        made = [FakePartition(replicas[i % len(replicas)], replicas) for i in range(partitions)]
        self.topics[name] = made
        for i, p in enumerate(made):
            self.partitions[(name, i)] = p
        return made

    def _metadata(self, names: list[str]) -> dict[str, dict[str, Any]]:
        out = {}
        for name in names:
            if name not in self.topics:
                raise UnknownTopicError(f"no topic {name!r}")
            parts = self.topics[name]
            brokers = {b: {"handle": self.brokers[b], "node_id": f"node-{b}"}
                       for p in parts for b in p.replicas if b in self.alive}
            out[name] = {"name": name, "topic_id": name, "configs": {}, "brokers": brokers,
                         "partitions": [{"partition": i, "leader": p.leader,
                                         "leader_epoch": p.leader_epoch,
                                         "replicas": list(p.replicas),
                                         "isr": list(p.replicas)}
                                        for i, p in enumerate(parts)]}
        return out


def fake_cluster(controller: FakeController) -> RaylogCluster:
    """The real connection over the fake controller."""
    return RaylogCluster(controller)
