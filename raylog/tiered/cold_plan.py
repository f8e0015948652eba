"""Which offsets of a partition an analytics read takes from the object store, and which from
the brokers.

A partition with remote storage holds ``[log_start, local_log_start)`` only in uploaded
segments and ``[local_log_start, high_watermark)`` on its brokers (a segment uploaded but not
yet deleted locally is on both; the brokers serve it). A leader describes this with
``tiered_view(topic, partition)`` (the broker method of the tiered-storage work); a
:class:`TieredView` is that answer, parsed. :func:`split_range` cuts a planned offset range
into :class:`ColdPiece` s, one per remote segment it touches, read from the store without a
broker (raylog/tiered/cold_read.py), and the hot rest, read from the brokers as before.

Plain Python, no Ray: the Ray Data planner and the Spark connector's planner both call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from raylog.errors import OffsetOutOfRangeError
from raylog.tiered.layout import COPY_FINISHED, RemoteSegment


@dataclass(frozen=True)
class TieredView:
    """One partition's log as its leader sees it: the readable remote segments, sorted by
    base offset, and its offsets; ``uri`` and ``settings`` name the object store
    (raylog/tiered/store.py)."""

    remote: tuple[RemoteSegment, ...]
    log_start: int
    local_log_start: int
    high_watermark: int
    uri: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any]) -> TieredView:
        """A ``tiered_view`` answer: ``{"remote": [RemoteSegment.to_json(), ...],
        "log_start", "local_log_start", "high_watermark", "store": {"uri", "settings"}}``."""
        store = answer.get("store") or {}
        remote = sorted((RemoteSegment.from_json(r) for r in answer.get("remote", ())),
                        key=lambda s: s.base_offset)
        return cls(tuple(s for s in remote if s.state == COPY_FINISHED),
                   int(answer["log_start"]), int(answer["local_log_start"]),
                   int(answer["high_watermark"]), store.get("uri"),
                   dict(store.get("settings") or {}))

    @classmethod
    def local_only(cls, log_start: int, high_watermark: int) -> TieredView:
        """The view of a partition without remote storage (or a broker that has no
        ``tiered_view``): everything is hot."""
        return cls((), log_start, log_start, high_watermark)


class ColdPiece(NamedTuple):
    """Offsets [start, end) of one remote segment."""

    segment: RemoteSegment
    start: int
    end: int


def split_range(view: TieredView, start: int, end: int
                ) -> tuple[list[ColdPiece], tuple[int, int] | None]:
    """``[start, end)`` as the pieces read from remote segments (those below the local log
    start) and the range read from the brokers (None if there is none).

    Raises OffsetOutOfRangeError when a cold offset is in no remote segment of the view: the
    remote segments leave a gap (retention deleted one after the range was planned), which a
    new plan resolves."""
    cold_end = min(end, view.local_log_start)
    pieces: list[ColdPiece] = []
    cursor = start
    for segment in view.remote:
        if cursor >= cold_end:
            break
        if segment.end_offset < cursor:
            continue
        if segment.base_offset > cursor:
            break
        until = min(cold_end, segment.end_offset + 1)
        pieces.append(ColdPiece(segment, cursor, until))
        cursor = until
    if cursor < cold_end:
        name = f"{view.remote[0].topic}-{view.remote[0].partition}" if view.remote else \
            "the partition"
        raise OffsetOutOfRangeError(
            f"{name}: offsets [{cursor}, {cold_end}) are below the local log start "
            f"{view.local_log_start} but in no remote segment (the remote log now starts at "
            f"{view.log_start}): plan the read again")
    hot_start = max(start, view.local_log_start)
    return pieces, ((hot_start, end) if hot_start < end else None)
