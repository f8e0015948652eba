"""The produce socket without Ray: the host's listener (actors/data_socket.py) on an event
loop of the test's, and the client's connection and route (raylog/client/host_socket.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from actors.data_socket import DataSocket
from raylog.client import host_socket
from raylog.client.host_socket import (
    ConnectionClosedError,
    HostConnection,
    HostRoute,
    SocketCall,
)
from raylog.errors import ActorUnavailableError, InternalError, NotLeaderError
from raylog.util.socket_frames import LENGTH, hello, new_token

DEADLINE_S = 10.0


def wait_until(condition: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S} s: {what}")
        time.sleep(0.005)


class Host:
    """A host's produce socket on an event loop of its own thread, serving a fake
    ``produce_batches`` that records each call as it starts."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.started: list[tuple[list[tuple[str, int, int, bytes]], Any, int, Any]] = []
        self.hold: asyncio.Event | None = None  # calls wait on it while set up
        self.fail: BaseException | None = None
        # A stream answers each of these in turn (an exception: raised, ending it), then
        # ends; ``made`` counts the answers it made, ``closed`` the streams that ended.
        self.stream_answers: list[Any] = []
        self.streams_opened: list[tuple] = []
        self.made = 0
        self.closed = 0
        self.socket = DataSocket(self.serve, self.stream)
        self.address = self.run(self.socket.start("127.0.0.1"))

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(DEADLINE_S)

    async def serve(self, items: list, acks: Any, timeout_ms: int,
                    client_id: str | None = None) -> list[tuple[str, int, int]]:
        self.started.append(([(t, p, e, bytes(d)) for t, p, e, d in items], acks, timeout_ms,
                             client_id))
        if self.hold is not None:
            await self.hold.wait()
        if self.fail is not None:
            raise self.fail
        return [(t, p, len(d)) for t, p, _, d in items]

    async def stream(self, reads: list, max_bytes: int, max_wait_ms: int, min_bytes: int,
                     isolation: str, client_id: str | None):
        self.streams_opened.append((reads, max_bytes, max_wait_ms, min_bytes, isolation,
                                    client_id))
        try:
            for answer in self.stream_answers:
                if isinstance(answer, BaseException):
                    raise answer
                if answer == "forever":
                    await asyncio.Event().wait()
                self.made += 1
                yield answer
        finally:
            self.closed += 1

    def hold_calls(self) -> None:
        async def make() -> None:
            self.hold = asyncio.Event()
        self.run(make())

    def release(self) -> None:
        self.loop.call_soon_threadsafe(self.hold.set)

    def close(self) -> None:
        """Close the listener and every connection, as the process's end would."""
        async def closed() -> None:
            self.socket.close()
            while self.socket.connections:  # (each closes on a later turn of the loop)
                await asyncio.sleep(0.001)
        self.run(closed())

    def stop(self) -> None:
        self.close()
        if self.hold is not None:
            self.release()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(DEADLINE_S)


@pytest.fixture
def host() -> Iterator[Host]:
    h = Host()
    yield h
    h.stop()


def connect(host: Host, closed: list | None = None,
            token: bytes | None = None) -> HostConnection:
    return HostConnection(host.address, host.socket.token if token is None else token,
                          (closed if closed is not None else []).append)


def test_a_call_is_served_by_produce_batches_and_answered(host):
    connection = connect(host)
    call = connection.call([("t", 0, 4, b"abc"), ("t", 1, 4, b"")], "all", 1500, "me")
    assert isinstance(call, SocketCall)
    assert call.future.result(DEADLINE_S) == [("t", 0, 3), ("t", 1, 0)]
    assert host.started == [([("t", 0, 4, b"abc"), ("t", 1, 4, b"")], "all", 1500, "me")]
    connection.close()


def test_large_batches_cross_whole(host):
    connection = connect(host)
    batches = [bytes([i]) * (3 << 20) for i in range(3)]
    call = connection.call([("t", i, 0, b) for i, b in enumerate(batches)], 1, 100, None)
    assert call.future.result(DEADLINE_S) == [("t", i, 3 << 20) for i in range(3)]
    assert [d for _, _, _, d in host.started[0][0]] == batches
    connection.close()


def test_calls_start_in_the_order_they_were_sent(host):
    connection = connect(host)
    calls = [connection.call([("t", 0, 0, str(i).encode())], 1, 100, None) for i in range(200)]
    for call in calls:
        call.future.result(DEADLINE_S)
    assert [items[0][3] for items, *_ in host.started] == [str(i).encode() for i in range(200)]
    connection.close()


def test_an_error_comes_back_typed_and_a_bug_as_an_internal_error(host):
    connection = connect(host)
    host.fail = NotLeaderError("broker 3 holds no replica of t-0")
    with pytest.raises(NotLeaderError, match="holds no replica"):
        connection.call([("t", 0, 0, b"x")], 1, 100, None).future.result(DEADLINE_S)
    host.fail = KeyError("oops")
    with pytest.raises(InternalError, match="KeyError inside the cluster"):
        connection.call([("t", 0, 0, b"x")], 1, 100, None).future.result(DEADLINE_S)
    connection.close()


def test_a_connection_without_the_hosts_token_is_closed_before_any_call(host):
    closed: list = []
    connection = connect(host, closed, token=new_token())
    try:  # the host may have closed it already
        call = connection.call([("t", 0, 0, b"x")], 1, 100, None)
    except ConnectionClosedError:
        pass
    else:
        with pytest.raises(ActorUnavailableError, match="may have been appended"):
            call.future.result(DEADLINE_S)
    wait_until(lambda: closed == [connection], "the connection reported closed")
    assert host.started == []
    with pytest.raises(ConnectionClosedError):
        connection.call([("t", 0, 0, b"x")], 1, 100, None)


def test_a_malformed_frame_closes_its_connection_only(host):
    good = connect(host)
    with socket.create_connection(host.address) as raw:
        raw.sendall(hello(host.socket.token) + LENGTH.pack(8) + b"\x00\x00\x00\x02[]xx")
        raw.settimeout(DEADLINE_S)
        assert raw.recv(10) == b""  # closed by the host
    assert good.call([("t", 0, 0, b"y")], 1, 100, None).future.result(DEADLINE_S) == \
        [("t", 0, 1)]
    assert len(host.started) == 1
    good.close()


def test_calls_waiting_when_the_host_goes_fail_as_unanswered(host):
    closed: list = []
    connection = connect(host, closed)
    host.hold_calls()
    call = connection.call([("t", 0, 0, b"x")], 1, 100, None)
    wait_until(lambda: host.started, "the call started")
    host.close()  # the process goes away (its listener and connections close)
    with pytest.raises(ActorUnavailableError, match="may have been appended"):
        call.future.result(DEADLINE_S)
    wait_until(lambda: closed == [connection], "the connection reported closed")


class FakeRef:
    def __init__(self, future: concurrent.futures.Future) -> None:
        self._future = future

    def future(self) -> concurrent.futures.Future:
        return self._future


class FakeHandle:
    """A host actor's handle: ``socket_address`` answers the host's address and token
    (or fails, while ``gone``)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.gone = False
        self.asked = 0
        self.socket_address = self

    def remote(self) -> FakeRef:
        self.asked += 1
        future: concurrent.futures.Future = concurrent.futures.Future()
        if self.gone:
            future.set_exception(ActorUnavailableError("the host died"))
        else:
            future.set_result((*self.host.address, self.host.socket.token))
        return FakeRef(future)


class RayCalls:
    """The route's other way: calls that stay unanswered until the test answers them."""

    def __init__(self) -> None:
        self.made: list[concurrent.futures.Future] = []

    def __call__(self) -> FakeRef:
        self.made.append(concurrent.futures.Future())
        return FakeRef(self.made[-1])


def produce(route: HostRoute, ray_calls: RayCalls, data: bytes = b"x") -> Any:
    return route.produce([("t", 0, 0, data)], 1, 100, None, ray_calls)


def test_the_route_goes_by_ray_until_connected_and_never_past_a_ray_call(host):
    handle, ray_calls = FakeHandle(host), RayCalls()
    route = HostRoute(handle)
    first = produce(route, ray_calls)  # not connected yet: by Ray, and connecting begins
    assert isinstance(first, FakeRef) and handle.asked == 1
    wait_until(lambda: route.connection is not None, "the route connected")
    # Connected, but the Ray call is not answered: the next goes by Ray too (order).
    assert isinstance(produce(route, ray_calls), FakeRef)
    for future in ray_calls.made:
        future.set_result([])
    call = produce(route, ray_calls, b"by socket")
    assert isinstance(call, SocketCall)
    assert call.future.result(DEADLINE_S) == [("t", 0, 9)]
    assert len(ray_calls.made) == 2 and handle.asked == 1


def test_the_route_falls_back_to_ray_when_the_host_goes_and_reconnects_to_its_next_one():
    old = Host()
    handle, ray_calls = FakeHandle(old), RayCalls()
    route = HostRoute(handle)
    produce(route, ray_calls)
    ray_calls.made[0].set_result([])
    wait_until(lambda: route.connection is not None, "the route connected")
    old.stop()  # the host process is gone ...
    wait_until(lambda: route.connection is None, "the route saw it")
    handle.gone = True
    assert isinstance(produce(route, ray_calls), FakeRef)  # ... by Ray, and asking fails
    assert handle.asked == 2
    ray_calls.made[-1].set_result([])
    assert isinstance(produce(route, ray_calls), FakeRef)  # not asked again at once
    assert handle.asked == 2
    ray_calls.made[-1].set_result([])
    new = Host()  # ... and restarts, on a new port
    try:
        handle.host, handle.gone = new, False
        wait_until(lambda: isinstance(produce(route, ray_calls), SocketCall)
                   or ray_calls.made[-1].set_result([]), "the route reconnected")
        assert route.connection.address == new.address
    finally:
        new.stop()


def test_a_host_that_stays_unreachable_is_named_once_at_warning(host, monkeypatch, caplog):
    monkeypatch.setattr(host_socket, "RETRY_MIN_S", 0.001)
    handle, ray_calls = FakeHandle(host), RayCalls()
    handle.gone = True
    route = HostRoute(handle)

    def warned() -> bool:
        produce(route, ray_calls)
        ray_calls.made[-1].set_result([])
        return any(r.levelname == "WARNING" for r in caplog.records)

    with caplog.at_level(logging.DEBUG, logger=host_socket.__name__):
        wait_until(warned, "a warning")
        assert handle.asked == host_socket.WARN_AFTER_FAILURES
        for _ in range(3):
            produce(route, ray_calls)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "its produce calls go by Ray" in warnings[0].getMessage()
    assert route.connection is None


READS = [("t", 0, 3, 100, 1 << 20), ("t", 1, 3, 0, 1 << 20)]


def open_stream(connection: HostConnection, woken: list | None = None, ahead: int = 2):
    return connection.open_stream(READS, 50 << 20, 500, 1, "read_uncommitted", "me", ahead,
                                  lambda: (woken if woken is not None else []).append(1))


def test_a_stream_hands_over_its_answers_in_order_then_its_end(host):
    host.stream_answers = ["a", "b", "c"]
    connection = connect(host)
    woken: list = []
    stream = open_stream(connection, woken)
    got = []
    for _ in range(3):
        wait_until(stream.ready, "an answer")
        got.append(stream.take())
    wait_until(stream.ready, "the end")
    with pytest.raises(StopIteration):
        stream.take()
    with pytest.raises(StopIteration):
        stream.take()
    assert got == ["a", "b", "c"] and len(woken) == 4
    assert host.streams_opened == [([tuple(r) for r in READS], 50 << 20, 500, 1,
                                     "read_uncommitted", "me")]
    wait_until(lambda: host.closed == 1, "the host's stream closed")
    connection.close()


def test_a_stream_sends_no_more_than_ahead_answers_not_taken(host):
    host.stream_answers = list(range(10))
    connection = connect(host)
    stream = open_stream(connection, ahead=2)
    # The host made a third answer, and waits to send it until one is taken.
    wait_until(lambda: host.made == 3, "three answers made")
    wait_until(lambda: len(stream._answers) == 2, "two answers here")
    assert stream.take() == 0
    wait_until(lambda: host.made == 4 and len(stream._answers) == 2, "one more sent")
    assert [stream.take() for _ in range(2)] == [1, 2]
    connection.close()


def test_a_streams_error_is_raised_once_then_it_has_ended(host):
    host.stream_answers = ["a", NotLeaderError("moved")]
    connection = connect(host)
    stream = open_stream(connection)
    wait_until(stream.ready, "an answer")
    assert stream.take() == "a"
    wait_until(stream.ready, "the error")
    with pytest.raises(NotLeaderError, match="moved"):
        stream.take()
    with pytest.raises(StopIteration):
        stream.take()
    connection.close()


def test_a_cancelled_stream_ends_on_the_host(host):
    host.stream_answers = ["a", "forever"]
    connection = connect(host)
    stream = open_stream(connection)
    wait_until(stream.ready, "an answer")
    stream.cancel()
    wait_until(lambda: host.closed == 1, "the host's stream ended")
    connection.close()


def test_streams_end_with_their_connection_on_both_sides(host):
    host.stream_answers = ["forever"]
    connection = connect(host)
    stream = open_stream(connection)
    wait_until(lambda: host.streams_opened, "the stream opened")
    connection.close()  # this process is done with it: the host ends its streams
    wait_until(lambda: host.closed == 1, "the host's stream ended")
    wait_until(stream.ready, "the client's stream ended")
    with pytest.raises(ActorUnavailableError):
        stream.take()

    other = connect(host)  # and the host going: the client's streams end with an error
    stream = open_stream(other)
    wait_until(lambda: len(host.streams_opened) == 2, "the stream opened")
    host.close()
    wait_until(stream.ready, "the client's stream ended")
    with pytest.raises(ActorUnavailableError, match="ended"):
        stream.take()


def test_a_send_a_hung_host_does_not_read_fails_the_connection_instead_of_waiting(
        monkeypatch):
    """A host that takes the connection and then reads nothing (stopped): a call larger
    than the socket's buffers fails as unanswered after SEND_TIMEOUT_S, and the thread that
    made it goes on."""
    monkeypatch.setattr(host_socket, "SEND_TIMEOUT_S", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        closed: list = []
        connection = HostConnection(listener.getsockname()[:2], new_token(), closed.append)
        started = time.monotonic()
        call = connection.call([("t", 0, 0, b"x" * (64 << 20))], 1, 100, None)
        assert time.monotonic() - started < DEADLINE_S
        with pytest.raises(ActorUnavailableError, match="may have been appended"):
            call.future.result(DEADLINE_S)
        assert closed == [connection]


def test_a_call_above_the_frame_limit_goes_by_ray_and_the_next_waits_for_it(host,
                                                                           monkeypatch):
    handle, ray_calls = FakeHandle(host), RayCalls()
    route = HostRoute(handle)
    produce(route, ray_calls)
    ray_calls.made[0].set_result([])
    wait_until(lambda: route.connection is not None, "the route connected")
    monkeypatch.setattr("raylog.util.socket_frames.MAX_FRAME_BYTES", 1000)
    assert isinstance(produce(route, ray_calls, b"x" * 2000), FakeRef)
    assert isinstance(produce(route, ray_calls), FakeRef)  # behind the Ray call: in order
    for future in ray_calls.made:
        if not future.done():
            future.set_result([])
    call = produce(route, ray_calls)
    assert isinstance(call, SocketCall) and call.future.result(DEADLINE_S) == [("t", 0, 1)]
    assert [items for items, *_ in host.started] == [[("t", 0, 0, b"x")]]  # only that one
