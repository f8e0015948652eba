"""``raylog users add|list|delete`` over an in-memory topic: what is stored (never the
password), what is printed, and the input refused before anything connects."""

from __future__ import annotations

import io
import json

import pytest

from raylog.cli import users as users_cli
from raylog.cli.commands import main
from raylog.kafka.auth.credentials import CredentialStore, encode, record_key
from raylog.kafka.auth.scram import Mechanism
from raylog.kafka.gateway import users as users_module


class FakeTopic:
    """UsersTopic's interface over a list of records (the topic's log)."""

    log: list[tuple[bytes, bytes | None]] = []

    def __init__(self, cluster) -> None:
        pass

    def put(self, user, credentials) -> None:
        self.log.extend(encode(user, c) for c in credentials)

    def delete(self, user, mechanisms) -> None:
        self.log.extend((record_key(user, m), None) for m in mechanisms)

    def load(self, store=None) -> CredentialStore:
        store = store or CredentialStore()
        for key, value in self.log:
            store.apply(key, value)
        return store


@pytest.fixture
def topic(monkeypatch):
    FakeTopic.log = []
    monkeypatch.setattr(users_module, "UsersTopic", FakeTopic)
    monkeypatch.setattr(users_cli, "connect", lambda args: None)
    return FakeTopic


def run(argv: list[str], stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    return main(["users", *argv], out=out, stdin=io.StringIO(stdin)), out.getvalue()


def test_add_stores_salted_credentials_of_both_mechanisms(topic):
    assert run(["add", "alice", "--password-stdin"], "wonderland\n") == \
        (0, "user alice: SCRAM-SHA-256, SCRAM-SHA-512 set\n")
    assert all(b"wonderland" not in (value or b"") for _, value in topic.log)
    store = topic(None).load()
    assert store.check_password("alice", "wonderland")
    assert [c.mechanism for c in store.users()["alice"]] == list(Mechanism)


def test_list_and_delete(topic):
    run(["add", "alice", "--iterations", "8192"], "pw\n")  # stdin not a terminal: read
    run(["add", "bob", "--mechanism", "SCRAM-SHA-512"], "pw\n")
    status, out = run(["list", "--json"])
    assert status == 0
    assert json.loads(out) == [
        {"user": "alice", "mechanisms": [
            {"mechanism": "SCRAM-SHA-256", "iterations": 8192},
            {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]},
        {"user": "bob", "mechanisms": [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}]
    assert run(["delete", "alice", "--mechanism", "SCRAM-SHA-256"]) == \
        (0, "user alice: SCRAM-SHA-256 deleted\n")
    assert run(["delete", "bob"]) == (0, "user bob: SCRAM-SHA-512 deleted\n")
    assert run(["list"]) == (0, "alice\tSCRAM-SHA-512 (8192 iterations)\n")


def test_deleting_what_is_not_there_is_an_error(topic, capsys):
    assert run(["delete", "nobody"])[0] == 1
    assert "user 'nobody' has no credential" in capsys.readouterr().err


@pytest.mark.parametrize("argv, stdin, message", [
    (["add", "alice", "--iterations", "100"], "pw\n", "iterations must be an integer in"),
    (["add", "alice"], "\n", "an empty password is refused"),
])
def test_bad_input_is_refused_before_anything_connects(monkeypatch, capsys, argv, stdin,
                                                       message):
    monkeypatch.setattr(users_cli, "connect", lambda args: pytest.fail("connected"))
    assert run(argv, stdin)[0] == 1
    assert message in capsys.readouterr().err


def test_a_prompt_asks_twice(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    answers = iter(["one", "two"])
    monkeypatch.setattr(users_cli.getpass, "getpass", lambda prompt: next(answers))
    from raylog.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="do not match"):
        users_cli.read_password(False, Terminal())
    answers = iter(["same", "same"])
    assert users_cli.read_password(False, Terminal()) == "same"
