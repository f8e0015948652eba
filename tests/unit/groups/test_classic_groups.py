"""Kafka's classic group protocol over the coordinator (raylog/groups/classic.py), without
Ray: rounds, generations, member ids, sessions and rebalance timeouts on a fake clock."""

from __future__ import annotations

from collections import Counter

import pytest

from raylog.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    NotPartitionOwnerError,
    RebalanceInProgressError,
    UnknownMemberError,
)
from raylog.groups.classic import ClassicGroups, JoinAnswer, Protocol
from raylog.groups.coordinator import GroupCoordinator, OffsetAndMetadata
from raylog.types import TopicPartition

TOPICS = {"t": 4}
SESSION_MS = 10_000
REBALANCE_MS = 30_000
RANGE = (Protocol("range", ("t",), b"sub"),)
COOPERATIVE = "cooperative-sticky"


def cooperative(*owned: TopicPartition) -> tuple[Protocol, ...]:
    return (Protocol(COOPERATIVE, ("t",), b"sub", owned),)


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Kafka:
    """A coordinator, its classic protocol and a clock; ``durable`` has the store's role
    (a group record written at once unless told otherwise)."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.coordinator = GroupCoordinator(self.clock)
        self.classic = ClassicGroups(self.coordinator)
        self.durable = True

    def join(self, member_id: str = "", protocols=RANGE, client_id: str = "c",
             require: bool = False, session_ms: int = SESSION_MS) -> dict[str, JoinAnswer]:
        joined, answers = self.classic.join("g", member_id, client_id, "/127.0.0.1", "consumer",
                                    protocols, session_ms, REBALANCE_MS, TOPICS, require)
        assert joined == member_id or not member_id
        self.persist()
        return answers

    def persist(self) -> None:
        group = self.coordinator.groups.get("g")
        if self.durable and group is not None:
            self.coordinator.membership_durable("g", group.generation)

    def new_member(self, client_id: str = "c", protocols=RANGE) -> str:
        with pytest.raises(MemberIdRequiredError) as e:
            self.join(client_id=client_id, require=True, protocols=protocols)
        return e.value.member_id

    def sync(self, member_id: str, generation: int) -> list[TopicPartition]:
        owned, complete = self.classic.sync("g", member_id, generation)
        assert complete
        return owned

    def static_join(self, instance: str, member_id: str = "", protocols=RANGE,
                    client_id: str = "c") -> tuple[str, dict[str, JoinAnswer]]:
        """A JoinGroup v5+ with ``group.instance.id`` ``instance`` (member id as given)."""
        joined, answers = self.classic.join("g", member_id, client_id, "/127.0.0.1", "consumer",
                                            protocols, SESSION_MS, REBALANCE_MS, TOPICS, True,
                                            instance)
        self.persist()
        return joined, answers

    def restarted(self) -> Kafka:
        """Another coordinator, at the same time, that replayed this one's group record."""
        restarted = Kafka()
        restarted.clock.now = self.clock.now
        restarted.coordinator.load(*self.coordinator.group_record("g"))
        restarted.coordinator.finish_load()
        return restarted

    def owners(self) -> Counter:
        group = self.coordinator.groups["g"]
        return Counter(tp for m in group.members.values() for tp in m.owned)


def all_partitions() -> set[TopicPartition]:
    return {TopicPartition("t", p) for p in range(TOPICS["t"])}


def stable_pair(k: Kafka) -> tuple[str, str, int]:
    """Two members that joined one round and synced: (a, b, generation)."""
    a = k.new_member("a")
    first = k.join(a)
    assert set(first) == {a}  # alone: its round ends at once
    b = k.new_member("b")
    assert k.join(b) == {}  # parked until a joins again
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", a, first[a].generation)
    answers = k.join(a)
    assert set(answers) == {a, b}
    generation = answers[a].generation
    assert answers[b].generation == generation and generation > first[a].generation
    return a, b, generation


def test_two_members_split_the_partitions_one_owner_each():
    k = Kafka()
    a, b, generation = stable_pair(k)
    answers = {a: k.sync(a, generation), b: k.sync(b, generation)}
    assert set(answers[a]) | set(answers[b]) == all_partitions()
    assert not set(answers[a]) & set(answers[b])
    assert len(answers[a]) == len(answers[b]) == 2
    assert all(n == 1 for n in k.owners().values())
    k.classic.heartbeat("g", a, generation)
    assert k.classic.state("g") == "Stable"


def test_no_member_is_the_leader_and_the_protocol_is_the_one_offered():
    k = Kafka()
    a = k.new_member()
    (answer,) = k.join(a, protocols=(Protocol("roundrobin", ("t",)),
                                     Protocol("range", ("t",)))).values()
    assert answer.leader == "" and answer.leader != a
    assert answer.protocol == "roundrobin"
    assert k.coordinator.groups["g"].assignor == "round_robin"


def test_the_round_takes_the_protocol_most_members_prefer():
    k = Kafka()
    rr_first = (Protocol("roundrobin", ("t",)), Protocol("range", ("t",)))
    a = k.new_member()
    k.join(a, protocols=RANGE)
    b, c = k.new_member(), k.new_member()
    k.join(b, protocols=rr_first)
    k.join(c, protocols=rr_first)
    answers = k.join(a, protocols=RANGE)
    # a offers only range: range is the one protocol all offer, whatever b and c prefer
    assert {x.protocol for x in answers.values()} == {"range"}


def test_a_member_offering_no_served_protocol_is_refused_clearly():
    k = Kafka()
    with pytest.raises(InconsistentGroupProtocolError, match="cooperative-sticky"):
        k.join(protocols=(Protocol("sticky", ("t",)), Protocol("my-own", ("t",))))
    with pytest.raises(InconsistentGroupProtocolError, match="protocol type"):
        k.classic.join("g", "", "c", "h", "connect", RANGE, SESSION_MS, REBALANCE_MS, TOPICS,
                       False)
    assert "g" not in k.coordinator.groups  # nothing joined


def test_a_member_sharing_no_protocol_with_the_group_is_refused():
    k = Kafka()
    k.join(k.new_member())
    with pytest.raises(InconsistentGroupProtocolError):
        k.join(k.new_member(), protocols=(Protocol("roundrobin", ("t",)),))


def test_member_id_required_then_the_issued_id_joins_and_others_are_unknown():
    k = Kafka()
    member_id = k.new_member("client-1")
    assert member_id.startswith("client-1-")
    assert set(k.join(member_id)) == {member_id}
    with pytest.raises(UnknownMemberError):
        k.join("someone-else")
    # an issued id not used within a session is forgotten
    late = k.new_member()
    k.clock.now += SESSION_MS + 1
    k.classic.expire(TOPICS)
    with pytest.raises(UnknownMemberError):
        k.join(late)


def test_a_client_before_join_group_v4_joins_without_the_extra_round_trip():
    k = Kafka()
    (answer,) = k.join("", require=False).values()
    assert answer.member_id.startswith("c-") and answer.generation >= 1


def test_a_join_releases_everything_the_member_owned():
    k = Kafka()
    a, b, generation = stable_pair(k)
    k.sync(a, generation)
    k.sync(b, generation)
    k.join(a)  # eager: a revoked everything before joining again
    assert not k.coordinator.groups["g"].members[a].owned
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", b, generation)


def test_an_old_generation_commits_until_its_member_rejoins_and_is_fenced_after():
    k = Kafka()
    a, b, generation = stable_pair(k)
    owned_b = k.sync(b, generation)
    k.sync(a, generation)
    c = k.new_member("c")
    k.join(c)  # a rebalance starts: b has not rejoined yet
    offsets = {owned_b[0]: OffsetAndMetadata(5)}
    k.coordinator.check_commit("g", b, generation, offsets)  # its revoke-time commit is fine
    k.join(b)
    with pytest.raises(NotPartitionOwnerError):  # it gave the partitions up by joining
        k.coordinator.check_commit("g", b, generation, offsets)
    answers = k.join(a)
    new = answers[a].generation
    assert set(answers) == {a, b, c} and new > generation
    with pytest.raises(IllegalGenerationError):
        k.classic.heartbeat("g", b, generation)
    with pytest.raises(IllegalGenerationError):
        k.coordinator.check_commit("g", b, generation, offsets)
    owned = {m: k.sync(m, new) for m in (a, b, c)}
    assert sorted(tp for tps in owned.values() for tp in tps) == sorted(all_partitions())


def test_sync_in_the_wrong_generation_or_during_a_rebalance_is_refused():
    k = Kafka()
    a, _b, generation = stable_pair(k)
    with pytest.raises(IllegalGenerationError):
        k.classic.sync("g", a, generation - 1)
    k.join(k.new_member())
    with pytest.raises(RebalanceInProgressError):
        k.classic.sync("g", a, generation)
    with pytest.raises(UnknownMemberError):
        k.classic.sync("g", "nobody", generation)
    with pytest.raises(UnknownMemberError):
        k.classic.heartbeat("other-group", a, generation)


def test_nothing_is_granted_before_the_group_record_is_durable():
    k = Kafka()
    k.durable = False
    a = k.new_member()
    (answer,) = k.join(a).values()
    assert k.classic.sync("g", a, answer.generation) == ([], False)
    k.coordinator.membership_durable("g", k.coordinator.groups["g"].generation)
    assert k.classic.sync("g", a, answer.generation) == (sorted(all_partitions()), True)


def test_a_held_partition_is_granted_once_its_commit_is_in():
    k = Kafka()
    a = k.new_member()
    (answer,) = k.join(a).values()
    seen = []
    k.coordinator.grants_may_change.append(seen.append)
    held = TopicPartition("t", 1)
    k.coordinator.hold("g", [held])
    owned, complete = k.classic.sync("g", a, answer.generation)
    assert held not in owned and not complete
    k.coordinator.unhold("g", [held])
    assert seen == ["g"]
    assert k.sync(a, answer.generation) == sorted(all_partitions())


def test_partial_starts_another_round():
    k = Kafka()
    a, _b, generation = stable_pair(k)
    k.classic.partial("g", TOPICS)
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", a, generation)


def test_a_member_that_stops_heartbeating_expires_and_the_other_takes_all():
    k = Kafka()
    a, b, generation = stable_pair(k)
    k.sync(a, generation)
    k.sync(b, generation)
    for _ in range(3):
        k.clock.now += SESSION_MS // 2
        k.classic.heartbeat("g", a, generation)
        removed, _ = k.classic.expire(TOPICS)
        assert removed == [] or removed == [("g", b)]
    assert b not in k.coordinator.groups["g"].members
    assert not k.owners().get(TopicPartition("t", 0), 0) > 1
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", a, generation)
    with pytest.raises(UnknownMemberError):
        k.classic.heartbeat("g", b, generation)
    (answer,) = k.join(a).values()
    k.persist()
    assert k.sync(a, answer.generation) == sorted(all_partitions())


def test_a_parked_member_does_not_expire_but_one_that_never_rejoins_is_removed():
    k = Kafka()
    a, b, generation = stable_pair(k)
    c = k.new_member("c")
    k.join(c)  # a round starts; c is parked
    k.join(a)  # a is parked too; b heartbeats but never rejoins
    start = k.clock.now
    while k.clock.now - start <= REBALANCE_MS:
        k.clock.now += 1_000
        with pytest.raises(RebalanceInProgressError):
            k.classic.heartbeat("g", b, generation)
        removed, answers = k.classic.expire(TOPICS)
        if answers:
            break
    assert removed == [("g", b)]  # parked a and c outlived their sessions, b did not join
    assert set(answers["g"]) == set(k.coordinator.groups["g"].members) == {a, c}


def test_leave_one_or_several_and_an_unknown_one():
    k = Kafka()
    a, b, generation = stable_pair(k)
    k.sync(a, generation)
    outcomes, answers = k.classic.leave("g", [(b, None), ("nobody", None)], TOPICS)
    assert outcomes[0] is None and isinstance(outcomes[1], UnknownMemberError)
    assert answers == {}
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", a, generation)


def test_a_leave_can_end_a_round():
    k = Kafka()
    a, b, _generation = stable_pair(k)
    c = k.new_member()
    k.join(c)
    k.join(a)
    _, answers = k.classic.leave("g", [(b, None)], TOPICS)  # the one everyone waited for
    assert set(answers) == {a, c}


def test_kafka_and_native_members_never_share_a_group():
    k = Kafka()
    k.coordinator.join("g", "native-1", "c", ["t"], None, SESSION_MS, "range", TOPICS)
    with pytest.raises(InconsistentGroupProtocolError, match="raylog consumers"):
        k.join()
    with pytest.raises(InconsistentGroupProtocolError):
        k.join(require=True)  # refused before an id is issued
    other = Kafka()
    other.join(other.new_member())
    with pytest.raises(InconsistentGroupProtocolError, match="Kafka clients"):
        other.coordinator.join("g", "native-1", "c", ["t"], None, SESSION_MS, "range",
                               TOPICS)


def test_after_a_restart_kafka_members_come_back_pending_and_rejoin():
    k = Kafka()
    a, b, generation = stable_pair(k)
    k.sync(a, generation)
    k.sync(b, generation)
    restarted = k.restarted()
    group = restarted.coordinator.groups["g"]
    assert {p.kafka for p in group.pending.values()} == {True}
    with pytest.raises(InconsistentGroupProtocolError):  # still a Kafka group
        restarted.coordinator.join("g", "native", "c", ["t"], None, SESSION_MS, "range",
                                   TOPICS)
    with pytest.raises(RebalanceInProgressError):
        restarted.classic.heartbeat("g", a, generation)
    assert restarted.join(a) == {}  # b has not rejoined: nothing is granted meanwhile
    answers = restarted.join(b)
    assert set(answers) == {a, b}
    new = answers[a].generation
    owned = restarted.sync(a, new) + restarted.sync(b, new)
    assert sorted(owned) == sorted(all_partitions())


def test_describe_in_kafka_terms():
    k = Kafka()
    assert k.classic.state("g") == "Dead"
    a, b, generation = stable_pair(k)
    assert k.classic.state("g") == "CompletingRebalance"
    k.sync(a, generation)
    k.sync(b, generation)
    out = k.classic.describe("g")
    assert out["state"] == "Stable" and out["protocol"] == "range"
    assert out["protocol_type"] == "consumer"
    assert {m["member_id"] for m in out["members"]} == {a, b}
    assert all(m["metadata"] == b"sub" and m["client_host"] == "/127.0.0.1"
               for m in out["members"])
    k.classic.leave("g", [(a, None), (b, None)], TOPICS)
    assert k.classic.state("g") == "Empty"


def test_new_partitions_start_a_round_that_assigns_them():
    k = Kafka()
    a, b, generation = stable_pair(k)
    k.sync(a, generation)
    k.sync(b, generation)
    grown = {"t": 6}
    k.coordinator.topics_changed(grown)
    _, answers = k.classic.expire(grown)
    assert answers == {}
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", a, generation)
    for member_id in (a, b):
        k.classic.join("g", member_id, "c", "h", "consumer", RANGE, SESSION_MS, REBALANCE_MS,
                       grown, True)
    k.persist()
    new = k.coordinator.groups["g"].members[a].generation
    owned = k.sync(a, new) + k.sync(b, new)
    assert sorted(owned) == sorted(TopicPartition("t", p) for p in range(6))


def test_a_subscription_to_a_topic_that_does_not_exist_yet_is_assigned_once_it_does():
    k = Kafka()
    a = k.new_member()
    (answer,) = k.join(a, protocols=(Protocol("range", ("t", "later")),)).values()
    assert k.sync(a, answer.generation) == sorted(all_partitions())
    k.coordinator.topics_changed({**TOPICS, "later": 1})
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", a, answer.generation)


def test_cooperative_members_keep_their_partitions_and_hand_over_in_two_rounds():
    k = Kafka()
    a = k.new_member("a", cooperative())
    (first,) = k.join(a, protocols=cooperative()).values()
    mine = k.sync(a, first.generation)
    assert mine == sorted(all_partitions())
    b = k.new_member("b", cooperative())
    assert k.join(b, protocols=cooperative()) == {}
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", a, first.generation)
    answers = k.join(a, protocols=cooperative(*mine))  # a keeps reading what it names
    assert {x.protocol for x in answers.values()} == {COOPERATIVE}
    second = answers[a].generation
    assert len(k.coordinator.groups["g"].members[a].owned) == 4  # nothing released
    kept = k.sync(a, second)  # a's assignment: what it keeps; it gives the rest up
    assert len(kept) == 2 and set(kept) < set(mine)
    assert k.sync(b, second) == []  # b's partitions are a's until a gives them up
    assert all(n == 1 for n in k.owners().values())
    given_up = sorted(set(mine) - set(kept))
    # a commits what it gives up, in the new generation, before it lets go
    k.coordinator.check_commit("g", a, second, {given_up[0]: OffsetAndMetadata(3)})
    k.join(a, protocols=cooperative(*kept))  # gave them up: joins again naming the rest
    assert set(k.coordinator.groups["g"].members[a].owned) == set(kept)
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", b, second)
    third = k.join(b, protocols=cooperative())[b].generation
    assert k.sync(a, third) == kept  # sticky: a keeps its half
    assert k.sync(b, third) == given_up
    assert all(n == 1 for n in k.owners().values())


def test_a_cooperative_member_never_gains_what_it_only_names():
    k = Kafka()
    a = k.new_member("a", cooperative())
    (first,) = k.join(a, protocols=cooperative()).values()
    k.sync(a, first.generation)
    b = k.new_member("b", cooperative())
    k.join(b, protocols=cooperative(TopicPartition("t", 0)))  # claims what is a's
    assert not k.coordinator.groups["g"].members[b].owned


def test_an_eager_member_in_a_cooperative_round_gives_everything_up():
    k = Kafka()
    both = (Protocol("range", ("t",)), Protocol(COOPERATIVE, ("t",)))  # Java's default
    a = k.new_member("a")
    (first,) = k.join(a, protocols=both).values()
    assert first.protocol == "range"
    k.sync(a, first.generation)
    b = k.new_member("b", cooperative())
    k.join(b, protocols=cooperative())
    answers = k.join(a, protocols=both)  # a's client is eager (range has no cooperative form)
    assert {x.protocol for x in answers.values()} == {COOPERATIVE}
    assert not k.coordinator.groups["g"].members[a].owned
    generation = answers[a].generation
    owned = k.sync(a, generation) + k.sync(b, generation)
    assert sorted(owned) == sorted(all_partitions())


def test_what_a_joining_member_names_is_never_released_whatever_it_offers():
    k = Kafka()
    a = k.new_member()
    (first,) = k.join(a).values()
    k.sync(a, first.generation)
    still = TopicPartition("t", 2)
    k.join(a, protocols=(Protocol("range", ("t",), b"", (still,)),))  # it says it reads t-2
    assert k.coordinator.groups["g"].members[a].owned == {still}


# -- static membership (group.instance.id, KIP-345) -----------------------------------------------

def static_pair(k: Kafka) -> tuple[str, str, int]:
    """Static members of instances "ia" and "ib" that joined one round and synced: (a, b,
    generation). A static member's first join needs no MEMBER_ID_REQUIRED round trip."""
    a, first = k.static_join("ia")
    assert set(first) == {a}
    b, parked = k.static_join("ib")
    assert parked == {}
    _, answers = k.static_join("ia", a)
    generation = answers[a].generation
    assert set(answers) == {a, b} and answers[b].generation == generation
    k.sync(a, generation)
    k.sync(b, generation)
    return a, b, generation


def test_a_static_members_new_incarnation_takes_its_partitions_back_without_a_rebalance():
    k = Kafka()
    a, b, generation = static_pair(k)
    owned = {a: k.sync(a, generation), b: k.sync(b, generation)}
    # a's process restarts: it joins with no member id, as an eager client naming nothing
    a2, answers = k.static_join("ia")
    assert a2 != a and set(answers) == {a2}  # answered at once, in the same generation
    assert answers[a2].generation == generation
    assert k.sync(a2, generation) == owned[a]
    k.classic.heartbeat("g", b, generation)  # b is not told to rebalance
    assert k.sync(b, generation) == owned[b]
    assert k.classic.state("g") == "Stable"
    assert k.coordinator.groups["g"].owner[owned[a][0]] == a2
    assert all(n == 1 for n in k.owners().values())


def test_the_replaced_member_id_is_fenced_everywhere():
    k = Kafka()
    a, b, generation = static_pair(k)
    owned_a = k.sync(a, generation)
    ticket = k.coordinator.check_commit("g", a, generation, {owned_a[0]: OffsetAndMetadata(1)})
    a2, _ = k.static_join("ia")
    # a commit of the old incarnation on its way when it was replaced is not applied
    assert isinstance(k.coordinator.fenced(ticket), UnknownMemberError)
    with pytest.raises(FencedInstanceIdError):
        k.classic.heartbeat("g", a, generation)
    with pytest.raises(FencedInstanceIdError):
        k.classic.sync("g", a, generation)
    with pytest.raises(FencedInstanceIdError):
        k.coordinator.check_commit("g", a, generation, {owned_a[0]: OffsetAndMetadata(2)})
    with pytest.raises(FencedInstanceIdError):
        k.static_join("ia", a)  # the old incarnation joins again with its id
    outcomes, _ = k.classic.leave("g", [(a, "ia"), (a, None)], TOPICS)
    assert [type(e) for e in outcomes] == [FencedInstanceIdError, FencedInstanceIdError]
    assert set(k.coordinator.groups["g"].members) == {a2, b}
    k.coordinator.check_commit("g", a2, generation, {owned_a[0]: OffsetAndMetadata(3)})


def test_a_static_member_rejoining_with_another_subscription_rebalances():
    k = Kafka()
    _a, b, generation = static_pair(k)
    a2, answers = k.static_join("ia", protocols=(Protocol("range", ("t", "u"), b"sub"),))
    assert answers == {}  # parked: a round, which b joins too
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", b, generation)
    _, answers = k.static_join("ib", b)
    assert set(answers) == {a2, b} and answers[b].generation > generation


def test_a_static_member_rejoining_during_a_round_joins_the_round():
    k = Kafka()
    _a, b, _generation = static_pair(k)
    c = k.new_member("c")
    k.join(c)  # a round starts
    a2, answers = k.static_join("ia")
    assert answers == {}
    _, answers = k.static_join("ib", b)
    assert set(answers) == {a2, b, c}
    new = answers[a2].generation
    owned = k.sync(a2, new) + k.sync(b, new) + k.sync(c, new)
    assert sorted(owned) == sorted(all_partitions())


def test_a_static_member_that_does_not_come_back_expires_and_the_group_rebalances():
    k = Kafka()
    a, b, generation = static_pair(k)
    for _ in range(3):  # a closed without a LeaveGroup (static members do not leave)
        k.clock.now += SESSION_MS // 2
        k.classic.heartbeat("g", b, generation)
        k.classic.expire(TOPICS)
    group = k.coordinator.groups["g"]
    assert set(group.members) == {b} and group.instance("ia") is None
    with pytest.raises(RebalanceInProgressError):
        k.classic.heartbeat("g", b, generation)
    with pytest.raises(UnknownMemberError):
        k.classic.heartbeat("g", a, generation)
    a2, answers = k.static_join("ia")  # back later: a new member, in a round
    assert answers == {} and a2 in group.members


def test_leave_group_names_static_members_by_instance_id():
    k = Kafka()
    _a, b, _generation = static_pair(k)
    outcomes, _ = k.classic.leave("g", [("", "ia"), ("", "nobody"), ("wrong", "ib")], TOPICS)
    assert outcomes[0] is None
    assert type(outcomes[1]) is UnknownMemberError
    assert type(outcomes[2]) is FencedInstanceIdError
    assert set(k.coordinator.groups["g"].members) == {b}
    outcomes, _ = k.classic.leave("g", [(b, "ib")], TOPICS)
    assert outcomes == [None] and not k.coordinator.groups["g"].members


def test_static_members_survive_a_coordinator_restart_in_the_group_record():
    k = Kafka()
    a, b, generation = static_pair(k)
    restarted = k.restarted()
    group = restarted.coordinator.groups["g"]
    assert {p.member_id: p.instance_id for p in group.pending.values()} == {a: "ia", b: "ib"}
    # a's new incarnation takes the pending member's place; b rejoins with its id
    a2, answers = restarted.static_join("ia")
    assert answers == {} and group.instance("ia") == a2
    with pytest.raises(FencedInstanceIdError):
        restarted.classic.heartbeat("g", a, generation)
    _, answers = restarted.static_join("ib", b)
    assert set(answers) == {a2, b}
    assert group.members[a2].instance_id == "ia"
    # and the record written now names the new id
    again = restarted.restarted().coordinator.groups["g"]
    assert {p.member_id: p.instance_id for p in again.pending.values()} == {a2: "ia", b: "ib"}


def test_a_group_record_without_instance_ids_reads_as_dynamic_members():
    k = Kafka()
    k.coordinator.load(b'["group", "g"]', b'{"generation": 3, "assignor": "range", "members": '
                       b'{"m": {"client_id": "c", "session_timeout_ms": 10000, "kafka": true}}}')
    k.coordinator.finish_load()
    assert k.coordinator.groups["g"].pending["m"].instance_id is None
    assert "instance_id" not in k.coordinator.groups["g"].membership()["m"]


def test_describe_shows_instance_ids():
    k = Kafka()
    a, b, _ = static_pair(k)
    members = {m["member_id"]: m for m in k.classic.describe("g")["members"]}
    assert members[a]["instance_id"] == "ia" and members[b]["instance_id"] == "ib"
    assert k.coordinator.describe("g")["members"][0]["instance_id"] in {"ia", "ib"}


def test_a_restarted_coordinator_fences_an_old_id_by_the_instance_id_its_requests_name():
    k = Kafka()
    a, _b, generation = static_pair(k)
    a2, _ = k.static_join("ia")
    restarted = k.restarted()  # it never saw a replaced: only the record naming a2
    with pytest.raises(FencedInstanceIdError):
        restarted.classic.heartbeat("g", a, generation, "ia")
    with pytest.raises(FencedInstanceIdError):
        restarted.classic.sync("g", a, generation, "ia")
    with pytest.raises(FencedInstanceIdError):
        restarted.static_join("ia", a)
    with pytest.raises(FencedInstanceIdError):
        restarted.coordinator.check_commit("g", a, generation, {}, "ia")
    with pytest.raises(UnknownMemberError) as e:
        restarted.classic.heartbeat("g", a, generation)  # (no instance id: just unknown)
    assert type(e.value) is UnknownMemberError
    with pytest.raises(RebalanceInProgressError):  # a2 itself is told to rejoin
        restarted.classic.heartbeat("g", a2, generation, "ia")


def test_once_a_static_member_is_gone_its_replaced_ids_are_unknown_not_fenced():
    k = Kafka()
    a, b, generation = static_pair(k)
    a2, _ = k.static_join("ia")
    with pytest.raises(FencedInstanceIdError):
        k.classic.heartbeat("g", a, generation)
    for _ in range(3):  # a2 is never heard from again: its session runs out
        k.clock.now += SESSION_MS // 2
        k.classic.heartbeat("g", b, generation)
        k.classic.expire(TOPICS)
    assert set(k.coordinator.groups["g"].members) == {b}
    for member_id in (a, a2):
        with pytest.raises(UnknownMemberError) as e:
            k.classic.heartbeat("g", member_id, generation)
        assert type(e.value) is UnknownMemberError
