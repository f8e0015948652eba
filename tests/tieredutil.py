"""Uploading closed segments of a partition directory into an object store with the
leader's own Uploader (raylog/tiered/uploader.py): the tests and the benchmark of the
analytics read use it where the brokers' uploads are not wanted (a directory a test reads
from a live broker, or a log it wrote). Each closed segment (every segment but the active
one) is one copy from its base offset, with the leader epochs and the aborted transactions
the directory's checkpoint and transaction indexes hold for it; the returned records are
the COPY_FINISHED ones. Also a fake of the broker's ``tiered_view`` answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raylog.records.header import iter_headers
from raylog.replica.epochs import LEADER_EPOCH_FILE
from raylog.storage.segment import log_bases, segment_files
from raylog.storage.txn_index import AbortedTxn, decode_entries
from raylog.tiered.layout import RemoteSegment
from raylog.tiered.store import ObjectStore
from raylog.tiered.uploader import (
    CopyPlan,
    LocalSegment,
    PartitionRef,
    ProducersBefore,
    Uploader,
)

TOPIC_ID = "0f0f0f0f0f0f4f0f8f0f0f0f0f0f0f0f"


def _epochs(directory: Path) -> list[tuple[int, int]]:
    """The leader-epoch checkpoint's (epoch, start offset) entries."""
    path = directory / LEADER_EPOCH_FILE
    lines = path.read_text().split("\n") if path.exists() else []
    return [(int(e), int(s)) for e, s in (line.split() for line in lines[2:] if line.strip())]


def _aborted(directory: Path, bases: list[int]) -> list[AbortedTxn]:
    """Every entry of the directory's transaction indexes, in marker order."""
    out: list[AbortedTxn] = []
    for base in bases:
        txn = directory / segment_files(base)[3]
        if txn.exists():
            out.extend(decode_entries(txn.read_bytes()))
    return sorted(out, key=lambda e: e.last_offset)


def upload_segments(directory: str | Path, store: ObjectStore, topic: str, partition: int, *,
                    topic_id: str = TOPIC_ID, leader_epoch: int = 0, broker_id: int = 0,
                    below: int | None = None, now_ms: int = 0) -> list[RemoteSegment]:
    """Upload every closed segment of the partition log in ``directory`` (the files must be
    written: flush the log first) whose records all lie below ``below`` (default: all of
    them); returns their records, in offset order."""
    directory = Path(directory)
    bases = log_bases(set(p.name for p in directory.iterdir()))
    ref = PartitionRef(topic, topic_id, partition)
    epochs, aborted = _epochs(directory), _aborted(directory, bases)
    uploader = Uploader(store, lambda record: True, clock=lambda: now_ms)
    out = []
    for base in bases[:-1]:  # the last one is the active segment
        path = directory / segment_files(base)[0]
        size = path.stat().st_size
        ends = [h.last_offset for _, h in iter_headers(path.read_bytes(), verify=False)]
        if not ends:
            continue
        if below is not None and ends[-1] >= below:
            break
        plan = CopyPlan(ref, LocalSegment(base, ends[-1] + 1, str(path), size), base,
                        leader_epoch, broker_id, {e: s for e, s in epochs if s <= ends[-1]},
                        tuple(e for e in aborted
                              if e.last_offset >= base and e.first_offset <= ends[-1]),
                        ProducersBefore(out[-1] if out else None))
        out.append(uploader.copy(plan))
    return out


def fake_view(segments: list[RemoteSegment], log_start: int, high_watermark: int, uri: str,
              settings: dict[str, Any] | None = None,
              local_log_start: int | None = None) -> dict[str, Any]:
    """A ``tiered_view`` answer over ``segments``: the local log starts right after the last
    of them unless ``local_log_start`` says otherwise."""
    if local_log_start is None:
        local_log_start = segments[-1].end_offset + 1 if segments else log_start
    return {"remote": [s.to_json() for s in segments], "log_start": log_start,
            "local_log_start": local_log_start, "high_watermark": high_watermark,
            "store": {"uri": uri, "settings": dict(settings or {})}}
