"""``raylog acls add|list|remove``: the ACLs a Kafka listener with ``--authorizer`` enforces
(docs/security.md), kept in ``__raylog_acls``, with kafka-acls' flags.

``add`` writes one binding per (principal, host, operation, resource): principals from
``--allow-principal`` (ALLOW; hosts ``--allow-host``, default ``*``) and ``--deny-principal``
(DENY; hosts ``--deny-host``), operations ``--operation`` (default ALL), resources
``--topic``, ``--group``, ``--transactional-id`` (each repeatable) and ``--cluster``, named
with ``--resource-pattern-type`` literal (default) or prefixed. ``remove`` takes the same
flags and removes those bindings (tombstones). ``list`` prints the bindings, those of the
resources named if any (``--principal``: of that principal only). Listeners follow the
topic: a change is in force within a poll. Imports nothing heavy until it runs.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from raylog.cli.common import connect, json_flag

OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe",
              "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite")


def _resource_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", action="append", default=[], metavar="NAME")
    parser.add_argument("--group", action="append", default=[], metavar="NAME")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--resource-pattern-type", default="literal",
                        type=str.lower, choices=["literal", "prefixed"],
                        help="how resource names match (default literal; '*' literal: all)")


def add_parser(commands: argparse._SubParsersAction) -> None:
    acls = commands.add_parser("acls", help="ACLs of the Kafka listeners' authorizer "
                                            "(in __raylog_acls)")
    acls.set_defaults(run="acls")
    actions = acls.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (("add", "add ACLs"), ("remove", "remove ACLs (the same flags as add)")):
        action = actions.add_parser(name, help=text)
        action.add_argument("--allow-principal", action="append", default=[],
                            metavar="User:NAME", help="allow this principal (User:* all)")
        action.add_argument("--deny-principal", action="append", default=[],
                            metavar="User:NAME", help="deny this principal (User:* all)")
        action.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                            help="hosts of the allowed principals (default *)")
        action.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                            help="hosts of the denied principals (default *)")
        action.add_argument("--operation", action="append", default=[], metavar="OP",
                            type=_operation_name,
                            help=f"repeatable; one of {', '.join(OPERATIONS)} (default All)")
        _resource_flags(action)
    listing = actions.add_parser("list", help="the ACLs (of the resources named, if any)")
    _resource_flags(listing)
    listing.set_defaults(resource_pattern_type=None)
    listing.add_argument("--principal", default=None, metavar="User:NAME")
    json_flag(listing)


def _operation_name(text: str) -> str:
    """kafka-acls' operation names (Read, DescribeConfigs), any case, as an Operation's."""
    from raylog.errors import InvalidArgumentError

    wanted = text.replace("_", "").replace("-", "").lower()
    for name in OPERATIONS:
        if name.lower() == wanted:
            return "".join("_" + c if c.isupper() else c for c in name).lstrip("_").upper()
    raise InvalidArgumentError(f"unknown operation {text!r}; one of {', '.join(OPERATIONS)}")


def resources(args: argparse.Namespace) -> list[tuple]:
    """(ResourceType, resource name) of each resource the flags name."""
    from raylog.kafka.auth.acls import CLUSTER_NAME, ResourceType

    named = [(ResourceType.TOPIC, n) for n in args.topic]
    named += [(ResourceType.GROUP, n) for n in args.group]
    named += [(ResourceType.TRANSACTIONAL_ID, n) for n in args.transactional_id]
    if args.cluster:
        named.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return named


def bindings(args: argparse.Namespace) -> list:
    """The AclBindings ``add``/``remove`` mean; InvalidArgumentError for an incomplete or
    bad set of flags."""
    from raylog.errors import InvalidArgumentError
    from raylog.kafka.auth.acls import AclBinding, Operation, PatternType, Permission

    named = resources(args)
    if not named:
        raise InvalidArgumentError("name a resource: --topic, --group, --transactional-id "
                                   "or --cluster")
    if not args.allow_principal and not args.deny_principal:
        raise InvalidArgumentError("name a principal: --allow-principal or --deny-principal")
    pattern = PatternType[args.resource_pattern_type.upper()]
    operations = [Operation[o] for o in args.operation] or [Operation.ALL]
    out = []
    for permission, principals, hosts in (
            (Permission.ALLOW, args.allow_principal, args.allow_host or ["*"]),
            (Permission.DENY, args.deny_principal, args.deny_host or ["*"])):
        for principal in principals:
            for host in hosts:
                for resource_type, name in named:
                    for operation in operations:
                        try:
                            out.append(AclBinding(principal, host, resource_type, name,
                                                  pattern, operation, permission))
                        except ValueError as e:
                            raise InvalidArgumentError(str(e)) from None
    return out


def cmd_acls(args: argparse.Namespace, out: TextIO) -> int:
    from raylog.kafka.auth.acls import Authorizer, encode, tombstone
    from raylog.kafka.gateway.users import AclsTopic

    wanted = bindings(args) if args.action in ("add", "remove") else []  # checked first
    topic = AclsTopic(connect(args))
    if args.action == "add":
        topic.write([encode(b) for b in wanted])
        for b in wanted:
            out.write(f"added: {b}\n")
        return 0
    present = set(topic.load(Authorizer()).bindings())
    if args.action == "remove":
        gone = [b for b in wanted if b in present]
        if gone:
            topic.write([tombstone(b) for b in gone])
        for b in gone:
            out.write(f"removed: {b}\n")
        if len(gone) < len(wanted):
            out.write(f"{len(wanted) - len(gone)} of the ACLs named did not exist\n")
        return 0
    named = set(resources(args))
    rows = [b for b in sorted(present, key=str)
            if (not named or (b.resource_type, b.resource_name) in named)
            and (args.principal is None or b.principal == args.principal)]
    if args.json:
        from raylog.cli.common import print_json

        print_json([b.to_json() for b in rows], out)
    else:
        for b in rows:
            out.write(f"{b}\n")
    return 0
