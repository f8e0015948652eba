"""Source offsets as target offsets: what a consumer group needs to fail over.

Every batch the target acknowledges tells the mirror where a range of source offsets landed.
:class:`OffsetSyncs` keeps that per partition as *points* ``(source, target, span)``: source
offsets [source, source + span) landed at target offsets [target, target + span), one for
one. Consecutive batches of a gap-free source extend one point, so a partition copied
without gaps needs a single point however long it runs; a gap (compaction, retention)
starts a new one, and a compacted batch (fewer records than offsets) is a point of span 0 at
each end.

:meth:`OffsetSyncs.translate` maps a source offset (a group's committed position: the next
record to read) to the target offset to resume at: exact inside a point, otherwise the end
of the last point below it, so a consumer may read again what lies between, never skip
anything. A position below every point known cannot be translated (None).

Checkpoint records, written by the mirror to the target's ``_mirror.<alias>.checkpoints``
topic (compacted: the newest record per key is what counts), carry both: ``sync:<topic>:<n>``
holds a partition's newest points, ``group:<id>`` a source group's committed offsets with
their translation. Plain Python: no Ray, no Arrow.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping
from typing import Any

MAX_POINTS = 1000  # per partition in memory; the oldest go first
CHECKPOINT_POINTS = 64  # per partition in a sync record


class OffsetSyncs:
    """Where the source offsets of one partition landed on the target. Not safe for
    concurrent use.

    >>> syncs = OffsetSyncs()
    >>> syncs.add(100, 110, 0, 10)    # source [100, 110) at target [0, 10)
    >>> syncs.translate(105), syncs.translate(110), syncs.translate(50)
    (5, 10, None)
    """

    def __init__(self, points: Iterable[tuple[int, int, int]] = ()) -> None:
        self.points: list[list[int]] = [list(p) for p in sorted(points)]

    def add(self, source_start: int, source_end: int, target_start: int,
            target_end: int) -> None:
        """A batch holding source offsets [source_start, source_end) landed at target
        offsets [target_start, target_end)."""
        records = target_end - target_start
        last = self.points[-1] if self.points else None
        if source_end - source_start == records:
            if last is not None and last[0] + last[2] == source_start and \
                    last[1] + last[2] == target_start:
                last[2] += records
            else:
                self._append([source_start, target_start, records])
            return
        if last is None or last[:2] != [source_start, target_start] or last[2]:
            self._append([source_start, target_start, 0])
        self._append([source_end, target_end, 0])

    def _append(self, point: list[int]) -> None:
        if self.points and point[0] <= self.points[-1][0]:
            # The copy went back (a restarted mirror re-learning a range): keep it monotone.
            del self.points[bisect.bisect_left(self.points, point[:1]):]
        self.points.append(point)
        del self.points[:-MAX_POINTS]

    def merge(self, points: Iterable[Iterable[int]]) -> None:
        """Take in points persisted earlier (a restarted mirror's memory): those below what
        this instance knows."""
        first = self.points[0][0] if self.points else None
        given = [list(p) for p in points]
        older = [p for p in given if first is None or p[0] < first]
        self.points = sorted(older + self.points)[-MAX_POINTS:]

    def translate(self, source_offset: int) -> int | None:
        """The target offset to resume at for a consumer whose next source record is
        ``source_offset``; None when it lies below every point known."""
        i = bisect.bisect_right(self.points, [source_offset, float("inf"), 0]) - 1
        if i < 0:
            return None
        source, target, span = self.points[i]
        return target + min(source_offset - source, span)

    def learn(self, source_offset: int, target_offset: int) -> None:
        """Keep a translation found elsewhere (read from the target's batches) as a point of
        span 0 among the others."""
        point = [source_offset, target_offset, 0]
        i = bisect.bisect_left(self.points, point)
        if i == len(self.points) or self.points[i][0] != source_offset:
            self.points.insert(i, point)
            del self.points[:-MAX_POINTS]

    def source_at(self, target_offset: int) -> int | None:
        """The source offset a point says lands at ``target_offset``, None if none does
        (where a copy stopped, when the target's batches are gone)."""
        for source, target, span in reversed(self.points):
            if target <= target_offset <= target + span:
                return source + target_offset - target
        return None

    def newest(self, count: int = CHECKPOINT_POINTS) -> list[list[int]]:
        return [list(p) for p in self.points[-count:]]


# -- checkpoint records ----------------------------------------------------------------------------

def sync_key(topic: str, partition: int) -> bytes:
    return f"sync:{topic}:{partition}".encode()


def group_key(group_id: str) -> bytes:
    return f"group:{group_id}".encode()


def sync_value(syncs: OffsetSyncs) -> bytes:
    return json.dumps({"points": syncs.newest()}).encode()


def group_value(group_id: str, offsets: Mapping[tuple[str, int], tuple[int, int]]) -> bytes:
    """A group's committed source offsets and their target offsets: ``offsets`` maps
    (source topic, partition) to (source offset, target offset). (When it was written is
    the record's timestamp.)"""
    return json.dumps({"group": group_id,
                       "offsets": [[t, p, s, d] for (t, p), (s, d) in sorted(offsets.items())]
                       }).encode()


class Checkpoints:
    """What a checkpoint topic holds, folded: the newest record per key wins (as
    compaction would keep). Plain data; build it with :meth:`add` in offset order."""

    def __init__(self) -> None:
        self.syncs: dict[tuple[str, int], list[list[int]]] = {}
        self.groups: dict[str, dict[str, Any]] = {}

    def add(self, key: bytes | None, value: bytes | None, timestamp: int = 0) -> None:
        """One record of the topic (its timestamp in ms); unknown or malformed ones are
        skipped (a newer mirror may write kinds this one does not know)."""
        if key is None:
            return
        kind, _, rest = key.decode(errors="replace").partition(":")
        try:
            body = None if value is None else json.loads(value)
            if kind == "sync":
                topic, _, partition = rest.rpartition(":")
                if body is None:
                    self.syncs.pop((topic, int(partition)), None)
                else:
                    self.syncs[(topic, int(partition))] = [list(map(int, p))
                                                           for p in body["points"]]
            elif kind == "group":
                if body is None:
                    self.groups.pop(rest, None)
                else:
                    self.groups[rest] = {**body, "at_ms": timestamp}
        except (ValueError, KeyError, TypeError):
            return

    def group_offsets(self, group_id: str) -> dict[tuple[str, int], tuple[int, int]] | None:
        """(source topic, partition) -> (source offset, target offset) of the group's newest
        checkpoint, None if there is none."""
        body = self.groups.get(group_id)
        if body is None:
            return None
        return {(t, p): (s, d) for t, p, s, d in body["offsets"]}
