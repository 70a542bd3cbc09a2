"""DescribeUserScramCredentials and AlterUserScramCredentials, as a ZooKeeper-mode Kafka
broker answers them (any broker): credentials live in /config/users/<user> in Kafka's format
(`gregor.broker.security.scram_credentials`), a change is announced in /config/changes, and
SCRAM authentication reads the znode afresh, so a new password works at once.

DESCRIBE on the cluster to list, ALTER to change (CLUSTER_AUTHORIZATION_FAILED otherwise).
Kafka's refusals: an empty user or too few (< 4096) or too many (> 16384) iterations are
UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, a user named twice
DUPLICATE_RESOURCE, deleting or describing a credential that does not exist
RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

from collections import Counter

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation
from gregor.broker.security.scram_credentials import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MIN_ITERATIONS,
    ScramCredential,
    entity_user,
    user_entity,
)
from gregor.broker.zk import znodes
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from gregor.protocol.apis.describe_user_scram_credentials import (
    CredentialInfo,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)
from gregor.protocol.errors import (
    ClusterAuthorizationFailedError,
    DuplicateResourceError,
    KafkaError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)

MECHANISMS = {number: name for name, number in MECHANISM_IDS.items()}


def _infos(config: dict[str, str]) -> list[CredentialInfo]:
    infos = []
    for name, number in MECHANISM_IDS.items():
        if name in config:
            try:
                iterations = ScramCredential.decode(config[name]).iterations
            except ValueError:
                continue
            infos.append(CredentialInfo(number, iterations))
    return infos


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "0")
async def describe_user_scram_credentials(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest, version: int
) -> DescribeUserScramCredentialsResponse:
    if not ctx.authorized(AclOperation.DESCRIBE):
        error = ClusterAuthorizationFailedError()
        return DescribeUserScramCredentialsResponse(error_code=error.code, error_message=str(error))
    zk = ctx.services.zk
    if not request.users:  # null or empty: every user with a credential
        entities = await zk.get_all_entities_with_config(znodes.CONFIG_USERS)
        configs = await zk.get_entities_configs(znodes.CONFIG_USERS, entities)
        results = [
            DescribeUserScramCredentialsResult(
                entity_user(e), error_message=None, credential_infos=infos
            )
            for e, config in sorted(configs.items())
            if (infos := _infos(config))
        ]
        return DescribeUserScramCredentialsResponse(error_message=None, results=results)
    counts = Counter(u.name for u in request.users)
    results = []
    for user in dict.fromkeys(u.name for u in request.users):
        result = DescribeUserScramCredentialsResult(user, error_message=None)
        try:
            if counts[user] > 1:
                raise DuplicateResourceError(
                    "Cannot describe SCRAM credentials for the same user twice in a single request"
                )
            config = await zk.get_entity_configs(znodes.CONFIG_USERS, user_entity(user))
            result.credential_infos = _infos(config)
            if not result.credential_infos:
                raise ResourceNotFoundError(
                    "Attempt to describe a user credential that does not exist"
                )
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, str(exc)
        results.append(result)
    return DescribeUserScramCredentialsResponse(error_message=None, results=results)


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "0")
async def alter_user_scram_credentials(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest, version: int
) -> AlterUserScramCredentialsResponse:
    users = dict.fromkeys(
        [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    )
    if not ctx.authorized(AclOperation.ALTER):
        error = ClusterAuthorizationFailedError()
        return AlterUserScramCredentialsResponse(
            results=[AlterUserScramCredentialsResult(u, error.code, str(error)) for u in users]
        )
    # A user's mechanism may be named once in a request.
    named = Counter(
        [(d.name, d.mechanism) for d in request.deletions]
        + [(u.name, u.mechanism) for u in request.upsertions]
    )
    zk = ctx.services.zk
    results = []
    for user in users:
        result = AlterUserScramCredentialsResult(user, error_message=None)
        try:
            if not user:
                raise UnacceptableCredentialError("Username must not be empty")
            if any(n > 1 for (name, _), n in named.items() if name == user):
                raise DuplicateResourceError(
                    "A user credential cannot be altered twice in the same request"
                )
            entity = user_entity(user)
            config = dict(await zk.get_entity_configs(znodes.CONFIG_USERS, entity))
            for deletion in (d for d in request.deletions if d.name == user):
                mechanism = _mechanism(deletion.mechanism)
                if config.pop(mechanism, None) is None:
                    raise ResourceNotFoundError(
                        "Attempt to delete a user credential that does not exist"
                    )
            for upsertion in (u for u in request.upsertions if u.name == user):
                mechanism = _mechanism(upsertion.mechanism)
                if upsertion.iterations < MIN_ITERATIONS:
                    raise UnacceptableCredentialError("Too few iterations")
                if upsertion.iterations > MAX_ITERATIONS:
                    raise UnacceptableCredentialError("Too many iterations")
                if not upsertion.salt or not upsertion.salted_password:
                    raise UnacceptableCredentialError("Credential salt and password are required")
                config[mechanism] = ScramCredential.from_salted_password(
                    mechanism,
                    bytes(upsertion.salt),
                    bytes(upsertion.salted_password),
                    upsertion.iterations,
                ).encode()
            await zk.change_entity_config(znodes.CONFIG_USERS, entity, config)
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, str(exc)
        results.append(result)
    return AlterUserScramCredentialsResponse(results=results)


def _mechanism(number: int) -> str:
    found = MECHANISMS.get(number)
    if found is None:
        raise UnsupportedSaslMechanismError("Unknown SCRAM mechanism")
    return found
