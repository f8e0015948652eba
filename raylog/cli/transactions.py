"""``raylog transactions list|describe|abort``: the transaction coordinator on the command
line, as Kafka's ``kafka-transactions.sh`` (its column names, and ``--duration-filter`` for
hanging transactions), over Admin. Exit statuses and one-line errors as every raylog
command (raylog/cli/common.py). Imports nothing heavy until a command runs.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, TextIO

from raylog.cli.common import connect, int_in, json_flag, print_json

# The states a transactional id can be in (raylog.transactions.state.TransactionState),
# said here so that --help needs no import of the coordinator.
STATES = ("EMPTY", "ONGOING", "PREPARE_COMMIT", "PREPARE_ABORT", "COMPLETE_COMMIT",
          "COMPLETE_ABORT", "PREPARE_EPOCH_FENCE", "DEAD")


def _state(text: str) -> str:
    state = text.strip().upper()
    if state not in STATES:
        raise argparse.ArgumentTypeError(
            f"unknown transaction state {text!r}; the states are {', '.join(STATES)}")
    return state


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``transactions`` to the ``raylog`` parser."""
    transactions = commands.add_parser(
        "transactions", aliases=["transaction"],
        help="transactions: list, describe, abort a hanging one")
    transactions.set_defaults(run="transactions")
    actions = transactions.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="transactional ids, their states and producers")
    listing.add_argument("--state", dest="states", action="append", type=_state,
                         metavar="STATE", help=f"only ids in this state; repeatable "
                                               f"({', '.join(STATES[:6])})")
    listing.add_argument("--duration-filter", type=int_in(0), default=0, metavar="MS",
                         help="only open transactions running at least this long (hanging "
                              "ones)")
    json_flag(listing)
    describe = actions.add_parser("describe", help="one transactional id: state, producer, "
                                                   "timeout, partitions, age")
    describe.add_argument("--transactional-id", required=True)
    json_flag(describe)
    abort = actions.add_parser("abort", help="abort an open transaction: its producer is "
                                             "fenced, its partitions get abort markers")
    abort.add_argument("--transactional-id", required=True)
    json_flag(abort)


def cmd_transactions(args: argparse.Namespace, out: TextIO) -> int:
    from raylog import Admin

    admin = Admin(cluster=connect(args))
    if args.action == "list":
        found = admin.list_transactions(args.states, args.duration_filter)
        if args.json:
            print_json(found, out)
            return 0
        out.write(f"{'TransactionalId':<32}{'ProducerId':>21}{'ProducerEpoch':>15}  "
                  f"TransactionState\n")
        for t in found:
            out.write(f"{t['transactional_id']:<32}{t['producer_id']:>21}"
                      f"{t['producer_epoch']:>15}  {_kafka_state(t['state'])}\n")
        return 0
    if args.action == "describe":
        described = admin.describe_transaction(args.transactional_id)
    else:
        described = admin.abort_transaction(args.transactional_id)
    if args.json:
        print_json(described, out)
        return 0
    if args.action == "abort":
        out.write(f"aborting the transaction of {args.transactional_id}: producer "
                  f"{described['producer_id']} fenced at epoch "
                  f"{described['producer_epoch']}; abort markers being written\n")
    _describe(described, out)
    return 0


def _describe(t: dict[str, Any], out: TextIO) -> None:
    """One row, under kafka-transactions.sh's describe columns."""
    columns = {
        "CoordinatorEpoch": t.get("coordinator_epoch", "-"),
        "TransactionalId": t["transactional_id"],
        "ProducerId": t["producer_id"],
        "ProducerEpoch": t["producer_epoch"],
        "TransactionState": _kafka_state(t["state"]),
        "TransactionTimeoutMs": t["timeout_ms"],
        "CurrentTransactionStartTimeMs": _start(t["start_ms"]),
        "TransactionDurationMs": "None" if t["age_ms"] is None else t["age_ms"],
        "TopicPartitions": ",".join(t["partitions"]) or "-",
    }
    widths = [max(len(name), len(str(value))) + 2 for name, value in columns.items()]
    out.write("".join(f"{name:<{w}}" for name, w in zip(columns, widths, strict=True))
              .rstrip() + "\n")
    out.write("".join(f"{value!s:<{w}}" for value, w in zip(columns.values(), widths,
                                                             strict=True)).rstrip() + "\n")


def _kafka_state(state: str) -> str:
    """``PREPARE_COMMIT`` as Kafka's tools spell it: ``PrepareCommit``."""
    return "".join(word.capitalize() for word in state.split("_"))


def _start(start_ms: int) -> str:
    if start_ms < 0:
        return "None"
    return f"{start_ms} ({time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(start_ms / 1000))})"
