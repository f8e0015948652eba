"""Ray Data's cold reads (raylog/integrations/ray_data/cold.py) without Ray: the pieces of a
tiered partition of an S3 store with credentials are sent to the gateways of the leaders'
nodes with no secret in any argument (the arguments pickled as Ray would), and the gateway's
class (actors/cold_reader.py, undecorated) reads them with the controller's credentials into
exactly the tables a broker's ``read_kafka_table`` gives (as Arrow IPC streams), under both
isolation levels."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pyarrow as pa
import pytest

from actors.cold_reader import ColdReader
from raylog.errors import ActorUnavailableError
from raylog.integrations.ray_data import cold
from raylog.records.kafka_columns import kafka_table
from raylog.replica.partition import READ_COMMITTED, READ_UNCOMMITTED
from raylog.tiered import cold_read
from raylog.tiered.cold_plan import TieredView
from raylog.tiered.store import SECRET_SETTINGS
from raylog.types import TopicPartition
from tests.tieredutil import fake_view
from tests.unit.tiered.test_cold_read import partition, uploaded  # noqa: F401 - fixtures

T0 = TopicPartition("t", 0)
NODE = "ab" * 28
URI = "s3://bucket/tiered"
SECRETS = {"access_key": "AKIDEXAMPLE", "secret_key": "wJalrXUtnFEMI-secret",
           "session_token": "FwoGZXIvYXdzE-token"}
SETTINGS = {"endpoint_override": "127.0.0.1:9000", "scheme": "http", "region": "us-east-1",
            **SECRETS}


class FakeGateway:
    """Stands for a gateway's handle: ``read_table.remote`` keeps its arguments and reads
    through the gateway's class, whose controller answered the cluster's store."""

    def __init__(self, sent: list[tuple]) -> None:
        self.reader = ColdReader.__ray_actor_class__()
        self.reader._cluster_store = {"uri": URI, "settings": SETTINGS}
        self.read_table = SimpleNamespace(remote=self._remote)
        self._sent = sent

    def _remote(self, *args: object) -> pa.Table:
        self._sent.append(args)
        return self.reader.read_table(*args)


@pytest.fixture
def sent(monkeypatch, uploaded):  # noqa: F811 - the fixture above
    """Every argument sent to a gateway; the store (S3 with credentials, as the view and the
    controller name it) is the test's file:// one, and the settings it was opened with are
    kept in ``opened``."""
    store, _, _ = uploaded
    calls: list[tuple] = []
    opened: list[dict] = []

    def cached_store(uri, settings):
        assert uri == URI
        opened.append(dict(settings))
        return store

    monkeypatch.setattr(cold_read, "cached_store", cached_store)
    monkeypatch.setattr(cold, "cached_store", cached_store)
    monkeypatch.setattr(cold, "local_aborted", lambda *_: ())
    gateways: dict[str, FakeGateway] = {}
    monkeypatch.setattr(cold.ray, "get_actor", lambda name, namespace: gateways.setdefault(
        name, FakeGateway(calls)))
    return SimpleNamespace(calls=calls, opened=opened, names=gateways)


def fake_cluster(asked: list[str]) -> SimpleNamespace:
    """A cluster whose controller names a gateway per node and whose partition t-0 is led
    on NODE."""
    def cold_reader(node_id: str) -> str:
        asked.append(node_id)
        return f"cold-reader:{node_id}"

    leader = SimpleNamespace(node_id=NODE)
    partition_meta = SimpleNamespace(leader_client=lambda: leader)
    return SimpleNamespace(controller=SimpleNamespace(cold_reader=cold_reader),
                           topic=lambda name: SimpleNamespace(partitions=[partition_meta]))


@pytest.mark.parametrize("isolation", [READ_UNCOMMITTED, READ_COMMITTED])
def test_pieces_go_to_the_leaders_gateway_without_secrets(sent, uploaded, partition,  # noqa: F811
                                                          isolation):
    _, segments, _ = uploaded
    view = TieredView.from_answer(fake_view(segments, 0, 113, URI, SETTINGS))
    plan = cold.plan_read({T0: (2, 112)}, {T0: view}, 1000)
    asked: list[str] = []
    blocks = cold.cold_refs(fake_cluster(asked), plan.cold, isolation)

    # Each block is an Arrow IPC stream in bytes (Ray writes them whole; a table's
    # out-of-band buffers it would write with unwritten gaps): Ray Data reads it as a table.
    assert all(type(block) is bytes for block in blocks)
    tables = [pa.ipc.open_stream(block).read_all() for block in blocks]
    expected = kafka_table(partition.read_table(2, 112, 0, isolation), "t", 0)
    assert pa.concat_tables(tables).equals(expected)
    assert asked == [NODE] and list(sent.names) == [f"cold-reader:{NODE}"]  # asked once
    assert len(sent.calls) == len(plan.cold) > 1
    blob = pickle.dumps(sent.calls)  # what Ray would put into the task specs
    for name in SECRET_SETTINGS:
        assert SECRETS[name].encode() not in blob and name.encode() not in blob
    assert b"127.0.0.1:9000" in blob  # the store's public settings do travel
    # The gateway opened the store with the controller's settings, credentials included
    # (and the planner, for read_committed, with the view's: in the driver, not sent).
    assert sent.opened and all(o == SETTINGS for o in sent.opened)


def test_a_gateway_gone_before_it_is_found_fails_the_attempt_retriably(monkeypatch):
    def gone(name, namespace):
        raise ValueError(f"Failed to look up actor with name '{name}'")

    monkeypatch.setattr(cold.ray, "get_actor", gone)
    with pytest.raises(ActorUnavailableError, match="cold-reader") as caught:
        cold.ColdReaders(fake_cluster([])).read_table(NODE, "{}", 0, 1)
    assert caught.value.retriable
