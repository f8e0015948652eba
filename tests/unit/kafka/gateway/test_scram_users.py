"""DescribeUserScramCredentials and AlterUserScramCredentials on raw sockets: only super
users, Kafka's checks per user, all or nothing per user, written before the answer."""

from __future__ import annotations

import pytest
from kafka.protocol.admin.users import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
)

from raylog.kafka.auth.credentials import CredentialStore, decode
from raylog.kafka.auth.scram import Mechanism, make_credential
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.listener import KafkaListener, ListenerThread
from raylog.kafka.gateway.security import ListenerSecurity
from tests.unit.kafka.gateway import wire
from tests.unit.kafka.gateway.test_sasl import scram_login

SHA256, SHA512 = Mechanism.SCRAM_SHA_256, Mechanism.SCRAM_SHA_512
Upsert = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
Delete = AlterUserScramCredentialsRequest.ScramCredentialDeletion


@pytest.fixture
def credentials() -> CredentialStore:
    store = CredentialStore()
    for user in ("admin", "alice"):
        store.put(user, SHA256, make_credential("pw", SHA256))
    store.put("alice", SHA512, make_credential("pw", SHA512, 8192))
    return store


@pytest.fixture
def written() -> list:
    return []


@pytest.fixture
def running(backend, credentials, written):
    security = ListenerSecurity(security_protocol="SASL_PLAINTEXT", super_users="User:admin")
    with ListenerThread(KafkaListener(backend, port=0, security=security,
                                      credentials=credentials,
                                      write_users=written.extend)) as thread:
        yield thread


def logged_in(running, user: str):
    sock = wire.connect((running.listener.host, running.listener.port))
    assert scram_login(sock, SHA256, user, "pw").error_code == Code.NONE
    return sock


def ask(sock, request):
    sock.sendall(wire.frame(request, 0))
    return wire.response(sock, request.API_KEY, 0)[1]


def describe(sock, *names):
    users = [DescribeUserScramCredentialsRequest.UserName(name=n) for n in names] or None
    return ask(sock, DescribeUserScramCredentialsRequest[0](users=users))


def alter(sock, upsertions=(), deletions=()):
    return ask(sock, AlterUserScramCredentialsRequest[0](upsertions=list(upsertions),
                                                         deletions=list(deletions)))


def upsert(name, mechanism: Mechanism | int = SHA512, iterations=4096, password="new"):
    """An upsertion as a client makes it: salted and hashed there (an int mechanism: an
    unknown one, with a made-up salted password)."""
    salt = b"0123456789abcdef"
    if isinstance(mechanism, Mechanism):
        kind, salted = mechanism.kafka_type, mechanism.salted_password(password, salt,
                                                                       max(iterations, 1))
    else:
        kind, salted = mechanism, b"x"
    return Upsert(name=name, mechanism=kind, iterations=iterations, salt=salt,
                  salted_password=salted)


def test_a_super_user_describes_every_user_or_those_named(running):
    with logged_in(running, "admin") as sock:
        answer = describe(sock)
        assert answer.error_code == Code.NONE
        assert {r.user: [(c.mechanism, c.iterations) for c in r.credential_infos]
                for r in answer.results} == {"admin": [(1, 4096)],
                                              "alice": [(1, 4096), (2, 8192)]}
        named = describe(sock, "alice", "nobody", "admin", "admin")
        assert [(r.user, r.error_code) for r in named.results] == [
            ("alice", Code.NONE), ("nobody", Code.RESOURCE_NOT_FOUND),
            ("admin", Code.DUPLICATE_RESOURCE), ("admin", Code.DUPLICATE_RESOURCE)]


def test_others_may_not_describe_nor_alter(running, written, credentials):
    with logged_in(running, "alice") as sock:
        assert describe(sock).error_code == Code.CLUSTER_AUTHORIZATION_FAILED
        answer = alter(sock, [upsert("alice")], [Delete(name="admin", mechanism=1)])
        assert {(r.user, r.error_code) for r in answer.results} == {
            ("alice", Code.CLUSTER_AUTHORIZATION_FAILED),
            ("admin", Code.CLUSTER_AUTHORIZATION_FAILED)}
    assert written == [] and credentials.get("admin", SHA256) is not None


def test_a_super_user_adds_changes_and_deletes_credentials(running, written, credentials):
    with logged_in(running, "admin") as sock:
        answer = alter(sock, [upsert("bob", SHA512, 4096, "bobs")],
                       [Delete(name="alice", mechanism=1)])
        assert {(r.user, r.error_code) for r in answer.results} == {("bob", Code.NONE),
                                                                     ("alice", Code.NONE)}
    assert {decode(k, v)[:2] for k, v in written} == {("bob", SHA512), ("alice", SHA256)}
    assert credentials.get("alice", SHA256) is None
    assert credentials.check_password("bob", "bobs")  # the client's salted password
    with wire.connect((running.listener.host, running.listener.port)) as sock:
        assert scram_login(sock, SHA512, "bob", "bobs").error_code == Code.NONE


@pytest.mark.parametrize("upsertions, deletions, code", [
    ([upsert("carol", mechanism=3)], [], Code.UNSUPPORTED_SASL_MECHANISM),
    ([upsert("carol", iterations=1000)], [], Code.UNACCEPTABLE_CREDENTIAL),
    ([upsert("carol", iterations=20000)], [], Code.UNACCEPTABLE_CREDENTIAL),
    ([upsert("")], [], Code.UNACCEPTABLE_CREDENTIAL),
    ([upsert("carol"), upsert("carol")], [], Code.DUPLICATE_RESOURCE),
    ([upsert("carol")], [Delete(name="carol", mechanism=2)], Code.DUPLICATE_RESOURCE),
    ([], [Delete(name="carol", mechanism=1)], Code.RESOURCE_NOT_FOUND),
    ([upsert("carol", SHA256), upsert("carol", iterations=5)], [], Code.UNACCEPTABLE_CREDENTIAL),
])
def test_a_user_with_any_bad_change_gets_none_applied(running, written, upsertions,
                                                       deletions, code):
    with logged_in(running, "admin") as sock:
        answer = alter(sock, [*upsertions, upsert("dave")], deletions)
        by_user = {r.user: r.error_code for r in answer.results}
    assert by_user.pop("dave") == Code.NONE  # another user's changes go through
    assert set(by_user.values()) == {code}
    assert [decode(k, v)[0] for k, v in written] == ["dave"]


def test_no_super_user_by_default(backend, credentials):
    security = ListenerSecurity(security_protocol="SASL_PLAINTEXT")
    with ListenerThread(KafkaListener(backend, port=0, security=security,
                                      credentials=credentials)) as running, \
            logged_in(running, "admin") as sock:
        assert describe(sock).error_code == Code.CLUSTER_AUTHORIZATION_FAILED


def test_a_plaintext_listener_has_no_users_to_administer(backend):
    security = ListenerSecurity(super_users=["User:ANONYMOUS"])
    with ListenerThread(KafkaListener(backend, port=0, security=security)) as running, \
            wire.connect((running.listener.host, running.listener.port)) as sock:
        assert describe(sock).error_code == Code.CLUSTER_AUTHORIZATION_FAILED
