"""The ``raylog`` command line: topics, producing, consuming, cluster status, the demo.

Exit status: 0 when everything asked was done; 1 when raylog or the cluster refused
something (an unknown topic, a bad config, a record not produced, no cluster); 2 for a bad
command line. Every error is one line on stderr, ``raylog: error: <cause>``, never a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from raylog import __version__
from raylog.cli.common import (
    UsageError,
    connect,
    int_in,
    json_flag,
    print_json,
    report,
    short_node,
)
from raylog.errors import RaylogError
from raylog.types import EARLIEST, LATEST

EPILOG = ("exit status: 0 done; 1 refused by raylog or the cluster (e.g. a record not "
          "produced); 2 bad command line. Errors are one line on stderr: 'raylog: error: ...'.")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse adds the usage text)."""

    def error(self, message: str) -> NoReturn:
        report(f"{message} (see '{self.prog} --help')", 2)
        self.exit(2)


def _non_empty(text: str) -> str:
    """An argparse type: any text but the empty one."""
    if not text:
        raise argparse.ArgumentTypeError("expected a non-empty value")
    return text


def _config_pair(text: str) -> tuple[str, str]:
    """An argparse type: ``NAME=VALUE``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value


def _configs(pairs: Sequence[tuple[str, str]] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in pairs or []:
        if name in out:
            raise UsageError(f"config {name!r} is given twice")
        out[name] = value
    return out


def _reset_target(text: str) -> str | int | dict[str, int]:
    """``--to`` of reset-offsets: earliest, latest, an offset, or timestamp:MS."""
    if text in (EARLIEST, LATEST):
        return text
    if text.isdigit():
        return int(text)
    kind, _, ms = text.partition(":")
    if kind == "timestamp" and ms.isdigit():
        return {"timestamp": int(ms)}
    raise argparse.ArgumentTypeError(
        f"--to must be earliest, latest, an offset or timestamp:MS, got {text!r}")


def _move(text: str) -> tuple[int, list[int]]:
    """``--move`` of topics reassign: ``PARTITION:BROKER,BROKER,...``."""
    partition, sep, brokers = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(partition), [int(b) for b in brokers.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected PARTITION:BROKER,BROKER,... (say 0:1,2,3), got {text!r}") from None


def _kafka_configs(configs: dict[str, Any]) -> dict[str, Any]:
    """Config names as Kafka's tools write them (``retention.ms``)."""
    from raylog.metadata.topics import kafka_config_name

    return {kafka_config_name(name): value for name, value in configs.items()}


def _topic_json(topic: dict[str, Any]) -> dict[str, Any]:
    return {**topic, "configs": _kafka_configs(topic["configs"])}


# -- topics --------------------------------------------------------------------------------------

def cmd_topics(args: argparse.Namespace, out: TextIO) -> int:
    from raylog import Admin

    configs = _configs(getattr(args, "config", None) or getattr(args, "set", None))
    if args.action == "alter" and args.partitions is None and not args.set and not args.delete:
        raise UsageError("topics alter needs --partitions, --set or --delete")
    admin = Admin(cluster=connect(args))
    if args.action == "create":
        described = admin.create_topic(args.name, args.partitions, args.replication_factor,
                                       configs)
        out.write(f"created topic {described['name']} with {len(described['partitions'])} "
                  f"partitions, replication factor {described['replication_factor']}\n")
    elif args.action == "list":
        names = admin.list_topics(include_internal=args.internal)
        if args.json:
            print_json(names, out)
        for name in [] if args.json else names:
            out.write(name + "\n")
    elif args.action == "describe":
        wanted = _partition_filter(args)
        topics = admin.describe_topics(args.names or None)
        storage = {t["name"]: _tiered_storage(admin, t) for t in topics}
        if args.json:
            print_json([{**_topic_json(t), "partitions": [
                {**p, **({"storage": storage[t["name"]][p["partition"]]}
                         if p["partition"] in storage[t["name"]] else {})}
                for p in t["partitions"] if wanted(p)]} for t in topics], out)
        for topic in [] if args.json else topics:
            _describe_topic(topic, out, wanted, storage[topic["name"]])
    elif args.action == "elect-leaders":
        moved = admin.elect_leaders(args.names or None)
        for name, partitions in sorted(moved.items()):
            out.write(f"{name}: preferred leader elected for partitions "
                      f"{','.join(map(str, partitions))}\n")
        if not moved:
            out.write("every partition is led by its preferred replica (or it cannot be)\n")
    elif args.action == "reassign":
        targets = {partition: brokers for partition, brokers in args.move}
        admin.reassign_partitions(args.name, targets)
        for partition, brokers in sorted(targets.items()):
            out.write(f"{args.name}-{partition}: moving to brokers "
                      f"{','.join(map(str, brokers))} (see topics describe)\n")
    elif args.action == "delete":
        admin.delete_topic(args.name)
        out.write(f"deleted topic {args.name}\n")
    elif args.action == "alter":
        _alter_topic(admin, args, configs)
        _describe_topic(admin.describe_topic(args.name), out)
    return 0


def _alter_topic(admin: Any, args: argparse.Namespace, configs: dict[str, str]) -> None:
    """Check every change against the topic first, then make them: a refusal leaves the
    topic as it was."""
    from raylog.metadata.topics import check_partition_growth, configs_to_delete, normalize_configs

    topic = admin.describe_topic(args.name)
    updates = normalize_configs(configs)
    configs_to_delete(args.name, topic["configs"], args.delete or [])
    if args.partitions is not None:
        check_partition_growth(args.name, len(topic["partitions"]), args.partitions)
        admin.add_partitions(args.name, args.partitions)
    if updates or args.delete:
        admin.alter_configs(args.name, updates, args.delete)


def _partition_filter(args: argparse.Namespace) -> Callable[[dict[str, Any]], bool]:
    """Kafka's ``--under-replicated-partitions`` and ``--unavailable-partitions``."""
    if args.under_replicated_partitions:
        return lambda p: p["under_replicated"]
    if args.unavailable_partitions:
        return lambda p: p["offline"]
    return lambda p: True


# What a tiered partition's leader says of its two logs (Partition.describe and
# TieredHost.describe), as ``topics describe`` shows it.
_STORAGE_FIELDS = ("log_start_offset", "high_watermark", "log_end_offset", "size_bytes",
                   "remote_log_start_offset", "remote_end_offset", "remote_size_bytes",
                   "remote_segments", "not_copied_bytes")


def _tiered_storage(admin: Any, topic: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Partition -> its leader's local and remote offsets and sizes, for a tiered topic
    (remote.storage.enable); {} for any other."""
    if not topic["configs"].get("remote_storage_enable"):
        return {}
    leaders = {p["partition"]: p["leader"] for p in topic["partitions"]}
    return {r["partition"]: {k: r.get(k) for k in _STORAGE_FIELDS}
            for r in admin.describe_replicas(topic["name"])
            if r.get("broker_id") == leaders.get(r["partition"])}


def _describe_topic(topic: dict[str, Any], out: TextIO,
                    wanted: Callable[[dict[str, Any]], bool] = lambda p: True,
                    storage: dict[int, dict[str, Any]] | None = None) -> None:
    partitions = [p for p in topic["partitions"] if wanted(p)]
    if not partitions and len(topic["partitions"]):
        return  # a filter left nothing of this topic to show
    configs = ",".join(f"{k}={v}" for k, v in sorted(_kafka_configs(topic["configs"]).items()))
    out.write(f"Topic: {topic['name']}\tTopicId: {topic['topic_id']}\t"
              f"PartitionCount: {len(topic['partitions'])}\t"
              f"ReplicationFactor: {topic['replication_factor']}\tConfigs: {configs}\n")
    for p in partitions:
        flags = [flag for flag, on in (("UnderReplicated", p["under_replicated"]),
                                       ("Offline", p["offline"])) if on]
        target = f"\tTarget: {','.join(map(str, p['target']))}" if p.get("target") else ""
        out.write(f"\tPartition: {p['partition']}\tLeader: {_dash(p['leader'])}\t"
                  f"LeaderEpoch: {p['leader_epoch']}\t"
                  f"Replicas: {','.join(map(str, p['replicas']))}\t"
                  f"Isr: {','.join(map(str, p['isr']))}{target}"
                  f"{chr(9) + ' '.join(flags) if flags else ''}\n")
        tiered = (storage or {}).get(p["partition"])
        if tiered is not None:
            out.write(f"\t\tLocal: {tiered['log_start_offset']}..{tiered['log_end_offset']} "
                      f"({tiered['size_bytes']} bytes)\tRemote: "
                      f"{_dash(tiered['remote_log_start_offset'])}.."
                      f"{_dash(tiered['remote_end_offset'])} ({tiered['remote_size_bytes']} "
                      f"bytes, {tiered['remote_segments']} segments)\t"
                      f"NotCopied: {tiered['not_copied_bytes']} bytes\t"
                      f"HighWatermark: {tiered['high_watermark']}\n")


# -- groups --------------------------------------------------------------------------------------

def cmd_groups(args: argparse.Namespace, out: TextIO) -> int:
    from raylog import Admin

    admin = Admin(cluster=connect(args))
    if args.action == "list":
        groups = admin.list_groups()
        if args.json:
            print_json(groups, out)
            return 0
        out.write(f"{'group':<30}{'state':<13}{'members':>8}{'generation':>12}\n")
        for g in groups:
            out.write(f"{g['group_id']:<30}{g['state']:<13}{g['members']:>8}"
                      f"{g['generation']:>12}\n")
    elif args.action == "describe":
        group = admin.describe_group(args.group)
        if args.json:
            print_json(group, out)
            return 0
        out.write(f"group {group['group_id']}: {group['state']}, generation "
                  f"{group['generation']}, {len(group['members'])} members, total lag "
                  f"{group['lag']}\n")
        out.write(f"{'topic':<24}{'partition':>10}{'committed':>11}{'end':>11}{'lag':>9}  "
                  f"owner\n")
        instances = {m["member_id"]: m.get("instance_id") for m in group["members"]}
        for p in group["partitions"]:
            owner = p["owner"] or "-"
            if instance := instances.get(p["owner"]):  # a static Kafka member
                owner += f" (instance {instance})"
            out.write(f"{p['topic']:<24}{p['partition']:>10}{_dash(p['committed']):>11}"
                      f"{_dash(p['end_offset']):>11}{_dash(p['lag']):>9}  {owner}\n")
    elif args.action == "delete":
        admin.delete_group(args.group)
        out.write(f"deleted group {args.group}\n")
    elif args.action == "reset-offsets":
        return _reset_offsets(admin, args, out)
    return 0


def _reset_offsets(admin: Any, args: argparse.Namespace, out: TextIO) -> int:
    """As Kafka's tool: the plan (current and new offset per partition), applied only with
    ``--execute``."""
    from raylog.errors import UnknownGroupError

    new = admin.reset_offsets(args.group, args.topic, args.to, args.partitions, dry_run=True)
    try:
        current = {p["partition"]: p["committed"] for p in admin.describe_group(args.group)
                   ["partitions"] if p["topic"] == args.topic}
    except UnknownGroupError:  # no offsets yet: Kafka's tool sets them all the same
        current = {}
    if args.execute:
        new = admin.reset_offsets(args.group, args.topic, args.to, args.partitions)
    plan = [{"group": args.group, "topic": args.topic, "partition": partition,
             "current_offset": current.get(partition), "new_offset": offset}
            for partition, offset in sorted(new.items())]
    if args.json:
        print_json({"executed": args.execute, "offsets": plan}, out)
        return 0
    out.write(f"{'GROUP':<24}{'TOPIC':<24}{'PARTITION':>10}{'CURRENT-OFFSET':>16}"
              f"{'NEW-OFFSET':>12}\n")
    for row in plan:
        out.write(f"{row['group']:<24}{row['topic']:<24}{row['partition']:>10}"
                  f"{_dash(row['current_offset']):>16}{row['new_offset']:>12}\n")
    if not args.execute:
        out.write("dry run: nothing changed (add --execute to set these offsets)\n")
    return 0


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


# -- cluster -------------------------------------------------------------------------------------

def cmd_cluster(args: argparse.Namespace, out: TextIO) -> int:
    from raylog.cli.cluster import run

    return run(args, out)


def cmd_start(args: argparse.Namespace, out: TextIO) -> int:
    cluster = connect(args, create=True)
    out.write(f"raylog controller running ({len(cluster.controller.list_topics())} "
              f"topics)\n")
    if args.kafka_port is not None:
        from raylog.cli.gateway import security_from
        from raylog.session import start_kafka_listeners

        security = security_from(args)  # refused here, before any listener starts
        listeners = start_kafka_listeners(args.kafka_port, args.auto_create_topics,
                                          security=security,
                                          max_connections_per_ip=args.max_connections_per_ip)
        for node, (host, port) in sorted(listeners.items()):
            out.write(f"Kafka listener of broker node {short_node(node)} on {host}:{port}\n")
        if not listeners:
            out.write("no broker node is up: no Kafka listener started (run this again "
                      "once brokers joined)\n")
    return 0


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    """Run the benchmark suite of this source tree with the arguments given; its exit
    status is the command's."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "suite.py"
    if not script.exists():
        return report(f"no benchmark suite at {script}: it is part of raylog's source tree, "
                      f"not of an installed package", 1)
    out.flush()
    return subprocess.call([sys.executable, str(script), *args.suite_args])


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from raylog.cli.demo import run_demo

    address = "local" if args.embedded else args.address
    return run_demo(services=args.services, records_per_service=args.records,
                    partitions=args.partitions, address=address, out=out)


# -- parser --------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="raylog", description="Operate a raylog cluster.", epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"raylog {__version__}")
    parser.add_argument("--address", default=None, help=ADDRESS_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    topics = commands.add_parser("topics", aliases=["topic"],
                                 help="create, list, describe, alter, delete topics; elect "
                                      "leaders, reassign partitions")
    topics.set_defaults(run="topics")
    actions = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int_in(1), default=1)
    create.add_argument("--replication-factor", type=int_in(1), default=1)
    create.add_argument("--config", action="append", type=_config_pair, metavar="NAME=VALUE",
                        help="a topic config, as Kafka names it (retention.ms=...); "
                             "repeatable")
    listing = actions.add_parser("list", help="topic names")
    listing.add_argument("--internal", action="store_true", help="include internal topics")
    json_flag(listing)
    describe = actions.add_parser("describe", help="partitions: leader, epoch, replicas, ISR")
    describe.add_argument("names", nargs="*")
    only = describe.add_mutually_exclusive_group()
    only.add_argument("--under-replicated-partitions", action="store_true",
                      help="only partitions whose ISR lacks some of their replicas")
    only.add_argument("--unavailable-partitions", action="store_true",
                      help="only partitions without a live leader")
    json_flag(describe)
    elect = actions.add_parser("elect-leaders",
                               help="give each partition back to its preferred replica")
    elect.add_argument("names", nargs="*", help="topics (default: all)")
    reassign = actions.add_parser(
        "reassign", help="move partitions to other brokers while producers keep writing")
    reassign.add_argument("name")
    reassign.add_argument("--move", action="append", type=_move, required=True,
                          metavar="PARTITION:BROKER,BROKER,...",
                          help="the first broker is the preferred leader; repeatable")
    delete = actions.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name")
    alter = actions.add_parser("alter", help="add partitions, set or delete configs (checks "
                                             "every change before making any)")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int_in(1),
                       help="grow to this many partitions (never fewer)")
    alter.add_argument("--set", action="append", type=_config_pair, metavar="NAME=VALUE")
    alter.add_argument("--delete", action="append", metavar="NAME",
                       help="delete a config that is set (back to its default)")

    produce = commands.add_parser(
        "produce", help="send lines (stdin or a file) as records",
        description="Send each line of stdin (or of --file) as a record and wait for every "
                    "acknowledgement. Prints how many records were produced; records the "
                    "cluster refused are counted on stderr, and then the exit status is 1.")
    produce.set_defaults(run="produce")
    produce.add_argument("topic")
    produce.add_argument("--file", "-f", metavar="PATH",
                         help="read lines from this file instead of stdin (with a progress "
                              "bar on a terminal)")
    produce.add_argument("--key-separator", type=_non_empty,
                         help="split each line into key SEP value")
    produce.add_argument("--partition", type=int_in(0))
    produce.add_argument("--acks", default="1", choices=["0", "1", "all"])
    produce.add_argument("--linger-ms", type=int_in(0), default=5)

    consume = commands.add_parser(
        "consume", help="print records, following the topic",
        description="Print records as they arrive, as kafka-console-consumer does: it follows "
                    "the topic until --max-messages, --timeout-ms or --until-end ends it, or "
                    "Ctrl-C. With --group it commits what it printed periodically, before "
                    "giving up a partition and on exit.")
    consume.set_defaults(run="consume")
    consume.add_argument("topic")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max-messages", type=int_in(0),
                         help="stop after printing this many records (0: print none)")
    consume.add_argument("--timeout-ms", type=_timeout_ms, default=None,
                         help="stop after this long without records (-1, the default: "
                              "follow until interrupted)")
    consume.add_argument("--until-end", action="store_true",
                         help="stop at the end offsets the partitions had when it started")
    consume.add_argument("--partition", type=int_in(0))
    consume.add_argument("--group", help="consume as a member of this consumer group")
    consume.add_argument("--print", type=_print_fields, default=None, metavar="FIELDS",
                         dest="fields",
                         help=f"what to print of each record, in order, tab-separated: any "
                              f"of {','.join(PRINTABLE)} (default: value)")
    consume.add_argument("--format", choices=["value", "kv", "full", "json"], default=None,
                         help="json: one JSON object per record; value, kv, full: shorthands "
                              "for --print value, key,value and "
                              "partition,offset,timestamp,key,value")

    groups = commands.add_parser("groups", aliases=["group"],
                                 help="consumer groups: list, describe, delete, reset offsets")
    groups.set_defaults(run="groups")
    group_actions = groups.add_subparsers(dest="action", required=True, metavar="ACTION")
    json_flag(group_actions.add_parser("list", help="groups, their states and members"))
    describe_group = group_actions.add_parser(
        "describe", help="members, owners, committed offsets and lag per partition")
    describe_group.add_argument("group")
    json_flag(describe_group)
    delete_group = group_actions.add_parser("delete", help="delete an empty group")
    delete_group.add_argument("group")
    reset = group_actions.add_parser(
        "reset-offsets", help="move a stopped group's committed offsets (a dry run unless "
                              "--execute)")
    reset.add_argument("group")
    reset.add_argument("topic")
    reset.add_argument("--to", required=True, type=_reset_target,
                       help="earliest, latest, an offset, or timestamp:MS")
    reset.add_argument("--partitions", type=int_in(0), nargs="+")
    run_mode = reset.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true", help="set the offsets")
    run_mode.add_argument("--dry-run", action="store_true",
                          help="only show the plan (what happens without --execute)")
    json_flag(reset)

    from raylog.cli.balance import add_action as add_balance_action
    from raylog.cli.cluster import add_parser as add_cluster_parser

    add_balance_action(add_cluster_parser(commands))

    start = commands.add_parser("start",
                                help="start the raylog controller on a running Ray cluster")
    start.set_defaults(run="start")
    start.add_argument("--kafka-port", type=int_in(0, 65535), default=None,
                       help="also start a Kafka protocol listener on every broker node, on "
                            "this port (0: any free one), each advertising its node")
    start.add_argument("--auto-create-topics", action="store_true",
                       help="with --kafka-port: create a topic a Kafka client asks metadata "
                            "of (auto.create.topics.enable; default off)")
    from raylog.cli.gateway import add_security_options

    add_security_options(start, prefix="kafka-")  # --kafka-security-protocol, ...

    demo = commands.add_parser("demo", help="page views from simulated services, end to end")
    demo.set_defaults(run="demo")
    demo.add_argument("--services", type=int_in(1, 8), default=4)
    demo.add_argument("--records", type=int_in(1), default=25_000, help="records per service")
    demo.add_argument("--partitions", type=int_in(1), default=6)
    demo.add_argument("--embedded", action="store_true",
                      help="start an embedded local cluster even if RAY_ADDRESS names one")
    from raylog.cli.schemas import add_parsers as add_schema_parsers

    add_schema_parsers(commands)
    from raylog.cli.mirror import add_commands as add_mirror_commands

    add_mirror_commands(commands, group_actions)
    from raylog.cli.transactions import add_parser as add_transactions_parser

    add_transactions_parser(commands)
    from raylog.cli.gateway import add_parser as add_gateway_parser

    add_gateway_parser(commands)
    from raylog.cli.users import add_parser as add_users_parser

    add_users_parser(commands)
    from raylog.cli.acls import add_parser as add_acls_parser

    add_acls_parser(commands)
    from raylog.cli.quotas import add_parser as add_quotas_parser

    add_quotas_parser(commands)
    _address_anywhere(commands)
    # Added after --address went everywhere: every argument after `bench` is the suite's.
    bench = commands.add_parser("bench", add_help=False, prefix_chars="\0",
                                help="run the benchmark suite (benchmarks/suite.py of the "
                                     "source tree; 'raylog bench --help' for its options)")
    bench.set_defaults(run="bench")
    bench.add_argument("suite_args", nargs=argparse.REMAINDER)
    return parser


def _timeout_ms(text: str) -> int | None:
    """``--timeout-ms``: milliseconds, or -1 for none (follow until interrupted)."""
    if text.strip() == "-1":
        return None
    return int_in(0)(text)


PRINTABLE = ("timestamp", "partition", "offset", "headers", "key", "value")


def _print_fields(text: str) -> tuple[str, ...]:
    fields = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in fields if f not in PRINTABLE]
    if unknown or not fields:
        raise argparse.ArgumentTypeError(
            f"--print takes a comma-separated list of {', '.join(PRINTABLE)}; got {text!r}")
    return fields


ADDRESS_HELP = ("the Ray cluster to join, HOST:PORT (default: $RAY_ADDRESS; raylog joins no "
                "other cluster)")


def _address_anywhere(commands: argparse._SubParsersAction) -> None:
    """``--address`` after any (sub)command too, as in ``raylog topics list --address X``
    or ``raylog topics --address X list``; the last one given wins."""
    seen: set[int] = set()
    for sub in commands.choices.values():
        if id(sub) in seen:  # an alias: the same parser under another name
            continue
        seen.add(id(sub))
        sub.add_argument("--address", default=argparse.SUPPRESS, help=ADDRESS_HELP)
        nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            _address_anywhere(nested[0])


# The commands whose module is imported only when run (raylog.cli.<module>.cmd_<command>),
# and those of them that read standard input.
LAZY_COMMANDS = {"produce": "records", "consume": "records", "gateway": "gateway",
                 "users": "users", "acls": "acls", "transactions": "transactions",
                 "quotas": "quotas",
                 "schemas": "schemas", "registry": "schemas"}
READS_STDIN = frozenset({"produce", "users"})


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         stdin: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)  # a usage error exits with status 2
    try:
        if args.run in LAZY_COMMANDS:
            module = importlib.import_module(f"raylog.cli.{LAZY_COMMANDS[args.run]}")
            command = getattr(module, f"cmd_{args.run}")
            return command(args, out, stdin) if args.run in READS_STDIN else command(args, out)
        # imported already: build_parser added its commands
        from raylog.cli import mirror as mirror_commands

        if args.run in mirror_commands.COMMANDS:
            return mirror_commands.run(args, out)
        return globals()[f"cmd_{args.run}"](args, out)
    except (UsageError, argparse.ArgumentTypeError) as e:
        return report(e, 2)
    except RaylogError as e:
        return report(e, 1)
    except KeyboardInterrupt:
        return report("interrupted", 130)
    except BrokenPipeError:
        return 141  # the reader went away (`raylog consume ... | head`), as a shell would say
    except Exception as e:  # never a traceback: name what failed on one line
        return report(f"unexpected {type(e).__name__}: {e}", 1)


if __name__ == "__main__":
    sys.exit(main())
