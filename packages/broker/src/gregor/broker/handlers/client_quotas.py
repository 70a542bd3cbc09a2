"""DescribeClientQuotas and AlterClientQuotas: the quotas of users and client ids.

They are read from and written to ZooKeeper as ZooKeeper-mode Kafka does (any broker
answers): `/config/users/<u>`, `/config/clients/<c>`, `/config/users/<u>/clients/<c>`, each
change followed by a /config/changes notification that every broker applies
(`gregor.broker.quotas`). A user's znode also holds its SCRAM credentials: an alteration
changes only the quota keys. In a request an entity name of null is the default entity.

Filters (DescribeClientQuotas) match an entity type EXACT(name), DEFAULT or ANY (any name
or the default); with `strict`, an entity naming a type the filter does not is left out.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation
from gregor.broker.quotas import (
    CLIENT_ID,
    DEFAULT,
    QUOTA_KEYS,
    USER,
    Entity,
    entity_of,
    entity_path,
    finite_positive,
    quota_values,
)
from gregor.broker.security.scram_credentials import user_entity as sanitize
from gregor.broker.zk import KafkaZkClient, znodes
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    EntityData,
    OpData,
    ResponseEntryData,
)
from gregor.protocol.apis.describe_client_quotas import (
    ComponentData,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    EntryData,
    ValueData,
)
from gregor.protocol.apis.describe_client_quotas import EntityData as DescribedEntity
from gregor.protocol.errors import ErrorCode, InvalidRequestError

EXACT, DEFAULT_MATCH, ANY = 0, 1, 2  # DescribeClientQuotas match types
IP = "ip"


async def all_quotas(zk: KafkaZkClient) -> dict[Entity, dict[str, float]]:
    """Every user and client-id entity with quotas, as ZooKeeper holds them now."""
    out = {}
    for entity_type in (znodes.CONFIG_USERS, znodes.CONFIG_CLIENTS):
        names = await zk.get_all_entities_with_config(entity_type)
        for name, config in (await zk.get_entities_configs(entity_type, names)).items():
            entity = entity_of(entity_type, name)
            values = quota_values(config)
            if entity is not None and values:
                out[entity] = values
    return out


# -- describing -------------------------------------------------------------------------------


def _name(sanitized: str | None) -> str | None:
    """An entity name as clients see it: null for the default, unsanitized."""
    return None if sanitized == DEFAULT or sanitized is None else urllib.parse.unquote(sanitized)


def _filters(components: Sequence[ComponentData]) -> dict[str, tuple[int, str | None]]:
    out: dict[str, tuple[int, str | None]] = {}
    for c in components:
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidRequestError(f"Custom entity type '{c.entity_type}' not supported")
        if c.entity_type in out:
            raise InvalidRequestError(f"Duplicate {c.entity_type} filter component entity type")
        if c.match_type not in (EXACT, DEFAULT_MATCH, ANY):
            raise InvalidRequestError(f"Unexpected match type {c.match_type}")
        if c.match_type == EXACT and c.match is None:
            raise InvalidRequestError(f"The {c.entity_type} filter matches EXACT a null name")
        out[c.entity_type] = (c.match_type, c.match)
    if IP in out and len(out) > 1:
        raise InvalidRequestError("Invalid entity filter component combination: ip with others")
    return out


def _matches(
    names: dict[str, str | None], filters: dict[str, tuple[int, str | None]], strict: bool
) -> bool:
    """Whether an entity ({type: name, None for the default}) passes the filters."""
    if strict and set(names) != set(filters):
        return False
    for entity_type, (match_type, match) in filters.items():
        if entity_type not in names:
            return False
        name = names[entity_type]
        if match_type == EXACT and name != match:
            return False
        if match_type == DEFAULT_MATCH and name is not None:
            return False
    return True


def _names(entity: Entity) -> dict[str, str | None]:
    user, client = entity
    out = {}
    if user is not None:
        out[USER] = _name(user)
    if client is not None:
        out[CLIENT_ID] = _name(client)
    return out


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS, "0-1")
async def describe_client_quotas(
    ctx: RequestContext, request: DescribeClientQuotasRequest, version: int
) -> DescribeClientQuotasResponse:
    if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS):
        return DescribeClientQuotasResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message="Cluster authorization failed.",
            entries=None,
        )
    try:
        filters = _filters(request.components)
    except InvalidRequestError as exc:
        return DescribeClientQuotasResponse(
            error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc), entries=None
        )
    entries = []
    for entity, values in sorted((await all_quotas(ctx.services.zk)).items(), key=str):
        names = _names(entity)
        if _matches(names, filters, request.strict):
            entries.append(
                EntryData(
                    entity=[DescribedEntity(t, n) for t, n in names.items()],
                    values=[ValueData(k, v) for k, v in sorted(values.items())],
                )
            )
    return DescribeClientQuotasResponse(error_message=None, entries=entries)


# -- altering ---------------------------------------------------------------------------------


def _entity(entity: Sequence[EntityData]) -> Entity:
    names: dict[str, str] = {}
    for part in entity:
        if part.entity_type == IP:
            raise InvalidRequestError("IP quotas are not supported by this broker")
        if part.entity_type not in (USER, CLIENT_ID):
            raise InvalidRequestError(f"Unhandled client quota entity type: {part.entity_type}")
        if part.entity_type in names:
            raise InvalidRequestError(f"Duplicate {part.entity_type} entity in the request")
        if part.entity_name == "":
            raise InvalidRequestError(f"Empty {part.entity_type} name")
        names[part.entity_type] = (
            DEFAULT if part.entity_name is None else sanitize(part.entity_name)
        )
    if not names:
        raise InvalidRequestError("Invalid empty client quota entity")
    return names.get(USER), names.get(CLIENT_ID)


def _check_ops(ops: Sequence[OpData]) -> None:
    seen = set()
    for op in ops:
        if op.key not in QUOTA_KEYS:
            raise InvalidRequestError(f"Invalid configuration key {op.key}")
        if op.key in seen:
            raise InvalidRequestError(f"Duplicate quota key {op.key}")
        seen.add(op.key)
        if op.remove:
            continue
        if not finite_positive(op.value):
            raise InvalidRequestError(f"Quota {op.key} must be a positive number, not {op.value}")
        if QUOTA_KEYS[op.key] and op.value != int(op.value):
            raise InvalidRequestError(f"Quota {op.key} must be a whole number, not {op.value}")


def _text(key: str, value: float) -> str:
    return str(int(value)) if QUOTA_KEYS[key] else repr(value)


@handles(ApiKey.ALTER_CLIENT_QUOTAS, "0-1")
async def alter_client_quotas(
    ctx: RequestContext, request: AlterClientQuotasRequest, version: int
) -> AlterClientQuotasResponse:
    zk = ctx.services.zk
    results = []
    for entry in request.entries:
        result = ResponseEntryData(error_message=None, entity=entry.entity)
        results.append(result)
        if not ctx.authorized(AclOperation.ALTER_CONFIGS):
            result.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            continue
        try:
            entity = _entity(entry.entity)
            _check_ops(entry.ops)
        except InvalidRequestError as exc:
            result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, str(exc)
            continue
        if request.validate_only:
            continue
        entity_type, name = entity_path(entity)
        config = await zk.get_entity_configs(entity_type, name)
        for op in entry.ops:
            if op.remove:
                config.pop(op.key, None)
            else:
                config[op.key] = _text(op.key, op.value)
        await zk.change_entity_config(entity_type, name, config)
    return AlterClientQuotasResponse(entries=results)
