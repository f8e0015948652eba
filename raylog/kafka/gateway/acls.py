"""DescribeAcls (key 29), CreateAcls (30) and DeleteAcls (31), versions 1-3: the ACLs
administered over Kafka's protocol (``kafka-acls --bootstrap-server``, the Java Admin's
``createAcls``, confluent-kafka's ``AdminClient.create_acls``).

A listener without an authorizer answers SECURITY_DISABLED, as Kafka's brokers without one.
Otherwise Describe needs DESCRIBE on the cluster, Create and Delete ALTER on it (super users
may), else CLUSTER_AUTHORIZATION_FAILED. Create and Delete write ``__raylog_acls`` (acks=all)
before they answer; this listener applies what they wrote at once, the others within a poll
of their follower. A creation that is not a binding (ANY or MATCH in it, a principal not
``type:name``) is answered INVALID_REQUEST alone; the others of the request are written.
"""

from __future__ import annotations

import asyncio
from typing import Any

from raylog.kafka.auth.acls import (
    CLUSTER,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    encode,
    tombstone,
)
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code
from raylog.kafka.gateway.protocol import response_class

DESCRIBE_ACLS_KEY = 29
CREATE_ACLS_KEY = 30
DELETE_ACLS_KEY = 31
MIN_VERSION, MAX_VERSION = 1, 3


def _refusal(ctx: Context, operation: Operation) -> tuple[int, str] | None:
    """(code, message) when this request may not go on; None when it may."""
    if ctx.access is None:
        return Code.SECURITY_DISABLED, "no authorizer is configured on this listener"
    if not ctx.allows(operation, ResourceType.CLUSTER, CLUSTER.name):
        return (Code.CLUSTER_AUTHORIZATION_FAILED,
                f"{ctx.connection.principal} may not {operation.name} the cluster's ACLs")
    return None


def _write_refusal(ctx: Context) -> tuple[int, str] | None:
    """Create's and Delete's :func:`_refusal`: ALTER, and a way to write the topic."""
    refused = _refusal(ctx, Operation.ALTER)
    if refused is None and ctx.access.write is None:
        return Code.SECURITY_DISABLED, "this listener cannot write ACLs"
    return refused


def _filter(f: Any) -> AclFilter:
    return AclFilter(resource_type=ResourceType(f.resource_type_filter),
                     resource_name=f.resource_name_filter,
                     pattern=PatternType(f.pattern_type_filter), principal=f.principal_filter,
                     host=f.host_filter, operation=Operation(f.operation),
                     permission=Permission(f.permission_type))


async def handle_describe_acls(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(DESCRIBE_ACLS_KEY, version)
    refused = _refusal(ctx, Operation.DESCRIBE)
    if refused is not None:
        return cls(throttle_time_ms=0, error_code=refused[0], error_message=refused[1],
                   resources=[])
    try:
        acl_filter = _filter(request)
    except ValueError as e:
        return cls(throttle_time_ms=0, error_code=Code.INVALID_REQUEST, error_message=str(e),
                   resources=[])
    by_resource: dict[tuple[int, str, int], list[Any]] = {}
    resource_cls = cls.DescribeAclsResource
    for b in ctx.access.authorizer.bindings(acl_filter):
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern), []).append(
            resource_cls.AclDescription(principal=b.principal, host=b.host,
                                        operation=b.operation,
                                        permission_type=b.permission))
    return cls(throttle_time_ms=0, error_code=Code.NONE, error_message=None, resources=[
        resource_cls(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
        for (t, n, p), acls in by_resource.items()])


async def _write(ctx: Context, records: list[tuple[bytes, bytes | None]]) -> None:
    """Write ``records`` to ``__raylog_acls``, then apply them here at once."""
    if records:
        await asyncio.to_thread(ctx.access.write, records)
        for key, value in records:
            ctx.access.authorizer.apply(key, value)


async def handle_create_acls(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(CREATE_ACLS_KEY, version)
    result = cls.AclCreationResult
    refused = _write_refusal(ctx)
    if refused is not None:
        return cls(throttle_time_ms=0, results=[
            result(error_code=refused[0], error_message=refused[1])
            for _ in request.creations])
    answers, records = [], []
    for c in request.creations:
        try:
            binding = AclBinding(c.principal, c.host, c.resource_type, c.resource_name,
                                 c.resource_pattern_type, c.operation, c.permission_type)
        except ValueError as e:
            answers.append(result(error_code=Code.INVALID_REQUEST, error_message=str(e)))
            continue
        records.append(encode(binding))
        answers.append(result(error_code=Code.NONE, error_message=None))
    await _write(ctx, records)
    return cls(throttle_time_ms=0, results=answers)


async def handle_delete_acls(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(DELETE_ACLS_KEY, version)
    result = cls.DeleteAclsFilterResult
    refused = _write_refusal(ctx)
    if refused is not None:
        return cls(throttle_time_ms=0, filter_results=[
            result(error_code=refused[0], error_message=refused[1], matching_acls=[])
            for _ in request.filters])
    answers, records = [], []
    for f in request.filters:
        try:
            matched = ctx.access.authorizer.bindings(_filter(f))
        except ValueError as e:
            answers.append(result(error_code=Code.INVALID_REQUEST, error_message=str(e),
                                  matching_acls=[]))
            continue
        records.extend(tombstone(b) for b in matched)
        answers.append(result(error_code=Code.NONE, error_message=None, matching_acls=[
            result.DeleteAclsMatchingAcl(
                error_code=Code.NONE, error_message=None, resource_type=b.resource_type,
                resource_name=b.resource_name, pattern_type=b.pattern,
                principal=b.principal, host=b.host, operation=b.operation,
                permission_type=b.permission) for b in matched]))
    await _write(ctx, records)
    return cls(throttle_time_ms=0, filter_results=answers)


def register(dispatch: Dispatch) -> None:
    dispatch.add(DESCRIBE_ACLS_KEY, MIN_VERSION, MAX_VERSION, handle_describe_acls)
    dispatch.add(CREATE_ACLS_KEY, MIN_VERSION, MAX_VERSION, handle_create_acls)
    dispatch.add(DELETE_ACLS_KEY, MIN_VERSION, MAX_VERSION, handle_delete_acls)
