"""``raylog users add|list|delete``: the SCRAM credentials Kafka clients log in with on a
SASL listener (docs/security.md), kept in ``__raylog_users``.

``add NAME`` reads the password from a prompt (twice), or from standard input's first line
with ``--password-stdin`` (or when standard input is not a terminal), and stores a salted,
hashed credential per ``--mechanism`` (default both SCRAM-SHA-256 and SCRAM-SHA-512; PLAIN
logins are checked against them) with ``--iterations`` (default 4096, Kafka's bounds
4096-16384). Adding an existing user replaces the credentials of the mechanisms given.
``delete NAME`` removes the user's credentials (``--mechanism``: only those). Listeners
follow the topic: a deleted user's next login fails. Imports nothing heavy until it runs.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import TextIO

from raylog.cli.common import connect, json_flag

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_parser(commands: argparse._SubParsersAction) -> None:
    users = commands.add_parser("users", help="SCRAM users of the Kafka listeners' SASL "
                                              "logins (in __raylog_users)")
    users.set_defaults(run="users")
    actions = users.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add a user, or set its password")
    add.add_argument("name")
    add.add_argument("--mechanism", action="append", choices=MECHANISMS, default=None,
                     help="SCRAM-SHA-256 or SCRAM-SHA-512, repeatable (default: both)")
    add.add_argument("--iterations", type=int, default=4096,
                     help="SCRAM iterations (4096-16384; default 4096)")
    add.add_argument("--password-stdin", action="store_true",
                     help="read the password from standard input's first line")
    listing = actions.add_parser("list", help="users and their mechanisms (no secrets)")
    json_flag(listing)
    delete = actions.add_parser("delete", help="delete a user's credentials")
    delete.add_argument("name")
    delete.add_argument("--mechanism", action="append", choices=MECHANISMS, default=None,
                        help="delete only this mechanism's credential (repeatable)")


def read_password(from_stdin: bool, stdin: TextIO) -> str:
    """The new password: standard input's first line, or a prompt asked twice."""
    from raylog.errors import InvalidArgumentError

    if from_stdin or not stdin.isatty():
        password = stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != password:
            raise InvalidArgumentError("the passwords do not match")
    if not password:
        raise InvalidArgumentError("an empty password is refused")
    return password


def cmd_users(args: argparse.Namespace, out: TextIO, stdin: TextIO | None = None) -> int:
    from raylog.errors import InvalidArgumentError
    from raylog.kafka.auth.scram import Mechanism, check_iterations, make_credential
    from raylog.kafka.gateway.users import UsersTopic

    stdin = stdin or sys.stdin
    mechanisms = [Mechanism.named(m) for m in (getattr(args, "mechanism", None) or MECHANISMS)]
    credentials = []
    if args.action == "add":  # bad input refused before anything connects
        check_iterations(args.iterations)
        password = read_password(args.password_stdin, stdin)
        credentials = [make_credential(password, m, args.iterations) for m in mechanisms]
    topic = UsersTopic(connect(args))
    if args.action == "add":
        topic.put(args.name, credentials)
        out.write(f"user {args.name}: {', '.join(m.sasl_name for m in mechanisms)} set\n")
    elif args.action == "delete":
        has = {c.mechanism for c in topic.load().users().get(args.name, [])}
        gone = [m for m in mechanisms if m in has]
        if not gone:
            raise InvalidArgumentError(f"user {args.name!r} has no credential of "
                                       f"{', '.join(m.sasl_name for m in mechanisms)}")
        topic.delete(args.name, gone)
        out.write(f"user {args.name}: {', '.join(m.sasl_name for m in gone)} deleted\n")
    else:
        users = topic.load().users()
        rows = [{"user": user, "mechanisms": [{"mechanism": c.mechanism.sasl_name,
                                               "iterations": c.iterations} for c in creds]}
                for user, creds in users.items()]
        if args.json:
            from raylog.cli.common import print_json

            print_json(rows, out)
        else:
            for row in rows:
                out.write(f"{row['user']}\t" + ", ".join(
                    f"{m['mechanism']} ({m['iterations']} iterations)"
                    for m in row["mechanisms"]) + "\n")
    return 0
