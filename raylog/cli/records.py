"""``raylog produce`` and ``raylog consume``: records between the terminal and a topic.

``produce`` waits for the acknowledgement of every record it sends and reports each record
the cluster refused (by line number and cause): a run in which any record was not produced
ends with exit status 1, after printing how many were.

``consume`` follows the topic as ``kafka-console-consumer`` does, until ``--max-messages``,
``--timeout-ms``, ``--until-end``, Ctrl-C or SIGTERM (signals.py); then it prints
``Processed a total of N messages`` on stderr. As a group member it commits what it
printed (never more) every :data:`COMMIT_INTERVAL_S`, before a rebalance takes a partition
away, and on exit.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections import defaultdict
from typing import Any, TextIO

from raylog.cli.common import UsageError, connect, report
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


def _lines(args: argparse.Namespace, stdin: TextIO | None) -> tuple[TextIO, int | None]:
    """The input as text whose undecodable bytes survive (``surrogateescape``: each line's
    bytes are sent as they were), and its size in bytes when known (a file)."""
    if args.file is not None:
        try:
            handle = open(args.file, encoding="utf-8", errors="surrogateescape")  # noqa: SIM115
        except OSError as e:
            raise InvalidRecordError(f"cannot read {args.file}: {e.strerror}") from None
        return handle, os.fstat(handle.fileno()).st_size
    if stdin is not None:
        return stdin, None
    return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape"), None


def cmd_produce(args: argparse.Namespace, out: TextIO, stdin: TextIO | None = None) -> int:
    from raylog import Producer
    from raylog.util.progress import progress

    cluster = connect(args)
    _check_target(cluster, args)
    lines, size = _lines(args, stdin)
    producer = Producer(cluster=cluster, acks=args.acks, linger_ms=args.linger_ms)
    sent: list[tuple[int, Any]] = []  # (line number, future)
    refused: list[tuple[int, BaseException]] = []
    stopped: tuple[int, RaylogError] | None = None  # an error about the target, not a record
    closing: RaylogError | None = None
    shown = progress(size, f"producing to {args.topic}", "bytes") if args.file else None
    try:
        for number, line in enumerate(lines, 1):
            if shown is not None:
                shown.update(len(line))
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
        if shown is not None:
            shown.close()
        if args.file is not None:
            lines.close()
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
    from raylog.metadata.topics import check_partition

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


COMMIT_INTERVAL_S = 5.0  # a group member commits what it printed this often
SHORTHANDS = {"value": ("value",), "kv": ("key", "value"),
              "full": ("partition", "offset", "timestamp", "key", "value")}


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", "backslashreplace")


def _field(record: Any, name: str) -> str:
    """One field as Kafka's console consumer prints it (``CreateTime:...``,
    ``Partition:...``, headers ``k:v,k2:v2`` or ``NO_HEADERS``, ``null`` for none)."""
    if name == "timestamp":
        return f"CreateTime:{record.timestamp}"
    if name == "partition":
        return f"Partition:{record.partition}"
    if name == "offset":
        return f"Offset:{record.offset}"
    if name == "headers":
        return ",".join(f"{k}:{_text(v)}" for k, v in record.headers) or "NO_HEADERS"
    return _text(getattr(record, name))


def format_record(record: Any, fields: tuple[str, ...] | None) -> str:
    """A record as one line: JSON (``fields`` None) or the fields, tab-separated."""
    if fields is None:
        return json.dumps({
            "topic": record.topic, "partition": record.partition, "offset": record.offset,
            "timestamp": record.timestamp,
            "key": None if record.key is None else _text(record.key),
            "value": None if record.value is None else _text(record.value),
            "headers": [[k, None if v is None else _text(v)] for k, v in record.headers],
        })
    if fields == ("value",) and record.value is None:
        return ""
    return "\t".join(_field(record, name) for name in fields)


def _fields(args: argparse.Namespace) -> tuple[str, ...] | None:
    if args.fields is not None:
        if args.format is not None:
            raise UsageError("give --print or --format, not both")
        return args.fields
    if args.format == "json":
        return None
    return SHORTHANDS[args.format or "value"]


class _Printed:
    """The next offset after the last record printed, per partition; a group member
    commits exactly these (never what was fetched and not printed)."""

    def __init__(self, consumer: Any, group: bool) -> None:
        self.consumer = consumer
        self.group = group
        self.next: dict[Any, int] = {}
        self.committed: dict[Any, int] = {}
        self.last_commit = time.monotonic()

    def commit(self, partitions: Any = None) -> None:
        """Commit what was printed of ``partitions`` (default all) and not committed yet."""
        if not self.group:
            return
        wanted = self.next.keys() if partitions is None else set(partitions) & self.next.keys()
        offsets = {tp: self.next[tp] for tp in wanted if self.committed.get(tp) != self.next[tp]}
        if offsets:
            self.consumer.commit(offsets)
            self.committed.update(offsets)
        self.last_commit = time.monotonic()

    def on_partitions_assigned(self, partitions: list) -> None:
        for tp in partitions:  # a partition without a commit starts here, now, not later
            self.consumer.position(tp)

    def on_partitions_revoked(self, partitions: list) -> None:
        self.commit(partitions)  # before another member starts after what we printed

    def on_partitions_lost(self, partitions: list) -> None:
        for tp in partitions:  # not ours any more: committing would be refused
            self.next.pop(tp, None)


def cmd_consume(args: argparse.Namespace, out: TextIO) -> int:
    """Print records until ``--max-messages`` are printed (a limit, as Kafka's console
    consumer has: 0 prints none), none came for ``--timeout-ms``, every partition reached
    the end it had at the start (``--until-end``), or Ctrl-C or SIGTERM."""
    from raylog import Consumer, TopicPartition
    from raylog.cli.signals import StopSignals

    fields = _fields(args)
    cluster = connect(args)
    count = _check_target(cluster, args)
    if args.max_messages == 0:
        return 0
    group = args.group is not None and args.partition is None
    consumer = Consumer(cluster=cluster,
                        auto_offset_reset="earliest" if args.from_beginning else "latest",
                        group_id=args.group, enable_auto_commit=False)
    printed = _Printed(consumer, args.group is not None)
    seen = 0
    with StopSignals() as stop:
        try:
            if group:
                consumer.subscribe([args.topic], listener=printed)
                ends = consumer.end_offsets(
                    TopicPartition(args.topic, p) for p in range(count)) if args.until_end \
                    else None
            else:
                partitions = [args.partition] if args.partition is not None else range(count)
                tps = [TopicPartition(args.topic, p) for p in partitions]
                consumer.assign(tps)
                ends = consumer.end_offsets(tps) if args.until_end else None
            idle_since = time.monotonic()
            while not stop.is_set():
                if ends is not None and _at_end(consumer, ends):
                    break
                if args.timeout_ms is not None and \
                        (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                    break
                records = consumer.poll(timeout_ms=100)
                if records:
                    idle_since = time.monotonic()
                for record in records:
                    tp = TopicPartition(record.topic, record.partition)
                    if ends is not None and record.offset >= ends.get(tp, record.offset + 1):
                        continue  # past the end it had at the start
                    out.write(format_record(record, fields) + "\n")
                    printed.next[tp] = record.offset + 1
                    seen += 1
                    if args.max_messages is not None and seen >= args.max_messages:
                        break
                out.flush()
                if args.max_messages is not None and seen >= args.max_messages:
                    break
                if time.monotonic() - printed.last_commit >= COMMIT_INTERVAL_S:
                    printed.commit()
        except KeyboardInterrupt:
            pass  # a second signal while a step hangs: commit what was printed, close
        finally:
            try:
                out.flush()
                printed.commit()
            finally:
                consumer.close()
                print(f"Processed a total of {seen} messages", file=sys.stderr)
    return 0


def _at_end(consumer: Any, ends: dict) -> bool:
    """Whether every partition this consumer reads has reached its end offset of the start
    (a group member: the partitions it owns now, once it owns any)."""
    assigned = consumer.assignment()
    return bool(assigned) and all(consumer.position(tp) >= ends.get(tp, 0) for tp in assigned)
