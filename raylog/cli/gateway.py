"""``raylog gateway``: Kafka's wire protocol for the whole cluster, in the foreground.

One listener speaks for every broker: Metadata advertises each raylog broker under its own
id at the listener's address (``--advertise``, default the address listened on), and the
listener sends each partition's requests to its leader. With ``--embedded`` it first starts
an embedded local cluster (as ``raylog registry --embedded``) and stops it on the way out.
Runs until SIGINT or SIGTERM (raylog/cli/signals.py), then says how many requests it
answered. For one listener per broker node, each advertising its own node, see ``raylog
start --kafka-port``. Imports nothing heavy until it runs.

Security (docs/security.md) takes the same options on both commands, named after Kafka's
broker settings; ``raylog start`` prefixes them with ``--kafka-`` (``--kafka-security-protocol``,
``--kafka-ssl-certfile``, ...), as its ``--kafka-port``. Bad settings are refused before
anything connects (SecurityConfigError).
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
    add_security_options(gateway)


def add_security_options(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The listener's security options (``prefix`` "kafka-" on ``raylog start``), each
    stored under its unprefixed name for :func:`security_from`."""
    def option(name: str, **kwargs) -> None:
        parser.add_argument(f"--{prefix}{name}", dest=name.replace("-", "_"), **kwargs)

    option("security-protocol", default="PLAINTEXT",
           choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
           help="Kafka's security.protocol of the listener (default PLAINTEXT)")
    option("sasl-mechanisms", default=None, metavar="M[,M...]",
           help="sasl.enabled.mechanisms: of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (default "
                "the two SCRAM ones); users: `raylog users add`")
    option("ssl-certfile", default=None, metavar="PEM",
           help="the listener's certificate chain (with SSL or SASL_SSL)")
    option("ssl-keyfile", default=None, metavar="PEM",
           help="its private key (default: in --ssl-certfile)")
    option("ssl-cafile", default=None, metavar="PEM",
           help="the CAs client certificates must chain to (with --ssl-client-auth)")
    option("ssl-client-auth", default="none", choices=["none", "requested", "required"],
           help="ssl.client.auth: ask clients for a certificate (mTLS); its subject is "
                "the principal")
    option("super-users", default="", metavar="User:A;User:B",
           help="super.users: principals that may describe and alter users over Kafka's "
                "protocol, and do anything with --authorizer; default none")
    option("authorizer", action="store_true",
           help="enforce ACLs (raylog acls, CreateAcls): a principal may do only what an "
                "ACL allows; super users everything (default: off, everything allowed)")
    option("allow-everyone-if-no-acl-found", action="store_true",
           help="allow.everyone.if.no.acl.found: with --authorizer, a resource without any "
                "ACL is open to everyone (default: denied)")
    option("max-connections-per-ip", type=int_in(1), default=None, metavar="N",
           help="max.connections.per.ip: close connections from one address beyond N "
                "(default: no limit)")


def security_from(args: argparse.Namespace):
    """The ListenerSecurity the options say; SecurityConfigError if they cannot work."""
    from raylog.kafka.gateway.security import ListenerSecurity

    return ListenerSecurity(security_protocol=args.security_protocol,
                            sasl_enabled_mechanisms=args.sasl_mechanisms,
                            ssl_certfile=args.ssl_certfile, ssl_keyfile=args.ssl_keyfile,
                            ssl_cafile=args.ssl_cafile, ssl_client_auth=args.ssl_client_auth,
                            super_users=args.super_users, authorizer=args.authorizer,
                            allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found)


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
    from raylog.kafka.gateway.quotas import ListenerQuotas
    from raylog.kafka.gateway.settings import GatewaySettings, inline_appends
    from raylog.kafka.gateway.users import credential_follower, start_access

    security = security_from(args)
    options = {}
    if args.idle_ms is not None:
        options["connections_max_idle_ms"] = args.idle_ms
    if args.request_max_bytes is not None:
        options["request_max_bytes"] = args.request_max_bytes
    settings = GatewaySettings(auto_create_topics_enable=args.auto_create_topics,
                               max_connections_per_ip=args.max_connections_per_ip, **options)
    inline_appends()
    cluster, on_stop = connect_or_embed(args, out)
    users = credential_follower(cluster) if security.uses_sasl else None
    advertiser = OneAddress(args.host, args.port)
    backend = ClusterBackend.connect(cluster, advertiser)
    running = acls = None
    try:
        credentials = users.start() if users is not None else None
        acls, access = start_access(cluster, security)
        running = ListenerThread(KafkaListener(
            backend, settings, host=args.host, port=args.port, security=security,
            credentials=credentials, write_users=users.topic.write if users else None,
            access=access, quotas=ListenerQuotas()))
        try:
            host, port = running.start()
        except OSError as e:
            raise InvalidArgumentError(f"cannot listen on {args.host}:{args.port}: "
                                       f"{e.strerror}") from None
        advertiser.host, advertiser.port = advertised(host, port, args.advertise)
        with StopSignals() as stop:
            out.write(f"Kafka listener on {host}:{port} ({security.security_protocol}), "
                      f"advertised as {advertiser.host}:{advertiser.port}\n")
            out.flush()
            stop.wait()
    finally:
        if running is not None:
            running.stop()
        if users is not None:
            users.close()
        if acls is not None:
            acls.close()
        backend.close()
        if on_stop is not None:
            on_stop()
    calls, batches = backend.appends_sent
    out.write(f"Kafka listener stopped after {running.listener.answered:,} requests "
              f"({batches:,} acks=1 batches appended in {calls:,} calls)\n")
    return 0
