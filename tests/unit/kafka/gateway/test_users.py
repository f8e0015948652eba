"""The credential follower keeps following whatever a poll raises: one that stopped would
leave a deleted user able to log in."""

from __future__ import annotations

import threading
import time

from raylog.errors import LeaderNotAvailableError
from raylog.kafka.auth import acls
from raylog.kafka.auth.credentials import encode
from raylog.kafka.auth.scram import Mechanism, make_credential
from raylog.kafka.gateway.users import acl_follower, credential_follower
from tests.unit.fake_remote import wait_until


class FlakyReader:
    """Fails its first two polls (a bug, then a leader moving), then reads alice."""

    def __init__(self) -> None:
        self.polls = 0

    def apply(self, store, timeout_ms: int) -> None:
        self.polls += 1
        if self.polls == 1:
            raise RuntimeError("a bug")
        if self.polls == 2:
            raise LeaderNotAvailableError("moving")
        store.apply(*encode("alice", make_credential("pw", Mechanism.SCRAM_SHA_256)))
        time.sleep(timeout_ms / 1000)

    def close(self) -> None:
        pass


def test_the_follower_survives_failed_polls(caplog):
    follower = credential_follower(cluster=None, poll_ms=10)
    follower.retry_s = 0.01
    follower._reader = FlakyReader()
    follower._thread = threading.Thread(target=follower._follow, daemon=True)
    follower._thread.start()
    try:
        wait_until(lambda: follower.store.users())
        assert list(follower.store.users()) == ["alice"]
    finally:
        follower.close()
    assert "following __raylog_users failed; retrying" in caplog.text
    assert "moving; retrying" in caplog.text


class AclReader:
    """Fails its first poll, then reads one ACL."""

    def __init__(self, binding) -> None:
        self.binding, self.polls = binding, 0

    def apply(self, store, timeout_ms: int) -> None:
        self.polls += 1
        if self.polls == 1:
            raise LeaderNotAvailableError("moving")
        store.apply(*acls.encode(self.binding))
        time.sleep(timeout_ms / 1000)

    def close(self) -> None:
        pass


def test_the_acl_follower_applies_acls_to_its_authorizer(caplog):
    binding = acls.AclBinding("User:alice", "*", acls.ResourceType.TOPIC, "t",
                              acls.PatternType.LITERAL, acls.Operation.READ,
                              acls.Permission.ALLOW)
    authorizer = acls.Authorizer()
    follower = acl_follower(None, authorizer, poll_ms=10)
    assert follower.store is authorizer
    follower.retry_s = 0.01
    follower._reader = AclReader(binding)
    follower._thread = threading.Thread(target=follower._follow, daemon=True)
    follower._thread.start()
    try:
        wait_until(lambda: authorizer.has_acls())
        assert authorizer.bindings() == [binding]
    finally:
        follower.close()
    assert "following __raylog_acls: moving; retrying" in caplog.text


def test_no_authorizer_no_acl_follower():
    from raylog.kafka.gateway.security import ListenerSecurity
    from raylog.kafka.gateway.users import start_access

    assert start_access(None, ListenerSecurity()) == (None, None)  # nothing connects
