"""The producer's calls and the consumer's fetch streams over the hosts' data sockets
(raylog/client/host_socket.py, actors/data_socket.py) on the session's cluster.

- Once connected, a producer's calls go over the socket (none with ``produce_socket=False``),
  and every record lands once, in order, at the offset acknowledged.
- A host Ray restarts (a new process, a new port and token, the same actor) ends the
  connection: the calls it held fail as unanswered and are retried, the producer's calls go
  by Ray until it knows the new socket, then over it; nothing is lost or doubled.
- A host answers only a connection that carries its token.
- A consumer's streams go over the socket once its process is connected (none with
  ``fetch_socket=False``), and reading goes on across a host restart, every record once.
(Broker kills under load, with the socket on by default, are test_producer_faults.py's.)
"""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest
import ray

from raylog import Admin, Consumer, Producer
from raylog.client.host_socket import HostConnection, route_of
from raylog.types import TopicPartition
from raylog.util.socket_frames import LENGTH, hello, new_token, request_frame
from tests.integration.conftest import consume_all, restarts, wait_for

PARTITIONS = 6


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


def counted(monkeypatch, method: str) -> list[int]:
    """Counts the calls this process makes of ``HostConnection.<method>``."""
    made: list[int] = []
    original = getattr(HostConnection, method)

    def counting(self, *args, **kwargs):
        made.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(HostConnection, method, counting)
    return made


@pytest.fixture
def socket_calls(monkeypatch) -> list[int]:
    """The produce calls this process makes over data sockets."""
    return counted(monkeypatch, "call")


def send_all(producer: Producer, topic: str, values: list[bytes]) -> dict[bytes, tuple]:
    futures = {v: producer.send(topic, v, partition=i % PARTITIONS)
               for i, v in enumerate(values)}
    return {v: (f.result(120).partition, f.result(120).offset) for v, f in futures.items()}


def check_log(topic: str, acked: dict[bytes, tuple], values: list[bytes]) -> None:
    records = consume_all(topic, PARTITIONS, len(acked))
    assert sorted(r.value for r in records) == sorted(values)  # each once
    assert {r.value: (r.partition, r.offset) for r in records} == acked
    for p in range(PARTITIONS):  # in send order
        mine = [r.value for r in sorted(records, key=lambda r: r.offset) if r.partition == p]
        assert mine == [v for i, v in enumerate(values) if i % PARTITIONS == p]


@pytest.mark.cluster
@pytest.mark.parametrize("by_socket", [True, False])
def test_calls_go_over_the_socket_once_connected(ray_cluster, admin, topic_name, by_socket,
                                                 socket_calls):
    admin.create_topic(topic_name, partitions=PARTITIONS)
    values = [b"v%04d" % i for i in range(600)]
    with Producer(cluster=ray_cluster.raylog, linger_ms=0, acks="all",
                  produce_socket=by_socket) as producer:
        acked = send_all(producer, topic_name, values[:30])
        if by_socket:
            handles = {p.leader_client().handle._actor_id.hex(): p.leader_client().handle
                       for p in ray_cluster.raylog.topic(topic_name).partitions}
            wait_for(lambda: all(route_of(h).connection is not None
                                 for h in handles.values()),
                     timeout=30, what="the producer's process connected to every host")
        before = len(socket_calls)
        acked.update(send_all(producer, topic_name, values[30:]))
    check_log(topic_name, acked, values)
    if by_socket:
        assert len(socket_calls) - before > 0
    else:
        assert socket_calls == []


@pytest.mark.cluster
def test_a_restarted_host_is_reached_again_over_its_new_socket(ray_cluster, admin, topic_name,
                                                              socket_calls):
    admin.create_topic(topic_name, partitions=1)
    handle = ray_cluster.raylog.topic(topic_name).partitions[0].leader_client().handle
    values = [b"r%04d" % i for i in range(900)]
    acked: dict[bytes, tuple] = {}
    with Producer(cluster=ray_cluster.raylog, linger_ms=0, acks="all",
                  delivery_timeout_ms=120_000) as producer:
        acked.update(send_all_one(producer, topic_name, values[:100]))
        wait_for(lambda: route_of(handle).connection is not None, timeout=30,
                 what="the producer's process connected to the host")
        old = route_of(handle).connection
        before = restarts(handle)
        sending = threading.Thread(target=lambda: acked.update(
            send_all_one(producer, topic_name, values[100:800])))
        sending.start()
        ray.kill(handle, no_restart=False)
        sending.join(180)
        assert not sending.is_alive()
        wait_for(lambda: restarts(handle) > before, timeout=60, what="the host restarted")
        # The route asks the host again at a call: send until it is connected anew.
        more = (b"s%04d" % i for i in range(10_000))
        extra: list[bytes] = []

        def reconnected() -> bool:
            value = next(more)
            extra.append(value)
            acked.update(send_all_one(producer, topic_name, [value]))
            return route_of(handle).connection not in (None, old)

        wait_for(reconnected, timeout=60, interval=0.05,
                 what="the producer's process connected to the restarted host")
        assert old.closed
        before_calls = len(socket_calls)
        acked.update(send_all_one(producer, topic_name, values[800:900]))
        assert len(socket_calls) > before_calls
    sent = values[:800] + extra + values[800:]
    records = consume_all(topic_name, 1, len(sent))
    assert [r.value for r in sorted(records, key=lambda r: r.offset)] == sent
    assert {r.value: r.offset for r in records} == {v: o for v, (_, o) in acked.items()}


def send_all_one(producer: Producer, topic: str, values: list[bytes]) -> dict[bytes, tuple]:
    futures = [(v, producer.send(topic, v, partition=0)) for v in values]
    return {v: (0, f.result(120).offset) for v, f in futures}


@pytest.mark.cluster
def test_a_host_answers_no_call_without_its_token(ray_cluster, admin, topic_name):
    admin.create_topic(topic_name, partitions=1)
    client = ray_cluster.raylog.topic(topic_name).partitions[0].leader_client()
    host, port, token = ray.get(client.handle.socket_address.remote(), timeout=30)
    assert len(token) == 32
    frame = b"".join(bytes(p) for p in request_frame(
        1, [(topic_name, 0, client.leader_epoch, b"not even a batch")], 1, 1000, None))
    for wrong in (hello(new_token()), b"GET / HTTP/1.1\r\n\r\n".ljust(36, b" ")):
        with socket.create_connection((host, port), timeout=30) as raw:
            raw.sendall(wrong + frame)
            raw.settimeout(30)
            # closed unanswered: an end, or a reset (the host left bytes unread)
            with contextlib.suppress(ConnectionResetError):
                assert raw.recv(LENGTH.size) == b""
    with socket.create_connection((host, port), timeout=30) as raw:  # the token: answered
        raw.sendall(hello(token) + frame)
        raw.settimeout(30)
        assert len(raw.recv(LENGTH.size)) == LENGTH.size


@pytest.fixture
def socket_streams(monkeypatch) -> list[int]:
    """The fetch streams this process opens over data sockets."""
    return counted(monkeypatch, "open_stream")


def read_values(consumer: Consumer, wanted: int, timeout_s: float = 120) -> list:
    records: list = []
    wait_for(lambda: records.extend(consumer.poll(timeout_ms=200)) or len(records) >= wanted,
             timeout=timeout_s, what=f"{wanted} records read")
    return records


@pytest.mark.cluster
@pytest.mark.parametrize("by_socket", [True, False])
def test_a_consumers_streams_go_over_the_socket_and_across_a_host_restart(
        ray_cluster, admin, topic_name, by_socket, socket_streams):
    """A consumer reads a partition from its leader's host: over the data socket once its
    process connected (none with ``fetch_socket=False``); the host restarts (its connection
    ends, the stream with it): reading goes on, every record once and in order."""
    admin.create_topic(topic_name, partitions=1)
    handle = ray_cluster.raylog.topic(topic_name).partitions[0].leader_client().handle
    consumer = Consumer(cluster=ray_cluster.raylog, auto_offset_reset="earliest",
                        enable_auto_commit=False, fetch_max_wait_ms=200,
                        fetch_socket=by_socket)
    consumer.assign([TopicPartition(topic_name, 0)])
    values = [b"c%04d" % i for i in range(600)]
    records: list = []
    with Producer(cluster=ray_cluster.raylog, acks="all", linger_ms=0) as producer:
        send_all_one(producer, topic_name, values[:200])
        records += read_values(consumer, 200)
        if by_socket:  # made again over the socket once connected
            wait_for(lambda: records.extend(consumer.poll(timeout_ms=100)) or socket_streams,
                     timeout=60, what="a stream over the socket")
        send_all_one(producer, topic_name, values[200:400])
        records += read_values(consumer, 400 - len(records))
        before = restarts(handle)
        ray.kill(handle, no_restart=False)
        wait_for(lambda: restarts(handle) > before, timeout=60, what="the host restarted")
        send_all_one(producer, topic_name, values[400:])
        records += read_values(consumer, 600 - len(records))
    consumer.close()
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == list(range(600))
    assert (len(socket_streams) > 0) == by_socket
