"""The ``raylog`` command line: topics, producing, consuming, cluster status, the demo."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from raylog.errors import RaylogError


def _configs(pairs: Sequence[str] | None) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def _reset_target(text: str) -> str | int | dict[str, int]:
    """``--to`` of reset-offsets: earliest, latest, an offset, or timestamp:MS."""
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    kind, _, ms = text.partition(":")
    if kind == "timestamp" and ms.isdigit():
        return {"timestamp": int(ms)}
    raise argparse.ArgumentTypeError(
        f"--to must be earliest, latest, an offset or timestamp:MS, got {text!r}")


def _connect(args: argparse.Namespace, create: bool = False):
    import raylog

    return raylog.init(args.address, start_local=False, create=create)


def _print_json(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=2, sort_keys=True, default=str)
    out.write("\n")


# -- topics --------------------------------------------------------------------------------------

def cmd_topics(args: argparse.Namespace, out: TextIO) -> int:
    from raylog import Admin

    admin = Admin(cluster=_connect(args))
    if args.action == "create":
        described = admin.create_topic(args.name, args.partitions, args.replication_factor,
                                       _configs(args.config))
        out.write(f"created topic {described['name']} with {len(described['partitions'])} "
                  f"partitions, replication factor {described['replication_factor']}\n")
    elif args.action == "list":
        for name in admin.list_topics(include_internal=args.internal):
            out.write(name + "\n")
    elif args.action == "describe":
        for topic in admin.describe_topics(args.names or None):
            _describe_topic(topic, out)
    elif args.action == "delete":
        admin.delete_topic(args.name)
        out.write(f"deleted topic {args.name}\n")
    elif args.action == "alter":
        if args.partitions is not None:
            admin.add_partitions(args.name, args.partitions)
        if args.set or args.delete:
            admin.alter_configs(args.name, _configs(args.set), args.delete)
        _describe_topic(admin.describe_topic(args.name), out)
    return 0


def _describe_topic(topic: dict[str, Any], out: TextIO) -> None:
    configs = ",".join(f"{k}={v}" for k, v in sorted(topic["configs"].items()))
    out.write(f"Topic: {topic['name']}\tTopicId: {topic['topic_id']}\t"
              f"PartitionCount: {len(topic['partitions'])}\t"
              f"ReplicationFactor: {topic['replication_factor']}\tConfigs: {configs}\n")
    for p in topic["partitions"]:
        out.write(f"\tPartition: {p['partition']}\tLeader: {_short(p['leader'])}\t"
                  f"LeaderEpoch: {p['leader_epoch']}\t"
                  f"Replicas: {','.join(map(_short, p['replicas']))}\t"
                  f"Isr: {','.join(map(_short, p['isr']))}\n")


def _short(node_id: str | None) -> str:
    return "none" if node_id is None else node_id[:12]


# -- produce and consume ------------------------------------------------------------------------

def cmd_produce(args: argparse.Namespace, out: TextIO, stdin: TextIO) -> int:
    from raylog import Producer

    producer = Producer(cluster=_connect(args), acks=args.acks, linger_ms=args.linger_ms)
    sent = 0
    try:
        for line in stdin:
            line = line.rstrip("\n")
            key = None
            if args.key_separator:
                raw_key, sep, line = line.partition(args.key_separator)
                if not sep:
                    raise RaylogError(f"line {sent + 1} has no key separator "
                                      f"{args.key_separator!r}")
                key = raw_key.encode()
            producer.send(args.topic, line.encode(), key=key, partition=args.partition)
            sent += 1
        producer.flush()
    finally:
        producer.close()
    out.write(f"produced {sent} records to {args.topic}\n")
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
    from raylog import Consumer, TopicPartition

    cluster = _connect(args)
    consumer = Consumer(cluster=cluster,
                        auto_offset_reset="earliest" if args.from_beginning else "latest",
                        consumer_timeout_ms=args.timeout_ms, group_id=args.group,
                        enable_auto_commit=False)
    if args.group is not None and args.partition is None:
        consumer.subscribe([args.topic])
    else:
        count = cluster.topic(args.topic).num_partitions
        partitions = [args.partition] if args.partition is not None else range(count)
        consumer.assign([TopicPartition(args.topic, p) for p in partitions])
    seen = 0
    printed: dict[TopicPartition, int] = {}  # next offset after the last record printed
    try:
        for record in consumer:
            out.write(_format_record(record, args.format) + "\n")
            printed[TopicPartition(record.topic, record.partition)] = record.offset + 1
            seen += 1
            if args.max_messages is not None and seen >= args.max_messages:
                break
        if args.group is not None and printed:
            consumer.commit(printed)  # exactly what was printed, not what was fetched
    finally:
        consumer.close()
    out.flush()
    return 0


# -- groups --------------------------------------------------------------------------------------

def cmd_groups(args: argparse.Namespace, out: TextIO) -> int:
    from raylog import Admin

    admin = Admin(cluster=_connect(args))
    if args.action == "list":
        groups = admin.list_groups()
        out.write(f"{'group':<30}{'state':<13}{'members':>8}{'generation':>12}\n")
        for g in groups:
            out.write(f"{g['group_id']:<30}{g['state']:<13}{g['members']:>8}"
                      f"{g['generation']:>12}\n")
    elif args.action == "describe":
        group = admin.describe_group(args.group)
        if args.json:
            _print_json(group, out)
            return 0
        out.write(f"group {group['group_id']}: {group['state']}, generation "
                  f"{group['generation']}, {len(group['members'])} members, total lag "
                  f"{group['lag']}\n")
        out.write(f"{'topic':<24}{'partition':>10}{'committed':>11}{'end':>11}{'lag':>9}  "
                  f"owner\n")
        for p in group["partitions"]:
            out.write(f"{p['topic']:<24}{p['partition']:>10}{_dash(p['committed']):>11}"
                      f"{_dash(p['end_offset']):>11}{_dash(p['lag']):>9}  "
                      f"{p['owner'] or '-'}\n")
    elif args.action == "delete":
        admin.delete_group(args.group)
        out.write(f"deleted group {args.group}\n")
    elif args.action == "reset-offsets":
        moved = admin.reset_offsets(args.group, args.topic, args.to, args.partitions)
        for partition, offset in sorted(moved.items()):
            out.write(f"{args.topic}\t{partition}\t{offset}\n")
    return 0


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


# -- cluster -------------------------------------------------------------------------------------

def cmd_cluster(args: argparse.Namespace, out: TextIO) -> int:
    from raylog import Admin

    status = Admin(cluster=_connect(args)).cluster_status()
    if args.json:
        _print_json(status, out)
        return 0
    out.write(f"controller on node {_short(status['controller_node'])}, "
              f"{status['topics']} topics\n")
    out.write(f"{'node':<14}{'alive':<7}{'replicas':>9}{'leaders':>9}\n")
    for broker in status["brokers"]:
        out.write(f"{_short(broker['node_id']):<14}{'yes' if broker['alive'] else 'no':<7}"
                  f"{len(broker['replicas']):>9}{len(broker['leaders']):>9}\n")
    return 0


def cmd_start(args: argparse.Namespace, out: TextIO) -> int:
    cluster = _connect(args, create=True)
    out.write(f"raylog controller running ({len(cluster.controller.call('list_topics'))} "
              f"topics)\n")
    return 0


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from raylog.demo import run_demo

    address = "local" if args.embedded else args.address
    return run_demo(services=args.services, records_per_service=args.records,
                    partitions=args.partitions, address=address, out=out)


# -- parser --------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raylog", description="Operate a raylog cluster.")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: $RAY_ADDRESS or a running local "
                             "cluster)")
    commands = parser.add_subparsers(dest="command", required=True)

    topics = commands.add_parser("topics", help="create, list, describe, alter, delete topics")
    actions = topics.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", metavar="NAME=VALUE")
    listing = actions.add_parser("list")
    listing.add_argument("--internal", action="store_true", help="include internal topics")
    describe = actions.add_parser("describe")
    describe.add_argument("names", nargs="*")
    delete = actions.add_parser("delete")
    delete.add_argument("name")
    alter = actions.add_parser("alter")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, help="grow to this many partitions")
    alter.add_argument("--set", action="append", metavar="NAME=VALUE")
    alter.add_argument("--delete", action="append", metavar="NAME")

    produce = commands.add_parser("produce", help="send stdin lines as records")
    produce.add_argument("topic")
    produce.add_argument("--key-separator", help="split each line into key SEP value")
    produce.add_argument("--partition", type=int)
    produce.add_argument("--acks", default="1", choices=["0", "1", "all"])
    produce.add_argument("--linger-ms", type=int, default=5)

    consume = commands.add_parser("consume", help="print records")
    consume.add_argument("topic")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max-messages", type=int)
    consume.add_argument("--partition", type=int)
    consume.add_argument("--group", help="consume as a member of this consumer group")
    consume.add_argument("--format", choices=["value", "kv", "full", "json"], default="value")
    consume.add_argument("--timeout-ms", type=int, default=5000,
                         help="stop after this long without records")

    groups = commands.add_parser("groups", help="consumer groups: list, describe, delete, "
                                                "reset offsets")
    group_actions = groups.add_subparsers(dest="action", required=True)
    group_actions.add_parser("list")
    describe_group = group_actions.add_parser("describe")
    describe_group.add_argument("group")
    describe_group.add_argument("--json", action="store_true")
    delete_group = group_actions.add_parser("delete")
    delete_group.add_argument("group")
    reset = group_actions.add_parser("reset-offsets")
    reset.add_argument("group")
    reset.add_argument("topic")
    reset.add_argument("--to", required=True, type=_reset_target,
                       help="earliest, latest, an offset, or timestamp:MS")
    reset.add_argument("--partitions", type=int, nargs="*")

    cluster = commands.add_parser("cluster", help="cluster status")
    cluster.add_argument("action", choices=["status"])
    cluster.add_argument("--json", action="store_true")

    commands.add_parser("start", help="start the raylog controller on a running Ray cluster")

    demo = commands.add_parser("demo", help="page views from simulated services, end to end")
    demo.add_argument("--services", type=int, default=4)
    demo.add_argument("--records", type=int, default=25_000, help="records per service")
    demo.add_argument("--partitions", type=int, default=6)
    demo.add_argument("--embedded", action="store_true",
                      help="always start an embedded local cluster, even if one is running")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         stdin: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        if args.command == "topics":
            return cmd_topics(args, out)
        if args.command == "produce":
            return cmd_produce(args, out, stdin or sys.stdin)
        if args.command == "consume":
            return cmd_consume(args, out)
        if args.command == "cluster":
            return cmd_cluster(args, out)
        if args.command == "groups":
            return cmd_groups(args, out)
        if args.command == "start":
            return cmd_start(args, out)
        return cmd_demo(args, out)
    except RaylogError as e:
        print(f"raylog: error: {e}", file=sys.stderr)
        return 1
    except argparse.ArgumentTypeError as e:
        print(f"raylog: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
