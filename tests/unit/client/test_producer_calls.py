"""The producer's produce calls (Kafka's produce request): one call to a replica host carries
the ready batches of every partition it serves, each answered on its own. Over a fake
cluster behind the client's wrappers (tests/unit/fake_remote.py): 6 partitions on 3 brokers,
partitions p and p + 3 led by the same one.

- The sendable batches are grouped by leader into calls of at most max_request_size bytes,
  and max_in_flight_requests_per_broker counts calls.
- One partition's refusal fails only its batch; a retry of one partition's batch neither
  reorders nor duplicates the others'.
- A call that fails as a whole (the actor died: no answer) fails each batch's attempt as
  unanswered, and the retries land once each, under their own sequence numbers.
"""

from __future__ import annotations

import threading

import pytest

import raylog.client.producer as producer_module
from raylog.client.producer import Producer
from raylog.errors import (
    ActorUnavailableError,
    BrokerStalledError,
    LeadershipLostAfterAppendError,
    NotEnoughReplicasAfterAppendError,
    ProduceFailedError,
    RecordTooLargeError,
)
from tests.unit import fake_remote
from tests.unit.fake_remote import FakeController, _Method, wait_until


@pytest.fixture
def controller(monkeypatch) -> FakeController:
    fake_remote.install(monkeypatch, producer_module)
    controller = FakeController()
    controller.add_topic("t", 6)
    yield controller
    controller.cont()
    for broker in controller.brokers.values():
        broker.cont()


def producer_for(controller: FakeController, **settings) -> Producer:
    return Producer(cluster=fake_remote.fake_cluster(controller),
                    **{"linger_ms": 60_000, "retry_backoff_ms": 10, **settings})


def partitions_of(call: list[tuple[str, int, int]]) -> list[int]:
    return [partition for _, partition, _ in call]


def test_a_flush_sends_one_call_per_broker_carrying_each_of_its_partitions_batches(
        controller):
    with producer_for(controller) as producer:
        futures = {p: producer.send("t", b"v%d" % p, partition=p) for p in range(6)}
        producer.flush(timeout=10)
        assert {p: f.result(timeout=5).offset for p, f in futures.items()} == \
            dict.fromkeys(range(6), 0)
    # partition p is led by broker 1 + p % 3 (FakeController.add_topic)
    assert {b: [partitions_of(call) for call in broker.produce_calls]
            for b, broker in controller.brokers.items()} == \
        {1: [[0, 3]], 2: [[1, 4]], 3: [[2, 5]]}


def test_max_in_flight_per_broker_counts_calls_and_a_call_stops_at_max_request_size(
        controller):
    """Broker 1 hangs: it holds one call, whatever the batches waiting; once it answers,
    the batches that waited leave in calls of at most max_request_size bytes (one batch
    more than that would carry), each partition's in its order."""
    broker = controller.brokers[1]
    broker.stop()
    producer = producer_for(controller, linger_ms=1, batch_size=4096, max_request_size=9000,
                            max_in_flight_requests_per_broker=1)
    futures = []
    for i in range(60):
        futures.append((i % 2 * 3, producer.send("t", b"%04d" % i + b"x" * 200,
                                                 partition=i % 2 * 3)))
    flushed = threading.Thread(target=producer.flush)
    flushed.start()
    wait_until(lambda: not producer._open)  # every batch sealed, to go when it may
    with producer._submitting:  # and no thread in the middle of sending some
        assert broker.held == 1  # nothing more while the one call is unanswered
    broker.cont()
    flushed.join(timeout=30)
    for partition in (0, 3):
        offsets = [f.result(timeout=5).offset for p, f in futures if p == partition]
        assert offsets == list(range(30))
        assert controller.partitions[("t", partition)].values == \
            [b"%04d" % i + b"x" * 200 for i in range(60) if i % 2 * 3 == partition]
    calls = broker.produce_calls
    assert len(calls) > 2 and any(len(call) > 1 for call in calls)
    for call in calls:
        sizes = [size for _, _, size in call]
        assert len(sizes) == 1 or sum(sizes[:-1]) <= 9000, sizes
    producer.close()


def test_one_partitions_refusal_fails_its_batch_alone(controller):
    broker = controller.brokers[1]
    serve = broker._produce

    def refuse_partition_3(topic, partition, *args, **kwargs):
        if partition == 3:
            raise RecordTooLargeError("partition 3's leader refuses it")
        return serve(topic, partition, *args, **kwargs)

    broker.produce = _Method(broker, refuse_partition_3)
    with producer_for(controller) as producer:
        ok, refused = (producer.send("t", b"v", partition=p) for p in (0, 3))
        with pytest.raises(ProduceFailedError):
            producer.flush(timeout=10)
        assert ok.result(timeout=5).offset == 0
        with pytest.raises(RecordTooLargeError, match="partition 3"):
            refused.result(timeout=5)
    assert [partitions_of(call) for call in broker.produce_calls] == [[0, 3]]


def test_a_retry_of_one_partition_reorders_and_duplicates_nothing(controller):
    """Partition 3 moves to broker 2 while the producer sends to partitions 0 and 3 (led
    together by broker 1, which holds its one call meanwhile): partition 3's batches in
    broker 1's next call are refused (a fenced epoch) and retried at broker 2, partition
    0's in the same call are acknowledged."""
    producer = producer_for(controller, linger_ms=1, batch_size=4096,
                            max_in_flight_requests_per_broker=1)
    sent: dict[int, list[bytes]] = {0: [], 3: []}
    futures = []
    broker = controller.brokers[1]
    broker.stop()  # its calls wait, and the batches behind them gather into full calls
    for i in range(400):
        partition = i % 2 * 3
        value = b"%05d" % i + b"x" * 100
        sent[partition].append(value)
        futures.append(producer.send("t", value, partition=partition))
        if i == 200:
            controller.partitions[("t", 3)].fail_over(2)
    broker.cont()
    producer.flush(timeout=30)
    assert all(f.exception(timeout=5) is None for f in futures)
    for partition in (0, 3):
        assert controller.partitions[("t", partition)].values == sent[partition]
    assert any(set(partitions_of(call)) == {0, 3} for call in broker.produce_calls)
    assert any(3 in partitions_of(call) for call in controller.brokers[2].produce_calls)
    producer.close()


def test_a_call_that_dies_fails_each_batch_and_the_retries_land_once_in_order(controller):
    """Broker 1 appends a call's batches, then its answer is lost (the actor died): every
    batch of the call is retried under its own producer id, epoch and sequence, and the
    leader answers each retry with its first append: each record once, in send order."""
    broker = controller.brokers[1]
    serve, lost = broker._produce_batches, [0]

    def append_then_die(*args, **kwargs):
        answers = serve(*args, **kwargs)
        if not lost[0] and sum(len(call) for call in broker.produce_calls) >= 4:
            lost[0] = len(broker.produce_calls[-1])
            raise ActorUnavailableError("the broker died after appending")
        return answers

    broker.produce_batches = _Method(broker, append_then_die)
    producer = producer_for(controller, linger_ms=1, batch_size=4096)
    sent: dict[int, list[bytes]] = {0: [], 3: []}
    futures = []
    for i in range(300):
        partition = i % 2 * 3
        sent[partition].append(b"%05d" % i)
        futures.append((partition, producer.send("t", b"%05d" % i, partition=partition)))
    producer.flush(timeout=30)
    assert lost[0] >= 1
    for partition in (0, 3):
        assert controller.partitions[("t", partition)].values == sent[partition]
        assert [f.result(timeout=5).offset for p, f in futures if p == partition] == \
            list(range(len(sent[partition])))
    producer.close()


def test_acks_0_sends_calls_and_reads_no_answer(controller):
    with producer_for(controller, acks=0) as producer:
        futures = [producer.send("t", b"v%d" % p, partition=p) for p in range(6)]
        producer.flush(timeout=10)
        assert [f.result(timeout=5).offset for f in futures] == [-1] * 6
    assert [controller.partitions[("t", p)].values for p in range(6)] == \
        [[b"v%d" % p] for p in range(6)]


@pytest.mark.parametrize("after_append", [
    BrokerStalledError("broker 1 stalled while the call was in it"),
    LeadershipLostAfterAppendError("broker 1 stopped leading before it was committed"),
    NotEnoughReplicasAfterAppendError("the ISR shrank before it was committed")])
def test_a_batch_whose_leader_failed_after_appending_is_never_renumbered(controller,
                                                                         after_append):
    """A leader answers a batch of a call with an error it may give after it appended it
    (the call's processing spanned a stall of its process; it stopped leading before the
    batch was committed: actors/serving.py, actors/hosting.py), and the later batches of
    the partition fail for good (a hole: the epoch is bumped). The first batch's outcome
    is unknown: it fails at the bump instead of going out again renumbered, which would
    append its records a second time."""
    broker = controller.brokers[1]
    serve, first = broker._produce_batches, [True]

    def stall_after_the_first_append(batches, *args, **kwargs):
        if not first[0] or len(batches) < 2:
            return serve(batches, *args, **kwargs)
        first[0] = False
        serve(batches[:1], *args, **kwargs)  # appended, then the stall
        return [after_append] + \
            [RecordTooLargeError("refused")] * (len(batches) - 1)

    broker.produce_batches = _Method(broker, stall_after_the_first_append)
    broker.stop()  # the first batch's call is held: the others go in one call after it
    producer = producer_for(controller, batch_size=4096, max_in_flight_requests_per_broker=1)
    futures = [producer.send("t", b"%03d" % i + b"x" * 1500, partition=0) for i in range(4)]
    raised: list[BaseException] = []

    def flush() -> None:
        try:
            producer.flush(timeout=20)
        except ProduceFailedError as e:
            raised.append(e)

    flushed = threading.Thread(target=flush)
    flushed.start()
    wait_until(lambda: not producer._open)
    broker.cont()
    flushed.join(timeout=30)
    assert not flushed.is_alive() and raised
    values = [v[:3] for v in controller.partitions[("t", 0)].values]
    assert values == [b"000", b"001"]  # each once: the second not renumbered and resent
    assert futures[0].result(timeout=5).offset == 0
    assert futures[1].exception(timeout=5) is after_append
    producer.close()


def test_a_flush_after_sends_that_sealed_batches_ends_with_their_answers(controller):
    """A send that seals a batch submits it on the caller's thread, and the sender thread
    stays out of its way for a while: with a long linger_ms, the answers of the batches
    submitted last must still be collected without a further send (a flush waits on
    them). It waited linger_ms (here 60 s)."""
    producer = producer_for(controller, batch_size=4096)
    futures = [producer.send("t", b"%03d" % i + b"x" * 1500, partition=0) for i in range(3)]
    producer.flush(timeout=20)
    assert [f.result(timeout=5).offset for f in futures] == [0, 1, 2]
    producer.close()


@pytest.mark.parametrize("produce_socket", [True, False])
def test_over_the_socket_small_batches_gather_while_a_call_is_out(controller, produce_socket):
    """Broker 1 holds its first call: over the produce socket, the small batches after it
    wait (no second call) and go together once it answers; by Ray,
    max_in_flight_requests_per_broker (2) is the only limit."""
    broker = controller.brokers[1]
    broker.stop()
    producer = producer_for(controller, linger_ms=0, produce_socket=produce_socket)
    first = producer.send("t", b"first", partition=0)
    wait_until(lambda: broker.held == 1)
    smalls = [producer.send("t", b"small %d" % i, partition=i % 2 * 3) for i in range(20)]
    flushed = threading.Thread(target=producer.flush)
    flushed.start()
    if produce_socket:
        wait_until(lambda: not producer._open)  # every batch sealed, to go when it may
        with producer._submitting:  # and no thread in the middle of sending some
            assert broker.held == 1
    else:
        wait_until(lambda: broker.held == 2)
    broker.cont()
    flushed.join(timeout=30)
    assert first.result(5).offset == 0 and all(f.exception(5) is None for f in smalls)
    if produce_socket:
        assert len(broker.produce_calls) == 2  # the first, then the others together
    producer.close()


def test_over_the_socket_a_large_batch_goes_beside_a_call_out(controller):
    broker = controller.brokers[1]
    broker.stop()
    producer = producer_for(controller, linger_ms=0)
    first = producer.send("t", b"first", partition=0)
    wait_until(lambda: broker.held == 1)
    large = producer.send("t", b"x" * producer_module.PIPELINED_BATCH_BYTES, partition=3)
    wait_until(lambda: broker.held == 2)  # beside the first, not after it
    broker.cont()
    assert first.result(10).offset == 0 and large.result(10).offset == 0
    producer.close()
