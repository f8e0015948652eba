"""``raylog cluster balance``: the partition balancer on the command line (docs/balancing.md).

Shows the controller's plan (a dry run unless ``--execute``): the moves, as ``raylog topics
reassign`` would make them, and each broker's replicas, leaders and bytes before and after;
``--json`` prints it as Admin.plan_balance returns it. With ``--execute`` it carries the plan
out and waits for it, printing the progress (the bytes copied) as the moves go. ``--remove``
empties brokers before they leave for good. Exit statuses and one-line errors as every
raylog command (raylog/cli/common.py). Imports nothing heavy until the command runs.

:func:`add_action` adds the ``balance`` action to the ``cluster`` group's actions (the way
raylog/cli/cluster.py says: its handler is :func:`cmd_balance`).
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from raylog.cli.cluster import seconds
from raylog.cli.common import connect, int_in, json_flag, print_json


def add_action(actions: argparse._SubParsersAction) -> None:
    """Add ``balance`` to a group's actions (``raylog cluster balance``)."""
    balance = actions.add_parser(
        "balance", help="even replicas, leaders and bytes over the brokers (a dry run unless "
                        "--execute)",
        description="Plan moves of partitions that even the replicas, preferred leaders and "
                    "bytes of the live brokers, copying as few bytes as it can; with "
                    "--execute, carry them out (new replicas copy within "
                    "replication.throttled.rate while producers go on) and wait.")
    balance.set_defaults(handler=cmd_balance)  # run as every cluster action
    mode = balance.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="carry the plan out and wait")
    mode.add_argument("--dry-run", action="store_true",
                      help="only show the plan (what happens without --execute)")
    balance.add_argument("--remove", type=int_in(0), nargs="+", default=[], metavar="BROKER",
                         help="empty these brokers (before they leave for good)")
    balance.add_argument("--timeout-s", type=seconds, default=None,
                         help="with --execute: stop waiting after this long (the moves go "
                              "on); default: wait until done")
    json_flag(balance)


def cmd_balance(args: argparse.Namespace, out: TextIO) -> int:
    from raylog import Admin

    admin = Admin(cluster=connect(args))
    plan = admin.plan_balance(args.remove)
    if not args.json:
        _show(plan, out)
    if not args.execute:
        if args.json:
            print_json({"executed": False, **plan}, out)
        else:
            out.write("dry run: nothing moved (add --execute to carry the plan out)\n")
        return 0

    def progress(status: dict[str, Any]) -> None:
        if not args.json:
            out.write(_progress(status) + "\n")
            out.flush()

    if plan["moves"] and not args.json:
        out.write(f"executing {len(plan['moves'])} moves...\n")
    admin.execute_balance(plan, timeout_s=args.timeout_s, progress=progress)
    if args.json:
        print_json({"executed": True, **plan}, out)
    elif plan["moves"]:
        out.write("balance done: every move made, preferred leaders elected\n")
    return 0


def _show(plan: dict[str, Any], out: TextIO) -> None:
    moves = plan["moves"]
    if moves:
        out.write(f"{'TOPIC':<24}{'PARTITION':>10}  {'REPLICAS':<14}{'TARGET':<14}"
                  f"{'COPY':>10}\n")
        for m in moves:
            out.write(f"{m['topic']:<24}{m['partition']:>10}  {_ids(m['replicas']):<14}"
                      f"{_ids(m['target']):<14}{_bytes(m['bytes']):>10}"
                      f"{'  (leader only)' if m['leader_only'] else ''}\n")
    else:
        out.write("balanced: nothing to move\n")
    out.write(f"{'BROKER':>6}  {'REPLICAS':>14}  {'LEADERS':>12}  {'BYTES':>22}\n")
    for broker, before in plan["before"].items():
        after = plan["after"][broker]
        out.write(f"{broker:>6}  {_change(before['replicas'], after['replicas']):>14}  "
                  f"{_change(before['leaders'], after['leaders']):>12}  "
                  f"{_change(_bytes(before['bytes']), _bytes(after['bytes'])):>22}\n")
    out.write(f"{len(moves)} moves, {_bytes(plan['bytes'])} to copy\n")
    for why in plan["skipped"]:
        out.write(f"not moved: {why}\n")


def _progress(status: dict[str, Any]) -> str:
    moving = status["moving"]
    total = sum(m["bytes_to_copy"] for m in moving)
    copied = sum(m["bytes_copied"] for m in moving)
    return (f"moving {len(moving)} partitions: {_bytes(copied)} of {_bytes(total)} copied; "
            f"{len(status['leaders_pending'])} preferred leaders to elect")


def _ids(brokers: list[int]) -> str:
    return ",".join(map(str, brokers))


def _change(before: object, after: object) -> str:
    return str(after) if before == after else f"{before} -> {after}"


def _bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"
