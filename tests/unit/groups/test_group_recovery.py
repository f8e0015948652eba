"""Consumer groups across coordinator restarts: ownership is rebuilt from the members' claims,
and nothing is granted while a member the coordinator knew has not spoken (issue 10, item 3).

The coordinator restarts by replaying the group records a host persisted after every change
of generation, as the controller does with ``__consumer_offsets``.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from raylog.errors import RejoinRequiredError, UnknownMemberError
from raylog.groups.coordinator import GroupCoordinator, OffsetAndMetadata
from raylog.groups.group import GroupState
from raylog.types import TopicPartition

SESSION_MS = 1_000
TOPICS = {"t": 6}
ALL = {TopicPartition("t", p) for p in range(6)}


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Host:
    """A coordinator with its persisted records, restartable; what the controller does."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.records: list[tuple[bytes, bytes | None]] = []
        self.coordinator = GroupCoordinator(self.clock)

    def persist(self) -> None:
        c = self.coordinator
        group = c.groups.get("g")
        if group is not None and c.generations.get("g") != group.generation:
            self.records.append(c.group_record("g"))
            c.generations["g"] = group.generation

    def restart(self) -> None:
        self.coordinator = GroupCoordinator(self.clock)
        for key, value in self.records:
            self.coordinator.load(key, value)
        self.coordinator.finish_load()

    def join(self, member_id: str, claims=()) -> set[TopicPartition]:
        member = self.coordinator.join("g", member_id, "client", ["t"], None, SESSION_MS,
                                       "range", TOPICS, None, list(claims))
        self.persist()
        return set(member.owned)

    def beat(self, member_id: str, owned=()):
        return self.coordinator.heartbeat("g", member_id, sorted(owned))

    def expire(self) -> None:
        self.coordinator.expire(TOPICS)
        self.persist()


def settle(host: Host, members: list[str], rounds: int = 3) -> dict[str, set[TopicPartition]]:
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for _ in range(rounds):
        for m in members:
            answer = host.beat(m, owned[m])
            owned[m] = set(answer.owned - answer.revoke)
    return owned


@pytest.fixture
def host() -> Host:
    host = Host()
    host.join("a")
    host.join("b")
    owned = settle(host, ["a", "b"])
    assert owned["a"] | owned["b"] == ALL and not owned["a"] & owned["b"]
    return host


def test_known_members_are_told_to_rejoin_and_unknown_ones_that_they_are_gone(host):
    host.restart()
    group = host.coordinator.group("g")
    assert group.state is GroupState.RECOVERING and set(group.pending) == {"a", "b"}
    with pytest.raises(RejoinRequiredError):
        host.beat("a")
    with pytest.raises(RejoinRequiredError):
        host.coordinator.check_commit("g", "a", 5, {TopicPartition("t", 0): OffsetAndMetadata(0)})
    with pytest.raises(UnknownMemberError):
        host.beat("stranger")


def test_the_first_member_back_keeps_its_own_and_is_not_given_the_others(host):
    """The defect: after a restart the first member to rejoin was given every partition
    while the other still held (and processed) its own."""
    a_owns = set(host.coordinator.group("g").members["a"].owned)
    host.restart()
    assert host.join("a", claims=a_owns) == a_owns
    for _ in range(3):
        answer = host.beat("a", a_owns)
        assert set(answer.owned) == a_owns and answer.pending
    b_owns = ALL - a_owns
    assert host.join("b", claims=b_owns) == b_owns
    assert host.coordinator.group("g").state is GroupState.STABLE


def test_a_member_that_never_comes_back_is_waited_for_one_session(host):
    a_owns = set(host.coordinator.group("g").members["a"].owned)
    host.clock.now += 200  # the restart happens a while after the members' last heartbeat
    host.restart()
    host.join("a", claims=a_owns)
    host.clock.now += SESSION_MS
    host.expire()
    assert set(host.beat("a", a_owns).owned) == a_owns  # b's session is not over yet
    host.clock.now += 1
    host.expire()
    assert not host.coordinator.group("g").pending
    owned = settle(host, ["a"])
    assert owned["a"] == ALL


def test_a_second_restart_does_not_extend_a_silent_members_session(host):
    host.restart()
    host.clock.now += 600
    host.join("a", claims=())
    host.restart()  # b is still pending, and persisted as such with its end
    host.clock.now += SESSION_MS - 600 + 1
    host.expire()
    assert "b" not in host.coordinator.group("g").pending


def test_claims_are_refused_to_a_stranger_and_to_a_second_claimant(host):
    host.restart()
    assert host.join("stranger", claims=ALL) == set()
    assert host.join("a", claims={TopicPartition("t", 0)}) == {TopicPartition("t", 0)}
    assert host.join("b", claims=ALL) == ALL - {TopicPartition("t", 0)}


def test_a_recovering_group_is_not_empty(host):
    host.restart()
    with pytest.raises(Exception, match="active members"):
        host.coordinator.check_empty("g")


class Client:
    """A consumer as membership.py makes it: it reads what it holds, claims what it holds
    or was granted, and loses everything when its session has run out unheard."""

    def __init__(self, now: int) -> None:
        self.reading: set[TopicPartition] = set()
        self.granted: set[TopicPartition] = set()
        self.revoke: set[TopicPartition] = set()
        self.last_success = now

    def claims(self) -> set[TopicPartition]:
        return self.reading | (self.granted - self.revoke)


class RestartMachine(RuleBasedStateMachine):
    """Members join, heartbeat, take grants, release, leave and go silent; the coordinator
    restarts at any point and the clock runs. At no time do two members read the same
    partition."""

    @initialize()
    def start(self):
        self.host = Host()
        self.clients: dict[str, Client] = {}

    def _rejoin(self, member_id: str, claims: set[TopicPartition]) -> None:
        client = self.clients[member_id]
        kept = self.host.join(member_id, claims)
        client.reading &= kept  # lost: stop reading at once
        client.granted, client.revoke = kept, set()
        client.last_success = self.host.clock.now

    @rule(member_id=st.sampled_from(["a", "b", "c"]))
    def join(self, member_id):
        if member_id not in self.clients:
            self.clients[member_id] = Client(self.host.clock.now)
            self._rejoin(member_id, set())

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), release=st.booleans())
    def heartbeat(self, data, release):
        self._beat(data.draw(st.sampled_from(sorted(self.clients))), release)

    @precondition(lambda self: self.clients)
    @rule(take=st.booleans())
    def everyone_beats(self, take):
        """A round of every member: release, heartbeat and (maybe) take what was granted."""
        for member_id in sorted(self.clients):
            self._beat(member_id, release=True)
            self.no_partition_is_read_by_two_members()
            if take:
                client = self.clients[member_id]
                client.reading |= client.granted - client.revoke
                self.no_partition_is_read_by_two_members()

    def _beat(self, member_id: str, release: bool) -> None:
        client = self.clients[member_id]
        if release:
            client.reading -= client.revoke
        try:
            answer = self.host.beat(member_id, client.claims())
        except RejoinRequiredError:
            self._rejoin(member_id, client.claims())
            return
        except UnknownMemberError:
            client.reading.clear()
            self._rejoin(member_id, set())
            return
        client.granted, client.revoke = set(answer.owned), set(answer.revoke)
        client.last_success = self.host.clock.now

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def take_grants(self, data):
        client = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        client.reading |= client.granted - client.revoke

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data):
        member_id = data.draw(st.sampled_from(sorted(self.clients)))
        del self.clients[member_id]
        self.host.coordinator.leave("g", member_id, TOPICS)
        self.host.persist()

    @rule()
    def restart(self):
        self.host.restart()

    @rule(ms=st.integers(0, 700))
    def tick(self, ms):
        self.host.clock.now += ms
        for member_id, client in list(self.clients.items()):
            if self.host.clock.now - client.last_success > SESSION_MS:
                client.reading.clear()  # the consumer's own session check, in its poll
                client.granted, client.revoke = set(), set()
                self.host.coordinator.leave("g", member_id, TOPICS)
                self.host.persist()
                del self.clients[member_id]
        self.host.expire()

    @invariant()
    def no_partition_is_read_by_two_members(self):
        held = Counter(tp for c in self.clients.values() for tp in c.reading)
        assert not [tp for tp, n in held.items() if n > 1], {
            m: sorted(c.reading) for m, c in self.clients.items()}


RestartMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_random_restarts_never_give_a_partition_two_readers = RestartMachine.TestCase
