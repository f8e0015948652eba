"""Offset bounds of a read: "earliest", "latest", offsets, timestamps, per partition.

Spark's Kafka source conventions apply: -2 means earliest and -1 latest in per-partition
maps. Plain Python: resolving a bound needs the partition's earliest and latest offsets and,
for timestamps, a lookup the caller supplies.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Union

from raylog.errors import InvalidOffsetRangeError, OffsetOutOfRangeError
from raylog.types import EARLIEST, LATEST, TopicPartition
from raylog.util.arguments import INT64_MAX

EARLIEST_OFFSET = -2
LATEST_OFFSET = -1


class Timestamp(NamedTuple):
    """A bound at the first record whose timestamp is at or after ``ms``."""

    ms: int


Spec = Union[str, int, Timestamp]  # noqa: UP007 - a runtime alias
Bound = Union[Spec, Mapping[Any, Any]]  # noqa: UP007


def datetime_ms(moment: datetime.datetime) -> int:
    """Milliseconds since the epoch of a datetime; one without a timezone is UTC (as
    ``ray.data.read_kafka`` takes it)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _single(spec: Any, what: str) -> Spec:
    if isinstance(spec, datetime.datetime):
        return _single(Timestamp(datetime_ms(spec)), what)
    if isinstance(spec, Timestamp):
        if type(spec.ms) is not int or not 0 <= spec.ms <= INT64_MAX:
            raise InvalidOffsetRangeError(f"{what}: a timestamp must be ms >= 0, got {spec.ms!r}")
        return spec
    if isinstance(spec, Mapping) and set(spec) == {"timestamp"}:
        return _single(Timestamp(spec["timestamp"]), what)
    if spec in (EARLIEST, LATEST):
        return spec
    if type(spec) is int:
        if spec == EARLIEST_OFFSET:
            return EARLIEST
        if spec == LATEST_OFFSET:
            return LATEST
        if 0 <= spec <= INT64_MAX:
            return spec
    raise InvalidOffsetRangeError(
        f"{what} must be 'earliest', 'latest', an offset >= 0, -2, -1, a datetime, "
        f"Timestamp(ms) or a map of those per partition, got {spec!r}")


def spec_for(bound: Bound, tp: TopicPartition, default: str, what: str) -> Spec:
    """The bound that applies to one partition. A map may be keyed by TopicPartition,
    (topic, partition), or topic -> {partition: spec}; partitions it omits get ``default``."""
    if isinstance(bound, Mapping) and set(bound) != {"timestamp"}:
        for key in (tp, tuple(tp)):
            if key in bound:
                return _single(bound[key], f"{what} of {tp.topic}-{tp.partition}")
        per_topic = bound.get(tp.topic)
        if isinstance(per_topic, Mapping):
            for key in (tp.partition, str(tp.partition)):
                if key in per_topic:
                    return _single(per_topic[key], f"{what} of {tp.topic}-{tp.partition}")
            return default
        if per_topic is not None:
            return _single(per_topic, f"{what} of {tp.topic}")
        return default
    return _single(bound, what)


def resolve(spec: Spec, earliest: int, latest: int,
            by_time: Callable[[int], int | None]) -> int:
    """An offset from a spec; a timestamp past every record resolves to ``latest``."""
    if spec == EARLIEST:
        return earliest
    if spec == LATEST:
        return latest
    if isinstance(spec, Timestamp):
        found = by_time(spec.ms)
        return latest if found is None else found
    return spec


def check_range(tp: TopicPartition, start: int, end: int, earliest: int, latest: int) -> None:
    """Refuse a range that starts before the log start, ends past the end, or goes back."""
    name = f"{tp.topic}-{tp.partition}"
    if start < earliest:
        raise OffsetOutOfRangeError(
            f"{name}: start offset {start} is before the log start {earliest}")
    if end > latest:
        raise OffsetOutOfRangeError(
            f"{name}: end offset {end} is past the end of the partition ({latest})")
    if end < start:
        raise InvalidOffsetRangeError(f"{name}: end offset {end} is before start {start}")


def split(start: int, end: int, max_records: int) -> list[tuple[int, int]]:
    """[start, end) cut into consecutive ranges of at most ``max_records`` offsets."""
    return [(s, min(s + max_records, end)) for s in range(start, end, max_records)]


def plan_tasks(ranges: Mapping[TopicPartition, tuple[int, int]], max_records: int,
               parallelism: int, min_records: int = 10_000,
               ) -> list[list[tuple[TopicPartition, int, int]]]:
    """Group offset ranges into read tasks, as Spark packs file splits into partitions.

    A task reads at most ``per_task`` records: the total spread over ``parallelism`` slots,
    but no fewer than ``min_records`` (a task has a fixed cost) and no more than
    ``max_records``. Ranges longer than that are cut; shorter ones are packed together,
    largest first, each into the first task with room. Empty ranges are left out.
    """
    if max_records < 1 or parallelism < 1:
        raise ValueError(f"max_records and parallelism must be >= 1, got {max_records}, "
                         f"{parallelism}")
    total = sum(end - start for start, end in ranges.values())
    per_task = min(max_records, max(min_records, -(-total // parallelism)))
    pieces = sorted(((tp, s, e) for tp, (start, end) in ranges.items()
                     for s, e in split(start, end, per_task)),
                    key=lambda piece: (piece[1] - piece[2], piece[0], piece[1]))
    tasks: list[list[tuple[TopicPartition, int, int]]] = []
    room: list[int] = []
    for piece in pieces:
        size = piece[2] - piece[1]
        slot = next((i for i, left in enumerate(room) if left >= size), None)
        if slot is None:
            tasks.append([piece])
            room.append(per_task - size)
        else:
            tasks[slot].append(piece)
            room[slot] -= size
    for task in tasks:
        task.sort()
    return tasks
