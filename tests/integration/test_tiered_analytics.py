"""Analytics over tiered topics: Ray Data's read_topic and Spark's format("raylog") read the
cold part of a mostly remote topic from the object store (file:// and S3 on moto's server),
without brokers, and give exactly the rows a read through the brokers gives.

Two kinds of tests:

- **Own uploads** (run now): the closed segments of the leaders' replica directories are
  uploaded by tests/tieredutil.py as a leader's upload writes them, and the driver's
  ``tiered_views`` is replaced by one that answers what a broker's ``tiered_view`` would
  (local log start right after the uploaded segments). The brokers still hold every record,
  so a plain read is the reference.
- **Brokers' uploads**: a topic with ``remote.storage.enable`` whose local log the brokers
  trimmed after their own uploads; the reference is a consumer reading from offset 0.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
import ray

import raylog.integrations.ray_data.cold as ray_data_cold
from raylog import Admin, Producer, TopicPartition
from raylog.errors import RemoteObjectError
from raylog.integrations.ray_data import read_topic
from raylog.tiered import layout
from raylog.tiered.cold_plan import TieredView
from raylog.tiered.store import ObjectStore
from raylog.util.cluster_names import CONTROLLER_NAME, NAMESPACE
from tests.integration.conftest import consume_all, replica_info, wait_for
from tests.tieredutil import fake_view, upload_segments

PARTITIONS = 2
RECORDS = 1200
SEGMENT_BYTES = 4096  # many small segments: most of each partition is closed and uploaded


@pytest.fixture(scope="module")
def admin(ray_cluster) -> Admin:
    return Admin(cluster=ray_cluster.raylog)


@pytest.fixture(scope="module")
def topic(admin) -> str:
    """A topic whose partitions rolled many small segments, with keys, headers and
    timestamps."""
    name = "tiered-analytics"
    admin.create_topic(name, partitions=PARTITIONS, replication_factor=2,
                       configs={"segment_bytes": SEGMENT_BYTES})
    # acks="all": every record below the high watermark when its future ends, so the
    # uploads below it take every closed segment (with acks=1 a follower lagging on a busy
    # cluster left the high watermark behind and nothing to upload)
    with Producer(linger_ms=5, acks="all") as producer:
        for round_start in range(0, RECORDS, 100):  # rounds: many batches, many segments
            futures = [producer.send(name, b"value-%05d" % i + b"." * (i % 40),
                                     key=b"k%d" % (i % 17),
                                     headers=[("h", b"%d" % i)] if i % 3 else None,
                                     partition=i % PARTITIONS)
                       for i in range(round_start, round_start + 100)]
            for future in futures:
                future.result(timeout=60)
    return name


def rows(dataset) -> list[tuple]:
    return sorted((r["partition"], r["offset"], r["key"], r["value"], r["timestamp"],
                   r["timestampType"], json.dumps([[h["key"], h["value"].hex()]
                                                   for h in r["headers"] or []]))
                  for r in dataset.take_all())


def moto_server() -> Iterator[dict]:
    """moto's S3 server on loopback, a bucket in it, and the settings that reach it."""
    moto_server_module = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = moto_server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        settings = {"endpoint_override": f"127.0.0.1:{port}", "scheme": "http",
                    "access_key": "testing", "secret_key": "testing", "region": "us-east-1"}
        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                     aws_access_key_id="testing", aws_secret_access_key="testing") \
            .create_bucket(Bucket="raylog-tiered")
        yield settings
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3_settings() -> Iterator[dict]:
    yield from moto_server()


@pytest.fixture(scope="module", params=["file", "s3"])
def uploaded(request, admin, topic, tmp_path_factory) -> dict[TopicPartition, dict]:
    """Each partition's closed segments uploaded (by the test helper) to a file:// or S3
    store: the fake ``tiered_view`` answers, per partition."""
    if request.param == "file":
        uri, settings = f"file://{tmp_path_factory.mktemp('store')}", {}
    else:
        uri, settings = "s3://raylog-tiered/analytics", request.getfixturevalue("s3_settings")
    store = ObjectStore.from_uri(uri, settings)
    views = {}
    for p in range(PARTITIONS):
        info = replica_info(admin, topic, p)
        segments = upload_segments(info["directory"], store, topic, p,
                                   below=info["high_watermark"])
        assert len(segments) >= 3, "the topic rolled too few segments to be mostly remote"
        views[TopicPartition(topic, p)] = fake_view(segments, info["log_start_offset"],
                                                    info["high_watermark"], uri, settings)
    return views


@pytest.fixture
def tiered(monkeypatch, uploaded) -> dict[TopicPartition, dict]:
    """The driver's planner sees the uploaded segments as the partitions' remote log."""
    def views(cluster, tps, refresh, timeout_s=None):
        return {tp: TieredView.from_answer(uploaded[tp]) if tp in uploaded else None
                for tp in tps}

    monkeypatch.setattr(ray_data_cold, "tiered_views", views)
    return uploaded


def test_read_topic_reads_cold_segments_from_the_store(topic, tiered):
    cold = sum(v["local_log_start"] - v["log_start"] for v in tiered.values())
    total = sum(v["high_watermark"] - v["log_start"] for v in tiered.values())
    assert cold > total // 2  # mostly remote
    with pytest.MonkeyPatch.context() as plain:
        plain.setattr(ray_data_cold, "tiered_views", lambda cluster, tps, *_: dict.fromkeys(tps))
        through_brokers = rows(read_topic(topic))
    assert len(through_brokers) == RECORDS
    assert rows(read_topic(topic)) == through_brokers
    assert rows(read_topic(topic, isolation_level="read_committed")) == through_brokers
    # Ranges that start and end inside remote segments, and one across the boundary.
    tp = TopicPartition(topic, 0)
    boundary = tiered[tp]["local_log_start"]
    bounds = ({topic: {0: 3, 1: 0}}, {topic: {0: boundary + 5, 1: 10}})
    expected = [r for r in through_brokers
                if (r[0] == 0 and 3 <= r[1] < boundary + 5) or (r[0] == 1 and r[1] < 10)]
    assert rows(read_topic(topic, *bounds, max_records_per_block=7)) == expected


def test_a_damaged_remote_object_fails_the_read_naming_it(topic, tiered, spark):
    """Both readers fail naming the object: they read it from the store, not the brokers
    (which still hold every record)."""
    from raylog.integrations import spark as raylog_spark

    view = tiered[TopicPartition(topic, 1)]
    if not view["store"]["uri"].startswith("file://"):
        pytest.skip("damaged on the file:// store only (the same check guards both)")
    segment = layout.RemoteSegment.from_json(view["remote"][1])
    store = ObjectStore.from_uri(view["store"]["uri"])
    path = f"{segment.folder(store.prefix)}/{layout.SEGMENT}"
    good = store.get(path)
    store.put(path, good[:-1] + bytes([good[-1] ^ 1]))
    try:
        with pytest.raises(RemoteObjectError, match="sha256"):
            read_topic(topic, timeout_ms=5_000).materialize()
        with pytest.raises(Exception, match=f"(?s)RemoteObjectError.*{segment.segment_id}"):
            raylog_spark.read(spark, topic).selectExpr("sum(length(value))").collect()
    finally:
        store.put(path, good)


def spark_rows(frame) -> list[tuple]:
    return sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]),
                   r["timestamp"], r["timestampType"],
                   json.dumps([[h["key"], bytes(h["value"]).hex()] for h in r["headers"] or []]))
                  for r in frame.collect())


def test_format_raylog_reads_cold_segments_from_the_store(topic, tiered, spark):
    """raylog.integrations.spark.read plans the cold pieces (the tiered views above) and the
    connector's tasks read them through their nodes' cold-read gateways from the store; a plain
    format("raylog") here plans with the brokers' own views: every range hot."""
    from raylog.integrations import spark as raylog_spark

    through_brokers = (spark.read.format("raylog").option("subscribe", topic)
                       .option("includeHeaders", "true").load())
    cold = raylog_spark.read(spark, topic)
    assert spark_rows(cold) == spark_rows(through_brokers)
    assert len(spark_rows(cold)) == RECORDS
    # Without values the cold tasks build the columns asked for, as a broker's java_read.
    columns = "partition, offset, timestamp"
    assert sorted(cold.selectExpr(*columns.split(", ")).collect()) == \
        sorted(through_brokers.selectExpr(*columns.split(", ")).collect())
    total = "sum(length(value)) AS n"
    assert cold.selectExpr(total).collect() == through_brokers.selectExpr(total).collect()
    # Small tasks: a cold range cut into pieces still reads each from its segment.
    pieces = raylog_spark.read(spark, topic, max_records_per_task=25)
    assert spark_rows(pieces) == spark_rows(through_brokers)


def test_a_cold_read_gateway_that_died_is_replaced(topic, tiered, spark, ray_cluster):
    """Spark tasks read cold pieces through their node's gateway; once it died, a task's
    call fails, the task asks the controller again (which starts a new one under a new
    name) and reads the piece again: the same rows."""
    from raylog.integrations import spark as raylog_spark

    cold = raylog_spark.read(spark, topic)
    expected = spark_rows(cold)  # the executors' JVMs hold their nodes' gateways now
    controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    nodes = [n.node_id for n in ray_cluster.cluster.list_all_nodes()]
    gateways = {node: ray.get(controller.java_cold_reader.remote(node)) for node in nodes}
    for name in gateways.values():
        ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
    assert spark_rows(cold) == expected
    for node, killed in gateways.items():
        name = ray.get(controller.java_cold_reader.remote(node))
        assert name != killed and name.startswith(f"cold-reader:{node}:")


# -- the brokers' uploads ----------------------------------------------------------------------
# The cluster's store is the file:// directory conftest gives the head node
# (RAYLOG_REMOTE_STORAGE_URI); the brokers upload the closed segments and trim their local
# logs to local.retention.bytes; the reference is a consumer reading from offset 0 (the
# brokers fetch below their local log start from the store).

@pytest.fixture(scope="module")
def broker_tiered(admin) -> str:
    name = "tiered-by-brokers"
    admin.create_topic(name, partitions=PARTITIONS, replication_factor=2, configs={
        "remote.storage.enable": "true", "segment.bytes": 1024, "local.retention.bytes": 2048})
    with Producer(linger_ms=5) as producer:
        for round_start in range(0, RECORDS, 100):
            futures = [producer.send(name, b"tiered-%05d" % i, key=b"k%d" % (i % 5),
                                     partition=i % PARTITIONS)
                       for i in range(round_start, round_start + 100)]
            for future in futures:
                future.result(timeout=60)
    tps = [TopicPartition(name, p) for p in range(PARTITIONS)]

    def tiered():  # remote segments, and a local log that lost some of them
        views = ray_data_cold.tiered_views(admin._cluster, tps, True, 60)
        return all(len(v.remote) >= 3 and v.local_log_start > v.log_start
                   for v in views.values())

    wait_for(tiered, timeout=180, what=f"the brokers to move part of {name} to the store")
    return name


def consumed(topic: str) -> list[tuple]:
    return sorted((r.partition, r.offset, r.key, r.value)
                  for r in consume_all(topic, PARTITIONS, RECORDS, timeout_s=120))


def test_read_topic_of_a_topic_the_brokers_tiered(broker_tiered):
    expected = consumed(broker_tiered)
    assert len(expected) == RECORDS
    found = sorted((r["partition"], r["offset"], r["key"], r["value"])
                   for r in read_topic(broker_tiered).take_all())
    assert found == expected
    committed = read_topic(broker_tiered, isolation_level="read_committed").take_all()
    assert sorted((r["partition"], r["offset"], r["key"], r["value"])
                  for r in committed) == expected


def test_format_raylog_of_a_topic_the_brokers_tiered(broker_tiered, spark):
    """Both planners: the connector's own (a java_split task asking the leaders) and
    raylog.integrations.spark.read's (the driver asking them)."""
    from raylog.integrations import spark as raylog_spark

    expected = consumed(broker_tiered)
    plain = spark.read.format("raylog").option("subscribe", broker_tiered).load()
    for frame in (plain, raylog_spark.read(spark, broker_tiered)):
        assert sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]))
                      for r in frame.collect()) == expected
    assert plain.selectExpr("sum(length(value))").first()[0] == \
        sum(len(value) for *_, value in expected)


def test_a_stream_of_a_topic_the_brokers_tiered_reads_its_cold_part_then_its_hot_part(
        broker_tiered, spark, tmp_path):
    """A streaming query from earliest, in batches of at most 200 records: its first batches
    read offsets below the local log start, planned cold and read from the store; its later
    ones read only hot offsets, planned without the planning task. Every record once."""
    expected = consumed(broker_tiered)
    query = (spark.readStream.format("raylog").option("subscribe", broker_tiered)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "200")
             .load().selectExpr("partition", "offset", "key", "value")
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(sizes) >= 5 and max(sizes) <= 200
    found = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]))
                  for r in found) == expected


def test_a_plan_whose_hot_start_local_retention_deleted_is_read_from_the_store(
        admin, spark, monkeypatch):
    """A read planned at the local log starts the leaders gave, then local retention moves
    them past that split before the hot ranges are read: the brokers serve the hot ranges'
    offsets below their new local log start from the store (the fetch path's remote read),
    so Ray Data (both isolation levels) and Spark (stored batches, and Arrow columns without
    ``value``) read every row, as a consumer reads them."""
    from raylog.integrations import spark as raylog_spark

    name = "tiered-moving-start"
    admin.create_topic(name, partitions=PARTITIONS, replication_factor=2, configs={
        "remote.storage.enable": "true", "segment.bytes": 1024, "local.retention.bytes": 8192})
    with Producer(linger_ms=5, acks="all") as producer:
        for round_start in range(0, RECORDS, 100):
            futures = [producer.send(name, b"moving-%05d" % i, key=b"k%d" % (i % 5),
                                     partition=i % PARTITIONS)
                       for i in range(round_start, round_start + 100)]
            for future in futures:
                future.result(timeout=60)
    tps = [TopicPartition(name, p) for p in range(PARTITIONS)]

    def views() -> dict:
        return ray_data_cold.tiered_views(admin._cluster, tps, True, 60)

    def split() -> bool:  # remote segments, and a local part holding several more
        return all(len(v.remote) >= 2 and v.log_start < v.local_log_start
                   and v.high_watermark - v.local_log_start > 100 for v in views().values())

    wait_for(split, timeout=180, interval=1, what=f"the brokers to move part of {name} away")
    # The plans: Spark's now (raylog.integrations.spark.read plans at the call); Ray Data's
    # at each attempt, so its views are pinned to ones taken after Spark's plan (local log
    # starts only grow: theirs are at or past the split Spark's plan made).
    frame = raylog_spark.read(spark, name)
    planned = views()
    admin.alter_configs(name, {"local.retention.bytes": 1024})
    wait_for(lambda: all(v.local_log_start > planned[tp].local_log_start
                         for tp, v in views().items()),
             timeout=180, interval=1,
             what=f"local retention of {name} to pass the planned split")
    monkeypatch.setattr(ray_data_cold, "tiered_views",
                        lambda cluster, tps, refresh, timeout_s=None: planned)

    expected = consumed(name)
    assert len(expected) == RECORDS
    for isolation in ("read_uncommitted", "read_committed"):
        found = read_topic(name, isolation_level=isolation).take_all()
        assert sorted((r["partition"], r["offset"], r["key"], r["value"])
                      for r in found) == expected, isolation
    assert sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]))
                  for r in frame.collect()) == expected
    assert sorted((r["partition"], r["offset"]) for r in
                  frame.select("partition", "offset").collect()) == \
        [(partition, offset) for partition, offset, *_ in expected]
