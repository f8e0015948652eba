"""``raylog schemas ...`` and ``raylog registry``: the schema registry on the command line.

``schemas`` talks to the cluster's registry actor directly (no REST server needed);
``registry`` serves Confluent's REST API for the running cluster, or with ``--embedded``
for an embedded local cluster it starts (and stops on SIGINT or SIGTERM). Exit statuses
and one-line errors as every raylog command (raylog/cli/common.py). Imports nothing heavy
until a command runs: ``raylog --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from raylog.cli.common import connect, connect_or_embed, int_in, json_flag, print_json

DEFAULT_PORT = 8081  # Confluent Schema Registry's


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Add ``schemas`` and ``registry`` to the ``raylog`` parser."""
    schemas = commands.add_parser("schemas", aliases=["schema"],
                                  help="the schema registry: subjects, versions, compatibility")
    schemas.set_defaults(run="schemas")
    actions = schemas.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="subjects with their latest version and id")
    listing.add_argument("--deleted", action="store_true", help="include soft-deleted subjects")
    json_flag(listing)
    get = actions.add_parser("get", help="a version of a subject (default: the latest)")
    get.add_argument("subject")
    get.add_argument("--version", default="latest", help="a version number or 'latest'")
    json_flag(get)
    register = actions.add_parser("register", help="register an Avro schema (.avsc) under a "
                                                   "subject; '-' reads standard input")
    register.add_argument("subject")
    register.add_argument("file")
    register.add_argument("--normalize", action="store_true",
                          help="store and compare the schema normalized (Confluent's "
                               "normalize=true)")
    check = actions.add_parser("check", help="is a schema compatible with the subject? (exit "
                                             "status 1 when not, saying what breaks)")
    check.add_argument("subject")
    check.add_argument("file")
    check.add_argument("--version", default=None,
                       help="check against this version only (default: as the level says)")
    config = actions.add_parser("config", help="the compatibility level, global or of a subject")
    config.add_argument("subject", nargs="?", default=None)
    config.add_argument("--set", dest="level", type=_level, default=None, metavar="LEVEL",
                        help="NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, "
                             "FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE")
    delete = actions.add_parser("delete", help="soft-delete a subject or one of its versions "
                                               "(--permanent after a soft delete)")
    delete.add_argument("subject")
    delete.add_argument("--version", default=None)
    delete.add_argument("--permanent", action="store_true")

    registry = commands.add_parser("registry", help="serve the schema registry's REST API "
                                                    "(Confluent's) until SIGINT or SIGTERM")
    registry.set_defaults(run="registry")
    registry.add_argument("--port", type=int_in(0, 65535), default=DEFAULT_PORT)
    registry.add_argument("--host", default="127.0.0.1",
                          help="the address to listen on (0.0.0.0: every interface)")
    registry.add_argument("--embedded", action="store_true",
                          help="start an embedded local cluster (data under $RAYLOG_DATA_DIR, "
                               "else ~/.raylog) and serve its registry")


def _level(text: str) -> str:
    """An argparse type: a compatibility level's name."""
    from raylog.schemas.compatibility import Level
    from raylog.schemas.errors import InvalidCompatibilityLevelError

    try:
        return Level.of(text).value
    except InvalidCompatibilityLevelError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _read_schema(path: str) -> str:
    from raylog.errors import InvalidArgumentError

    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise InvalidArgumentError(f"cannot read {path}: {e.strerror}") from None


def cmd_schemas(args: argparse.Namespace, out: TextIO) -> int:
    from raylog.schemas.client import SchemaRegistry

    action = args.action
    # Bad input is refused before anything connects.
    schema = _read_schema(args.file) if action in ("register", "check") else None
    if schema is not None:
        from raylog.schemas.avro import parse

        parse(schema)  # InvalidSchemaError says what is wrong, with no cluster asked
    registry = SchemaRegistry(connect(args))
    if action == "list":
        rows = []
        for subject in registry.subjects(args.deleted):
            latest = registry.version(subject, "latest", deleted=args.deleted)
            rows.append({"subject": subject, "version": latest["version"], "id": latest["id"]})
        if args.json:
            print_json(rows, out)
        else:
            for row in rows:
                out.write(f"{row['subject']}\tversion {row['version']}\tid {row['id']}\n")
    elif action == "get":
        found = registry.version(args.subject, args.version)
        if args.json:
            print_json(found, out)
        else:
            out.write(f"subject {found['subject']} version {found['version']} "
                      f"id {found['id']}\n")
            out.write(json.dumps(json.loads(found["schema"]), indent=2) + "\n")
    elif action == "register":
        done = registry.register(args.subject, schema, normalize=args.normalize)
        out.write(f"registered {args.subject} version {done['version']} id {done['id']}\n")
    elif action == "check":
        problems = registry.check(args.subject, schema, args.version)
        if problems:
            out.write("incompatible:\n" + "".join(f"  {p}\n" for p in problems))
            return 1
        out.write("compatible\n")
    elif action == "config":
        level = registry.set_config(args.subject, args.level) if args.level else \
            registry.config(args.subject, default_to_global=True)
        out.write(f"{args.subject or 'global'}: {level}\n")
    else:
        if args.version is None:
            versions = registry.delete_subject(args.subject, args.permanent)
        else:
            versions = [registry.delete_version(args.subject, args.version, args.permanent)]
        how = "permanently deleted" if args.permanent else "soft-deleted"
        out.write(f"{how} {args.subject} versions {', '.join(map(str, versions))}\n")
    return 0


def cmd_registry(args: argparse.Namespace, out: TextIO) -> int:
    from raylog.schemas.client import SchemaRegistry

    cluster, on_stop = connect_or_embed(args, out)
    registry = SchemaRegistry(cluster)
    loaded = registry.ready()
    out.write(f"schema registry: {loaded['subjects']} subjects, highest id {loaded['max_id']}\n")
    return serve(registry, args.host, args.port, out, on_stop)


def serve(registry: Any, host: str, port: int, out: TextIO,
          on_stop: Callable[[], None] | None = None) -> int:
    """Serve the REST API over ``registry`` until SIGINT or SIGTERM (signals.py);
    then stop the server (and call ``on_stop``) and say how many requests it answered.
    Prints the URL once it listens."""
    from raylog.cli.signals import StopSignals
    from raylog.schemas.errors import RegistryStoreError
    from raylog.schemas.rest import RegistryHTTPServer

    try:
        server = RegistryHTTPServer(registry, host, port)
    except OSError as e:
        raise RegistryStoreError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    with StopSignals() as stop:
        try:
            with server.running():
                out.write(f"schema registry listening on {server.url}\n")
                out.flush()
                stop.wait()
        finally:
            if on_stop is not None:
                on_stop()
    out.write(f"schema registry stopped after {server.answered:,} requests\n")
    return 0
