"""Credentials as records of __raylog_users and the store logins are checked against."""

from __future__ import annotations

import json

import pytest

from raylog.errors import AuthenticationError, CorruptRecordError
from raylog.kafka.auth import plain
from raylog.kafka.auth.credentials import CredentialStore, decode, encode, record_key
from raylog.kafka.auth.scram import Mechanism, make_credential


def test_a_record_round_trips_and_holds_no_password():
    credential = make_credential("pencil", Mechanism.SCRAM_SHA_512, 4096)
    key, value = encode("alice", credential)
    assert key == b"SCRAM-SHA-512:alice"
    assert b"pencil" not in value
    assert set(json.loads(value)) == {"salt", "iterations", "stored_key", "server_key"}
    assert decode(key, value) == ("alice", Mechanism.SCRAM_SHA_512, credential)


def test_user_names_with_colons_survive():
    credential = make_credential("pw", Mechanism.SCRAM_SHA_256)
    assert decode(*encode("a:b", credential))[0] == "a:b"


@pytest.mark.parametrize("key, value", [
    (b"alice", b"{}"),
    (b"SCRAM-SHA-1:alice", b"{}"),
    (b"SCRAM-SHA-256:alice", b"not json"),
    (b"SCRAM-SHA-256:alice", b'{"salt": "AA=="}'),
    (b"SCRAM-SHA-256:", None),
])
def test_records_that_are_not_credentials_are_refused(key, value):
    with pytest.raises(CorruptRecordError, match="__raylog_users"):
        decode(key, value)


def test_the_store_follows_records_and_tombstones():
    store = CredentialStore()
    first = make_credential("one", Mechanism.SCRAM_SHA_256)
    second = make_credential("two", Mechanism.SCRAM_SHA_256)
    store.apply(*encode("alice", first))
    store.apply(*encode("alice", make_credential("x", Mechanism.SCRAM_SHA_512)))
    store.apply(*encode("alice", second))  # a later record of the same key wins
    assert store.get("alice", Mechanism.SCRAM_SHA_256) == second
    assert [c.mechanism for c in store.users()["alice"]] == [Mechanism.SCRAM_SHA_256,
                                                            Mechanism.SCRAM_SHA_512]
    store.apply(record_key("alice", Mechanism.SCRAM_SHA_256), None)
    assert store.get("alice", Mechanism.SCRAM_SHA_256) is None
    store.apply(record_key("alice", Mechanism.SCRAM_SHA_512), None)
    assert store.users() == {}


def test_plain_passwords_are_checked_against_sha512_first():
    store = CredentialStore()
    store.put("alice", Mechanism.SCRAM_SHA_256, make_credential("old", Mechanism.SCRAM_SHA_256))
    assert store.check_password("alice", "old")
    store.put("alice", Mechanism.SCRAM_SHA_512, make_credential("new", Mechanism.SCRAM_SHA_512))
    assert store.check_password("alice", "new") and not store.check_password("alice", "old")
    assert not store.check_password("nobody", "new")


def test_plain_messages():
    assert plain.parse(b"\0alice\0pw") == ("alice", "pw")
    assert plain.parse(b"alice\0alice\0pw") == ("alice", "pw")
    for bad in (b"alice\0pw", b"\0\0pw", b"\0alice\0", b"bob\0alice\0pw", b"\xff\0a\0b"):
        with pytest.raises(AuthenticationError):
            plain.parse(bad)
