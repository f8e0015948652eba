"""raylog/storage/files.py's write_atomic, the one place a file is rewritten whole, and the
writers that go through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.hosting import write_marker
from raylog.metadata.identity import BrokerIdentity, write_identity
from raylog.metadata.snapshot import write_snapshot
from raylog.metadata.state import MetadataState
from raylog.replica.producer_state import ProducerSnapshots, ProducerStates
from raylog.storage import files
from raylog.storage.checkpoint import Checkpoint
from tests.unit.powerloss import PowerLoss


def test_a_power_loss_at_any_step_leaves_the_old_file_or_the_new_one(tmp_path, monkeypatch):
    power = PowerLoss(monkeypatch, tmp_path / "data")
    files.make_dirs(power.root)
    path = power.root / "state"
    files.write_atomic(path, b"old " * 1000)
    power.copy_each_event = True
    files.write_atomic(path, b"new " * 1000)
    power.copy_each_event = False
    assert path.read_bytes() == b"new " * 1000
    seen = [(copy / "state").read_bytes() for copy in power.copies]
    assert set(seen) == {b"old " * 1000, b"new " * 1000}
    assert seen[-1] == b"new " * 1000  # durable, name included, when it returned
    assert [kind for kind, _ in power.events[-3:]] == ["fsync", "replace", "sync"]


def test_without_a_directory_sync_the_new_name_is_not_durable_yet(tmp_path, monkeypatch):
    power = PowerLoss(monkeypatch, tmp_path / "data")
    files.make_dirs(power.root)
    files.write_atomic(power.root / "state", b"one")
    files.write_atomic(power.root / "state", b"two", sync_dir=False)
    assert (power.crash_copy() / "state").read_bytes() == b"one"
    files.fsync_dir(power.root)
    assert (power.crash_copy() / "state").read_bytes() == b"two"


def test_a_failed_fsync_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "state"
    files.write_atomic(path, b"old")

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(files, "fsync", failing)
    with pytest.raises(OSError):
        files.write_atomic(path, b"new")
    assert path.read_bytes() == b"old"


WRITERS = {
    "checkpoint": lambda d: Checkpoint(d / "checkpoint").write(["1", "2"]),
    "metadata snapshot": lambda d: write_snapshot(d, MetadataState()),
    "broker identity": lambda d: write_identity(d, BrokerIdentity(1, "0123456789abcdef")),
    "partition marker": lambda d: write_marker(d, {"topic": "t", "partition": 0}),
    "producer snapshot": lambda d: ProducerSnapshots(d).write(7, ProducerStates()),
}


@pytest.mark.parametrize("writer", WRITERS)
def test_every_file_rewritten_whole_goes_through_write_atomic(writer, tmp_path, monkeypatch):
    written: list[Path] = []
    real = files.write_atomic

    def recording(path: Path, data: bytes, **kwargs) -> None:
        written.append(Path(path))
        real(path, data, **kwargs)

    monkeypatch.setattr(files, "write_atomic", recording)
    WRITERS[writer](tmp_path)
    assert [p.parent for p in written] == [tmp_path]
    assert not list(tmp_path.glob("*" + files.TMP_SUFFIX))
