"""A broker's fetch below the local log start (actors/tiered.py's TieredHost.fetch): what a
reader sees when whole-log retention deletes the segment the fetch chose."""

from __future__ import annotations

import asyncio

import pytest

from actors.tiered import TieredHost
from raylog.errors import (
    NotLeaderError,
    OffsetOutOfRangeError,
    RemoteObjectError,
    RemoteStorageUnavailableError,
)
from raylog.replica.partition import LeaderAndIsr, Partition
from raylog.tiered.layout import SEGMENT
from raylog.tiered.reader import RemoteReader
from raylog.tiered.store import ObjectStore
from raylog.tiered.uploader import Uploader, local_deletable_below
from tests.unit.logutil import FakeClock
from tests.unit.tiered.test_uploader import REF, TIERED, Recorder, copy_all, filled_log


@pytest.fixture
def host(tmp_path):
    """A host whose partition's first segments are only remote (copied, deleted locally)."""
    store = ObjectStore.from_uri(f"file://{tmp_path / 'store'}")
    clock = FakeClock(1000)
    log = filled_log(tmp_path / "log", config=TIERED.replace(local_retention_ms=100),
                     clock=clock)
    partition = Partition(REF.topic, REF.partition, log, 7, clock=clock)
    partition.apply(LeaderAndIsr(7, 1, 1, (7,), (7,)))
    host = TieredHost(lambda: 7, lambda: None, lambda tp: None)
    recorder = Recorder(store)
    recorder.state = host.state
    copy_all(log, recorder, Uploader(store, recorder.write))
    clock.advance(10_000)
    assert partition.enforce_retention(local_deletable_below(host.state, REF)) > 0
    host.store, host.reader = store, RemoteReader(store)
    host.store_info = {"uri": None, "settings": {}}  # start() asks no controller
    host.loaded.set()  # as the feed does once it has applied the metadata topic
    yield host, partition, recorder
    host.close()


def test_a_fetch_below_the_local_log_start_reads_the_remote_segment(host):
    host, partition, _ = host
    result = asyncio.run(host.fetch(REF.topic_id, partition, 1, 0, 1 << 20))
    assert result.data and result.log_start_offset == 0
    # Not a local offset: the local log serves it (and checks the replica may serve).
    assert asyncio.run(host.fetch(REF.topic_id, partition, 1, partition.log.log_start_offset,
                                  1 << 20)) is None


def test_a_replica_that_may_not_serve_refuses_a_remote_fetch(host):
    host, partition, _ = host
    partition.apply(LeaderAndIsr(8, 2, 2, (7, 8), (8,)))  # a follower out of the ISR
    with pytest.raises(NotLeaderError):
        asyncio.run(host.fetch(REF.topic_id, partition, 2, 0, 1 << 20))


def test_a_segment_retention_deleted_after_the_fetch_chose_it_is_out_of_range(host):
    host, partition, recorder = host
    first = host.state.readable(REF.topic_id, REF.partition)[0]
    read = host.reader.read

    def deleted_meanwhile(segment, *args):
        Uploader(host.store, recorder.write).delete(segment, 1)
        return read(segment, *args)

    host.reader.read = deleted_meanwhile
    with pytest.raises(OffsetOutOfRangeError) as raised:
        asyncio.run(host.fetch(REF.topic_id, partition, 1, 0, 1 << 20))
    assert isinstance(raised.value.__cause__, RemoteObjectError)
    # A segment still readable whose object is missing stays a RemoteObjectError.
    host.reader.read = read
    second = host.state.readable(REF.topic_id, REF.partition)[0]
    assert second.base_offset == first.end_offset + 1
    host.store.delete_folder(second.folder(host.store.prefix))
    assert not host.store.size(f"{second.folder(host.store.prefix)}/{SEGMENT}")
    with pytest.raises(RemoteObjectError):
        asyncio.run(host.fetch(REF.topic_id, partition, 1, second.base_offset, 1 << 20))


def test_before_the_remote_log_is_loaded_a_remote_fetch_is_retriable(host):
    """Not an offset out of range: the consumer would reset past what the store holds."""
    host, partition, _ = host
    host.loaded.clear()
    with pytest.raises(RemoteStorageUnavailableError) as raised:
        asyncio.run(host.fetch(REF.topic_id, partition, 1, 0, 1 << 20))
    assert raised.value.retriable
    host.loaded.set()
    host.store = None  # nor before the store is open
    with pytest.raises(RemoteStorageUnavailableError):
        asyncio.run(host.fetch(REF.topic_id, partition, 1, 0, 1 << 20))
