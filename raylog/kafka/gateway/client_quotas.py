"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), versions 0-1: client
quotas administered over Kafka's protocol (``kafka-configs --bootstrap-server ...
--entity-type users|clients``, the Java Admin's ``alterClientQuotas``), stored by the
controller (docs/quotas.md).

Describe needs DESCRIBE_CONFIGS on the cluster and Alter ALTER_CONFIGS (as Kafka's; allowed
to everyone on a listener without an authorizer), else CLUSTER_AUTHORIZATION_FAILED. Alter
checks each entry on its own: an unknown quota key or entity type, a value that is not a
positive number (a byte rate must be whole), a key both set and removed, an entity named
twice or with a type twice: INVALID_REQUEST for that entry alone, the others applied together
(or only checked, with validate_only). Describe's filter is Kafka's: match type 0 (exact
name), 1 (the default), 2 (any, but the type must be in the entity), and ``strict``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from raylog.errors import InvalidQuotaError, RaylogError
from raylog.kafka.auth.acls import CLUSTER, Operation, ResourceType
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code, code_of
from raylog.kafka.gateway.protocol import response_class
from raylog.quotas.entity import MATCH_TYPES, QuotaEntity, check_change

DESCRIBE_KEY = 48
ALTER_KEY = 49
CALL_TIMEOUT_S = 30.0


def _entity(parts: list[Any]) -> dict[str, str | None]:
    entity = {p.entity_type: p.entity_name for p in parts}
    if len(entity) < len(parts):
        raise InvalidQuotaError("an entity names each of its types once")
    return entity


async def handle_describe(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(DESCRIBE_KEY, version)
    if not ctx.allows(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER.name):
        return cls(throttle_time_ms=0, error_code=Code.CLUSTER_AUTHORIZATION_FAILED,
                   error_message=f"{ctx.connection.principal} may not describe client quotas",
                   entries=None)
    try:
        components = []
        for c in request.components:
            if not 0 <= c.match_type < len(MATCH_TYPES):
                raise InvalidQuotaError(f"unknown match type {c.match_type}")
            components.append((c.entity_type, MATCH_TYPES[c.match_type], c.match))
        found = await ctx.backend.controller_call("describe_quotas", components,
                                                  bool(request.strict),
                                                  timeout_s=CALL_TIMEOUT_S)
    except RaylogError as e:
        return cls(throttle_time_ms=0, error_code=code_of(e), error_message=str(e),
                   entries=None)
    entry = cls.EntryData
    return cls(throttle_time_ms=0, error_code=Code.NONE, error_message=None, entries=[
        entry(entity=[entry.EntityData(entity_type=t, entity_name=n)
                      for t, n in e["entity"].items()],
              values=[entry.ValueData(key=k, value=float(v)) for k, v in e["quotas"].items()])
        for e in found])


async def handle_alter(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(ALTER_KEY, version)
    entry_cls = cls.EntryData

    def answer(parts: list[Any], code: int, message: str | None) -> Any:
        return entry_cls(error_code=code, error_message=message, entity=[
            entry_cls.EntityData(entity_type=p.entity_type, entity_name=p.entity_name)
            for p in parts])

    if not ctx.allows(Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER.name):
        return cls(throttle_time_ms=0, entries=[answer(
            e.entity, Code.CLUSTER_AUTHORIZATION_FAILED,
            f"{ctx.connection.principal} may not alter client quotas")
            for e in request.entries])
    # per entry: the change to make, or why it is refused
    checked: list[tuple[Any, dict[str, Any] | None, tuple[int, str] | None]] = []
    entities = []
    for e in request.entries:
        try:
            change = {"entity": _entity(e.entity),
                      "set": {op.key: op.value for op in e.ops if not op.remove},
                      "delete": [op.key for op in e.ops if op.remove]}
            entities.append(check_change(change)[0])
            checked.append((e, change, None))
        except RaylogError as error:
            checked.append((e, None, (code_of(error), str(error))))
    twice = {entity for entity, count in Counter(entities).items() if count > 1}
    changes = []
    for i, (e, change, _) in enumerate(checked):
        if change is None:
            continue
        entity = QuotaEntity.from_dict(change["entity"])
        if entity in twice:
            checked[i] = (e, None, (Code.INVALID_REQUEST, f"{entity} is named twice"))
        else:
            changes.append(change)
    failed: tuple[int, str] | None = None
    if changes:
        try:
            await ctx.backend.controller_call("alter_quotas", changes,
                                              bool(request.validate_only),
                                              timeout_s=CALL_TIMEOUT_S)
        except RaylogError as error:
            failed = code_of(error), str(error)
    return cls(throttle_time_ms=0, entries=[
        answer(e.entity, *(refused or failed or (Code.NONE, None)))
        for e, _, refused in checked])


def register(dispatch: Dispatch) -> None:
    dispatch.add(DESCRIBE_KEY, 0, 1, handle_describe)
    dispatch.add(ALTER_KEY, 0, 1, handle_alter)
