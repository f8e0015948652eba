"""The remote segment record's round trip and the object store seam on file://."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidConfigError
from raylog.tiered.layout import (
    COPY_FINISHED,
    MANIFEST,
    RemoteFile,
    RemoteSegment,
    digest,
)
from raylog.tiered.store import ObjectStore


def segment(**changes) -> RemoteSegment:
    fields = dict(topic="t", topic_id="abc", partition=2, segment_id="s1", base_offset=100,
                  end_offset=199, max_timestamp=5, size_bytes=1000, leader_epoch=3,
                  broker_id=1, leader_epochs={0: 0, 3: 150},
                  files={"segment.log": RemoteFile(1000, digest(b"x"))})
    return RemoteSegment(**{**fields, **changes})


def test_a_record_round_trips_and_changes_state():
    record = segment()
    assert RemoteSegment.from_json(record.to_json()) == record
    done = record.with_state(COPY_FINISHED, 42)
    assert (done.state, done.event_time_ms, done.key()) == (COPY_FINISHED, 42, "abc/2/s1")
    assert done.folder("/p/") == "/p/t-abc/2/00000000000000000100-s1"


@pytest.mark.parametrize("data", [b"{", b"[]", b'{"topic": "t"}',
                                  segment(version=2).to_json()])
def test_what_is_not_a_whole_record_of_a_known_version_is_refused(data):
    with pytest.raises(ValueError):
        RemoteSegment.from_json(data)


def test_a_record_that_ends_before_it_starts_or_has_no_known_state_is_refused():
    with pytest.raises(ValueError):
        segment(end_offset=99)
    with pytest.raises(ValueError):
        segment(state="uploading")


def test_the_file_store_puts_gets_lists_and_deletes(tmp_path):
    store = ObjectStore.from_uri(f"file://{tmp_path}/store")
    folder = segment().folder(store.prefix)
    store.put(f"{folder}/{MANIFEST}", b"hello world")
    assert store.get(f"{folder}/{MANIFEST}") == b"hello world"
    assert store.get_range(f"{folder}/{MANIFEST}", 6, 5) == b"world"
    assert store.size(f"{folder}/{MANIFEST}") == 11
    assert store.size(f"{folder}/nothing") is None
    parent = folder.rsplit("/", 1)[0]
    assert store.list_folders(parent) == [folder]
    assert not list((tmp_path / "store").rglob("*.tmp"))
    store.delete_folder(folder)
    assert store.list_folders(parent) == [] and store.size(f"{folder}/{MANIFEST}") is None
    store.delete_folder(folder)  # twice is nothing


@pytest.mark.parametrize("uri, settings", [("/no/scheme", None),
                                           ("file:///tmp/x", {"region": "eu"}),
                                           ("s3://bucket/p", {"colour": "red"})])
def test_a_store_that_cannot_be_opened_is_a_config_error(uri, settings):
    with pytest.raises(InvalidConfigError):
        ObjectStore.from_uri(uri, settings)
