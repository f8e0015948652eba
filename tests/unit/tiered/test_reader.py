"""The remote reader: verified objects through a bounded cache, typed errors."""

from __future__ import annotations

import pytest

from raylog.errors import RemoteObjectError, RemoteStorageUnavailableError
from raylog.records import read_records
from raylog.tiered.layout import SEGMENT
from raylog.tiered.reader import RemoteReader
from raylog.tiered.store import ObjectStore
from raylog.tiered.uploader import Uploader
from tests.unit.tiered.test_uploader import Recorder, copy_all, filled_log


@pytest.fixture
def copied(tmp_path):
    store = ObjectStore.from_uri(f"file://{tmp_path / 'store'}")
    log = filled_log(tmp_path / "log")
    recorder = Recorder(store)
    copy_all(log, recorder, Uploader(store, recorder.write))
    return store, log, recorder.state.readable("tid", 0)


def test_batches_from_the_one_holding_the_offset_up_to_max_bytes(copied):
    store, _, readable = copied
    reader = RemoteReader(store)
    segment = readable[1]
    middle = (segment.base_offset + segment.end_offset) // 2
    records = read_records(reader.read(segment, middle, 1))  # at least one batch
    assert records[0].offset <= middle <= records[-1].offset
    everything = read_records(reader.read(segment, segment.base_offset, 1 << 20))
    assert [r.offset for r in everything] == list(range(segment.base_offset,
                                                        segment.end_offset + 1))
    assert reader.read(segment, segment.end_offset + 1, 1 << 20) == b""
    assert (reader.misses, reader.hits) == (1, 2)


def test_the_cache_is_bounded(copied):
    store, _, readable = copied
    reader = RemoteReader(store, max_bytes=readable[0].size_bytes + readable[1].size_bytes)
    for segment in readable[:3]:
        reader.object(segment)
    assert reader.cached_bytes <= reader.max_bytes
    reader.object(readable[0])  # evicted first
    assert reader.misses == 4


def test_a_corrupt_object_is_refused_naming_it(copied):
    store, _, readable = copied
    path = f"{readable[0].folder(store.prefix)}/{SEGMENT}"
    data = bytearray(store.get(path))
    data[100] ^= 0xFF
    store.put(path, bytes(data))
    with pytest.raises(RemoteObjectError, match=f"{path} is corrupt"):
        RemoteReader(store).read(readable[0], readable[0].base_offset, 1 << 20)


def test_a_missing_object_is_refused_naming_it(copied):
    store, _, readable = copied
    store.delete_folder(readable[0].folder(store.prefix))
    with pytest.raises(RemoteObjectError, match="is missing"):
        RemoteReader(store).object(readable[0])


def test_an_unreachable_store_is_a_retriable_error(copied):
    store, _, readable = copied

    def down(path: str) -> bytes:
        raise OSError("When reading information: curl error: couldn't connect to server")

    store.get = down
    with pytest.raises(RemoteStorageUnavailableError) as raised:
        RemoteReader(store).object(readable[0])
    assert raised.value.retriable


def test_aborted_transactions_of_a_copied_segment_read_back(tmp_path):
    from raylog.storage.txn_index import AbortedTxn
    from raylog.tiered.uploader import closed_segments, plan_copy
    from tests.unit.tiered.test_uploader import REF

    store = ObjectStore.from_uri(f"file://{tmp_path / 'store'}")
    log = filled_log(tmp_path / "log")
    recorder = Recorder(store)
    entry = AbortedTxn(9, 0, 3, 0)
    plan = plan_copy(recorder.state, REF, closed_segments(log), log.high_watermark, 0, 1, 7,
                     [(1, 0)], lambda start, end: [entry])
    Uploader(store, recorder.write).copy(plan)
    reader = RemoteReader(store)
    assert reader.aborted(recorder.state.readable("tid", 0)[0]) == [entry]
    copy_all(log, recorder, Uploader(store, recorder.write))
    assert reader.aborted(recorder.state.readable("tid", 0)[1]) == []
