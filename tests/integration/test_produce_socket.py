"""The producer's calls over the hosts' produce sockets (raylog/client/host_socket.py,
actors/produce_socket.py) on the session's cluster.

- Once connected, a producer's calls go over the socket (none with ``produce_socket=False``),
  and every record lands once, in order, at the offset acknowledged.
- A host Ray restarts (a new process, a new port and token, the same actor) ends the
  connection: the calls it held fail as unanswered and are retried, the producer's calls go
  by Ray until it knows the new socket, then over it; nothing is lost or doubled.
- A host answers only a connection that carries its token.
(Broker kills under load, with the socket on by default, are test_producer_faults.py's.)
"""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest
import ray

from raylog import Admin, Producer
from raylog.client.host_socket import HostConnection, route_of
from raylog.util.produce_frames import LENGTH, hello, new_token, request_frame
from tests.integration.conftest import consume_all, restarts, wait_for

PARTITIONS = 6


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


@pytest.fixture
def socket_calls(monkeypatch) -> list[int]:
    """Counts the calls this process makes over produce sockets."""
    made: list[int] = []
    call = HostConnection.call

    def counted(self, *args, **kwargs):
        made.append(1)
        return call(self, *args, **kwargs)

    monkeypatch.setattr(HostConnection, "call", counted)
    return made


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
    host, port, token = ray.get(client.handle.produce_address.remote(), timeout=30)
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
