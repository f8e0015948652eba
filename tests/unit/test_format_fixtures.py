"""A newer raylog reads every format an older one wrote (docs/formats.md).

Each directory of tests/fixtures/formats/ was written by a raylog of the past with
tests/fixtures/formats/make_fixtures.py (its name says which); every one is opened here with
today's code, as is a set written now by today's code. Each is copied first: opening
changes a store (the clean-shutdown marker goes).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from actors.hosting import partition_dir_owner
from raylog.groups.coordinator import GroupCoordinator, OffsetAndMetadata
from raylog.metadata import MetadataStore
from raylog.metadata.identity import BrokerIdentity, read_identity
from raylog.quotas.entity import QuotaEntity
from raylog.records import read_records
from raylog.replica.partition import Partition
from raylog.schemas.compatibility import Level
from raylog.schemas.state import RegistryState
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.txn_index import AbortedTxn
from raylog.transactions.log import load as load_transactions
from raylog.transactions.state import TransactionState
from raylog.types import TopicPartition

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
WRITTEN_BEFORE = sorted(p.name for p in FIXTURES.iterdir() if (p / "records.json").exists())
NOW = 1_700_000_000_000
H = (("h", b"1"),)


def _make_fixtures():
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=[*WRITTEN_BEFORE, "written-now"])
def fixture_copy(request, tmp_path) -> Path:
    """A copy of one fixture set (or one written now by today's code)."""
    target = tmp_path / request.param
    if request.param == "written-now":
        _make_fixtures().main(target)
    else:
        shutil.copytree(FIXTURES / request.param, target)
    return target


def records_of(log: PartitionLog, start: int) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.timestamp, r.headers)
            for chunk in log.read_range(start, log.log_end_offset)
            for r in read_records(chunk) if r.offset >= start]


def test_there_is_a_fixture_written_before_format_versions_existed():
    assert "main-1b297cb" in WRITTEN_BEFORE


def test_there_is_a_fixture_of_each_metadata_log_format():
    assert "rv-rest-5e3deb6" in WRITTEN_BEFORE
    assert (FIXTURES / "rv-rest-5e3deb6" / "metadata" / "metadata-format").read_text() == \
        "version=1\n"


def test_a_partition_directory_opens_with_its_records_indexes_and_state(fixture_copy):
    directory = fixture_copy / "partition"
    assert partition_dir_owner(directory) == "fixture-topic-id"
    log = PartitionLog(directory, LogConfig(segment_bytes=4096, index_interval_bytes=256))
    partition = Partition("t", 0, log, replica_id=0)
    try:
        assert log.recovery.clean and log.recovery.segments_recovered == 0  # indexes trusted
        assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1, 16, 16)
        assert [s.base_offset for s in log.segments] == [0, 7, 10]
        assert records_of(log, 1) == [
            (1, b"k1", b"v1", NOW + 1, H), (2, None, b"v2", NOW, H), (3, None, b"v3", NOW + 1, H),
            (4, None, b"i0", NOW, H), (5, None, b"i1", NOW + 1, H), (6, None, b"a0", NOW, H),
            (8, None, b"c0", NOW, H),
            *((i, None, b"x%d" % i, NOW + i % 2, H) for i in range(10, 16))]
        assert log.offsets_for_time(NOW + 1) == (1, NOW + 1)  # through the time index
        assert log.aborted_transactions(0, 16) == [AbortedTxn(7, 6, 7, 8)]
        assert partition.epochs._epochs == [0, 1] and partition.epochs._starts == [1, 4]
        producers = {pid: (epoch, sequence)
                     for pid, epoch, sequence, *_ in partition.producers.to_json()["producers"]}
        assert producers == {5: (0, 2), 7: (0, 2)}
    finally:
        partition.close()


def test_a_compacted_log_keeps_its_clean_boundary(fixture_copy):
    log = PartitionLog(fixture_copy / "compacted",
                       LogConfig(segment_bytes=2048, cleanup_policy="compact"))
    try:
        assert log.recovery.clean
        assert [(o, k, v) for o, k, v, *_ in records_of(log, 0)] == [
            (1, b"b", b"b0"), (2, b"a", b"a1"), (3, b"b", b"b1")]
        assert log._compactor.clean_end == 3
    finally:
        log.close()


def test_the_metadata_store_loads_its_snapshot_and_the_events_after_it(fixture_copy):
    store = MetadataStore(fixture_copy / "metadata")
    try:
        state = store.load()
        # A set at metadata format 1 was written by a raylog with quotas: one event more.
        quotas = {QuotaEntity(client_id="fixture"): {"producer_byte_rate": 1024.0}} \
            if store.format_version >= 1 else {}
        assert state.quotas == quotas
        assert store.snapshot_position == 4 and state.applied == 6 + len(quotas)
        data = state.to_data()
        assert data["cluster_id"] == "0123456789abcdef" and data["broker_ids"] == [0]
        [topic] = data["topics"]
        assert topic["configs"] == {"cleanup_policy": "compact"}
        assert [(p["leader"], p["leader_epoch"], p["isr"]) for p in topic["partitions"]] == [
            (0, 1, [0]), (0, 0, [0])]
    finally:
        store.close()


def test_a_broker_identity_reads(fixture_copy):
    assert read_identity(fixture_copy / "broker") == BrokerIdentity(3, "0123456789abcdef")


def test_the_records_of_the_internal_topics_replay(fixture_copy):
    records = json.loads((fixture_copy / "records.json").read_text())
    by_topic: dict[str, list] = {}
    for topic, key, value in records:
        by_topic.setdefault(topic, []).append(
            (key.encode(), None if value is None else value.encode()))
    groups = GroupCoordinator(clock=lambda: NOW)
    for key, value in by_topic["__consumer_offsets"]:
        groups.load(key, value)
    assert groups.offsets == {"g": {TopicPartition("t", 0): OffsetAndMetadata(3, "meta", 1)}}
    assert groups.generations == {"g": 2}
    registry = RegistryState()
    for offset, (key, value) in enumerate(by_topic["_schemas"]):
        assert registry.apply(offset, key, value)
    assert registry.levels == {"s": Level.FULL} and registry.max_id == 1
    assert registry.live_versions("s")[0].schema == '"string"'
    transactions = load_transactions(by_topic["__transaction_state"]).transactions
    assert list(transactions) == ["tx"]
    assert transactions["tx"].state is TransactionState.COMPLETE_COMMIT
    assert transactions["tx"].partitions == frozenset([TopicPartition("t", 0)])
