"""``raylog mirror``, ``raylog flight-serve`` and ``raylog groups translate``.

Imports nothing heavy at module level: ``raylog --help`` builds these parsers too.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import signal
import sys
from typing import Any, TextIO

from raylog.cli.common import UsageError, connect, int_in, json_flag, print_json
from raylog.cli.signals import StopSignals

TOKEN_ENV = "RAYLOG_FLIGHT_TOKEN"
TOKEN_HELP = f"a file whose first line is the endpoint's token (default: ${TOKEN_ENV})"


def _alias(text: str) -> str:
    """An argparse type: a cluster alias."""
    from raylog.errors import InvalidArgumentError
    from raylog.mirror.naming import check_alias

    try:
        return check_alias(text)
    except InvalidArgumentError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _regex(text: str) -> str:
    """An argparse type: a regular expression."""
    try:
        re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {e}") from None
    return text


def add_commands(commands: argparse._SubParsersAction,
                 group_actions: argparse._SubParsersAction) -> None:
    """Register the commands with ``raylog``'s parser (and ``translate`` under ``groups``)."""
    mirror = commands.add_parser(
        "mirror", help="copy topics from another raylog cluster into this one",
        description="Copy the topics of a source cluster (read over its Flight endpoint, "
                    "`raylog flight-serve`) into the target cluster this command joins, as "
                    "<alias>.<topic>, exactly once per partition; keep partition counts and "
                    "configs in step; checkpoint consumer groups' offsets for `raylog groups "
                    "translate`. Runs until interrupted, or with --once up to the source's end.")
    mirror.set_defaults(run="mirror")
    mirror.add_argument("--source", required=True, metavar="grpc://HOST:PORT",
                        help="the source's Flight endpoint (grpc+tls://... for TLS)")
    mirror.add_argument("--target", metavar="HOST:PORT",
                        help="the target Ray cluster (default: --address or $RAY_ADDRESS)")
    mirror.add_argument("--alias", required=True, type=_alias,
                        help="the source cluster's name here: topics become ALIAS.TOPIC")
    mirror.add_argument("--target-alias", type=_alias,
                        help="the target's name on the source side (two-way mirrors: topics "
                             "that came from it are not sent back)")
    mirror.add_argument("--topics", action="append", metavar="REGEX", type=_regex,
                        help="copy only topics matching; repeatable (default: all)")
    mirror.add_argument("--exclude", action="append", metavar="REGEX", type=_regex,
                        help="do not copy topics matching; repeatable")
    mirror.add_argument("--groups", action="append", metavar="REGEX", type=_regex,
                        help="checkpoint only these consumer groups; repeatable (default: all)")
    mirror.add_argument("--token-file", metavar="PATH", help=TOKEN_HELP)
    mirror.add_argument("--tls-root-certs", metavar="PATH",
                        help="PEM certificates to trust for a grpc+tls:// source")
    mirror.add_argument("--once", action="store_true",
                        help="copy up to the source's end offsets at start, then exit")
    mirror.add_argument("--replication-factor", type=int_in(1),
                        help="of new remote topics (default: the source's, at most the "
                             "target's live brokers)")
    mirror.add_argument("--acks", choices=["1", "all"], default="all")
    mirror.add_argument("--checkpoint-interval-ms", type=int_in(100), default=5000)
    mirror.add_argument("--refresh-interval-ms", type=int_in(100), default=5000,
                        help="how often to look for new topics, partitions and configs")
    mirror.add_argument("--give-up-after-s", type=int_in(1), metavar="SECONDS",
                        help="exit when a cluster stays unreachable this long (default: "
                             "retry for ever)")

    serve = commands.add_parser(
        "flight-serve", help="serve this cluster's topics over Arrow Flight (for mirrors)",
        description="Serve the topics of the cluster this command joins over Arrow Flight: "
                    "stored batches for `raylog mirror`, records for any Flight client. "
                    "Every call needs the token. Runs until interrupted.")
    serve.set_defaults(run="flight-serve")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address to listen on (default: 127.0.0.1, this machine only)")
    serve.add_argument("--port", type=int_in(0, 65535), default=8815,
                       help="0: any free port (the address is printed)")
    serve.add_argument("--token-file", metavar="PATH", help=TOKEN_HELP)
    serve.add_argument("--tls-cert", metavar="PATH", help="PEM certificate chain (TLS)")
    serve.add_argument("--tls-key", metavar="PATH", help="PEM private key (TLS)")

    translate = group_actions.add_parser(
        "translate", help="set a group's offsets on remote topics from a mirror's checkpoint",
        description="Commit on this cluster the offsets a mirror translated from the source "
                    "group's committed offsets (its last checkpoint), so the group's consumers "
                    "resume on ALIAS.TOPIC where they stopped on the source. The group must "
                    "have no running members here.")
    translate.set_defaults(run="groups-translate")
    translate.add_argument("group")
    translate.add_argument("--cluster-alias", required=True, metavar="ALIAS", type=_alias,
                           help="the alias the mirror gave the source cluster")
    translate.add_argument("--dry-run", action="store_true", help="only show the offsets")
    json_flag(translate)


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        try:
            with open(args.token_file) as f:
                token = f.readline().strip()
        except OSError as e:
            raise UsageError(f"cannot read --token-file: {e}") from None
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise UsageError(f"a Flight endpoint's token is needed: --token-file PATH or "
                         f"${TOKEN_ENV}")
    return token


def _read(path: str | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"cannot read {what}: {e}") from None


def _say(message: str) -> None:
    print(f"raylog mirror: {message}", file=sys.stderr, flush=True)


# -- mirror ----------------------------------------------------------------------------------------

def cmd_mirror(args: argparse.Namespace, out: TextIO) -> int:
    token = _token(args)
    roots = _read(args.tls_root_certs, "--tls-root-certs")
    if args.alias == args.target_alias:
        raise UsageError(f"--alias and --target-alias cannot both be {args.alias!r}")
    from raylog.errors import ClusterAuthenticationError, NoClusterError
    from raylog.mirror.copier import CopyOptions
    from raylog.mirror.flight_client import SourceClient
    from raylog.mirror.retry import Backoff, Retrying
    from raylog.mirror.runner import Mirror, MirrorConfig
    from raylog.mirror.status import StatusDisplay

    source = SourceClient(args.source, token, tls_root_certs=roots)
    retrying = Retrying(Backoff(), _say, args.give_up_after_s, retriable=lambda e: e.retriable
                        or (isinstance(e, NoClusterError)
                            and not isinstance(e, ClusterAuthenticationError)))
    retrying.call(f"reaching the source {args.source}", source.topics)
    args.address = args.target or args.address
    cluster = retrying.call("joining the target cluster", lambda: connect(args, create=False))
    config = MirrorConfig(
        alias=args.alias, target_alias=args.target_alias, topics=args.topics or (),
        exclude=args.exclude or (), groups=args.groups or (), once=args.once,
        replication_factor=args.replication_factor,
        checkpoint_interval_ms=args.checkpoint_interval_ms,
        refresh_interval_ms=args.refresh_interval_ms,
        copy=CopyOptions(acks=args.acks if args.acks == "all" else 1,
                         give_up_after_s=args.give_up_after_s))
    import faulthandler

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID`: every thread's stack on stderr
    mirror = Mirror(source, cluster, config, _say)
    display = StatusDisplay(mirror.status, sys.stderr)

    def stop() -> None:
        _say("stopping: finishing what is in flight and writing a last checkpoint")
        mirror.stop()

    # A second signal exits at once: nothing is lost (see docs/mirror.md), and the copier
    # threads would keep a KeyboardInterrupt's exit waiting.
    with StopSignals(on_stop=stop, on_second=lambda: os._exit(130)):
        try:
            status = mirror.run()
        finally:
            display.close()
            source.close()
    for copier, _ in mirror.copiers.values():
        if copier.outcome not in ("done", "stopped"):
            out.write(f"{copier.name}: {copier.outcome}\n")
    out.write(f"copied {mirror.status.total():,} records from {args.alias} in "
              f"{mirror.copy_seconds:.2f} s\n")
    return status


# -- flight-serve ----------------------------------------------------------------------------------

def cmd_flight_serve(args: argparse.Namespace, out: TextIO) -> int:
    token = _token(args)
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("TLS needs both --tls-cert and --tls-key")
    tls = (_read(args.tls_cert, "--tls-cert"), _read(args.tls_key, "--tls-key")) \
        if args.tls_cert else None
    cluster = connect(args)
    import pyarrow as pa

    from raylog.mirror.flight_server import SourceFlightServer
    from raylog.mirror.source import ClusterSource

    try:
        server = SourceFlightServer(ClusterSource(cluster), token, args.host, args.port, tls)
    except (pa.ArrowException, OSError) as e:
        from raylog.errors import RaylogError

        raise RaylogError(f"cannot serve at {args.host}:{args.port}: {e}") from e
    if tls is None and not _loopback(args.host):
        print(f"raylog: warning: serving on {args.host} without TLS: the token and the "
              f"records cross the network in clear (give --tls-cert and --tls-key)",
              file=sys.stderr)
    out.write(f"serving raylog topics over Arrow Flight at {server.location}\n")
    out.flush()
    return serve_until_stopped(server, out)


def serve_until_stopped(server: Any, out: TextIO) -> int:
    """Serve (a Flight server serves once it is made) until SIGINT or SIGTERM; then shut
    down, in-flight reads finished, and say what was served."""
    with StopSignals() as stop:
        stop.wait()
        server.shutdown()
    out.write(f"stopped serving: {server.reads:,} reads, {server.bytes_sent:,} bytes of "
              f"records\n")
    return 0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


# -- groups translate ------------------------------------------------------------------------------

def cmd_translate(args: argparse.Namespace, out: TextIO) -> int:
    from raylog.mirror.checkpoints import translate_group

    plan = translate_group(args.group, args.cluster_alias, cluster=connect(args),
                           dry_run=args.dry_run)
    rows: list[dict[str, Any]] = [
        {"group": args.group, "topic": tp.topic, "partition": tp.partition,
         "source_offset": source, "new_offset": target}
        for tp, (source, target) in plan.items()]
    if args.json:
        print_json({"executed": not args.dry_run, "offsets": rows}, out)
        return 0
    out.write(f"{'GROUP':<24}{'TOPIC':<32}{'PARTITION':>10}{'SOURCE-OFFSET':>15}"
              f"{'NEW-OFFSET':>12}\n")
    for row in rows:
        out.write(f"{row['group']:<24}{row['topic']:<32}{row['partition']:>10}"
                  f"{row['source_offset']:>15}{row['new_offset']:>12}\n")
    if args.dry_run:
        out.write("dry run: nothing changed\n")
    return 0


# What ``raylog`` runs for each ``run`` these parsers set.
COMMANDS = {"mirror": cmd_mirror, "flight-serve": cmd_flight_serve,
            "groups-translate": cmd_translate}


def run(args: argparse.Namespace, out: TextIO) -> int:
    return COMMANDS[args.run](args, out)
