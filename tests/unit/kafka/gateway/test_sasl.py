"""Logins on the listener over raw sockets (a fake cluster): SASL PLAIN and SCRAM, v0's raw
tokens, TLS and client certificates, what an unauthenticated connection may ask, failures
answered late and closed, and the cap on connections per address."""

from __future__ import annotations

import socket
import ssl
import struct
import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from raylog.kafka.auth.credentials import CredentialStore
from raylog.kafka.auth.principal import ANONYMOUS, Principal
from raylog.kafka.auth.scram import Mechanism, make_credential
from raylog.kafka.gateway.dispatch import Dispatch, default_dispatch
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.listener import KafkaListener, ListenerThread
from raylog.kafka.gateway.security import ListenerSecurity
from raylog.kafka.gateway.settings import GatewaySettings
from tests.tls import make_pki
from tests.unit.fake_remote import wait_until
from tests.unit.kafka.auth.scram_client import ScramClient
from tests.unit.kafka.gateway import wire

SASL = ListenerSecurity(security_protocol="SASL_PLAINTEXT",
                        sasl_enabled_mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                        failed_authentication_delay_ms=20,
                        failed_authentication_max_delay_ms=200)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def credentials() -> CredentialStore:
    store = CredentialStore()
    for mechanism in Mechanism:
        store.put("alice", mechanism, make_credential("wonderland", mechanism))
    return store


def serve(backend, security, credentials=None, settings=None) -> ListenerThread:
    return ListenerThread(KafkaListener(backend, settings, port=0, security=security,
                                        credentials=credentials))


def address(running: ListenerThread) -> tuple[str, int]:
    return running.listener.host, running.listener.port


def metadata(sock: socket.socket, correlation_id: int = 9) -> list[str]:
    sock.sendall(wire.frame(MetadataRequest[9](topics=None), 9, correlation_id))
    return [t.name for t in wire.response(sock, 3, 9)[1].topics]


def handshake(sock, mechanism: str, version: int = 1):
    sock.sendall(wire.frame(SaslHandshakeRequest[version](mechanism=mechanism), version))
    return wire.response(sock, 17, version)[1]


def authenticate(sock, token: bytes, version: int = 2):
    sock.sendall(wire.frame(SaslAuthenticateRequest[version](auth_bytes=token), version))
    return wire.response(sock, 36, version)[1]


def scram_login(sock, mechanism: Mechanism, user: str, password: str, version: int = 2):
    """The last SaslAuthenticate answer of a SCRAM login."""
    assert handshake(sock, mechanism.sasl_name).error_code == Code.NONE
    client = ScramClient(mechanism, user, password)
    first = authenticate(sock, client.first(), version)
    if first.error_code != Code.NONE:
        return first
    final = authenticate(sock, client.final(bytes(first.auth_bytes)), version)
    if final.error_code == Code.NONE:
        assert client.verify(bytes(final.auth_bytes))
    return final


@pytest.mark.parametrize("mechanism", list(Mechanism))
@pytest.mark.parametrize("version", [0, 1, 2])
def test_scram_logs_in_then_every_api_is_served(backend, credentials, mechanism, version):
    with serve(backend, SASL, credentials) as running, wire.connect(address(running)) as sock:
        final = scram_login(sock, mechanism, "alice", "wonderland", version)
        assert (final.error_code, final.error_message) == (Code.NONE, None)
        assert metadata(sock) == ["orders"]


def test_plain_logs_in_against_the_scram_credentials(backend, credentials):
    with serve(backend, SASL, credentials) as running, wire.connect(address(running)) as sock:
        assert handshake(sock, "PLAIN").error_code == Code.NONE
        assert authenticate(sock, b"\0alice\0wonderland").error_code == Code.NONE
        assert metadata(sock) == ["orders"]


@pytest.mark.parametrize("user, password", [("alice", "guess"), ("mallory", "wonderland")])
def test_a_wrong_password_or_unknown_user_fails_late_and_closes(backend, credentials, user,
                                                               password, caplog):
    with serve(backend, SASL, credentials) as running:
        for mechanism in Mechanism:
            with wire.connect(address(running)) as sock:
                started = time.monotonic()
                final = scram_login(sock, mechanism, user, password)
                assert final.error_code == Code.SASL_AUTHENTICATION_FAILED
                assert final.error_message == (
                    f"Authentication failed during authentication due to invalid "
                    f"credentials with SASL mechanism {mechanism.sasl_name}")
                assert time.monotonic() - started >= 0.02  # the throttle's first delay
                assert wire.closed(sock)
        with wire.connect(address(running)) as sock:
            assert handshake(sock, "PLAIN").error_code == Code.NONE
            assert authenticate(sock, f"\0{user}\0{password}".encode()).error_code == \
                Code.SASL_AUTHENTICATION_FAILED
            assert wire.closed(sock)
        assert running.listener.throttle.failures("127.0.0.1") == 3
        wait_until(lambda: running.listener.authentication_failures == 3)
        # the listener goes on: the next client logs in
        with wire.connect(address(running)) as sock:
            assert scram_login(sock, Mechanism.SCRAM_SHA_256, "alice", "wonderland") \
                .error_code == Code.NONE
    assert "authentication from 127.0.0.1 failed" in caplog.text


def test_failures_from_one_address_are_answered_later_and_later(backend, credentials):
    with serve(backend, SASL, credentials) as running:
        delays = []
        for _ in range(4):
            with wire.connect(address(running)) as sock:
                handshake(sock, "PLAIN")
                started = time.monotonic()
                authenticate(sock, b"\0alice\0nope")
                delays.append(time.monotonic() - started)
    # 20, 40, 80, 160 ms: each at least its delay (never asserting an upper bound)
    assert [d >= floor for d, floor in zip(delays, (0.02, 0.04, 0.08, 0.16), strict=True)] \
        == [True] * 4


def test_before_login_only_the_logins_apis_are_served(backend, credentials):
    with serve(backend, SASL, credentials) as running:
        with wire.connect(address(running)) as sock:
            sock.sendall(wire.frame(ApiVersionsRequest[3](client_software_name="t",
                                                          client_software_version="1"), 3))
            answer = wire.response(sock, 18, 3)[1]
            served = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
            assert (served[17], served[36]) == ((0, 1), (0, 2))
            sock.sendall(wire.frame(MetadataRequest[9](topics=None), 9))
            assert wire.closed(sock)  # as Kafka: "Unexpected Kafka request ..."
        with wire.connect(address(running)) as sock:  # halfway through a login too
            handshake(sock, "SCRAM-SHA-256")
            sock.sendall(wire.frame(MetadataRequest[9](topics=None), 9))
            assert wire.closed(sock)
        settles_to(running, 0)


def test_an_unsupported_mechanism_is_answered_with_the_enabled_ones_then_closed(
        backend, credentials):
    scram_only = ListenerSecurity(security_protocol="SASL_PLAINTEXT")
    with serve(backend, scram_only, credentials) as running, \
            wire.connect(address(running)) as sock:
        answer = handshake(sock, "PLAIN")
        assert answer.error_code == Code.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert wire.closed(sock)


def test_a_second_handshake_and_tokens_out_of_turn_are_illegal(backend, credentials):
    with serve(backend, SASL, credentials) as running:
        with wire.connect(address(running)) as sock:
            assert scram_login(sock, Mechanism.SCRAM_SHA_256, "alice", "wonderland") \
                .error_code == Code.NONE
            assert handshake(sock, "PLAIN").error_code == Code.ILLEGAL_SASL_STATE
            assert wire.closed(sock)
        with wire.connect(address(running)) as sock:
            assert authenticate(sock, b"\0alice\0wonderland").error_code == \
                Code.ILLEGAL_SASL_STATE  # no handshake yet
            assert wire.closed(sock)


def test_the_login_apis_on_a_listener_without_sasl_are_illegal(backend):
    with serve(backend, None) as running, wire.connect(address(running)) as sock:
        assert handshake(sock, "PLAIN").error_code == Code.ILLEGAL_SASL_STATE
        assert authenticate(sock, b"\0a\0b").error_code == Code.ILLEGAL_SASL_STATE
        assert metadata(sock) == ["orders"]  # nothing else changes


def raw(sock: socket.socket, token: bytes) -> bytes | None:
    sock.sendall(struct.pack(">i", len(token)) + token)
    return wire.read_frame(sock)


def test_handshake_v0_takes_raw_tokens(backend, credentials):
    with serve(backend, SASL, credentials) as running:
        with wire.connect(address(running)) as sock:
            assert handshake(sock, "SCRAM-SHA-512", version=0).error_code == Code.NONE
            client = ScramClient(Mechanism.SCRAM_SHA_512, "alice", "wonderland")
            server_first = raw(sock, client.first())
            assert client.verify(raw(sock, client.final(server_first)))
            assert metadata(sock) == ["orders"]
        with wire.connect(address(running)) as sock:
            assert handshake(sock, "PLAIN", version=0).error_code == Code.NONE
            assert raw(sock, b"\0alice\0wonderland") == b""
            assert metadata(sock) == ["orders"]
        with wire.connect(address(running)) as sock:  # a failure: closed, nothing said
            handshake(sock, "PLAIN", version=0)
            assert raw(sock, b"\0a\0b") is None


def test_a_sasl_listener_needs_credentials(backend):
    from raylog.errors import SecurityConfigError

    with pytest.raises(SecurityConfigError, match="needs the users' credentials"):
        KafkaListener(backend, security=SASL)


# -- TLS --------------------------------------------------------------------------------------


def tls(pki, protocol: str = "SSL", **more) -> ListenerSecurity:
    return ListenerSecurity(security_protocol=protocol, ssl_certfile=str(pki.server_cert),
                            ssl_keyfile=str(pki.server_key), **more)


def recorded(backend, security, seen: list) -> ListenerThread:
    """A TLS listener whose Metadata answers note each asker's principal in ``seen``."""
    return ListenerThread(KafkaListener(backend, dispatch=recording_dispatch(seen), port=0,
                                        security=security))


def tls_client(pki, cert=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(*map(str, cert))
    return context


def tls_connect(running, context, hostname="localhost") -> ssl.SSLSocket:
    return context.wrap_socket(wire.connect(address(running)), server_hostname=hostname)


def recording_dispatch(seen: list):
    """The default dispatch, with Metadata also noting each asker's principal."""
    dispatch = default_dispatch()
    api = dispatch.get(3)
    wrapped = Dispatch()

    async def noting(ctx, version, request):
        seen.append(ctx.connection.principal)
        return await api.handler(ctx, version, request)

    for key, low, high in dispatch.ranges():
        wrapped.add(key, low, high, noting if key == 3 else dispatch.get(key).handler)
    return wrapped


@pytest.mark.parametrize("hostname", ["localhost", "127.0.0.1"])
def test_sasl_over_tls_with_the_servers_name_checked(backend, credentials, pki, hostname):
    seen: list = []
    running = ListenerThread(KafkaListener(backend, dispatch=recording_dispatch(seen), port=0,
                                           security=tls(pki, "SASL_SSL"),
                                           credentials=credentials))
    with running, tls_connect(running, tls_client(pki), hostname) as sock:
        assert scram_login(sock, Mechanism.SCRAM_SHA_512, "alice", "wonderland") \
            .error_code == Code.NONE
        assert metadata(sock) == ["orders"]
    assert seen == [Principal.user("alice")]


def test_a_wrong_name_fails_the_clients_check(backend, pki):
    with serve(backend, tls(pki)) as running, pytest.raises(ssl.SSLCertVerificationError):
        tls_connect(running, tls_client(pki), "elsewhere.example")


def test_mtls_makes_the_certificate_subject_the_principal(backend, pki):
    seen: list = []
    with recorded(backend, tls(pki, ssl_cafile=str(pki.ca), ssl_client_auth="required"),
                  seen) as running:
        with tls_connect(running, tls_client(pki, pki.client("bob"))) as sock:
            assert metadata(sock) == ["orders"]
        assert seen == [Principal.user("CN=bob,O=raylog tests")]
        # required: a client without a certificate does not get in
        with tls_connect(running, tls_client(pki)) as sock, \
                pytest.raises((ssl.SSLError, ConnectionError)):
            # TLS 1.3 finishes the client's side before the server checks: the refusal
            # comes with the first read
            sock.sendall(wire.frame(MetadataRequest[9](topics=None), 9))
            if wire.read_frame(sock) is None:
                raise ConnectionError("closed")


def test_requested_client_certificates_are_optional(backend, pki):
    seen: list = []
    running = recorded(backend, tls(pki, ssl_cafile=str(pki.ca), ssl_client_auth="requested"),
                       seen)
    with running, tls_connect(running, tls_client(pki)) as sock:
        assert metadata(sock) == ["orders"]
    assert seen == [ANONYMOUS]


def test_a_plaintext_client_against_tls_gets_nothing_and_harms_nothing(backend, pki):
    with serve(backend, tls(pki)) as running:
        with wire.connect(address(running)) as sock:
            sock.sendall(wire.frame(MetadataRequest[9](topics=None), 9))
            assert wire.closed(sock)
        with tls_connect(running, tls_client(pki)) as sock:
            assert metadata(sock) == ["orders"]


# -- connections per address ----------------------------------------------------------------


def test_connections_beyond_the_cap_per_address_are_closed(backend):
    settings = GatewaySettings(max_connections_per_ip=3)
    with serve(backend, None, settings=settings) as running:
        socks = [wire.connect(address(running)) for _ in range(3)]
        for sock in socks:
            assert metadata(sock) == ["orders"]
        with wire.connect(address(running)) as extra:
            assert wire.closed(extra)
        socks.pop().close()
        settles_to(running, 2)
        with wire.connect(address(running)) as again:
            assert metadata(again) == ["orders"]
        for sock in socks:
            sock.close()


def settles_to(running: ListenerThread, count: int) -> None:
    """Wait for the listener to count ``count`` open connections (its side of a close lags
    the client's)."""
    wait_until(lambda: running.listener.connections == count)


def test_a_deleted_credential_closes_the_connections_that_logged_in_with_it(backend,
                                                                            credentials):
    """Deleting alice's SCRAM-SHA-256 credential (the follower applying its tombstone, on
    another thread) closes her SCRAM-SHA-256 and PLAIN connections at once; her
    SCRAM-SHA-512 one, bob's, and one still logging in stay; her next login with it fails."""
    credentials.put("bob", Mechanism.SCRAM_SHA_256,
                    make_credential("builder", Mechanism.SCRAM_SHA_256))
    sha256, sha512 = Mechanism.SCRAM_SHA_256, Mechanism.SCRAM_SHA_512
    with serve(backend, SASL, credentials) as running, \
            wire.connect(address(running)) as alice256, \
            wire.connect(address(running)) as alice512, \
            wire.connect(address(running)) as alice_plain, \
            wire.connect(address(running)) as bob, \
            wire.connect(address(running)) as anonymous:
        assert scram_login(alice256, sha256, "alice", "wonderland").error_code == Code.NONE
        assert scram_login(alice512, sha512, "alice", "wonderland").error_code == Code.NONE
        assert handshake(alice_plain, "PLAIN").error_code == Code.NONE
        assert authenticate(alice_plain, b"\0alice\0wonderland").error_code == Code.NONE
        assert scram_login(bob, sha256, "bob", "builder").error_code == Code.NONE
        assert handshake(anonymous, "SCRAM-SHA-256").error_code == Code.NONE
        credentials.put("alice", sha256, None)
        assert wire.closed(alice256) and wire.closed(alice_plain)
        wait_until(lambda: running.listener.revoked == 2)
        for sock in (alice512, bob):
            assert metadata(sock) == ["orders"]
        client = ScramClient(sha256, "alice", "wonderland")
        first = authenticate(anonymous, client.first())  # an unknown user gets a made-up salt
        assert authenticate(anonymous, client.final(bytes(first.auth_bytes))).error_code == \
            Code.SASL_AUTHENTICATION_FAILED
        with wire.connect(address(running)) as again:
            assert scram_login(again, sha256, "alice", "wonderland").error_code == \
                Code.SASL_AUTHENTICATION_FAILED
        credentials.put("alice", sha256, None)  # gone already: nothing more is closed
        assert metadata(alice512) == ["orders"]
        assert running.listener.revoked == 2


def test_a_credential_deleted_during_a_scram_login_refuses_it(backend, credentials):
    """The deletion lands between the client's first and final messages: the revocation
    finds no logged-in connection to close, so the login's end checks the credential
    again and refuses it."""
    with serve(backend, SASL, credentials) as running, wire.connect(address(running)) as sock:
        assert handshake(sock, "SCRAM-SHA-512").error_code == Code.NONE
        client = ScramClient(Mechanism.SCRAM_SHA_512, "alice", "wonderland")
        first = authenticate(sock, client.first())
        assert first.error_code == Code.NONE
        credentials.put("alice", Mechanism.SCRAM_SHA_512, None)
        final = authenticate(sock, client.final(bytes(first.auth_bytes)))
        assert final.error_code == Code.SASL_AUTHENTICATION_FAILED
        assert wire.closed(sock)
