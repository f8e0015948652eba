"""raylog's own threads never wait inside Ray (raylog/client/remote.py): a thread inside Ray's
wait when the process shut Ray down crashed the process (SIGSEGV in the core worker's memory
store, seen at the end of integration runs). The reaper reads dropped answers through Ray's
completion callbacks, and a thread marked ``in_background`` waits on the answer's future."""

from __future__ import annotations

import concurrent.futures
import threading

from raylog.client import remote
from raylog.errors import RequestTimeoutError, UnknownTopicError


class _Ref:
    """Stands in for an ObjectRef: ``future()`` as Ray's, completed by the test."""

    def __init__(self) -> None:
        self.done = concurrent.futures.Future()

    def future(self) -> concurrent.futures.Future:
        return self.done


def test_dropped_answers_are_read_when_they_come_and_no_thread_waits_for_them():
    reaper = remote._Reaper()
    threads = set(threading.enumerate())
    refs = [_Ref() for _ in range(3)]
    for ref in refs:
        reaper.add(ref)
    assert reaper.pending == 3
    assert set(threading.enumerate()) == threads  # nothing waits: Ray calls back
    refs[0].done.set_result(b"records")
    refs[1].done.set_exception(ValueError("a dropped fetch's error"))
    assert reaper.pending == 1
    refs[2].done.set_exception(RuntimeError("another"))
    assert reaper.pending == 0


def _in_background(call):
    """``call()``'s result (or the error it raised) on a thread marked as raylog's own."""
    out = {}

    def run() -> None:
        remote.in_background()
        try:
            out["value"] = call()
        except Exception as e:  # returned to the test
            out["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    return out


def test_a_background_thread_waits_on_the_answers_future_not_inside_ray():
    refs = [_Ref(), _Ref()]
    refs[0].done.set_result({"partitions": 3})
    assert _in_background(lambda: remote.resolve(refs[0], timeout=1)) == \
        {"value": {"partitions": 3}}
    refs[1].done.set_result(7)
    assert _in_background(lambda: remote.resolve(refs, timeout=1)) == \
        {"value": [{"partitions": 3}, 7]}


def test_a_background_threads_wait_ends_at_its_deadline_as_raylogs_timeout():
    late = _Ref()
    got = _in_background(lambda: remote.resolve(late, timeout=0.05))
    assert isinstance(got["error"], RequestTimeoutError)


def test_a_background_thread_gets_the_answers_error_as_raylogs():
    failed = _Ref()
    failed.done.set_exception(UnknownTopicError("no topic 'pageviews'"))
    got = _in_background(lambda: remote.resolve(failed, timeout=1))
    assert isinstance(got["error"], UnknownTopicError)
