"""A broker's range reads (the analytics' hot path: read_kafka_table, java_read,
java_read_batches) of a tiered replica that start below its local log start: the part below
comes from the store through the fetch path's remote read (actors/tiered.py's
TieredHost.read_below), and the answer is exactly what the local log gave before local
retention deleted those segments (no Ray)."""

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
from raylog.replica.partition import READ_COMMITTED, READ_UNCOMMITTED, LeaderAndIsr
from raylog.storage.config import LogConfig
from raylog.tiered.layout import SEGMENT
from raylog.tiered.reader import RemoteReader
from raylog.tiered.store import ObjectStore
from raylog.tiered.uploader import Uploader, closed_segments, plan_copy
from tests.unit.logutil import FakeClock
from tests.unit.replica.test_partition import NOW, lead, new_partition
from tests.unit.tiered.test_cold_read import fill
from tests.unit.tiered.test_uploader import REF, Recorder

TIERED = LogConfig(remote_storage_enable=True, retention_ms=None, local_retention_ms=1)
RANGES = [(0, 113), (1, 4), (3, 3), (5, 108), (8, 50), (100, 110), (107, 110), (109, 113),
          (110, 112), (112, 113)]


@pytest.fixture
def tiered(tmp_path):
    """test_cold_read's log (a committed transaction, an aborted one at 3-4 and 108 whose
    abort marker, 109, is two segments later; closed segments 0-6, 7-106, 107-109, 110-111,
    the active one 112), its four closed segments copied to the store as a leader copies
    them; the expected reads taken before any local segment goes."""
    clock = FakeClock(NOW)
    p = fill(lead(new_partition(tmp_path, config=TIERED, clock=clock)))
    expected = {(s, e, i): (p.read_table(s, e, 0, i), p.read_batches(s, e, 0, i))
                for s, e in RANGES for i in (READ_UNCOMMITTED, READ_COMMITTED)}
    store = ObjectStore.from_uri(f"file://{tmp_path / 'store'}")
    host = TieredHost(lambda: 1, lambda: None, lambda tp: None)
    recorder = Recorder(store)
    recorder.state = host.state
    uploader = Uploader(store, recorder.write)
    while plan := plan_copy(host.state, REF, closed_segments(p.log), p.high_watermark,
                            p.log.log_start_offset, 0, 1, [(0, 0)],
                            p.log.aborted_transactions):  # as TieredHost.upkeep plans
        uploader.copy(plan)
    assert len(host.state.readable(REF.topic_id, REF.partition)) == 4
    host.store, host.reader = store, RemoteReader(store)
    host.store_info = {"uri": None, "settings": {}}  # start() asks no controller
    host.loaded.set()  # as the feed does once it has applied the metadata topic
    clock.advance(10_000)
    yield host, p, expected, recorder
    host.close()
    p.log.close()


def read(host, p, start, end, isolation, batches=False):
    """What ReplicaHost's range reads do: the store's part, then the local one at once."""
    async def both():
        remote = await host.read_below(REF.topic_id, p, 0, start, end, isolation)
        if batches:
            return p.read_batches(start, end, 0, isolation, remote)
        return p.read_table(start, end, 0, isolation, remote)
    return asyncio.run(both())


@pytest.mark.parametrize("isolation", [READ_UNCOMMITTED, READ_COMMITTED])
@pytest.mark.parametrize("local_start", [107, 110, 112])
def test_range_reads_below_the_local_log_start_are_what_the_local_log_gave(
        tiered, isolation, local_start):
    host, p, expected, _ = tiered
    assert p.enforce_retention(local_start) > 0
    assert p.log.log_start_offset == local_start
    for start, end in RANGES:
        table, batches = expected[(start, end, isolation)]
        assert read(host, p, start, end, isolation).equals(table), (start, end)
        assert read(host, p, start, end, isolation, batches=True) == batches, (start, end)
    # Without the store's part, the local log alone refuses what it no longer has.
    with pytest.raises(OffsetOutOfRangeError):
        p.read_table(0, 113, 0)


def test_a_range_wholly_local_reads_nothing_from_the_store(tiered):
    host, p, expected, _ = tiered
    p.enforce_retention(107)
    host.reader = None  # would fail if used
    assert asyncio.run(host.read_below(REF.topic_id, p, 0, 107, 113, READ_UNCOMMITTED)) is None
    assert read(host, p, 109, 113, READ_COMMITTED).equals(
        expected[(109, 113, READ_COMMITTED)][0])


def test_local_retention_moving_while_the_store_is_read_is_followed(tiered):
    """The local log start moves past what the read planned to take locally while the
    store's part is read (on a worker thread): the store's part goes on to the new start."""
    host, p, expected, _ = tiered
    p.enforce_retention(7)
    read_segment = host.reader.read

    def trimmed_meanwhile(segment, *args):
        p.enforce_retention(112)
        return read_segment(segment, *args)

    host.reader.read = trimmed_meanwhile
    for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
        table, batches = expected[(0, 113, isolation)]
        assert read(host, p, 0, 113, isolation).equals(table)
        assert read(host, p, 0, 113, isolation, batches=True) == batches
    assert p.log.log_start_offset == 112


def test_the_store_parts_errors_are_the_fetchs(tiered):
    host, p, _, recorder = tiered
    p.enforce_retention(112)
    readable = host.state.readable(REF.topic_id, REF.partition)
    # A missing object of a readable segment: named, not data.
    host.store.delete_folder(readable[1].folder(host.store.prefix))
    with pytest.raises(RemoteObjectError, match=SEGMENT):
        read(host, p, 0, 113, READ_UNCOMMITTED)
    # Whole-log retention deleted the first segment: its offsets are out of range, also
    # when the deletion comes while the read is under way.
    read_segment = host.reader.read

    def deleted_meanwhile(segment, *args):
        Uploader(host.store, recorder.write).delete(segment, 0)
        return read_segment(segment, *args)

    host.reader.read = deleted_meanwhile
    with pytest.raises(OffsetOutOfRangeError) as raised:
        read(host, p, 107, 113, READ_UNCOMMITTED)
    assert isinstance(raised.value.__cause__, RemoteObjectError)
    host.reader.read = read_segment
    with pytest.raises(OffsetOutOfRangeError):
        read(host, p, 108, 113, READ_UNCOMMITTED)
    # Metadata not loaded yet, or the store not open: retriable.
    host.loaded.clear()
    with pytest.raises(RemoteStorageUnavailableError) as unavailable:
        read(host, p, 110, 113, READ_UNCOMMITTED)
    assert unavailable.value.retriable


def test_a_replica_that_may_not_serve_refuses_the_store_part(tiered):
    host, p, _, _ = tiered
    p.enforce_retention(112)
    p.apply(LeaderAndIsr(8, 2, 2, (1, 8), (8,)))  # a follower out of the ISR
    with pytest.raises(NotLeaderError):
        asyncio.run(host.read_below(REF.topic_id, p, 2, 0, 113, READ_UNCOMMITTED))
