"""SCRAM's server side: RFC 7677's test vector, both mechanisms against a client, and every
way a client-first or client-final message is refused."""

from __future__ import annotations

import base64

import pytest

from raylog.errors import AuthenticationError, InvalidArgumentError
from raylog.kafka.auth.scram import (
    Credential,
    Mechanism,
    ScramServer,
    make_credential,
)
from tests.unit.kafka.auth.scram_client import ScramClient

SECRET = b"listener secret"


def server_for(credentials: dict[str, Credential], mechanism: Mechanism,
               nonce: str = "3rfcNHYJY1ZVvWVs7j") -> ScramServer:
    return ScramServer(mechanism, credentials.get, SECRET, nonce=lambda: nonce)


def test_rfc_7677_test_vector():
    """RFC 7677, section 3: user "user", password "pencil"."""
    mechanism = Mechanism.SCRAM_SHA_256
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = make_credential("pencil", mechanism, 4096, salt)
    server = server_for({"user": credential}, mechanism, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,"
        b"i=4096")
    final = server.final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                         b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.done and server.user == "user"


@pytest.mark.parametrize("mechanism", list(Mechanism))
def test_a_client_logs_in_and_checks_the_server(mechanism):
    credential = make_credential("s3cret", mechanism, 4096)
    server = server_for({"alice": credential}, mechanism)
    client = ScramClient(mechanism, "alice", "s3cret")
    server_first = server.first(client.first())
    assert client.verify(server.final(client.final(server_first)))


@pytest.mark.parametrize("mechanism", list(Mechanism))
def test_a_wrong_password_is_refused(mechanism):
    server = server_for({"alice": make_credential("s3cret", mechanism)}, mechanism)
    client = ScramClient(mechanism, "alice", "guess")
    server_first = server.first(client.first())
    with pytest.raises(AuthenticationError, match="invalid SCRAM proof"):
        server.final(client.final(server_first))
    assert not server.done


def test_an_unknown_user_gets_a_made_up_salt_and_fails_at_the_proof():
    mechanism = Mechanism.SCRAM_SHA_256
    firsts = []
    for _ in range(2):
        server = server_for({}, mechanism)
        client = ScramClient(mechanism, "nobody", "x")
        firsts.append(server.first(client.first()))
        with pytest.raises(AuthenticationError, match="unknown user"):
            server.final(client.final(firsts[-1]))
    assert firsts[0] == firsts[1]  # the same salt each time, as a real user's would be
    assert b",i=4096" in firsts[0]


def test_the_credential_keeps_no_password():
    credential = make_credential("pencil", Mechanism.SCRAM_SHA_512)
    assert b"pencil" not in credential.salt + credential.stored_key + credential.server_key
    assert credential.matches("pencil") and not credential.matches("pencil2")
    again = make_credential("pencil", Mechanism.SCRAM_SHA_512)
    assert again.salt != credential.salt and again.stored_key != credential.stored_key


@pytest.mark.parametrize("iterations", [4095, 16385, "4096", 0])
def test_iterations_outside_kafkas_bounds_are_refused(iterations):
    with pytest.raises(InvalidArgumentError, match="iterations"):
        make_credential("pencil", Mechanism.SCRAM_SHA_256, iterations)


def test_an_empty_password_is_refused():
    with pytest.raises(InvalidArgumentError, match="empty"):
        make_credential("", Mechanism.SCRAM_SHA_256)


@pytest.mark.parametrize("first, why", [
    (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
    (b"n,,r=abc", "without user"),
    (b"n,,n=alice", "without user or nonce"),
    (b"x,,n=alice,r=abc", "malformed"),
    (b"n,a=bob,n=alice,r=abc", "authorization id"),
    (b"n,,m=ext,n=alice,r=abc", "mandatory extensions"),
    (b"n,,n=al=ice,r=abc", "user name"),
    (b"\xff\xfe", "UTF-8"),
])
def test_bad_client_first_messages_are_refused(first, why):
    server = server_for({}, Mechanism.SCRAM_SHA_256)
    with pytest.raises(AuthenticationError, match=why):
        server.first(first)


def test_escaped_user_names_are_read():
    mechanism = Mechanism.SCRAM_SHA_256
    server = server_for({"a,b=c": make_credential("pw", mechanism)}, mechanism)
    client = ScramClient(mechanism, "a,b=c", "pw")
    assert client.first() == b"n,,n=a=2Cb=3Dc,r=fyko+d2lbbFgONRv9qkxdawL"
    assert client.verify(server.final(client.final(server.first(client.first()))))


def tamper(final: bytes, field: str, value: str) -> bytes:
    parts = [f"{field}={value}" if p.startswith(f"{field}=") else p
             for p in final.decode().split(",")]
    return ",".join(parts).encode()


@pytest.mark.parametrize("field, value, why", [
    ("r", "someone-elses-nonce", "nonce"),
    ("c", "eSws", "channel binding"),  # "y,," where the client said "n,,"
    ("p", "not*base64", "not base64"),
    ("p", base64.b64encode(b"short").decode(), "invalid SCRAM proof"),
])
def test_bad_client_final_messages_are_refused(field, value, why):
    mechanism = Mechanism.SCRAM_SHA_256
    server = server_for({"alice": make_credential("pw", mechanism)}, mechanism)
    client = ScramClient(mechanism, "alice", "pw")
    final = client.final(server.first(client.first()))
    with pytest.raises(AuthenticationError, match=why):
        server.final(tamper(final, field, value))


def test_a_nonce_ending_with_the_servers_is_taken_as_kafka_takes_it():
    """librdkafka 2.0 (kcat's) sends its own nonce again before the server's."""
    mechanism = Mechanism.SCRAM_SHA_512
    server = server_for({"alice": make_credential("pw", mechanism)}, mechanism)
    client = ScramClient(mechanism, "alice", "pw")
    final = client.final(server.first(client.first()), repeat_nonce=True)
    assert b",r=" + client.nonce.encode() * 2 in b"," + final
    assert client.verify(server.final(final))


def test_messages_out_of_turn_are_refused():
    mechanism = Mechanism.SCRAM_SHA_256
    server = server_for({"alice": make_credential("pw", mechanism)}, mechanism)
    with pytest.raises(AuthenticationError, match="out of turn"):
        server.final(b"c=biws,r=x,p=AAAA")
    client = ScramClient(mechanism, "alice", "pw")
    server_first = server.first(client.first())
    with pytest.raises(AuthenticationError, match="second"):
        server.first(client.first())
    final = client.final(server_first)
    server.final(final)
    with pytest.raises(AuthenticationError, match="out of turn"):
        server.final(final)  # a replay


def test_mechanisms_by_name():
    assert Mechanism.named("SCRAM-SHA-512") is Mechanism.SCRAM_SHA_512
    assert Mechanism.SCRAM_SHA_256.kafka_type == 1
    with pytest.raises(InvalidArgumentError, match="known: SCRAM-SHA-256, SCRAM-SHA-512"):
        Mechanism.named("SCRAM-SHA-1")
