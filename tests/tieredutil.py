"""Uploading closed segments of a partition directory into an object store, as a leader's
upload writes them (raylog/tiered/layout.py): the tests and the benchmark of the analytics
read use it where the broker side's uploads are not there (or not wanted).

What an upload writes, mirrored: per closed segment (every segment but the active one) a
folder ``<base>-<segment id>`` with ``segment.log``, ``offset.index``, ``time.index``,
``txn.index`` (only if the segment has entries), ``leader-epoch-checkpoint`` (the epochs
starting at or below the segment's end offset), ``producer.snapshot`` (the newest snapshot
at or below its end offset + 1, if the directory has one), every object put before
``manifest.json``, which is written last; the returned records are in COPY_FINISHED with
every object's size and sha256. Also a fake of the broker's ``tiered_view`` answer.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from raylog.records.header import iter_headers
from raylog.replica.epochs import LEADER_EPOCH_FILE
from raylog.storage.segment import log_bases, segment_files
from raylog.tiered import layout
from raylog.tiered.layout import COPY_FINISHED, RemoteFile, RemoteSegment
from raylog.tiered.store import ObjectStore

TOPIC_ID = "0f0f0f0f0f0f4f0f8f0f0f0f0f0f0f0f"


def _epochs_upto(directory: Path, end_offset: int) -> tuple[bytes, dict[int, int]]:
    """The leader-epoch checkpoint's entries starting at or below ``end_offset``, as the
    file's text (version, count, entries) and as a map."""
    path = directory / LEADER_EPOCH_FILE
    lines = path.read_text().split("\n") if path.exists() else []
    entries = [tuple(int(v) for v in line.split()) for line in lines[2:] if line.strip()]
    kept = {epoch: start for epoch, start in entries if start <= end_offset}
    text = "\n".join(["0", str(len(kept)), *(f"{e} {s}" for e, s in kept.items())]) + "\n"
    return text.encode(), kept


def _snapshot_upto(directory: Path, offset: int) -> bytes | None:
    found = sorted(p for p in directory.glob("*.snapshot")
                   if p.stem.isdigit() and int(p.stem) <= offset)
    return found[-1].read_bytes() if found else None


def upload_segments(directory: str | Path, store: ObjectStore, topic: str, partition: int, *,
                    topic_id: str = TOPIC_ID, leader_epoch: int = 0, broker_id: int = 0,
                    below: int | None = None, now_ms: int = 0) -> list[RemoteSegment]:
    """Upload every closed segment of the partition log in ``directory`` (the files must be
    written: flush the log first) whose records all lie below ``below`` (default: all of
    them); returns their records, in offset order."""
    directory = Path(directory)
    bases = log_bases(set(p.name for p in directory.iterdir()))
    out = []
    for base in bases[:-1]:  # the last one is the active segment
        log_name, index_name, time_name, txn_name = segment_files(base)
        data = (directory / log_name).read_bytes()
        headers = [h for _, h in iter_headers(data)]
        if not headers:
            continue
        end = headers[-1].last_offset
        if below is not None and end >= below:
            break
        objects = {layout.SEGMENT: data,
                   layout.OFFSET_INDEX: (directory / index_name).read_bytes(),
                   layout.TIME_INDEX: (directory / time_name).read_bytes()}
        txn = directory / txn_name
        if txn.exists() and txn.stat().st_size:
            objects[layout.TXN_INDEX] = txn.read_bytes()
        epochs_file, epochs = _epochs_upto(directory, end)
        objects[layout.LEADER_EPOCHS] = epochs_file
        snapshot = _snapshot_upto(directory, end + 1)
        if snapshot is not None:
            objects[layout.PRODUCER_SNAPSHOT] = snapshot
        segment = RemoteSegment(
            topic=topic, topic_id=topic_id, partition=partition, segment_id=uuid.uuid4().hex,
            base_offset=base, end_offset=end, max_timestamp=max(h.max_timestamp for h in headers),
            size_bytes=len(data), leader_epoch=leader_epoch, broker_id=broker_id,
            leader_epochs=epochs,
            files={name: RemoteFile(len(body), layout.digest(body))
                   for name, body in objects.items()})
        folder = segment.folder(store.prefix)
        for name, body in objects.items():
            store.put(f"{folder}/{name}", body)
        segment = segment.with_state(COPY_FINISHED, now_ms)
        store.put(f"{folder}/{layout.MANIFEST}", segment.to_json())
        out.append(segment)
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
