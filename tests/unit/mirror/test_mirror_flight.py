"""The source's Flight endpoint against a fake cluster: auth, streams, actions, typed errors.
No Ray: the server reads through a backend, here a dict of encoded batches."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from raylog.errors import (
    OffsetOutOfRangeError,
    SourceAuthenticationError,
    SourceUnavailableError,
    UnknownTopicError,
)
from raylog.mirror.flight_client import SourceClient, batch_views
from raylog.mirror.flight_server import Fetched, SourceFlightServer
from raylog.mirror.local import free_port
from raylog.mirror.protocol import Ticket
from raylog.records import BatchBuilder, parse_header, read_records, stamp

TOKEN = "s3cret"


def _batches(count: int, per_batch: int) -> list[bytes]:
    out, offset = [], 0
    for b in range(count):
        builder = BatchBuilder()
        for i in range(per_batch):
            builder.append(1000 + offset + i, f"k{b}".encode(), f"v{offset + i}".encode(),
                           [("h", b"x")])
        data = bytearray(builder.build())
        stamp(data, offset, 0)
        out.append(bytes(data))
        offset += per_batch
    return out


class FakeSource:
    """One topic, two partitions of stored batches; fetches return at most two batches."""

    def __init__(self) -> None:
        self.logs = {0: _batches(5, 3), 1: _batches(1, 2)}
        self.fetches = 0

    def topics(self):
        return [{"name": "orders", "topic_id": "id", "partitions": 2, "replication_factor": 1,
                 "configs": {"retention_ms": 5}}]

    def offsets(self, topic):
        if topic != "orders":
            raise UnknownTopicError(f"unknown topic {topic!r}")
        return [(0, 15), (0, 2)]

    def group_offsets(self, topics):
        return {"g": [["orders", 0, 4]]} if "orders" in topics else {}

    def start_fetch(self, topic, partition, offset, max_bytes, max_wait_ms):
        self.fetches += 1
        if topic != "orders":
            raise UnknownTopicError(f"unknown topic {topic!r}")
        if offset > 15:
            raise OffsetOutOfRangeError(f"offset {offset} is past the end")
        found = [b for b in self.logs[partition] if parse_header(b).last_offset >= offset]
        return lambda: Fetched(b"".join(found[:2]), 15, 0)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[SourceFlightServer, FakeSource]]:
    source = FakeSource()
    server = SourceFlightServer(source, TOKEN)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield server, source
    server.shutdown()
    thread.join(10)


def test_a_stream_follows_fetch_after_fetch_to_its_end(endpoint):
    server, _ = endpoint
    client = SourceClient(server.location, TOKEN)
    views, metas = [], []
    for chunk, meta in client.read(Ticket("orders", 0, 4, end=13)):
        views.extend(batch_views(chunk))
        metas.append(meta)
    # The batches holding 4..12: [3,6), [6,9), [9,12), [12,15), whole, as stored.
    assert [parse_header(v).base_offset for v in views] == [3, 6, 9, 12]
    assert metas[-1] == {"next_offset": 15, "high_watermark": 15, "log_start_offset": 0}
    records = read_records(b"".join(bytes(v) for v in views), 4, 13)
    assert [r.offset for r in records] == list(range(4, 13))
    assert records[0].headers == (("h", b"x"),) and records[0].timestamp == 1004


def test_a_stream_sends_no_batch_that_starts_at_its_end(endpoint):
    server, _ = endpoint
    client = SourceClient(server.location, TOKEN)
    chunks = list(client.read(Ticket("orders", 0, 4, end=12)))
    views = [v for chunk, _ in chunks for v in batch_views(chunk)]
    # The second fetch returns [9,12) and [12,15); the stream keeps the first.
    assert [parse_header(v).base_offset for v in views] == [3, 6, 9]
    assert chunks[-1][1]["next_offset"] == 12


def test_a_followed_partition_ends_the_stream_when_nothing_comes(endpoint):
    server, _ = endpoint
    client = SourceClient(server.location, TOKEN)
    chunks = list(client.read(Ticket("orders", 1, 2, max_wait_ms=0)))
    assert len(chunks) == 1 and chunks[0][0].num_rows == 0
    assert chunks[0][1]["next_offset"] == 2


def test_max_bytes_ends_a_stream_early(endpoint):
    server, _ = endpoint
    client = SourceClient(server.location, TOKEN)
    chunks = list(client.read(Ticket("orders", 0, 0, max_bytes=1)))
    assert len(chunks) == 1 and chunks[0][1]["next_offset"] == 6


def test_actions_answer_topics_offsets_and_groups(endpoint):
    server, _ = endpoint
    client = SourceClient(server.location, TOKEN)
    assert client.topics()[0]["configs"] == {"retention_ms": 5}
    assert client.offsets("orders") == [(0, 15), (0, 2)]
    assert client.group_offsets(["orders"]) == {"g": [["orders", 0, 4]]}


def test_the_sources_errors_arrive_typed(endpoint):
    server, _ = endpoint
    client = SourceClient(server.location, TOKEN)
    with pytest.raises(UnknownTopicError, match="unknown topic 'nope'"):
        client.offsets("nope")
    with pytest.raises(OffsetOutOfRangeError, match="offset 99 is past the end"):
        list(client.read(Ticket("orders", 0, 99)))


@pytest.mark.parametrize("token", ["wrong", ""])
def test_a_wrong_token_is_refused(endpoint, token):
    server, source = endpoint
    before = source.fetches
    client = SourceClient(server.location, token)
    with pytest.raises(SourceAuthenticationError, match="refused the token"):
        client.topics()
    with pytest.raises(SourceAuthenticationError):
        list(client.read(Ticket("orders", 0, 0)))
    assert source.fetches == before  # refused before anything was read


def test_an_endpoint_nobody_serves_is_unavailable():
    client = SourceClient(f"grpc://127.0.0.1:{free_port()}", TOKEN, timeout_s=5)
    with pytest.raises(SourceUnavailableError, match="is unreachable"):
        client.topics()


def test_any_flight_client_reads_records_from_the_flights_listed(endpoint):
    """What a program outside Ray sees: list_flights, then do_get of each endpoint."""
    server, _ = endpoint
    client = flight.FlightClient(server.location)
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {TOKEN}".encode())])
    [info] = list(client.list_flights(options=options))
    assert info.descriptor.path == [b"orders"] and info.total_records == 17
    tables = [client.do_get(e.ticket, options).read_all() for e in info.endpoints]
    assert [t.num_rows for t in tables] == [15, 2]
    assert tables[0].column("value").to_pylist()[:2] == [b"v0", b"v1"]
    assert tables[0].schema.names == ["offset", "timestamp", "key", "value", "headers"]
    assert isinstance(tables[1], pa.Table)


def _self_signed() -> tuple[bytes, bytes]:
    """A certificate for 127.0.0.1 and its key, PEM."""
    pytest.importorskip("cryptography")
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def test_over_tls_a_client_must_trust_the_certificate():
    cert, key = _self_signed()
    server = SourceFlightServer(FakeSource(), TOKEN, tls=(cert, key))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        assert server.location.startswith("grpc+tls://127.0.0.1:")
        trusting = SourceClient(server.location, TOKEN, tls_root_certs=cert)
        assert trusting.offsets("orders") == [(0, 15), (0, 2)]
        stranger = SourceClient(server.location, TOKEN, timeout_s=5)
        with pytest.raises(SourceUnavailableError):
            stranger.topics()
    finally:
        server.shutdown()
        thread.join(10)
