"""Tiered storage on the session cluster, whose object store is a file:// directory
(conftest.py): segments copied and read back as one log from offset 0, whole-log retention
deleting remote segments, a leader killed mid-copy, a corrupted object detected, a deleted
topic's remote data removed.

Topics use 1 KiB segments and a 2 KiB local tail, so a few dozen records make a dozen
remote segments."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest

from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.client.remote import resolve
from raylog.errors import RemoteObjectError
from raylog.tiered.layout import (
    DELETE_FINISHED,
    METADATA_TOPIC,
    SEGMENT,
    RemoteSegment,
    digest,
    segment_folder,
)
from raylog.tiered.metadata import RemoteLogState
from tests.integration.conftest import read_to_ends, wait_for

CONFIGS = {"remote.storage.enable": "true", "segment.bytes": 1024,
           "local.retention.bytes": 2048}
PAD = b"x" * 200


def create(admin: Admin, name: str, **configs) -> str:
    admin.create_topic(name, 1, 3, {**CONFIGS, **configs})
    return name


def produce(topic: str, start: int, count: int) -> None:
    producer = Producer(acks="all", linger_ms=0)
    for i in range(start, start + count):
        producer.send(topic, b"v%05d" % i + PAD, key=b"k%05d" % i, partition=0)
        producer.flush()
    producer.close()


def leader_view(admin: Admin, topic: str) -> dict:
    client = admin._cluster.topic(topic, refresh=True).partitions[0].leader_client()
    view = resolve(client.tiered_view(), timeout=60)
    view["remote"] = [RemoteSegment.from_json(s) for s in view["remote"]]
    return view


def copied(admin: Admin, topic: str, at_least: int) -> dict | None:
    """The leader's view once its remote log holds ``at_least`` segments and its local log
    lost some (None before)."""
    view = leader_view(admin, topic)
    if len(view["remote"]) >= at_least and view["local_log_start"] > 0:
        return view
    return None


def read_all(topic: str, end: int) -> list:
    """Every record of ``topic``'s partition 0 from its earliest offset to ``end``."""
    tp = TopicPartition(topic, 0)
    consumer = Consumer(auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    records: list = []
    wait_for(lambda: records.extend(consumer.poll(timeout_ms=500)) or
             consumer.position(tp) >= end, timeout=120, what=f"{topic} read to {end}")
    consumer.close()
    return records


def retention_done(admin: Admin, topic: str, retention_bytes: int) -> dict | None:
    """The leader's view once whole-log retention deleted remote segments and has nothing
    more to delete: the whole log (remote, and local not copied) is below
    ``retention_bytes`` without its oldest remote segment."""
    leader = next(r for r in admin.describe_replicas(topic) if r["role"] == "leader")
    view = leader_view(admin, topic)
    remote = [s.size_bytes for s in view["remote"]]
    whole = sum(remote) + leader["not_copied_bytes"]
    return view if view["log_start"] > 0 and whole - remote[0] < retention_bytes else None


def remote_log(topic_id: str) -> RemoteLogState:
    """The metadata topic's state, read from its beginning by this test."""
    state = RemoteLogState()
    tp = TopicPartition(METADATA_TOPIC, 0)
    for record in read_to_ends([tp]):
        state.apply_value(record.key, record.value)  # tombstones of deleted topics too
    return state


def metadata_records(topic_id: str) -> list[RemoteSegment]:
    """The metadata topic's records of ``topic_id``, from its beginning."""
    records = [RemoteSegment.from_json(r.value)
               for r in read_to_ends([TopicPartition(METADATA_TOPIC, 0)])]
    return [r for r in records if r.topic_id == topic_id]


def only_readable_folders(store: Path, topic: str, topic_id: str) -> bool:
    """Whether partition 0's folder in the store holds the readable segments' folders and
    nothing else."""
    return folders(store, topic, topic_id) == sorted(
        f"{s.base_offset:020d}-{s.segment_id}"
        for s in remote_log(topic_id).readable(topic_id, 0))


def folders(store: Path, topic: str, topic_id: str) -> list[str]:
    partition = store / f"{topic}-{topic_id}" / "0"
    return sorted(p.name for p in partition.iterdir()) if partition.exists() else []


def test_a_consumer_reads_from_offset_0_across_the_remote_and_local_logs(ray_cluster,
                                                                        topic_name):
    admin = Admin()
    topic = create(admin, topic_name)
    produce(topic, 0, 60)
    view = wait_for(lambda: copied(admin, topic, 5), timeout=120, what="segments copied")
    remote = view["remote"]
    assert remote[0].base_offset == 0 == view["log_start"]
    assert all(a.end_offset + 1 == b.base_offset for a, b in itertools.pairwise(remote))
    assert view["local_log_start"] <= remote[-1].end_offset + 1
    assert view["high_watermark"] == 60
    assert view["store"] == {"uri": f"file://{ray_cluster.remote_store}", "settings": {}}
    for segment in remote:
        data = (Path(segment.folder(str(ray_cluster.remote_store))) / SEGMENT).read_bytes()
        assert digest(data) == segment.files[SEGMENT].sha256
    tp = TopicPartition(topic, 0)
    consumer = Consumer(enable_auto_commit=False)
    assert consumer.beginning_offsets([tp]) == {tp: 0}  # the remote log's start
    consumer.close()
    records = read_all(topic, 60)
    assert [r.offset for r in records] == list(range(60))
    assert [r.value for r in records] == [b"v%05d" % i + PAD for i in range(60)]
    described = next(r for r in admin.describe_replicas(topic) if r["role"] == "leader")
    assert described["remote_log_start_offset"] == 0
    assert described["remote_size_bytes"] >= sum(s.size_bytes for s in remote)  # copies go on


def test_whole_log_retention_deletes_remote_segments(ray_cluster, topic_name):
    admin = Admin()
    topic = create(admin, topic_name)
    topic_id = admin._cluster.topic(topic).topic_id
    produce(topic, 0, 60)
    view = wait_for(lambda: copied(admin, topic, 5), timeout=120, what="segments copied")
    before = folders(ray_cluster.remote_store, topic, topic_id)
    assert len(before) >= len(view["remote"])
    admin.alter_configs(topic, {"retention.bytes": 4096})
    after = wait_for(lambda: retention_done(admin, topic, 4096), timeout=120,
                     what="remote segments deleted")
    kept = after["remote"]
    assert all(s.size_bytes for s in kept)
    wait_for(lambda: folders(ray_cluster.remote_store, topic, topic_id) == sorted(
        f"{s.base_offset:020d}-{s.segment_id}" for s in leader_view(admin, topic)["remote"]),
        timeout=60, what="the deleted segments' folders gone")
    tp = TopicPartition(topic, 0)
    consumer = Consumer(enable_auto_commit=False)
    start = consumer.beginning_offsets([tp])[tp]
    consumer.close()
    assert start == after["log_start"] > 0
    assert [r.offset for r in read_all(topic, 60)] == list(range(start, 60))


def test_a_leader_killed_mid_copy_leaves_no_gap_duplicate_or_forgotten_orphan(ray_cluster,
                                                                              topic_name):
    admin = Admin()
    topic = create(admin, topic_name)
    topic_id = admin._cluster.topic(topic).topic_id
    marker = ray_cluster.root / f"tiered-kill-{topic}"
    first_leader = admin.describe_topic(topic)["partitions"][0]["leader"]
    with ray_cluster.failpoints({"tiered.copy.object_put": f"exit-once:{marker}"}):
        produce(topic, 0, 30)
        wait_for(marker.exists, timeout=120, what="the leader killed mid-copy")
    wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] not in
             (None, first_leader), timeout=120, what="a new leader")
    produce(topic, 30, 30)
    state = wait_for(lambda: (s := remote_log(topic_id)).end_offset(topic_id, 0) and
                     s.end_offset(topic_id, 0) >= 40 and not s.orphans(topic_id, 0, 1 << 30)
                     and s, timeout=180, what="copies past the kill, orphans deleted")
    readable = state.readable(topic_id, 0)
    assert readable[0].base_offset == 0
    assert all(a.end_offset + 1 == b.base_offset for a, b in itertools.pairwise(readable))
    # Every folder in the store is a readable segment's: the killed copy's is gone.
    wait_for(lambda: only_readable_folders(ray_cluster.remote_store, topic, topic_id),
             timeout=60, what="no folder but the readable segments'")
    # What no record leads to is swept (every 2 s here): an object the killed leader's put
    # would have landed in its deleted folder (the race a deposed leader that is not dead
    # yet runs), and an hour-old folder no record names.
    killed = [r for r in metadata_records(topic_id)
              if r.state == DELETE_FINISHED and not r.is_fence]
    assert killed, "the killed copy's attempt was deleted by its successor"
    late = Path(killed[0].folder(str(ray_cluster.remote_store)))
    late.mkdir(parents=True, exist_ok=True)
    (late / SEGMENT).write_bytes(b"late")
    unrecorded = Path(segment_folder(str(ray_cluster.remote_store), topic, topic_id, 0, 0,
                                     "unrecorded"))
    unrecorded.mkdir()
    (unrecorded / SEGMENT).write_bytes(b"lost")
    hour_ago = time.time() - 3600
    os.utime(unrecorded / SEGMENT, (hour_ago, hour_ago))
    os.utime(unrecorded, (hour_ago, hour_ago))
    assert not only_readable_folders(ray_cluster.remote_store, topic, topic_id)
    wait_for(lambda: only_readable_folders(ray_cluster.remote_store, topic, topic_id),
             timeout=60, what="the leader's sweep of what no record leads to")
    records = read_all(topic, 60)
    assert [r.offset for r in records] == list(range(60))


def test_a_corrupted_object_is_detected_and_named(ray_cluster, topic_name):
    admin = Admin()
    topic = create(admin, topic_name)
    produce(topic, 0, 40)
    view = wait_for(lambda: copied(admin, topic, 3), timeout=120, what="segments copied")
    first = view["remote"][0]
    path = Path(first.folder(str(ray_cluster.remote_store))) / SEGMENT
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    tp = TopicPartition(topic, 0)
    consumer = Consumer(auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    deadline = time.monotonic() + 60
    with pytest.raises(RemoteObjectError, match=f"{path} is corrupt"):
        while time.monotonic() < deadline:  # the first fetch's answer raises
            consumer.poll(timeout_ms=500)
    consumer.close()


def test_deleting_a_tiered_topic_removes_its_objects_and_metadata(ray_cluster, topic_name):
    admin = Admin()
    topic = create(admin, topic_name)
    old_id = admin._cluster.topic(topic).topic_id
    produce(topic, 0, 40)
    wait_for(lambda: copied(admin, topic, 3), timeout=120, what="segments copied")
    old_folder = ray_cluster.remote_store / f"{topic}-{old_id}"
    assert folders(ray_cluster.remote_store, topic, old_id)
    assert old_id in remote_log(old_id).topics()
    admin.delete_topic(topic)
    # Created again at once under its name, before the old one's data is gone: not touched.
    create(admin, topic)
    new_id = admin._cluster.topic(topic, refresh=True).topic_id
    assert new_id != old_id
    produce(topic, 0, 40)
    wait_for(lambda: not old_folder.exists() and old_id not in remote_log(old_id).topics(),
             timeout=180, what="the deleted topic's folder and metadata gone")
    view = wait_for(lambda: copied(admin, topic, 3), timeout=120, what="the new topic copied")
    assert view["log_start"] == 0
    assert {s.topic_id for s in view["remote"]} == {new_id}
    assert folders(ray_cluster.remote_store, topic, new_id)
    assert new_id in remote_log(new_id).topics()
    records = read_all(topic, 40)
    assert [r.value for r in records] == [b"v%05d" % i + PAD for i in range(40)]


def test_a_sweep_cut_short_by_a_crash_is_finished_after_it(ray_cluster, topic_name):
    """The process sweeping dies after the folder went, before any tombstone: the metadata
    topic's next leader (or the same process, back) finds the keys left and finishes."""
    admin = Admin()
    topic = create(admin, topic_name)
    topic_id = admin._cluster.topic(topic).topic_id
    produce(topic, 0, 30)
    wait_for(lambda: copied(admin, topic, 2), timeout=120, what="segments copied")
    folder = ray_cluster.remote_store / f"{topic}-{topic_id}"
    marker = ray_cluster.root / f"tiered-sweep-kill-{topic}"
    with ray_cluster.failpoints({"tiered.sweep.tombstone": f"exit-once:{marker}"}):
        admin.delete_topic(topic)
        wait_for(marker.exists, timeout=180, what="the sweeping process killed")
    assert not folder.exists()
    wait_for(lambda: topic_id not in remote_log(topic_id).topics(), timeout=240,
             what="the keys left by the killed sweep tombstoned")
