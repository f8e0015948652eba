"""``raylog gateway``: Kafka's wire protocol for the whole cluster, in the foreground.

One listener speaks for every broker: Metadata advertises each raylog broker under its own
id at the listener's address (``--advertise``, default the address listened on), and the
listener sends each partition's requests to its leader. With ``--embedded`` it first starts
an embedded local cluster (as ``raylog registry --embedded``) and stops it on the way out.
Runs until SIGINT or SIGTERM (raylog/cli/signals.py), then says how many requests it
answered. For one listener per broker node, each advertising its own node, see ``raylog
start --kafka-port``. Imports nothing heavy until it runs.
"""

from __future__ import annotations

import argparse
import socket
from typing import TextIO

from raylog.cli.common import connect_or_embed, int_in

DEFAULT_PORT = 9092  # Kafka's


def host_port(text: str) -> tuple[str, int]:
    """An argparse type: ``HOST:PORT``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def add_parser(commands: argparse._SubParsersAction) -> None:
    gateway = commands.add_parser("gateway", help="serve Kafka's wire protocol for the "
                                                  "cluster until SIGINT or SIGTERM")
    gateway.set_defaults(run="gateway")
    gateway.add_argument("--port", type=int_in(0, 65535), default=DEFAULT_PORT,
                         help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free)")
    gateway.add_argument("--host", default="127.0.0.1",
                         help="the address to listen on (0.0.0.0: every interface)")
    gateway.add_argument("--advertise", type=host_port, default=None, metavar="HOST:PORT",
                         help="the address Kafka clients are told to connect to (default: "
                              "the one listened on; this host's name for 0.0.0.0)")
    gateway.add_argument("--embedded", action="store_true",
                         help="start an embedded local cluster (data under $RAYLOG_DATA_DIR, "
                              "else ~/.raylog) and serve it")
    gateway.add_argument("--auto-create-topics", action="store_true",
                         help="create a topic a Kafka client asks metadata of, if the client "
                              "allows it (Kafka's auto.create.topics.enable; default off)")
    gateway.add_argument("--idle-ms", type=int_in(1), default=None,
                         help="close connections idle this long (connections.max.idle.ms; "
                              "default 600000)")
    gateway.add_argument("--request-max-bytes", type=int_in(1), default=None,
                         help="refuse larger requests (socket.request.max.bytes; default "
                              "104857600)")


def advertised(host: str, port: int, given: tuple[str, int] | None) -> tuple[str, int]:
    """Where clients are told to connect: ``given``, else the address listened on (this
    host's name when that is every interface)."""
    if given is not None:
        return given
    if host in ("0.0.0.0", "::", ""):
        return socket.getfqdn(), port
    return host, port


def cmd_gateway(args: argparse.Namespace, out: TextIO) -> int:
    from raylog.cli.signals import StopSignals
    from raylog.errors import InvalidArgumentError
    from raylog.kafka.gateway.cluster import ClusterBackend, OneAddress
    from raylog.kafka.gateway.listener import KafkaListener, ListenerThread
    from raylog.kafka.gateway.settings import GatewaySettings, inline_appends

    options = {}
    if args.idle_ms is not None:
        options["connections_max_idle_ms"] = args.idle_ms
    if args.request_max_bytes is not None:
        options["request_max_bytes"] = args.request_max_bytes
    settings = GatewaySettings(auto_create_topics_enable=args.auto_create_topics, **options)
    inline_appends()
    cluster, on_stop = connect_or_embed(args, out)
    advertiser = OneAddress(args.host, args.port)
    backend = ClusterBackend.connect(cluster, advertiser)
    running = ListenerThread(KafkaListener(backend, settings, host=args.host, port=args.port))
    try:
        try:
            host, port = running.start()
        except OSError as e:
            raise InvalidArgumentError(f"cannot listen on {args.host}:{args.port}: "
                                       f"{e.strerror}") from None
        advertiser.host, advertiser.port = advertised(host, port, args.advertise)
        with StopSignals() as stop:
            out.write(f"Kafka listener on {host}:{port}, advertised as "
                      f"{advertiser.host}:{advertiser.port}\n")
            out.flush()
            stop.wait()
    finally:
        running.stop()
        backend.close()
        if on_stop is not None:
            on_stop()
    calls, batches = backend.appends_sent
    out.write(f"Kafka listener stopped after {running.listener.answered:,} requests "
              f"({batches:,} acks=1 batches appended in {calls:,} calls)\n")
    return 0
