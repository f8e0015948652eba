"""The listener on raw sockets, over a fake cluster: framing, ordering, and bad input."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest

from raylog.kafka.gateway.dispatch import Dispatch, default_dispatch
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.listener import KafkaListener, ListenerThread
from raylog.kafka.gateway.protocol import response_class
from raylog.kafka.gateway.settings import GatewaySettings
from tests.unit.kafka.gateway import wire


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def serve(backend, settings=None, dispatch=None) -> ListenerThread:
    return ListenerThread(KafkaListener(backend, settings, dispatch, port=0))


@pytest.fixture
def listener(backend):
    with serve(backend) as running:
        yield running


def address(running: ListenerThread) -> tuple[str, int]:
    return running.listener.host, running.listener.port


def api_versions(addr) -> ApiVersionsResponse:
    return wire.call(addr, ApiVersionsRequest[3](client_software_name="t",
                                                 client_software_version="1"), 3)


# -- ApiVersions and Metadata ---------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_lists_the_dispatch_table(listener, version):
    request = ApiVersionsRequest[version]()
    if version >= 3:
        request = ApiVersionsRequest[3](client_software_name="t", client_software_version="1")
    answer = wire.call(address(listener), request, version)
    assert answer.error_code == Code.NONE
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert ranges[18] == (0, 3)
    assert ranges[3] == (0, 12)
    assert ranges == {k: (lo, hi) for k, lo, hi in default_dispatch().ranges()}


def test_an_unsupported_api_versions_is_answered_in_v0_with_error_35(listener):
    with wire.connect(address(listener)) as sock:
        sock.sendall(wire.frame(ApiVersionsRequest[4](client_software_name="t",
                                                      client_software_version="1"), 4,
                                correlation_id=42))
        data = wire.read_frame(sock)
        answer = ApiVersionsResponse.decode(data, version=0, header=True)
        assert answer.header.correlation_id == 42
        assert answer.error_code == Code.UNSUPPORTED_VERSION
        assert {k.api_key for k in answer.api_keys} >= {3, 18}
        # the connection goes on: the client asks again at a version both know
        sock.sendall(wire.frame(ApiVersionsRequest[0](), 0, correlation_id=43))
        assert wire.response(sock, 18, 0)[0] == 43


@pytest.mark.parametrize("version", [0, 1, 4, 7, 9, 10, 12])
def test_metadata_names_brokers_leaders_and_epochs(listener, backend, version):
    request = MetadataRequest[version](topics=[MetadataRequest.MetadataRequestTopic(
        name="orders")])
    answer = wire.call(address(listener), request, version)
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == \
        [(1, "127.0.0.1", 9092), (2, "127.0.0.1", 9093)]
    [topic] = answer.topics
    assert (topic.error_code, topic.name) == (Code.NONE, "orders")
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes)
            for p in topic.partitions] == [(0, 1, [1, 2], [1, 2]), (1, 1, [1, 2], [1, 2])]
    if version >= 7:
        assert {p.leader_epoch for p in topic.partitions} == {3}
    if version >= 2:
        assert answer.cluster_id == "fake-cluster"
    if version >= 10:
        assert topic.topic_id.hex == backend.topics["orders"].topic_id


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster_names_the_brokers(listener, backend, version):
    """(Kafka's Java AdminClient asks it before listing groups or nodes.)"""
    from kafka.protocol.admin import DescribeClusterRequest

    answer = wire.call(address(listener), DescribeClusterRequest[version](
        include_cluster_authorized_operations=False), version)
    assert (answer.error_code, answer.cluster_id) == (Code.NONE, "fake-cluster")
    assert sorted((b.broker_id, b.port) for b in answer.brokers) == [(1, 9092), (2, 9093)]
    assert answer.controller_id in (1, 2)


def test_metadata_of_all_topics_and_of_an_unknown_one(listener):
    everything = wire.call(address(listener), MetadataRequest[1](topics=None), 1)
    assert [t.name for t in everything.topics] == ["orders"]
    v0_all = wire.call(address(listener), MetadataRequest[0](topics=[]), 0)
    assert [t.name for t in v0_all.topics] == ["orders"]
    unknown = wire.call(address(listener), MetadataRequest[9](
        topics=[MetadataRequest.MetadataRequestTopic(name="nope")],
        allow_auto_topic_creation=True), 9)
    assert [(t.name, t.error_code) for t in unknown.topics] == \
        [("nope", Code.UNKNOWN_TOPIC_OR_PARTITION)]


def test_a_leader_without_a_listener_is_not_available(backend):
    backend.add_topic("lonely", leader=7)
    with serve(backend) as running:
        answer = wire.call(address(running), MetadataRequest[9](
            topics=[MetadataRequest.MetadataRequestTopic(name="lonely")]), 9)
    [p] = answer.topics[0].partitions
    assert (p.error_code, p.leader_id) == (Code.LEADER_NOT_AVAILABLE, -1)


def test_topics_are_created_on_metadata_only_when_the_setting_says_so(backend):
    ask = MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name="fresh")],
                             allow_auto_topic_creation=True)
    with serve(backend) as running:
        assert wire.call(address(running), ask, 9).topics[0].error_code == \
            Code.UNKNOWN_TOPIC_OR_PARTITION
    assert "fresh" not in backend.topics
    refused = MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name="fresh")],
                                 allow_auto_topic_creation=False)
    with serve(backend, GatewaySettings(auto_create_topics_enable=True)) as running:
        assert wire.call(address(running), refused, 9).topics[0].error_code == \
            Code.UNKNOWN_TOPIC_OR_PARTITION
        assert "fresh" not in backend.topics
        assert wire.call(address(running), ask, 9).topics[0].error_code == \
            Code.LEADER_NOT_AVAILABLE
        assert "fresh" in backend.topics
        assert wire.call(address(running), ask, 9).topics[0].error_code == Code.NONE


# -- order ----------------------------------------------------------------------------------


def _dispatch_with_delays() -> Dispatch:
    """ApiVersions whose answer to correlation id N comes after N * 20 ms... reversed: the
    first request asked is the slowest."""
    dispatch = Dispatch()

    async def slow(ctx, version, request):
        await asyncio.sleep(max(0, 5 - ctx.correlation_id) * 0.02)
        return response_class(18, version)(error_code=0, api_keys=[], throttle_time_ms=0)

    dispatch.add(18, 0, 3, slow)
    return dispatch


def test_pipelined_requests_are_answered_in_request_order(backend):
    with serve(backend, dispatch=_dispatch_with_delays()) as running, \
            wire.connect(address(running)) as sock:
        sock.sendall(b"".join(wire.frame(ApiVersionsRequest[1](), 1, correlation_id=i)
                              for i in range(5)))
        assert [wire.response(sock, 18, 1)[0] for _ in range(5)] == [0, 1, 2, 3, 4]


def test_a_stop_while_a_request_waits_ends_its_connection_quietly(backend):
    """A connection whose request still waits (a long-polling Fetch) when the listener
    stops ends without an error reported on the loop."""
    dispatch = Dispatch()
    waiting = []

    async def forever(ctx, version, request):
        waiting.append(1)
        await asyncio.sleep(3600)

    dispatch.add(18, 0, 3, forever)
    running = serve(backend, dispatch=dispatch)
    reported = []
    running.start()
    running._loop.call_soon_threadsafe(
        running._loop.set_exception_handler, lambda loop, context: reported.append(context))
    with wire.connect(address(running)) as sock:
        sock.sendall(wire.frame(ApiVersionsRequest[1](), 1, correlation_id=1))
        wait_until(lambda: waiting)
        running.stop()
    assert reported == []


# -- bad input ------------------------------------------------------------------------------


def _still_serves(running: ListenerThread) -> None:
    assert api_versions(address(running)).error_code == Code.NONE


def _raw(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack(">i", len(payload)) + payload)


BAD_FRAMES = {
    "over request_max_bytes": struct.pack(">i", 1025) + b"x" * 100,
    "negative length": struct.pack(">i", -5),
    "shorter than a header": struct.pack(">i", 3) + b"abc",
    "unknown api key": struct.pack(">ihhih", 10, 999, 0, 1, -1),
    "api key not served": struct.pack(">ihhih", 10, 4, 0, 1, -1),  # LeaderAndIsr
    "version not served": wire.frame(MetadataRequest[13](topics=None), 13),
    "garbage body": struct.pack(">i", 30) + struct.pack(">hhi", 3, 12, 1) + b"\xff" * 22,
}


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_a_bad_frame_closes_only_its_connection(backend, name):
    with serve(backend, GatewaySettings(request_max_bytes=1024)) as running:
        other = wire.connect(address(running))
        other.sendall(wire.frame(ApiVersionsRequest[0](), 0, correlation_id=1))
        assert wire.response(other, 18, 0)[0] == 1
        with wire.connect(address(running)) as sock:
            sock.sendall(BAD_FRAMES[name])
            assert wire.closed(sock)
        other.sendall(wire.frame(ApiVersionsRequest[0](), 0, correlation_id=2))
        assert wire.response(other, 18, 0)[0] == 2
        other.close()
        _still_serves(running)
        assert running.listener.refused == 1
    assert backend.calls == []


def test_answers_due_before_a_bad_frame_still_go_out(listener):
    with wire.connect(address(listener)) as sock:
        sock.sendall(wire.frame(ApiVersionsRequest[0](), 0, correlation_id=7)
                     + struct.pack(">ihhih", 10, 999, 0, 8, -1))
        assert wire.response(sock, 18, 0)[0] == 7
        assert wire.closed(sock)


def test_a_truncated_frame_and_a_vanished_client_harm_nothing(listener):
    for cut in (2, 4, 9):
        with wire.connect(address(listener)) as sock:
            sock.sendall(wire.frame(ApiVersionsRequest[0](), 0)[:cut])
    wait_until(lambda: listener.listener.connections == 0)
    _still_serves(listener)


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(backend):
    settings = GatewaySettings(connections_max_idle_ms=1000)
    with serve(backend, settings) as running:
        silent = wire.connect(address(running))
        half = wire.connect(address(running))
        half.sendall(wire.frame(ApiVersionsRequest[0](), 0)[:6])  # a frame never finished
        chatty = wire.connect(address(running))
        for i in range(6):  # one request every 250 ms: never idle for 1000
            chatty.sendall(wire.frame(ApiVersionsRequest[0](), 0, correlation_id=i))
            assert wire.response(chatty, 18, 0)[0] == i
            time.sleep(0.25)
        assert wire.closed(silent)
        assert wire.closed(half)
        chatty.close()
        silent.close()
        half.close()
        assert running.listener.refused == 2


def test_a_handler_that_fails_closes_its_connection_only(backend):
    dispatch = default_dispatch()

    async def broken(ctx, version, request):
        raise RuntimeError("a bug")

    dispatch._apis[18] = dispatch._apis[18].__class__(18, 0, 3, broken)
    with serve(backend, dispatch=dispatch) as running:
        with wire.connect(address(running)) as sock:
            sock.sendall(wire.frame(ApiVersionsRequest[0](), 0))
            assert wire.closed(sock)
        answer = wire.call(address(running), MetadataRequest[1](topics=None), 1)
        assert [t.name for t in answer.topics] == ["orders"]


def test_thousands_of_connections_are_each_served(listener):
    socks = [wire.connect(address(listener)) for _ in range(2000)]
    try:
        for i, sock in enumerate(socks):
            sock.sendall(wire.frame(ApiVersionsRequest[0](), 0, correlation_id=i))
        for i, sock in enumerate(socks):
            assert wire.response(sock, 18, 0)[0] == i
        assert listener.listener.connections == 2000
    finally:
        for sock in socks:
            sock.close()
    wait_until(lambda: listener.listener.connections == 0)
    _still_serves(listener)


def test_one_listener_for_the_whole_cluster_is_one_kafka_broker(backend):
    """As ``raylog gateway`` advertises (OneAddress): one Kafka broker leads everything,
    replicas and ISR stay raylog's."""
    from raylog.kafka.gateway.cluster import OneAddress

    async def brokers():
        return await OneAddress("127.0.0.1", 9092).addresses([2, 1])

    backend.brokers = brokers
    backend.add_topic("led-by-2", leader=2)
    with serve(backend) as running:
        answer = wire.call(address(running), MetadataRequest[12](topics=None), 12)
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(1, "127.0.0.1", 9092)]
    assert answer.controller_id == 1
    for topic in answer.topics:
        for p in topic.partitions:
            assert (p.error_code, p.leader_id, p.replica_nodes, p.offline_replicas) == \
                (Code.NONE, 1, [1, 2], [])


# -- the compiled translation ---------------------------------------------------------------


@pytest.mark.parametrize("compiled", [True, False])
def test_a_listener_without_the_compiled_translation_warns(backend, monkeypatch, caplog,
                                                           compiled):
    from raylog.kafka import records, records_py

    monkeypatch.setattr(records, "coder", object() if compiled else records_py)
    with caplog.at_level("WARNING", logger="raylog.kafka.gateway.listener"), serve(backend):
        pass
    warned = [r for r in caplog.records if "_records.c" in r.getMessage()]
    assert bool(warned) is not compiled
