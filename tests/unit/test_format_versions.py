"""An older raylog refuses a format newer than it reads, naming the file and both versions,
and changes nothing stored (docs/formats.md).

Each test takes a store written by today's code (the newest fixture set of
tests/fixtures/formats/), raises one file's version past what today's code reads, and checks
the refusal and that every file is as it was.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import crc32c
import pytest

from actors.hosting import METADATA_FILE, HostedReplica, partition_dir_owner
from raylog.errors import StorageError, UnsupportedFormatVersionError
from raylog.groups.coordinator import RECORD_VERSION as GROUPS_VERSION
from raylog.groups.coordinator import GroupCoordinator
from raylog.metadata import MetadataStore
from raylog.metadata import store as metadata_store
from raylog.metadata.identity import FORMAT_VERSION as IDENTITY_VERSION
from raylog.metadata.identity import IDENTITY_FILE, read_identity
from raylog.metadata.snapshot import VERSION as METADATA_SNAPSHOT_VERSION
from raylog.metadata.snapshot import read_snapshot
from raylog.metadata.state import configs_altered, quotas_altered
from raylog.metadata.store import EVENT_VERSIONS, METADATA_FORMAT_FILE, METADATA_LOG_VERSION
from raylog.quotas.entity import QuotaEntity
from raylog.replica.producer_state import SNAPSHOT_VERSION, ProducerSnapshots
from raylog.schemas.state import RECORD_VERSION as SCHEMAS_VERSION
from raylog.schemas.state import RegistryState
from raylog.storage import LogConfig, PartitionLog
from raylog.storage.checkpoint import VERSION as CHECKPOINT_VERSION
from raylog.storage.formats import (
    JSON_VERSION_FIELD,
    check_version,
    json_version,
    read_format_file,
    write_format_file,
)
from raylog.storage.log import LOG_FORMAT_FILE, LOG_FORMAT_VERSION
from raylog.transactions.log import VALUE_VERSION as TRANSACTION_VERSION
from raylog.transactions.log import load as load_transactions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
# today's formats but the metadata log's (at 0 there: no quota set, no metadata-format file)
NEWEST = FIXTURES / "main-1b297cb"
CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256)


def stored(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes (but the lock files a process takes, which
    hold no data)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture
def store(tmp_path) -> Path:
    shutil.copytree(NEWEST, tmp_path / "store")
    return tmp_path / "store"


def refused(call, where: str, found: int, supported: int, root: Path) -> None:
    """``call()`` raises the refusal naming ``where``, and nothing under ``root`` changes."""
    before = stored(root)
    with pytest.raises(UnsupportedFormatVersionError) as refusal:
        call()
    error = refusal.value
    assert where in error.where and (error.found, error.supported) == (found, supported)
    assert where in str(error) and f"format version {found}" in str(error)
    assert f"up to {supported}" in str(error)
    assert stored(root) == before


def set_first_line(path: Path, line: str) -> None:
    lines = path.read_text().split("\n")
    path.write_text("\n".join([line, *lines[1:]]))


# -- the rule ------------------------------------------------------------------------------------


def test_versions_up_to_the_supported_one_are_read_and_newer_ones_refused(tmp_path):
    assert check_version("f", 0, 1) == 0 and check_version("f", 1, 1) == 1
    with pytest.raises(UnsupportedFormatVersionError, match="f: format version 2"):
        check_version("f", 2, 1)
    assert json_version("r", {"a": 1}, 0) == 0  # no member: version 0
    assert json_version("r", {JSON_VERSION_FIELD: 1}, 1) == 1
    with pytest.raises(UnsupportedFormatVersionError):
        json_version("r", {JSON_VERSION_FIELD: 1}, 0)
    with pytest.raises(StorageError, match="not an integer"):
        json_version("r", {JSON_VERSION_FIELD: "1"}, 0)


def test_a_format_file_is_version_0_when_missing_and_refused_when_unreadable(tmp_path):
    path = tmp_path / "some-format"
    assert read_format_file(path, 0) == 0
    write_format_file(path, 2)
    assert path.read_text() == "version=2\n" and read_format_file(path, 2) == 2
    path.write_text("garbage")
    with pytest.raises(StorageError, match="not a format file"):
        read_format_file(path, 2)


def test_the_refusal_crosses_processes_with_its_fields():
    error = pickle.loads(pickle.dumps(UnsupportedFormatVersionError("f", 3, 2)))
    assert (error.where, error.found, error.supported) == ("f", 3, 2)
    assert isinstance(error, StorageError) and not error.retriable


# -- a log directory -----------------------------------------------------------------------------


def test_a_log_directory_of_a_newer_format_is_refused_before_anything_changes(store):
    directory = store / "partition"
    write_format_file(directory / LOG_FORMAT_FILE, LOG_FORMAT_VERSION + 1)
    assert (directory / ".clean-shutdown").exists()
    refused(lambda: PartitionLog(directory, CONFIG), LOG_FORMAT_FILE,
            LOG_FORMAT_VERSION + 1, LOG_FORMAT_VERSION, store)


def test_a_log_directory_of_todays_format_opens_with_its_format_file(store):
    write_format_file(store / "partition" / LOG_FORMAT_FILE, LOG_FORMAT_VERSION)
    log = PartitionLog(store / "partition", CONFIG)
    assert log.log_end_offset == 16
    log.close()


@pytest.mark.parametrize("directory, name", [
    ("partition", "recovery-point-checkpoint"), ("partition", "high-watermark-checkpoint"),
    ("partition", "log-start-offset-checkpoint"), ("partition", "leader-epoch-checkpoint"),
    ("compacted", "cleaner-offset-checkpoint"),
])
def test_a_checkpoint_of_a_newer_format_is_refused_not_rebuilt(store, directory, name):
    newer = int(CHECKPOINT_VERSION) + 1
    set_first_line(store / directory / name, str(newer))
    refused(lambda: PartitionLog(store / directory, CONFIG), name, newer,
            int(CHECKPOINT_VERSION), store)


def test_a_crash_open_refuses_a_newer_checkpoint_too(store):
    (store / "partition" / ".clean-shutdown").unlink()  # the recovery point is read then
    set_first_line(store / "partition" / "recovery-point-checkpoint", "1")
    refused(lambda: PartitionLog(store / "partition", CONFIG), "recovery-point-checkpoint",
            1, 0, store)


# -- a replica's directory -----------------------------------------------------------------------


def newer_producer_snapshot(directory: Path) -> Path:
    """Rewrite the newest producer snapshot as a newer raylog's (its checksum right)."""
    snapshots = ProducerSnapshots(directory)
    path = snapshots._path(snapshots.offsets()[-1])
    body = json.loads(path.read_bytes().partition(b"\n")[2])
    body["version"] = SNAPSHOT_VERSION + 1
    raw = json.dumps(body).encode()
    path.write_bytes(b"%08x\n" % crc32c.crc32c(raw) + raw)
    return path


def as_data_dir(store: Path) -> Path:
    """The fixture's partition directory as partition 0 of topic t in a broker's data dir."""
    (store / "data").mkdir()
    (store / "partition").rename(store / "data" / "t-0")
    return store / "data"


def test_a_producer_snapshot_of_a_newer_format_is_refused_before_the_log_opens(store):
    data_dir = as_data_dir(store)
    path = newer_producer_snapshot(data_dir / "t-0")
    with pytest.raises(UnsupportedFormatVersionError):
        ProducerSnapshots(data_dir / "t-0").load(1 << 62)
    refused(lambda: HostedReplica.open(data_dir, "t", 0, "fixture-topic-id", 0, {}),
            path.name, SNAPSHOT_VERSION + 1, SNAPSHOT_VERSION, store)


def test_a_partition_marker_of_a_newer_format_is_refused(store):
    data_dir = as_data_dir(store)
    marker = data_dir / "t-0" / METADATA_FILE
    content = json.loads(marker.read_text())
    marker.write_text(json.dumps({**content, JSON_VERSION_FIELD: 1}))
    refused(lambda: partition_dir_owner(data_dir / "t-0"), METADATA_FILE, 1, 0, store)
    refused(lambda: HostedReplica.open(data_dir, "t", 0, "fixture-topic-id", 0, {}),
            METADATA_FILE, 1, 0, store)


def test_a_partition_marker_of_version_0_written_out_reads(store):
    marker = store / "partition" / METADATA_FILE
    marker.write_text(json.dumps({**json.loads(marker.read_text()), JSON_VERSION_FIELD: 0}))
    assert partition_dir_owner(store / "partition") == "fixture-topic-id"


# -- the controller's metadata and a broker's identity ---------------------------------------


def test_a_metadata_log_of_a_newer_event_format_is_refused(store):
    write_format_file(store / "metadata" / METADATA_FORMAT_FILE, METADATA_LOG_VERSION + 1)
    refused(lambda: MetadataStore(store / "metadata"), METADATA_FORMAT_FILE,
            METADATA_LOG_VERSION + 1, METADATA_LOG_VERSION, store)


def test_the_first_event_of_a_newer_format_raises_the_metadata_format_before_it(
        store, monkeypatch):
    directory = store / "metadata"  # version 0: no metadata-format file
    metadata = MetadataStore(directory)
    state = metadata.load()
    topic = next(iter(state.topics))
    metadata.commit(state, [configs_altered(topic, {"retention_ms": 1000})])
    assert not (directory / METADATA_FORMAT_FILE).exists()  # a version-0 event: unchanged
    quota = quotas_altered(QuotaEntity(client_id="loader"), {"producer_byte_rate": 1024.0})
    metadata.commit(state, [quota])
    assert EVENT_VERSIONS[quota["type"]] == 1 == METADATA_LOG_VERSION
    assert read_format_file(directory / METADATA_FORMAT_FILE, METADATA_LOG_VERSION) == 1
    metadata.close()
    # Today's raylog reads it back; one that reads version 0 only refuses the directory
    # rather than stopping at an event it cannot apply.
    reopened = MetadataStore(directory)
    assert reopened.load().quotas == {QuotaEntity(client_id="loader"):
                                      {"producer_byte_rate": 1024.0}}
    reopened.close()
    monkeypatch.setattr(metadata_store, "METADATA_LOG_VERSION", 0)
    refused(lambda: MetadataStore(directory), METADATA_FORMAT_FILE, 1, 0, store)


def test_a_metadata_log_directory_of_a_newer_format_is_refused(store):
    write_format_file(store / "metadata" / LOG_FORMAT_FILE, LOG_FORMAT_VERSION + 1)
    refused(lambda: MetadataStore(store / "metadata"), LOG_FORMAT_FILE,
            LOG_FORMAT_VERSION + 1, LOG_FORMAT_VERSION, store)


def test_a_metadata_snapshot_of_a_newer_format_is_refused_not_set_aside(store):
    [path] = (store / "metadata").glob("*.snapshot")
    data = bytearray(path.read_bytes())
    data[4] = METADATA_SNAPSHOT_VERSION + 1  # the version byte (the checksum does not cover it)
    path.write_bytes(bytes(data))
    newer = METADATA_SNAPSHOT_VERSION + 1
    refused(lambda: read_snapshot(store / "metadata", 4), path.name, newer,
            METADATA_SNAPSHOT_VERSION, store)
    refused(lambda: MetadataStore(store / "metadata"), path.name, newer,
            METADATA_SNAPSHOT_VERSION, store)


def test_a_broker_identity_of_a_newer_format_is_refused(store):
    path = store / "broker" / IDENTITY_FILE
    path.write_text(path.read_text().replace(f"version={IDENTITY_VERSION}",
                                             f"version={IDENTITY_VERSION + 1}"))
    refused(lambda: read_identity(store / "broker"), IDENTITY_FILE, IDENTITY_VERSION + 1,
            IDENTITY_VERSION, store)


# -- records of the internal topics --------------------------------------------------------------


def records(store: Path, topic: str) -> list[tuple[bytes, bytes | None]]:
    return [(k.encode(), None if v is None else v.encode())
            for t, k, v in json.loads((store / "records.json").read_text()) if t == topic]


def with_version(value: bytes, field: str, version: int) -> bytes:
    return json.dumps({**json.loads(value), field: version}).encode()


def test_a_group_record_of_a_newer_format_stops_the_replay(store):
    (key, value), *_ = records(store, "__consumer_offsets")
    groups = GroupCoordinator(clock=lambda: 0)
    groups.load(key, with_version(value, JSON_VERSION_FIELD, GROUPS_VERSION))  # written out
    assert groups.offsets["g"]
    newer = with_version(value, JSON_VERSION_FIELD, GROUPS_VERSION + 1)
    with pytest.raises(UnsupportedFormatVersionError, match="__consumer_offsets") as e:
        GroupCoordinator(clock=lambda: 0).load(key, newer)
    assert (e.value.found, e.value.supported) == (GROUPS_VERSION + 1, GROUPS_VERSION)
    with pytest.raises(UnsupportedFormatVersionError):
        GroupCoordinator.transactional_offsets([(key, newer)])


def test_a_schema_record_of_a_newer_format_stops_the_replay(store):
    (key, value), *_ = records(store, "_schemas")
    RegistryState().apply(0, key, with_version(value, JSON_VERSION_FIELD, SCHEMAS_VERSION))
    with pytest.raises(UnsupportedFormatVersionError, match="_schemas") as e:
        RegistryState().apply(0, key, with_version(value, JSON_VERSION_FIELD,
                                                   SCHEMAS_VERSION + 1))
    assert (e.value.found, e.value.supported) == (SCHEMAS_VERSION + 1, SCHEMAS_VERSION)
    assert not RegistryState().apply(0, b'["a-later-kind"]', b"not even json")  # void


def test_a_transaction_record_of_a_newer_format_stops_the_replay(store):
    (key, value), *_ = records(store, "__transaction_state")
    with pytest.raises(UnsupportedFormatVersionError, match="__transaction_state") as e:
        load_transactions([(key, with_version(value, "version", TRANSACTION_VERSION + 1))])
    assert (e.value.found, e.value.supported) == (TRANSACTION_VERSION + 1, TRANSACTION_VERSION)
