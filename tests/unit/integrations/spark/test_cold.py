"""What the connector calls across languages for cold ranges: the plan of pieces over
tiered views, and a piece read by the cold-read gateway (actors/cold_reader.py) as
stored batches or Spark columns, errors crossing with their type (no Ray: the views are the
uploads', the store a file:// directory, the gateway's class undecorated)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from actors import cold_reader
from actors.cold_reader import ColdReader
from raylog.integrations.ray_data import cold as ray_data_cold
from raylog.integrations.spark import cold
from raylog.records.kafka_columns import spark_table
from raylog.replica.partition import READ_COMMITTED, READ_UNCOMMITTED
from raylog.tiered import cold_read, layout
from raylog.tiered.cold_plan import TieredView
from raylog.types import TopicPartition
from raylog.util.interop import ERROR_MARK, JavaCallError
from tests.tieredutil import fake_view
from tests.unit.tiered.test_cold_read import partition, uploaded  # noqa: F401 - fixtures

T0 = TopicPartition("t", 0)
GATEWAY = ColdReader.__ray_actor_class__()  # the actor's class, without Ray
GATEWAY._cluster_store = {"uri": None, "settings": {}}  # no controller: the pieces' own
SECRETS = {"access_key": "AKIDEXAMPLE", "secret_key": "wJalrXUtnFEMI-secret",
           "session_token": "FwoGZXIvYXdzE-token"}


@pytest.fixture
def views(monkeypatch, uploaded):  # noqa: F811 - the fixture above
    _, segments, uri = uploaded
    view = TieredView.from_answer(fake_view(segments, 0, 113, uri))
    monkeypatch.setattr(ray_data_cold, "tiered_views",
                        lambda cluster, tps, *_: {tp: view if tp == T0 else None for tp in tps})
    monkeypatch.setattr(ray_data_cold, "local_aborted", lambda *_: ())
    return segments


def pieces(plan: str) -> list[list]:
    return json.loads(plan)["pieces"]["t"]["0"]


def test_the_plan_holds_a_piece_per_remote_segment(views):
    plan = cold.cold_plan(None, {T0: (5, 113), TopicPartition("u", 0): (0, 9)}, READ_UNCOMMITTED)
    assert [(s, e) for s, e, _ in pieces(plan)] == [(5, 7), (7, 107), (107, 110), (110, 112)]
    assert set(json.loads(plan)["pieces"]) == {"t"}  # u has no view: all hot
    assert json.loads(plan)["log_starts"] == {"t": {"0": 0}}
    whole = cold.cold_plan(None, {T0: None}, READ_UNCOMMITTED)  # java_split's: all cold
    assert [(s, e) for s, e, _ in pieces(whole)] == [(0, 7), (7, 107), (107, 110), (110, 112)]
    first = json.loads(pieces(plan)[0][2])
    assert layout.RemoteSegment.from_json(first["segment"]) == views[0]
    assert first["aborted"] == []


def test_pieces_read_as_the_broker_reads_them(views, partition):  # noqa: F811
    for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
        plan = cold.cold_plan(None, {T0: (0, 112)}, isolation)
        stored = b"".join(GATEWAY.java_cold_read(piece, s, e, True, "")
                          for s, e, piece in pieces(plan))
        assert stored == partition.read_batches(0, 112, 0, isolation)
    piece = pieces(plan)[1][2]
    ipc = GATEWAY.java_cold_read(piece, 9, 60, False, "offset,value")
    table = pa.ipc.open_stream(ipc).read_all()
    assert table.equals(spark_table(partition.read_table(9, 60, 0), "t", 0, ["offset", "value"]))


def test_a_damaged_piece_crosses_as_its_raylog_error(views, uploaded):  # noqa: F811
    store, segments, _ = uploaded
    path = f"{segments[1].folder(store.prefix)}/{layout.SEGMENT}"
    store.put(path, b"not the segment")
    s, e, piece = pieces(cold.cold_plan(None, {T0: (0, 112)}, READ_UNCOMMITTED))[1]
    with pytest.raises(JavaCallError, match=f"{ERROR_MARK}.*RemoteObjectError"):
        GATEWAY.java_cold_read(piece, s, e, True, "")


def test_the_plan_names_the_store_without_its_credentials(monkeypatch, uploaded):  # noqa: F811
    _, segments, _ = uploaded
    settings = {"endpoint_override": "127.0.0.1:9000", "scheme": "http", **SECRETS}
    view = TieredView.from_answer(fake_view(segments, 0, 113, "s3://bucket/tiered", settings))
    monkeypatch.setattr(ray_data_cold, "tiered_views", lambda cluster, tps, *_: {T0: view})
    plan = cold.cold_plan(None, {T0: (0, 112)}, READ_UNCOMMITTED)
    for name, secret in SECRETS.items():
        assert secret not in plan and name not in plan
    piece = json.loads(pieces(plan)[0][2])
    assert piece["uri"] == "s3://bucket/tiered"
    assert piece["settings"] == {"endpoint_override": "127.0.0.1:9000", "scheme": "http"}


def test_the_gateway_opens_the_clusters_store_with_the_controllers_settings(
        monkeypatch, views, uploaded):  # noqa: F811
    store, _, uri = uploaded
    opened: list[tuple[str, dict]] = []

    def cached_store(piece_uri, settings):
        opened.append((piece_uri, dict(settings)))
        return store

    monkeypatch.setattr(cold_read, "cached_store", cached_store)
    s, e, piece = pieces(cold.cold_plan(None, {T0: (0, 112)}, READ_UNCOMMITTED))[1]
    gateway = ColdReader.__ray_actor_class__()
    gateway._cluster_store = {"uri": uri, "settings": SECRETS}  # the controller's answer
    assert gateway.java_cold_read(piece, s, e, True, "")
    gateway._cluster_store = {"uri": "s3://another/store", "settings": SECRETS}
    assert gateway.java_cold_read(piece, s, e, True, "")
    assert opened == [(uri, SECRETS), (uri, {})]  # another store: the piece's settings


def test_a_gateway_without_a_controller_fails_retriably(monkeypatch):
    def no_controller(name, namespace):
        raise ValueError(f"Failed to look up actor with name {name!r}")

    monkeypatch.setattr(cold_reader.ray, "get_actor", no_controller)  # no Ray here
    gateway = ColdReader.__ray_actor_class__()
    with pytest.raises(JavaCallError, match=f"{ERROR_MARK}.*RemoteStorageUnavailableError"):
        gateway.java_cold_read("{}", 0, 1, True, "")
