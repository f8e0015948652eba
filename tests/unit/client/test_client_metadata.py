"""What clients make of the controller's answers, without Ray: metadata and the replica a
consumer reads from (KIP-392), the typed controller calls' retry policy, and Admin changes
repeated across a controller restart."""

from __future__ import annotations

import pytest

from raylog.client import admin as admin_module
from raylog.client import remote
from raylog.client.admin import Admin
from raylog.client.connection import TopicMetadata
from raylog.client.remote import ControllerClient
from raylog.errors import (
    ActorUnavailableError,
    ControllerUnavailableError,
    LeaderNotAvailableError,
    NoClusterError,
    UnknownTopicError,
)


def raw(leader=1, isr=(1, 2, 3), replicas=(1, 2, 3), live=(1, 2, 3)) -> dict:
    """A controller's metadata answer for topic t with one partition."""
    return {"name": "t", "topic_id": "id", "configs": {},
            "partitions": [{"partition": 0, "leader": leader, "leader_epoch": 7,
                            "replicas": list(replicas), "isr": list(isr)}],
            "brokers": {b: {"handle": f"handle-{b}", "node_id": f"node-{b}"} for b in live}}


def test_every_live_replica_gets_a_client_carrying_the_leader_epoch():
    meta = TopicMetadata.from_controller(raw(live=(1, 3)))
    p = meta.partitions[0]
    assert sorted(p.clients) == [1, 3]  # broker 2 is not alive: no client
    assert all(c.leader_epoch == 7 and c.topic == "t" and c.partition == 0
               for c in p.clients.values())
    assert p.leader_client().broker_id == 1


def test_a_replica_another_process_of_its_broker_serves_is_called_there():
    answer = raw()
    answer["partitions"][0]["hosts"] = {1: "host-of-1"}  # broker 1 serves it from a host
    p = TopicMetadata.from_controller(answer).partitions[0]
    assert p.leader_client().handle == "host-of-1"
    assert p.leader_client().node_id == "node-1"
    assert p.clients[2].handle == "handle-2"  # its broker actor serves it itself


def test_the_nearest_replica_is_an_in_sync_one_on_this_node_else_the_leader():
    p = TopicMetadata.from_controller(raw()).partitions[0]
    assert p.nearest_client("node-2").broker_id == 2   # a follower here: read it
    assert p.nearest_client("node-1").broker_id == 1   # the leader here
    assert p.nearest_client("elsewhere").broker_id == 1
    assert p.nearest_client(None).broker_id == 1
    out_of_sync = TopicMetadata.from_controller(raw(isr=(1, 3))).partitions[0]
    assert out_of_sync.nearest_client("node-2").broker_id == 1  # not in the ISR: the leader


def test_a_partition_without_a_live_leader_says_so():
    for answer in (raw(leader=None), raw(live=(2, 3))):
        p = TopicMetadata.from_controller(answer).partitions[0]
        with pytest.raises(LeaderNotAvailableError):
            p.leader_client()
        with pytest.raises(LeaderNotAvailableError):
            p.nearest_client("elsewhere")


class _Method:
    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.calls = 0

    def remote(self, *args):
        self.calls += 1
        answer = self.answers.pop(0)
        return answer


class _Handle:
    def __init__(self, **methods: _Method) -> None:
        self.__dict__.update(methods)


@pytest.fixture
def fake_resolve(monkeypatch):
    def resolve(ref, timeout=None):
        if isinstance(ref, BaseException):
            raise ref
        return ref
    monkeypatch.setattr(remote, "resolve", resolve)
    monkeypatch.setattr(remote.time, "sleep", lambda s: None)


def test_reads_ride_out_a_controller_restart(fake_resolve):
    metadata = _Method([ActorUnavailableError("restarting")] * 3 + [{"t": "meta"}])
    client = ControllerClient(_Handle(metadata=metadata))
    assert client.metadata(["t"]) == {"t": "meta"}
    assert metadata.calls == 4


def test_reads_give_up_when_the_controller_stays_away(fake_resolve):
    metadata = _Method([ActorUnavailableError("gone")] * remote.CONTROLLER_RETRIES)
    with pytest.raises(NoClusterError, match="unreachable"):
        ControllerClient(_Handle(metadata=metadata)).metadata(["t"])


def test_changes_are_sent_once(fake_resolve):
    create = _Method([ActorUnavailableError("restarting"), "never sent"])
    with pytest.raises(ControllerUnavailableError, match="check whether the change happened"):
        ControllerClient(_Handle(create_topic=create)).create_topic("t", 1, 1, {}, "id")
    assert create.calls == 1


class _Controller:
    """Typed controller calls answering from a script."""

    def __init__(self, **scripts: list) -> None:
        self.scripts = scripts
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        def call(*args):
            self.calls.append(name)
            answer = self.scripts[name].pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        return call


class _Cluster:
    def __init__(self, controller) -> None:
        self.controller = controller
        self.limits = None

    def topic(self, name, refresh=False):
        return TopicMetadata.from_controller(raw())

    def forget(self, name):
        pass


def test_a_delete_repeated_after_a_restart_that_had_worked_is_success(monkeypatch):
    monkeypatch.setattr(admin_module.time, "sleep", lambda s: None)
    controller = _Controller(delete_topic=[ControllerUnavailableError("mid-call"),
                                           UnknownTopicError("no topic 't'")])
    Admin(cluster=_Cluster(controller)).delete_topic("t")
    assert controller.calls == ["delete_topic", "delete_topic"]


def test_an_unknown_topic_without_a_restart_is_an_error(monkeypatch):
    controller = _Controller(delete_topic=[UnknownTopicError("no topic 't'")])
    with pytest.raises(UnknownTopicError):
        Admin(cluster=_Cluster(controller)).delete_topic("t")


def test_deleting_a_config_repeated_after_a_restart_that_had_worked_is_success(monkeypatch):
    from raylog.errors import InvalidConfigError

    monkeypatch.setattr(admin_module.time, "sleep", lambda s: None)
    described = {"name": "t", "configs": {}, "partitions": []}  # retention.ms is gone
    controller = _Controller(
        alter_configs=[ControllerUnavailableError("mid-call"),
                       InvalidConfigError("retention_ms is not set")],
        describe_topics=[[described]])
    Admin(cluster=_Cluster(controller)).alter_configs("t", delete_configs=["retention.ms"])
    assert controller.calls == ["alter_configs", "alter_configs", "describe_topics"]


def test_a_change_gives_up_after_the_controller_stays_away(monkeypatch):
    monkeypatch.setattr(admin_module, "CHANGE_RETRY_S", 0.3)  # real sleeps of 0.2 s
    controller = _Controller(add_partitions=[ControllerUnavailableError("away")] * 20)
    with pytest.raises(ControllerUnavailableError):
        Admin(cluster=_Cluster(controller)).add_partitions("t", 3)
    assert 2 <= len(controller.calls) < 20
