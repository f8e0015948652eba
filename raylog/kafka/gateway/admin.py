"""Topic administration: CreateTopics (key 19, versions 2-7), DeleteTopics (20, 1-6),
CreatePartitions (37, 0-3), DescribeConfigs (32, 1-4), IncrementalAlterConfigs (44, 0-1).

Each is raylog's Admin client (raylog/client/admin.py) doing what the request asks, topic
by topic, with its checks and its retries across a controller restart; each topic's
refusal is answered in its own result with the Kafka code and raylog's message. What raylog
does not do is refused clearly: manual replica assignments (INVALID_REQUEST), configs of
brokers (INVALID_REQUEST: raylog's broker settings are not Kafka's), list operations
APPEND/SUBTRACT (INVALID_CONFIG). Number of partitions and replication factor -1 (a
client's "broker default") take the listener's ``auto_create_partitions`` and
``auto_create_replication_factor``. ``validate_only`` checks what can be checked without
the controller (name, counts, configs) and changes nothing.

With an authorizer (raylog/kafka/gateway/access.py), each topic needs, or its result is
TOPIC_AUTHORIZATION_FAILED and nothing is done to it: CREATE on it or on the cluster
(CreateTopics), DELETE (DeleteTopics), ALTER (CreatePartitions), DESCRIBE_CONFIGS
(DescribeConfigs), ALTER_CONFIGS (IncrementalAlterConfigs).
"""

from __future__ import annotations

import asyncio
from typing import Any

from raylog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    RaylogError,
    TopicExistsError,
)
from raylog.kafka.auth.acls import Operation, ResourceType
from raylog.kafka.gateway.dispatch import Context, Dispatch
from raylog.kafka.gateway.errors import Code, code_of
from raylog.kafka.gateway.metadata import may_create
from raylog.kafka.gateway.protocol import response_class
from raylog.metadata.topics import normalize_configs, validate_topic_name

CREATE_TOPICS_KEY = 19
DELETE_TOPICS_KEY = 20
DESCRIBE_CONFIGS_KEY = 32
CREATE_PARTITIONS_KEY = 37
INCREMENTAL_ALTER_CONFIGS_KEY = 44
TOPIC_RESOURCE = 2
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations (APPEND 2 and SUBTRACT 3 refused)
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5  # DescribeConfigs config sources


class _Denied(RaylogError):
    """The principal may not do this to the topic (the ACLs say): nothing was done."""


def _outcome(error: BaseException | None) -> tuple[int, str | None]:
    if isinstance(error, _Denied):
        return Code.TOPIC_AUTHORIZATION_FAILED, str(error)
    return (Code.NONE, None) if error is None else (code_of(error), str(error))


def _check(ctx: Context, operation: Operation, name: str) -> None:
    """Raise _Denied unless the principal may do ``operation`` on topic ``name``."""
    if not ctx.allows(operation, ResourceType.TOPIC, name):
        raise _Denied(f"{ctx.connection.principal} may not {operation.name} topic {name!r}")


async def _each(calls: list[Any]) -> list[BaseException | None]:
    """Run the blocking admin calls concurrently: None for each that worked, else its
    raylog error."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    out: list[BaseException | None] = []
    for result in results:
        if isinstance(result, RaylogError | None):
            out.append(result)
        elif isinstance(result, BaseException):
            raise result  # a bug: the listener closes the connection and logs it
        else:
            out.append(None)
    return out


async def handle_create_topics(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(CREATE_TOPICS_KEY, version)
    admin, settings = ctx.backend.admin, ctx.settings

    async def create(topic: Any) -> tuple[int, int]:
        partitions = topic.num_partitions if topic.num_partitions != -1 else \
            settings.auto_create_partitions
        replicas = topic.replication_factor if topic.replication_factor != -1 else \
            settings.auto_create_replication_factor
        if not may_create(ctx, topic.name):
            raise _Denied(f"{ctx.connection.principal} may not CREATE topic {topic.name!r}")
        if topic.assignments:
            raise InvalidArgumentError("raylog places replicas itself: manual replica "
                                       "assignments are not supported")
        configs = {c.name: c.value for c in topic.configs}
        if request.validate_only:
            validate_topic_name(topic.name)
            normalize_configs(configs)
            if topic.name in await ctx.backend.list_topics():
                raise TopicExistsError(f"topic {topic.name!r} already exists")
        else:
            await ctx.backend.blocking(admin.create_topic, topic.name, partitions, replicas,
                                       configs)
            ctx.backend.forget(topic.name)
        return partitions, replicas

    async def configs_of(name: str) -> list[Any]:
        """The created topic's configs, as v5+ answers them: Kafka's Java AdminClient reads
        the list of every topic created without error (null made it fail)."""
        if request.validate_only:  # nothing was created to describe
            return []
        described = await ctx.backend.blocking(admin.describe_configs, [name])
        return [cls.CreatableTopicResult.CreatableTopicConfigs(
            name=key, value=config_text(info["value"]), read_only=False,
            config_source=DEFAULT_CONFIG if info["is_default"] else DYNAMIC_TOPIC_CONFIG,
            is_sensitive=False) for key, info in described[name].items()]

    async def one(topic: Any) -> Any:
        configs: list[Any] = []
        config_code = Code.NONE
        try:
            partitions, replicas = await create(topic)
            error = None
        except RaylogError as e:
            partitions, replicas, error = -1, -1, e
        if error is None and version >= 5:
            try:
                configs = await configs_of(topic.name)
            except RaylogError as e:  # created all the same: only its configs are not told
                config_code = _outcome(e)[0]
        code, message = _outcome(error)
        return cls.CreatableTopicResult(name=topic.name, error_code=code,
                                         error_message=message, num_partitions=partitions,
                                         replication_factor=replicas, configs=configs,
                                         topic_config_error_code=config_code)

    results = await asyncio.gather(*(one(t) for t in request.topics))
    return cls(throttle_time_ms=0, topics=list(results))


async def handle_delete_topics(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(DELETE_TOPICS_KEY, version)
    names = [t.name for t in request.topics] if version >= 6 else list(request.topic_names)
    admin = ctx.backend.admin

    async def delete(name: str) -> None:
        _check(ctx, Operation.DELETE, name)
        await ctx.backend.blocking(admin.delete_topic, name)

    errors = await _each([delete(n) for n in names])
    for name in names:
        ctx.backend.forget(name)
    results = []
    for name, error in zip(names, errors, strict=True):
        code, message = _outcome(error)
        results.append(cls.DeletableTopicResult(name=name, error_code=code,
                                                error_message=message))
    return cls(throttle_time_ms=0, responses=results)


async def handle_create_partitions(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(CREATE_PARTITIONS_KEY, version)
    admin = ctx.backend.admin

    async def grow(topic: Any) -> None:
        _check(ctx, Operation.ALTER, topic.name)
        if topic.assignments:
            raise InvalidArgumentError("raylog places replicas itself: manual replica "
                                       "assignments are not supported")
        if not request.validate_only:
            await ctx.backend.blocking(admin.add_partitions, topic.name, topic.count)
            ctx.backend.forget(topic.name)

    errors = await _each([grow(t) for t in request.topics])
    results = []
    for topic, error in zip(request.topics, errors, strict=True):
        code, message = _outcome(error)
        results.append(cls.CreatePartitionsTopicResult(name=topic.name, error_code=code,
                                                       error_message=message))
    return cls(throttle_time_ms=0, results=results)


def config_text(value: Any) -> str | None:
    """A raylog config value as Kafka writes it: text, booleans as true/false."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


async def handle_describe_configs(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(DESCRIBE_CONFIGS_KEY, version)
    result_cls = cls.DescribeConfigsResult
    entry_cls = result_cls.DescribeConfigsResourceResult

    async def one(resource: Any) -> Any:
        configs: list[Any] = []
        try:
            if resource.resource_type != TOPIC_RESOURCE:
                raise InvalidArgumentError(f"only topic configs are described (resource type "
                                           f"{TOPIC_RESOURCE}), not type "
                                           f"{resource.resource_type}")
            _check(ctx, Operation.DESCRIBE_CONFIGS, resource.resource_name)
            described = await ctx.backend.blocking(ctx.backend.admin.describe_configs,
                                                   [resource.resource_name])
            wanted = resource.configuration_keys
            for name, info in described[resource.resource_name].items():
                if wanted is not None and name not in wanted:
                    continue
                configs.append(entry_cls(
                    name=name, value=config_text(info["value"]), read_only=False,
                    config_source=DEFAULT_CONFIG if info["is_default"] else
                    DYNAMIC_TOPIC_CONFIG, is_default=info["is_default"], is_sensitive=False,
                    synonyms=[], config_type=0, documentation=None))
            error = None
        except RaylogError as e:
            error = e
        code, message = _outcome(error)
        return result_cls(error_code=code, error_message=message,
                          resource_type=resource.resource_type,
                          resource_name=resource.resource_name, configs=configs)

    results = await asyncio.gather(*(one(r) for r in request.resources))
    return cls(throttle_time_ms=0, results=list(results))


async def handle_incremental_alter_configs(ctx: Context, version: int, request: Any) -> Any:
    cls = response_class(INCREMENTAL_ALTER_CONFIGS_KEY, version)

    async def alter(resource: Any) -> None:
        if resource.resource_type != TOPIC_RESOURCE:
            raise InvalidArgumentError(f"only topic configs can be altered (resource type "
                                       f"{TOPIC_RESOURCE}), not type {resource.resource_type}")
        _check(ctx, Operation.ALTER_CONFIGS, resource.resource_name)
        sets, deletes = {}, []
        for config in resource.configs:
            if config.config_operation == SET:
                sets[config.name] = config.value
            elif config.config_operation == DELETE:
                deletes.append(config.name)
            else:
                raise InvalidConfigError(f"config {config.name!r}: operation "
                                         f"{config.config_operation} (APPEND/SUBTRACT) is not "
                                         f"supported: raylog's topic configs are not lists")
        if request.validate_only:
            normalize_configs(sets)
            return
        await ctx.backend.blocking(ctx.backend.admin.alter_configs, resource.resource_name,
                                   sets, deletes)

    errors = await _each([alter(r) for r in request.resources])
    results = []
    for resource, error in zip(request.resources, errors, strict=True):
        code, message = _outcome(error)
        results.append(cls.AlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name))
    return cls(throttle_time_ms=0, responses=results)


def register(dispatch: Dispatch) -> None:
    dispatch.add(CREATE_TOPICS_KEY, 2, 7, handle_create_topics)
    dispatch.add(DELETE_TOPICS_KEY, 1, 6, handle_delete_topics)
    dispatch.add(DESCRIBE_CONFIGS_KEY, 1, 4, handle_describe_configs)
    dispatch.add(CREATE_PARTITIONS_KEY, 0, 3, handle_create_partitions)
    dispatch.add(INCREMENTAL_ALTER_CONFIGS_KEY, 0, 1, handle_incremental_alter_configs)
