"""CreateAcls, DescribeAcls and DeleteAcls, on the broker's `AclAuthorizer`: ALTER on the
cluster to change ACLs, DESCRIBE to list them (CLUSTER_AUTHORIZATION_FAILED otherwise), and
SECURITY_DISABLED on a broker without an authorizer, as Kafka answers."""

from __future__ import annotations

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)
from gregor.broker.security.acl_authorizer import AclAuthorizer
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.create_acls import (
    AclCreation,
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
)
from gregor.protocol.apis.delete_acls import (
    DeleteAclsFilter,
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from gregor.protocol.apis.describe_acls import (
    AclDescription,
    DescribeAclsRequest,
    DescribeAclsResource,
    DescribeAclsResponse,
)
from gregor.protocol.errors import ErrorCode
from gregor.protocol.errors import InvalidRequestError as Invalid

NO_AUTHORIZER = "No Authorizer is configured on the broker"
SPECIFIC_TYPES = (ResourceType.ANY, ResourceType.UNKNOWN)


def _authorizer(ctx: RequestContext) -> AclAuthorizer | None:
    authorizer = ctx.services.authorizer
    return authorizer if isinstance(authorizer, AclAuthorizer) else None


def _enum(enum: type, value: int, what: str) -> object:
    try:
        return enum(value)
    except ValueError:
        raise Invalid(f"unknown {what} {value}") from None


def _binding(creation: AclCreation) -> AclBinding:
    """The ACL a creation asks for; InvalidRequestError with Kafka's reason if it is not one."""
    resource_type = _enum(ResourceType, creation.resource_type, "resource type")
    pattern_type = _enum(PatternType, creation.resource_pattern_type, "pattern type")
    operation = _enum(AclOperation, creation.operation, "operation")
    permission = _enum(PermissionType, creation.permission_type, "permission type")
    assert isinstance(resource_type, ResourceType) and isinstance(pattern_type, PatternType)
    assert isinstance(operation, AclOperation) and isinstance(permission, PermissionType)
    if (
        resource_type in SPECIFIC_TYPES
        or pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED)
        or operation in (AclOperation.ANY, AclOperation.UNKNOWN)
        or permission in (PermissionType.ANY, PermissionType.UNKNOWN)
    ):
        raise Invalid("ACL binding contains unknown elements")
    if not creation.resource_name:
        raise Invalid("Invalid empty resource name specified")
    if resource_type == ResourceType.CLUSTER and creation.resource_name != CLUSTER_NAME:
        raise Invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    kind, sep, name = creation.principal.partition(":")
    if not sep or not kind or not name:
        raise Invalid(f"Could not parse principal from `{creation.principal}`")
    return AclBinding(
        ResourcePattern(resource_type, creation.resource_name, pattern_type),
        AccessControlEntry(creation.principal, creation.host, operation, permission),
    )


def _filter(f: DescribeAclsRequest | DeleteAclsFilter) -> AclBindingFilter:
    resource_type = _enum(ResourceType, f.resource_type_filter, "resource type")
    pattern_type = _enum(PatternType, f.pattern_type_filter, "pattern type")
    operation = _enum(AclOperation, f.operation, "operation")
    permission = _enum(PermissionType, f.permission_type, "permission type")
    assert isinstance(resource_type, ResourceType) and isinstance(pattern_type, PatternType)
    assert isinstance(operation, AclOperation) and isinstance(permission, PermissionType)
    if 0 in (resource_type, pattern_type, operation, permission):  # an UNKNOWN element
        raise Invalid("The filter contains unknown elements")
    return AclBindingFilter(
        resource_type,
        f.resource_name_filter,
        pattern_type,
        f.principal_filter,
        f.host_filter,
        operation,
        permission,
    )


@handles(ApiKey.CREATE_ACLS, "0-3")
async def create_acls(
    ctx: RequestContext, request: CreateAclsRequest, version: int
) -> CreateAclsResponse:
    authorizer = _authorizer(ctx)

    def everyone(error: ErrorCode, message: str) -> CreateAclsResponse:
        return CreateAclsResponse(
            results=[AclCreationResult(error, message) for _ in request.creations]
        )

    if authorizer is None:
        return everyone(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not ctx.authorized(AclOperation.ALTER):
        return everyone(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    results: list[AclCreationResult] = []
    valid: list[AclBinding] = []
    for creation in request.creations:
        try:
            valid.append(_binding(creation))
        except Invalid as exc:
            results.append(AclCreationResult(ErrorCode.INVALID_REQUEST, str(exc)))
        else:
            results.append(AclCreationResult(ErrorCode.NONE, None))
    await authorizer.create(valid)
    return CreateAclsResponse(results=results)


@handles(ApiKey.DESCRIBE_ACLS, "0-3")
async def describe_acls(
    ctx: RequestContext, request: DescribeAclsRequest, version: int
) -> DescribeAclsResponse:
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return DescribeAclsResponse(
            error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER
        )
    if not ctx.authorized(AclOperation.DESCRIBE):
        return DescribeAclsResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message="Cluster authorization failed.",
        )
    try:
        selected = _filter(request)
    except Invalid as exc:
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc))
    by_pattern: dict[ResourcePattern, list[AclDescription]] = {}
    for binding in authorizer.bindings(selected):
        e = binding.entry
        by_pattern.setdefault(binding.pattern, []).append(
            AclDescription(e.principal, e.host, e.operation, e.permission)
        )
    resources = [
        DescribeAclsResource(p.resource_type, p.name, p.pattern_type, acls)
        for p, acls in sorted(by_pattern.items(), key=lambda item: _order(item[0]))
    ]
    return DescribeAclsResponse(error_message=None, resources=resources)


def _order(pattern: ResourcePattern) -> tuple[int, str, int]:
    return pattern.resource_type, pattern.name, pattern.pattern_type


@handles(ApiKey.DELETE_ACLS, "0-3")
async def delete_acls(
    ctx: RequestContext, request: DeleteAclsRequest, version: int
) -> DeleteAclsResponse:
    authorizer = _authorizer(ctx)

    def everyone(error: ErrorCode, message: str) -> DeleteAclsResponse:
        return DeleteAclsResponse(
            filter_results=[DeleteAclsFilterResult(error, message) for _ in request.filters]
        )

    if authorizer is None:
        return everyone(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not ctx.authorized(AclOperation.ALTER):
        return everyone(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    filters: list[AclBindingFilter | Invalid] = []
    for f in request.filters:
        try:
            filters.append(_filter(f))
        except Invalid as exc:
            filters.append(exc)
    valid = [f for f in filters if isinstance(f, AclBindingFilter)]
    removed = iter(await authorizer.delete(valid))
    results = []
    for parsed in filters:
        if isinstance(parsed, Invalid):
            results.append(DeleteAclsFilterResult(ErrorCode.INVALID_REQUEST, str(parsed)))
            continue
        matching = [
            DeleteAclsMatchingAcl(
                error_message=None,
                resource_type=b.pattern.resource_type,
                resource_name=b.pattern.name,
                pattern_type=b.pattern.pattern_type,
                principal=b.entry.principal,
                host=b.entry.host,
                operation=b.entry.operation,
                permission_type=b.entry.permission,
            )
            for b in next(removed)
        ]
        results.append(DeleteAclsFilterResult(ErrorCode.NONE, None, matching))
    return DeleteAclsResponse(filter_results=results)
