"""``raylog produce`` and ``raylog consume``: records between the terminal and a topic.

``produce`` waits for the acknowledgement of every record it sends and reports each record
the cluster refused (by line number and cause): a run in which any record was not produced
ends with exit status 1, after printing how many were.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any, TextIO

from raylog.cli import connect, report
from raylog.errors import InvalidRecordError, RaylogError, RecordTooLargeError

SHOWN_LINES = 5  # line numbers listed per cause of refusal
SHOWN_CAUSES = 3  # causes listed in the one line of a refusal


def _record(line: str, separator: str | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one line of input, as the bytes that were read."""
    try:
        data = line.rstrip("\n").encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        raise InvalidRecordError(f"not valid text: {e}") from None
    if separator is None:
        return None, data
    key, sep, value = data.partition(separator.encode("utf-8", "surrogateescape"))
    if not sep:
        raise InvalidRecordError(f"no key separator {separator!r} in the line")
    return key, value


def _refusals(refused: list[tuple[int, BaseException]]) -> str:
    """The causes of refusal, each with the lines it refused: one line of text."""
    lines_by_cause: dict[str, list[int]] = defaultdict(list)
    for number, error in refused:
        lines_by_cause[str(error)].append(number)
    parts = []
    for cause, numbers in list(lines_by_cause.items())[:SHOWN_CAUSES]:
        shown = ", ".join(map(str, numbers[:SHOWN_LINES]))
        more = f" and {len(numbers) - SHOWN_LINES} more" if len(numbers) > SHOWN_LINES else ""
        parts.append(f"{cause} (line{'s' if len(numbers) > 1 else ''} {shown}{more})")
    if len(lines_by_cause) > SHOWN_CAUSES:
        parts.append(f"{len(lines_by_cause) - SHOWN_CAUSES} more causes")
    return "; ".join(parts)


def cmd_produce(args: argparse.Namespace, out: TextIO, stdin: TextIO) -> int:
    from raylog import Producer

    cluster = connect(args)
    _check_target(cluster, args)
    producer = Producer(cluster=cluster, acks=args.acks, linger_ms=args.linger_ms)
    sent: list[tuple[int, Any]] = []  # (line number, future)
    refused: list[tuple[int, BaseException]] = []
    stopped: tuple[int, RaylogError] | None = None  # an error about the target, not a record
    closing: RaylogError | None = None
    try:
        for number, line in enumerate(stdin, 1):
            try:
                key, value = _record(line, args.key_separator)
                sent.append((number, producer.send(args.topic, value, key=key,
                                                   partition=args.partition)))
            except (InvalidRecordError, RecordTooLargeError) as e:
                refused.append((number, e))
            except RaylogError as e:
                stopped = number, e
                break
    finally:
        try:
            producer.close()  # sends what is queued and waits for the acknowledgements
        except RaylogError as e:  # it may sum up failures that the futures below detail
            closing = e
    produced = 0
    failed = []
    for number, future in sent:
        try:
            error = future.exception(timeout=0)
        except RaylogError as e:  # not acknowledged even now
            error = e
        if error is None:
            produced += 1
        else:
            failed.append((number, error))
    if closing is not None and stopped is None and not failed:
        stopped = 0, closing  # a failure that no record's future explains
    refused = sorted(refused + failed, key=lambda entry: entry[0])
    return _summary(args, out, produced, refused, stopped)


def _check_target(cluster: Any, args: argparse.Namespace) -> int:
    """The topic's partition count; refuses an unknown topic or partition before any I/O."""
    from raylog.topics import check_partition

    count = cluster.topic(args.topic).num_partitions
    if args.partition is not None:
        check_partition(args.topic, args.partition, count)
    return count


def _summary(args: argparse.Namespace, out: TextIO, produced: int,
             refused: list[tuple[int, BaseException]],
             stopped: tuple[int, RaylogError] | None) -> int:
    unacknowledged = " (acks=0: not acknowledged)" if args.acks == "0" else ""
    out.write(f"produced {produced} records to {args.topic}{unacknowledged}\n")
    out.flush()
    if stopped is not None:
        where = f" at line {stopped[0]}" if stopped[0] else ""
        return report(f"stopped{where}: {stopped[1]}" +
                      (f"; also refused: {_refusals(refused)}" if refused else ""), 1)
    if refused:
        total = produced + len(refused)
        return report(f"{len(refused)} of {total} records refused: {_refusals(refused)}", 1)
    return 0


def _format_record(record: Any, fmt: str) -> str:
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode("utf-8", "backslashreplace")

    if fmt == "json":
        return json.dumps({
            "topic": record.topic, "partition": record.partition, "offset": record.offset,
            "timestamp": record.timestamp, "key": text(record.key), "value": text(record.value),
            "headers": [[k, text(v)] for k, v in record.headers],
        })
    if fmt == "kv":
        return f"{text(record.key)}\t{text(record.value)}"
    if fmt == "full":
        return (f"{record.partition}\t{record.offset}\t{record.timestamp}\t"
                f"{text(record.key)}\t{text(record.value)}")
    return text(record.value) or ""


def cmd_consume(args: argparse.Namespace, out: TextIO) -> int:
    """Print records until ``--max-messages`` are printed (a limit, as Kafka's console
    consumer has: 0 prints none) or none came for ``--timeout-ms``."""
    from raylog import Consumer, TopicPartition

    cluster = connect(args)
    count = _check_target(cluster, args)
    if args.max_messages == 0:
        return 0
    consumer = Consumer(cluster=cluster,
                        auto_offset_reset="earliest" if args.from_beginning else "latest",
                        consumer_timeout_ms=args.timeout_ms, group_id=args.group,
                        enable_auto_commit=False)
    printed: dict[TopicPartition, int] = {}  # next offset after the last record printed
    try:
        if args.group is not None and args.partition is None:
            consumer.subscribe(args.topic)
        else:
            partitions = [args.partition] if args.partition is not None else range(count)
            consumer.assign([TopicPartition(args.topic, p) for p in partitions])
        for seen, record in enumerate(consumer, 1):
            out.write(_format_record(record, args.format) + "\n")
            printed[TopicPartition(record.topic, record.partition)] = record.offset + 1
            if args.max_messages is not None and seen >= args.max_messages:
                break
        out.flush()
        if args.group is not None and printed:
            consumer.commit(printed)  # exactly what was printed, not what was fetched
    finally:
        consumer.close()
    return 0
