"""``raylog quotas set|list|delete``: client quotas (docs/quotas.md), in the spirit of
``kafka-configs --entity-type users|clients``.

An entity is ``--user NAME`` or ``--user-default``, ``--client-id NAME`` or
``--client-default``, or one of each::

    raylog quotas set --client-id loader producer_byte_rate=10485760
    raylog quotas set --user-default consumer_byte_rate=1048576,request_percentage=50
    raylog quotas list [--user alice] [--json]
    raylog quotas delete --client-id loader [producer_byte_rate ...]

``set`` takes ``KEY=VALUE`` pairs (separate or comma-separated, as Kafka's
``--add-config``); ``delete`` removes the keys named, or every quota of the entity when none
is named. Bad keys and values are refused (InvalidQuotaError) before anything changes.
``list`` shows every quota, or those of the entity parts given. Imports nothing heavy until
it runs.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from raylog.cli.common import connect, json_flag


def _entity_flags(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", help="a user (a Kafka listener's principal name)")
    user.add_argument("--user-default", action="store_true",
                      help="the default of every user without a quota of its own")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", help="a client id")
    client.add_argument("--client-default", action="store_true",
                        help="the default of every client id without a quota of its own")


def add_parser(commands: argparse._SubParsersAction) -> None:
    quotas = commands.add_parser("quotas", help="client quotas: produce and fetch byte rates "
                                                "and request-time shares per user and client id")
    quotas.set_defaults(run="quotas")
    actions = quotas.add_subparsers(dest="action", required=True, metavar="ACTION")
    set_ = actions.add_parser("set", help="set quotas of a user and/or client id")
    _entity_flags(set_)
    set_.add_argument("quotas", nargs="+", metavar="KEY=VALUE",
                      help="producer_byte_rate, consumer_byte_rate (bytes/s) or "
                           "request_percentage, e.g. producer_byte_rate=1048576")
    listing = actions.add_parser("list", help="the quotas set (of an entity, if given)")
    _entity_flags(listing)
    json_flag(listing)
    delete = actions.add_parser("delete", help="delete quotas of a user and/or client id")
    _entity_flags(delete)
    delete.add_argument("keys", nargs="*", metavar="KEY",
                        help="the quotas to delete (default: all of the entity's)")


def _parts(args: argparse.Namespace) -> tuple[str | None, str | None]:
    from raylog.quotas import DEFAULT

    user = DEFAULT if args.user_default else args.user
    client_id = DEFAULT if args.client_default else args.client_id
    return user, client_id


def parse_pairs(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items (each may hold several, comma-separated) -> {key: number}; a
    value that is not a number is kept as text, for the quota check to refuse by name."""
    from raylog.errors import InvalidQuotaError

    pairs: dict[str, Any] = {}
    for item in items:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, text = pair.partition("=")
            if not sep or not key:
                raise InvalidQuotaError(f"quotas are KEY=VALUE, got {pair!r}")
            value: Any = text
            for parse in (int, float):
                try:
                    value = parse(text)
                    break
                except ValueError:
                    continue
            pairs[key.strip()] = value
    return pairs


def cmd_quotas(args: argparse.Namespace, out: TextIO) -> int:
    from raylog.cli.common import UsageError
    from raylog.client.admin import Admin
    from raylog.errors import InvalidArgumentError
    from raylog.quotas import QUOTA_KEYS, QuotaEntity, check_quotas
    from raylog.quotas.entity import check_keys

    user, client_id = _parts(args)
    if args.action != "list" and user is None and client_id is None:
        raise UsageError(f"quotas {args.action} needs an entity: --user NAME, --user-default, "
                         f"--client-id NAME or --client-default")
    # bad input refused before anything connects
    updates = check_quotas(parse_pairs(args.quotas)) if args.action == "set" else {}
    check_keys(getattr(args, "keys", None) or [])
    admin = Admin(cluster=connect(args))
    if args.action == "set":
        entity = QuotaEntity(user, client_id)
        admin.alter_quotas(entity, updates)
        out.write(f"{entity}: " + ", ".join(f"{k}={v}" for k, v in updates.items()) + "\n")
    elif args.action == "delete":
        entity = QuotaEntity(user, client_id)
        keys = args.keys or list(QUOTA_KEYS)
        has = admin.describe_quotas(user, client_id, strict=True).get(entity, {})
        gone = [k for k in keys if k in has]
        if not gone and not args.keys:
            raise InvalidArgumentError(f"{entity} has no quotas")
        admin.alter_quotas(entity, delete_quotas=keys)
        out.write(f"{entity}: deleted {', '.join(gone) or 'nothing (none was set)'}\n")
    else:
        found = admin.describe_quotas(user, client_id)
        rows = [{"entity": e.to_dict(), "quotas": q} for e, q in found.items()]
        if args.json:
            from raylog.cli.common import print_json

            print_json(rows, out)
        else:
            for entity, values in found.items():
                out.write(f"{entity}\t" + ", ".join(f"{k}={v}" for k, v in values.items())
                          + "\n")
    return 0
