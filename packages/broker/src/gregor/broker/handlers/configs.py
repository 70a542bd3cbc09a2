"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, for topics and brokers.

Dynamic configs live in ZooKeeper with Kafka's layout: a topic's overrides in
/config/topics/T, dynamic broker settings in /config/brokers/<id> and, cluster-wide, in
/config/brokers/<default>; every change also writes a /config/changes notification so
every broker re-reads and applies it. As in ZooKeeper-mode Kafka any broker handles topic
configs, and a broker's own settings are altered through that broker.

A described value names its source, the most specific first: the topic's override, the
broker's dynamic setting, the cluster-wide dynamic default, server.properties, the default.
A broker's listener keys (`listener.name.<l>.<setting>`) are listed when set, with the
setting they override as a synonym. Sensitive values are never sent; password configs are
stored encrypted (gregor.broker.security.passwords) and refused without a secret.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

import attrs

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.config import (
    DYNAMIC_BROKER_CONFIGS,
    REPLICATION_THROTTLES,
    SERVER_SETTINGS,
    broker_setting,
    is_dynamic_listener_setting,
    is_password_config,
    listener_base,
)
from gregor.broker.security.passwords import decode_passwords, encode_passwords
from gregor.broker.topic_names import validate_topic_name
from gregor.broker.zk import znodes
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.alter_configs import (
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
)
from gregor.protocol.apis.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)
from gregor.protocol.apis.incremental_alter_configs import (
    AlterConfigsResource as IncrementalResource,
)
from gregor.protocol.apis.incremental_alter_configs import (
    AlterConfigsResourceResponse as IncrementalResult,
)
from gregor.protocol.apis.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from gregor.protocol.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from gregor.storage.config import SERVER_SYNONYMS, TOPIC_SETTINGS, LogConfig
from gregor.storage.settings import ConfigType, Setting

if TYPE_CHECKING:
    from gregor.broker.services import Services

# ConfigResource types, DescribeConfigs sources and config operations, with Kafka's ids. The
# settings' types, defaults and docs are declared with them (gregor.storage.config for
# topics, gregor.broker.config for brokers).
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT = 1, 2, 3, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@attrs.frozen
class ConfigEntry:
    name: str
    value: str | None
    source: int
    declaration: Setting | None
    read_only: bool = False
    synonyms: tuple[tuple[str, str | None, int], ...] = ()


def config_error(resource_type: int, name: str, exc: Exception) -> InvalidConfigError:
    kind = {TOPIC: "TOPIC", BROKER: "BROKER"}.get(resource_type, str(resource_type))
    return InvalidConfigError(
        f"Invalid config value for resource ConfigResource(type={kind}, name='{name}'): {exc}"
    )


# -- describing -------------------------------------------------------------------------------


async def dynamic_broker_configs(services: Services) -> tuple[dict[str, str], dict[str, str]]:
    """(this broker's dynamic settings, the cluster-wide dynamic defaults)."""
    found = await services.zk.get_entities_configs(
        znodes.CONFIG_BROKERS, [str(services.broker_id), znodes.DEFAULT_ENTITY]
    )
    return found[str(services.broker_id)], found[znodes.DEFAULT_ENTITY]


def _broker_synonyms(
    services: Services, names: list[str], own: Mapping[str, str], default: Mapping[str, str]
) -> list[tuple[str, str | None, int]]:
    static = services.config.properties
    out: list[tuple[str, str | None, int]] = []
    for name in names:
        if name in own:
            out.append((name, own[name], DYNAMIC_BROKER))
        if name in default:
            out.append((name, default[name], DYNAMIC_DEFAULT_BROKER))
        if name in static:
            out.append((name, static[name], STATIC_BROKER))
    return out


def describe_topic(
    services: Services,
    overrides: Mapping[str, str],
    own: Mapping[str, str] | None = None,
    default: Mapping[str, str] | None = None,
) -> list[ConfigEntry]:
    """Every setting of a topic with these overrides, with its source and synonyms."""
    own, default = own or {}, default or {}
    defaults = LogConfig.from_server_properties({**services.config.properties, **default, **own})
    values = LogConfig.from_properties(overrides, defaults=defaults).to_properties()
    entries = []
    for name, value in sorted(values.items()):
        server_names = [key for key, _ in SERVER_SYNONYMS.get(name, ())]
        synonyms = _broker_synonyms(services, server_names, own, default)
        if name in overrides:
            synonyms.insert(0, (name, value, TOPIC_CONFIG))
        elif server_names and not synonyms:
            synonyms.append((server_names[0], value, DEFAULT))
        source = synonyms[0][2] if synonyms else DEFAULT
        entries.append(
            ConfigEntry(name, value, source, TOPIC_SETTINGS.get(name), False, tuple(synonyms))
        )
    return entries


def describe_broker(
    services: Services, own: Mapping[str, str], default: Mapping[str, str], per_broker: bool
) -> list[ConfigEntry]:
    """This broker's settings (`per_broker`), or the cluster-wide dynamic defaults only."""
    values: dict[str, tuple[str | None, bool]] = {
        name: (value, is_default) for name, value, is_default in services.config.describe()
    }
    log_defaults = services.config.log_config.to_properties()
    for topic_key, server_keys in SERVER_SYNONYMS.items():
        server_key = server_keys[0][0]
        given = services.config.properties.get(server_key)
        values.setdefault(server_key, (given or log_defaults.get(topic_key), given is None))
    # Listener keys (`listener.name.<l>.<setting>`) set statically or dynamically, each
    # with the setting it overrides as its synonym, as Kafka lists them.
    for keys in (services.config.properties, own, default):
        for name in keys:
            if listener_base(name) is not None:
                values.setdefault(name, (None, False))
    entries = []
    for name, (value, _is_default) in sorted(values.items()):
        base = listener_base(name)
        synonyms = _broker_synonyms(
            services, [name] if base is None else [name, base], own, default
        )
        if not per_broker:
            synonyms = [s for s in synonyms if s[2] == DYNAMIC_DEFAULT_BROKER]
            if not synonyms:
                continue
        if synonyms:
            value = synonyms[0][1]
        source = synonyms[0][2] if synonyms else DEFAULT
        entries.append(
            ConfigEntry(
                name,
                value,
                source,
                broker_setting(name),
                name not in DYNAMIC_BROKER_CONFIGS and not is_dynamic_listener_setting(name),
                tuple(synonyms),
            )
        )
    return entries


def _result_entry(
    entry: ConfigEntry, synonyms: bool, documentation: bool, version: int
) -> DescribeConfigsResourceResult:
    declared = entry.declaration
    sensitive = declared is not None and declared.sensitive  # its value is never sent
    return DescribeConfigsResourceResult(
        name=entry.name,
        value=None if sensitive else entry.value,
        read_only=entry.read_only,
        is_default=version == 0 and entry.source == DEFAULT,  # v1+ say config_source
        config_source=entry.source,
        is_sensitive=sensitive,
        synonyms=[
            DescribeConfigsSynonym(n, None if sensitive else v, s) for n, v, s in entry.synonyms
        ]
        if synonyms
        else [],
        config_type=declared.type if declared else ConfigType.STRING,
        documentation=declared.doc if declared and documentation else None,
    )


def _check_access(
    ctx: RequestContext, operation: AclOperation, resource_type: int, name: str
) -> None:
    """Topics need the operation on the topic, brokers (and their loggers) on the cluster."""
    if resource_type == TOPIC:
        if not ctx.authorized(operation, ResourceType.TOPIC, name):
            raise TopicAuthorizationFailedError(f"Topic authorization failed for {name}.")
    elif resource_type in (BROKER, BROKER_LOGGER) and not ctx.authorized(operation):
        raise ClusterAuthorizationFailedError("Cluster authorization failed.")


@handles(ApiKey.DESCRIBE_CONFIGS, "0-4")
async def describe_configs(
    ctx: RequestContext, request: DescribeConfigsRequest, version: int
) -> DescribeConfigsResponse:
    services = ctx.services
    response = DescribeConfigsResponse()
    own, default = await dynamic_broker_configs(services)
    for resource in request.resources:
        result = DescribeConfigsResult(
            resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        try:
            _check_access(
                ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name
            )
            entries = await _describe(
                services, resource.resource_type, resource.resource_name, own, default
            )
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, str(exc)
        else:
            if entries is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = None
            else:
                keys = resource.configuration_keys
                wanted = [e for e in entries if not keys or e.name in keys]
                result.error_message = None
                result.configs = [
                    _result_entry(
                        e, request.include_synonyms, request.include_documentation, version
                    )
                    for e in wanted
                ]
        response.results.append(result)
    return response


async def _describe(
    services: Services,
    resource_type: int,
    name: str,
    own: Mapping[str, str],
    default: Mapping[str, str],
) -> list[ConfigEntry] | None:
    if resource_type == TOPIC:
        validate_topic_name(name)
        if not services.metadata_cache.contains_topic(name):
            return None
        overrides = await services.zk.get_entity_configs(znodes.CONFIG_TOPICS, name)
        return describe_topic(services, overrides, own, default)
    if resource_type == BROKER:
        if not name:
            return describe_broker(services, own, default, per_broker=False)
        if _broker_id(name) != services.broker_id:
            raise InvalidRequestError(
                f"Unexpected broker id, expected {services.broker_id} or empty string, "
                f"but received {name}"
            )
        return describe_broker(services, own, default, per_broker=True)
    if resource_type == BROKER_LOGGER:
        raise InvalidRequestError("BROKER_LOGGER resources are not supported")
    raise InvalidRequestError(f"Unsupported resource type: {resource_type}")


def _broker_id(name: str) -> int:
    try:
        return int(name)
    except ValueError:
        raise InvalidRequestError(f"Broker id must be an integer, but it is: {name}") from None


# -- altering ---------------------------------------------------------------------------------


async def _alter_topic(
    services: Services, name: str, config: dict[str, str], validate_only: bool
) -> None:
    if not name:
        raise InvalidRequestError("Default topic resources are not allowed.")
    validate_topic_name(name)
    # ZooKeeper, not this broker's cache, as Kafka: a topic the controller has just created
    # can be altered through any broker at once.
    if not await services.zk.topic_exists(name):
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
    try:
        LogConfig.from_properties(config, defaults=services.config.log_config)
    except InvalidConfigError as exc:
        raise config_error(TOPIC, name, exc) from exc
    if not validate_only:
        await services.zk.change_entity_config(znodes.CONFIG_TOPICS, name, config)


def _broker_entity(services: Services, name: str) -> str:
    if not name:
        return znodes.DEFAULT_ENTITY
    if _broker_id(name) != services.broker_id:
        raise InvalidRequestError(
            f"Unexpected broker id, expected {services.broker_id}, but received {name}"
        )
    return name


async def _alter_broker(
    services: Services, entity: str, config: dict[str, str], validate_only: bool
) -> None:
    listeners = {k: v for k, v in config.items() if is_dynamic_listener_setting(k)}
    static = set(config) - DYNAMIC_BROKER_CONFIGS - set(listeners)
    if static:
        raise config_error(
            BROKER, entity, ValueError(f"Cannot update these configs dynamically: {sorted(static)}")
        )
    if listeners and entity == znodes.DEFAULT_ENTITY:
        raise config_error(
            BROKER,
            entity,
            ValueError(
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {sorted(listeners)}"
            ),
        )
    try:
        LogConfig.from_server_properties({**services.config.properties, **config})
        for key in REPLICATION_THROTTLES & set(config):
            SERVER_SETTINGS[key].parser(key, config[key])
        if listeners:  # the keystores and truststores load, the JAAS configs parse
            services.config.with_overrides(listeners)
    except InvalidConfigError as exc:
        raise config_error(BROKER, entity, exc) from exc
    if not validate_only:
        try:  # passwords are stored encrypted, or refused without password.encoder.secret
            stored = encode_passwords(config, is_password_config, services.config.password_encoder)
        except InvalidConfigError as exc:
            raise config_error(BROKER, entity, exc) from exc
        await services.zk.change_entity_config(znodes.CONFIG_BROKERS, entity, stored)


R = TypeVar("R", AlterConfigsResourceResponse, IncrementalResult)
Res = TypeVar("Res", AlterConfigsResource, IncrementalResource)


async def _per_resource(
    resources: list[Res], result_type: type[R], alter: Callable[[Res], Awaitable[None]]
) -> list[R]:
    """Alter each resource on its own: one failing does not stop the others."""
    results = []
    for resource in resources:
        result = result_type(
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            error_message=None,
        )
        try:
            await alter(resource)
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, str(exc)
        results.append(result)
    return results


@handles(ApiKey.ALTER_CONFIGS, "0-2")
async def alter_configs(
    ctx: RequestContext, request: AlterConfigsRequest, version: int
) -> AlterConfigsResponse:
    services = ctx.services

    async def alter(resource: AlterConfigsResource) -> None:
        _check_access(
            ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )
        config = {c.name: c.value for c in resource.configs if c.value is not None}
        await _alter(
            services, resource.resource_type, resource.resource_name, config, request.validate_only
        )

    results = await _per_resource(request.resources, AlterConfigsResourceResponse, alter)
    return AlterConfigsResponse(responses=results)


async def _alter(
    services: Services, resource_type: int, name: str, config: dict[str, str], validate_only: bool
) -> None:
    if resource_type == TOPIC:
        await _alter_topic(services, name, config, validate_only)
    elif resource_type == BROKER:
        await _alter_broker(services, _broker_entity(services, name), config, validate_only)
    else:
        raise InvalidRequestError(
            f"AlterConfigs is only supported for topics and brokers, but resource type is "
            f"{resource_type}"
        )


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, "0-1")
async def incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest, version: int
) -> IncrementalAlterConfigsResponse:
    services = ctx.services

    async def alter(resource: IncrementalResource) -> None:
        _check_access(
            ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )
        await _incremental(services, resource, request.validate_only)

    results = await _per_resource(request.resources, IncrementalResult, alter)
    return IncrementalAlterConfigsResponse(responses=results)


async def _incremental(
    services: Services, resource: IncrementalResource, validate_only: bool
) -> None:
    kind, name, ops = resource.resource_type, resource.resource_name, resource.configs
    keys = [op.name for op in ops]
    if len(set(keys)) != len(keys):
        raise InvalidRequestError("Error due to duplicate config keys")
    if kind == TOPIC:
        if not name:
            raise InvalidRequestError("Default topic resources are not allowed.")
        current = await services.zk.get_entity_configs(znodes.CONFIG_TOPICS, name)
        defaults = LogConfig.from_properties(
            {}, defaults=services.config.log_config
        ).to_properties()
        declarations = TOPIC_SETTINGS
    elif kind == BROKER:
        entity = _broker_entity(services, name)
        current = decode_passwords(
            await services.zk.get_entity_configs(znodes.CONFIG_BROKERS, entity),
            is_password_config,
            services.config.password_decoders,
        )
        defaults = {}
        declarations = {k: SERVER_SETTINGS[k] for k in DYNAMIC_BROKER_CONFIGS}
    else:
        raise InvalidRequestError(
            f"AlterConfigs is only supported for topics and brokers, but resource type is {kind}"
        )
    config = dict(current)
    for op in ops:
        if op.config_operation == SET:
            if op.value is None:
                raise config_error(kind, name, ValueError(f"Null value for {op.name}"))
            config[op.name] = op.value
        elif op.config_operation == DELETE:
            config.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT):
            declared = declarations.get(op.name)
            if declared is None or declared.type != ConfigType.LIST:
                verb = "append" if op.config_operation == APPEND else "subtract"
                raise config_error(
                    kind,
                    name,
                    ValueError(f"Config value {verb} is not allowed for config key: {op.name}"),
                )
            base = _items(config.get(op.name, defaults.get(op.name, "")))
            change = _items(op.value or "")
            if op.config_operation == APPEND:
                merged = list(dict.fromkeys([*base, *change]))
            else:
                merged = [item for item in base if item not in change]
            config[op.name] = ",".join(merged)
        else:
            raise InvalidRequestError(f"Unknown config operation {op.config_operation}")
    if kind == TOPIC:
        await _alter_topic(services, name, config, validate_only)
    else:
        await _alter_broker(services, _broker_entity(services, name), config, validate_only)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]
