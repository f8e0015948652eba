"""Futures of produced records: results, errors, timeouts and callbacks across threads."""

from __future__ import annotations

import threading
import time

import pytest

from raylog.client.futures import BatchResult, RecordFuture, TableFuture
from raylog.errors import NotLeaderError, RecordTooLargeError, RequestTimeoutError
from raylog.types import RecordMetadata

TS = 1_700_000_000_000


def futures_of(batch: BatchResult, count: int) -> list[RecordFuture]:
    return [RecordFuture(batch, i, TS + i) for i in range(count)]


def complete_later(batch: BatchResult, base_offset: int, error: BaseException | None = None,
                   delay: float = 0.05) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)  # the waiter must be blocked before completion for this to test it
        batch.complete(base_offset, error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


# -- BatchResult ---------------------------------------------------------------------------------


def test_a_new_batch_result_is_not_done():
    batch = BatchResult("t", 2, count=3)
    assert not batch.done()
    assert (batch.topic, batch.partition, batch.count, batch.base_offset, batch.error) == (
        "t", 2, 3, -1, None)


def test_complete_records_offset_and_error():
    batch = BatchResult("t", 0)
    batch.complete(40, None)
    assert batch.done()
    assert batch.base_offset == 40
    batch.wait(0)


def test_wait_raises_the_batch_error():
    batch = BatchResult("t", 0)
    error = NotLeaderError("moved")
    batch.complete(-1, error)
    with pytest.raises(NotLeaderError) as info:
        batch.wait(1)
    assert info.value is error


def test_wait_times_out_with_request_timeout():
    batch = BatchResult("t", 0)
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError, match=r"no acknowledgement within 0.05 s"):
        batch.wait(0.05)
    assert time.monotonic() - started >= 0.04


# -- RecordFuture --------------------------------------------------------------------------------


def test_record_offsets_are_base_plus_index_and_timestamps_are_kept():
    batch = BatchResult("orders", 3, count=4)
    futures = futures_of(batch, 4)
    assert not any(f.done() for f in futures)
    batch.complete(100, None)
    assert all(f.done() for f in futures)
    assert [f.result() for f in futures] == [
        RecordMetadata("orders", 3, 100 + i, TS + i) for i in range(4)]
    assert all(f.exception() is None for f in futures)


def test_acks_0_records_get_offset_minus_one():
    batch = BatchResult("t", 0, count=2)
    futures = futures_of(batch, 2)
    batch.complete(-1, None)
    assert [f.result().offset for f in futures] == [-1, -1]
    assert [f.result().timestamp for f in futures] == [TS, TS + 1]


def test_result_waits_for_completion_from_another_thread():
    batch = BatchResult("t", 1, count=2)
    futures = futures_of(batch, 2)
    thread = complete_later(batch, 7)
    try:
        assert futures[1].result(timeout=10) == RecordMetadata("t", 1, 8, TS + 1)
    finally:
        thread.join()


def test_the_batch_error_propagates_from_result_and_exception():
    batch = BatchResult("t", 0, count=2)
    futures = futures_of(batch, 2)
    error = RecordTooLargeError("batch of 9 MB")
    batch.complete(-1, error)
    for future in futures:
        with pytest.raises(RecordTooLargeError, match="batch of 9 MB"):
            future.result()
        assert future.exception() is error
        assert future.done()


def test_an_error_from_another_thread_reaches_a_waiting_exception_call():
    batch = BatchResult("t", 0)
    future = RecordFuture(batch, 0, TS)
    error = NotLeaderError("moved")
    thread = complete_later(batch, -1, error)
    try:
        assert future.exception(timeout=10) is error
    finally:
        thread.join()


def test_result_and_exception_time_out_with_request_timeout():
    future = RecordFuture(BatchResult("t", 0), 0, TS)
    with pytest.raises(RequestTimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(RequestTimeoutError):
        future.exception(timeout=0.01)
    assert not future.done()


def test_exception_returns_a_request_timeout_that_failed_the_batch():
    """A batch that failed with RequestTimeoutError is done: exception() must return that
    error, as concurrent.futures does, and raise only when its own wait times out."""
    batch = BatchResult("t", 0)
    future = RecordFuture(batch, 0, TS)
    error = RequestTimeoutError("replica did not answer")
    batch.complete(-1, error)
    assert future.done()
    assert future.exception(timeout=1) is error


def test_a_callback_added_before_completion_runs_once():
    batch = BatchResult("t", 0, count=1)
    future = RecordFuture(batch, 0, TS)
    calls: list[RecordFuture] = []
    future.add_done_callback(calls.append)
    assert calls == []
    batch.complete(5, None)
    assert calls == [future]
    assert calls[0].result().offset == 5


def test_a_callback_added_after_completion_runs_at_once_and_once():
    batch = BatchResult("t", 0, count=1)
    future = RecordFuture(batch, 0, TS)
    batch.complete(5, None)
    calls: list[RecordFuture] = []
    future.add_done_callback(calls.append)
    assert calls == [future]


def test_callbacks_of_every_record_of_a_batch_run_once_each():
    batch = BatchResult("t", 0, count=3)
    futures = futures_of(batch, 3)
    seen: list[int] = []
    for future in futures:
        future.add_done_callback(lambda f: seen.append(f.result().offset))
    batch.complete(10, None)
    assert sorted(seen) == [10, 11, 12]


def test_a_callback_runs_on_the_completing_thread():
    batch = BatchResult("t", 0)
    future = RecordFuture(batch, 0, TS)
    ran_on: list[threading.Thread] = []
    done = threading.Event()

    def callback(f: RecordFuture) -> None:
        ran_on.append(threading.current_thread())
        done.set()

    future.add_done_callback(callback)
    thread = complete_later(batch, 0, delay=0)
    thread.join()
    assert done.wait(10)
    assert ran_on == [thread]


def test_a_callback_sees_the_error():
    batch = BatchResult("t", 0)
    future = RecordFuture(batch, 0, TS)
    errors: list[BaseException | None] = []
    future.add_done_callback(lambda f: errors.append(f.exception()))
    error = NotLeaderError("moved")
    batch.complete(-1, error)
    assert errors == [error]


def test_a_failing_callback_does_not_stop_the_others_or_the_completing_thread():
    """complete() runs on the producer's sender thread: a user callback that raises must not
    skip the callbacks after it, nor escape into the sender (which would abandon every batch)."""
    batch = BatchResult("t", 0, count=2)
    first, second = futures_of(batch, 2)
    seen: list[int] = []

    def broken(_: RecordFuture) -> None:
        raise RuntimeError("user callback bug")

    first.add_done_callback(broken)
    second.add_done_callback(lambda f: seen.append(f.result().offset))
    batch.complete(0, None)
    assert seen == [1]


def callback_counts_when_racing_completion(adders: int) -> list[int]:
    """How often each of ``adders`` callbacks ran, added by as many threads while the main
    thread completes the batch."""
    batch = BatchResult("t", 0, count=1)
    future = RecordFuture(batch, 0, TS)
    counts = [0] * adders
    lock = threading.Lock()
    start = threading.Barrier(adders + 1)

    def count(i: int) -> None:
        with lock:
            counts[i] += 1

    def add(i: int) -> None:
        start.wait()
        future.add_done_callback(lambda _: count(i))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(adders)]
    for thread in threads:
        thread.start()
    start.wait()
    batch.complete(1, None)
    for thread in threads:
        thread.join()
    return counts


def test_callbacks_added_while_another_thread_completes_run_exactly_once():
    """Many threads add callbacks while the batch completes: none is lost, none runs twice."""
    for _ in range(20):
        assert callback_counts_when_racing_completion(64) == [1] * 64


# -- TableFuture ---------------------------------------------------------------------------------


def test_table_future_lists_partition_offset_and_rows_of_every_batch():
    batches = [BatchResult("t", 0, count=10), BatchResult("t", 2, count=4)]
    future = TableFuture(batches)
    assert not future.done()
    batches[0].complete(100, None)
    assert not future.done()
    batches[1].complete(7, None)
    assert future.done()
    assert future.result() == [(0, 100, 10), (2, 7, 4)]


def test_table_future_of_no_batches_is_done():
    future = TableFuture([])
    assert future.done()
    assert future.result() == []


def test_table_future_waits_for_batches_completed_by_another_thread():
    batches = [BatchResult("t", 0, count=1), BatchResult("t", 1, count=1)]
    threads = [complete_later(batches[0], 3), complete_later(batches[1], 4, delay=0.1)]
    try:
        assert TableFuture(batches).result(timeout=10) == [(0, 3, 1), (1, 4, 1)]
    finally:
        for thread in threads:
            thread.join()


def test_table_future_raises_the_first_failed_batch_error():
    batches = [BatchResult("t", 0, count=1), BatchResult("t", 1, count=1)]
    batches[0].complete(3, None)
    batches[1].complete(-1, NotLeaderError("moved"))
    with pytest.raises(NotLeaderError, match="moved"):
        TableFuture(batches).result()


def test_table_future_times_out_with_request_timeout():
    batches = [BatchResult("t", 0, count=1), BatchResult("t", 1, count=1)]
    batches[0].complete(3, None)
    with pytest.raises(RequestTimeoutError):
        TableFuture(batches).result(timeout=0.01)
