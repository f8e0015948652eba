"""What every ``raylog`` command shares: one-line errors, argparse types and flags, JSON
output, and the connection to the cluster a command works on.

Imports nothing heavy (no Ray until :func:`connect` runs): ``raylog --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import Any, TextIO

from raylog.util.arguments import INT32_MAX


class UsageError(Exception):
    """A command line that parses but asks for something impossible (exit status 2)."""


def report(message: object, status: int) -> int:
    """Print ``raylog: error: <message>`` as one line on stderr; return ``status``."""
    text = re.sub(r"\s*\n\s*", " ", str(message)).strip()
    print(f"raylog: error: {text}", file=sys.stderr)
    return status


def int_in(minimum: int, maximum: int = INT32_MAX) -> Callable[[str], int]:
    """An argparse type: an integer in [minimum, maximum]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"expected an integer from {minimum} to {maximum}, got {value}")
        return value
    return parse


def short_node(node_id: str | None) -> str:
    """A Ray node id as commands print it: its first 12 characters ("-" for none)."""
    return "-" if node_id is None else node_id[:12]


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def print_json(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=2, sort_keys=True, default=str)
    out.write("\n")


def connect(args: argparse.Namespace, create: bool = False):
    """The cluster of ``--address`` (or ``$RAY_ADDRESS``); never an embedded new one.
    ``create`` starts raylog's controller if that Ray cluster has none (``raylog start``)."""
    import raylog

    return raylog.init(args.address, start_local=False, create=create)


def connect_or_embed(args: argparse.Namespace,
                     out: TextIO) -> tuple[Any, Callable[[], None] | None]:
    """For a command serving a cluster in the foreground (``registry``, ``gateway``): with
    ``--embedded``, an embedded local cluster it starts (saying where its data is) and the
    call that stops it; else the cluster of ``--address`` and None."""
    if not args.embedded:
        return connect(args), None
    import os

    import ray

    import raylog
    from raylog.util.cluster_names import DATA_DIR_ENV, raylog_home

    cluster = raylog.init("local", start_local=True, create=True)
    where = os.environ.get(DATA_DIR_ENV) or f"{raylog_home()} (brokers/, controller/)"
    out.write(f"embedded local cluster, data in {where}\n")
    return cluster, ray.shutdown
