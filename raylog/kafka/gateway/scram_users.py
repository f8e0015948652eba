"""DescribeUserScramCredentials (key 50, v0) and AlterUserScramCredentials (key 51, v0):
the users of the SASL logins, administered over Kafka's protocol (``kafka-configs
--alter --add-config SCRAM-SHA-256=[...] --entity-type users``, the Java Admin's
``alterUserScramCredentials``, confluent-kafka's ``AdminClient.alter_user_scram_credentials``).

Only a super user may call them (``ListenerSecurity.super_users``, Kafka's ``super.users``,
e.g. ``User:admin``; an mTLS principal is its certificate's subject), or, on a listener with
an authorizer, a principal the ACLs allow DESCRIBE (Describe) or ALTER (Alter) on the
cluster. Anyone else gets CLUSTER_AUTHORIZATION_FAILED, as does everyone on a listener
without credentials.

As Kafka's: Alter takes salted passwords (the client salts and hashes; the password never
crosses), checked per user: an unknown mechanism UNSUPPORTED_SASL_MECHANISM, iterations
outside 4096-16384 or an empty name, salt or salted password UNACCEPTABLE_CREDENTIAL, one
(user, mechanism) twice in a request DUPLICATE_RESOURCE, deleting a credential that does not
exist RESOURCE_NOT_FOUND; a user with any error has none of its changes applied. The others'
are written to ``__raylog_users`` (acks=all) before the answer; listeners see them within a
poll. Describe answers mechanisms and iterations (never a key) of the users named, or of
every user when none is named; an unknown one RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

from raylog.kafka.auth.acls import CLUSTER, Operation, ResourceType
from raylog.kafka.auth.credentials import CredentialStore, encode, record_key
from raylog.kafka.auth.scram import MAX_ITERATIONS, MIN_ITERATIONS, Credential, Mechanism
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.protocol import response_class

DESCRIBE_KEY = 50
ALTER_KEY = 51
Records = list[tuple[bytes, bytes | None]]


@dataclasses.dataclass(frozen=True)
class UserAdmin:
    """What the handlers need of a listener: the credentials it checks logins against,
    how to write records to ``__raylog_users`` (blocking; None: not writable here) and the
    super users' principals."""

    store: CredentialStore
    write: Callable[[Records], None] | None
    super_users: frozenset[str]

    def allows(self, principal: object) -> bool:
        return str(principal) in self.super_users


def _mechanism(kafka_type: int) -> Mechanism | None:
    return next((m for m in Mechanism if m.kafka_type == kafka_type), None)


def _allowed(ctx: Context, operation: Operation) -> UserAdmin | None:
    """The listener's UserAdmin if this principal may do ``operation`` on the cluster: a
    super user may; with an authorizer, whoever the ACLs allow (audited otherwise)."""
    admin: UserAdmin | None = ctx.users
    if admin is None:
        return None
    if admin.allows(ctx.connection.principal) or (
            ctx.access is not None
            and ctx.allows(operation, ResourceType.CLUSTER, CLUSTER.name)):
        return admin
    return None


async def handle_describe(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(DESCRIBE_KEY, version)
    result = cls.DescribeUserScramCredentialsResult
    admin = _allowed(ctx, Operation.DESCRIBE)
    if admin is None:
        return cls(throttle_time_ms=0, error_code=Code.CLUSTER_AUTHORIZATION_FAILED,
                   error_message=f"{ctx.connection.principal} may not describe users",
                   results=[])
    users = admin.store.users()
    named = [u.name for u in request.users or []]
    counts = Counter(named)
    results = []
    for name in (named or list(users)):
        if counts[name] > 1:
            results.append(result(user=name, error_code=Code.DUPLICATE_RESOURCE,
                                  error_message=f"user {name!r} named more than once",
                                  credential_infos=[]))
        elif name not in users:
            results.append(result(user=name, error_code=Code.RESOURCE_NOT_FOUND,
                                  error_message=f"no user {name!r}", credential_infos=[]))
        else:
            results.append(result(user=name, error_code=Code.NONE, error_message=None,
                                  credential_infos=[result.CredentialInfo(
                                      mechanism=c.mechanism.kafka_type,
                                      iterations=c.iterations) for c in users[name]]))
    return cls(throttle_time_ms=0, error_code=Code.NONE, error_message=None, results=results)


def _check(admin: UserAdmin, name: str, changes: list[tuple[str, Any]],
           repeated: Counter) -> tuple[int, str | None, Records]:
    """(error code, message, records) of one user's changes: all of them, or none."""
    records: Records = []
    for kind, change in changes:
        mechanism = _mechanism(change.mechanism)
        if mechanism is None:
            return Code.UNSUPPORTED_SASL_MECHANISM, f"unknown mechanism {change.mechanism}", []
        if not name:
            return Code.UNACCEPTABLE_CREDENTIAL, "a user name must not be empty", []
        if repeated[(name, change.mechanism)] > 1:
            return (Code.DUPLICATE_RESOURCE, f"{mechanism.sasl_name} of {name!r} altered "
                    f"twice in one request", [])
        if kind == "delete":
            if admin.store.get(name, mechanism) is None:
                return (Code.RESOURCE_NOT_FOUND, f"{name!r} has no {mechanism.sasl_name} "
                        f"credential", [])
            records.append((record_key(name, mechanism), None))
            continue
        if not MIN_ITERATIONS <= change.iterations <= MAX_ITERATIONS:
            return (Code.UNACCEPTABLE_CREDENTIAL, f"iterations {change.iterations} outside "
                    f"[{MIN_ITERATIONS}, {MAX_ITERATIONS}]", [])
        salt, salted = bytes(change.salt), bytes(change.salted_password)
        if not salt or not salted:
            return Code.UNACCEPTABLE_CREDENTIAL, "an empty salt or salted password", []
        records.append(encode(name, Credential.from_salted_password(
            mechanism, salted, salt, change.iterations)))
    return Code.NONE, None, records


async def handle_alter(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(ALTER_KEY, version)
    result = cls.AlterUserScramCredentialsResult
    changes: dict[str, list[tuple[str, Any]]] = {}
    for deletion in request.deletions:
        changes.setdefault(deletion.name, []).append(("delete", deletion))
    for upsertion in request.upsertions:
        changes.setdefault(upsertion.name, []).append(("upsert", upsertion))
    admin = _allowed(ctx, Operation.ALTER)
    if admin is None or admin.write is None:
        return cls(throttle_time_ms=0, results=[result(
            user=name, error_code=Code.CLUSTER_AUTHORIZATION_FAILED,
            error_message=f"{ctx.connection.principal} may not alter users")
            for name in changes])
    repeated = Counter((name, c.mechanism) for name, cs in changes.items() for _, c in cs)
    checked = {name: _check(admin, name, cs, repeated) for name, cs in changes.items()}
    records = [r for _, _, rs in checked.values() for r in rs]
    if records:
        await asyncio.to_thread(admin.write, records)
        for key, value in records:  # this listener sees them at once, others within a poll
            admin.store.apply(key, value)
    return cls(throttle_time_ms=0, results=[result(user=name, error_code=code,
                                                   error_message=message)
                                            for name, (code, message, _) in checked.items()])


def register(dispatch: Dispatch) -> None:
    dispatch.add(DESCRIBE_KEY, 0, 0, handle_describe)
    dispatch.add(ALTER_KEY, 0, 0, handle_alter)
