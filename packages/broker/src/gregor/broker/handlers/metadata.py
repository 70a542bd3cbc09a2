"""Metadata and DescribeCluster: answered from the metadata cache.

Metadata as Kafka answers it: all topics for a null list (an empty one in v0), topics by id
from v10 on, unknown topics auto-created when both the request (v4+) and
`auto.create.topics.enable` allow it (reported LEADER_NOT_AVAILABLE until they have
leaders), the brokers that have an endpoint on the listener the request came in on.
"""

from __future__ import annotations

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.metadata_cache import ZERO_UUID
from gregor.broker.topic_names import is_internal, validate_topic_name
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.describe_cluster import (
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from gregor.protocol.apis.metadata import MetadataRequest, MetadataResponse, MetadataResponseTopic
from gregor.protocol.errors import ErrorCode, InvalidTopicError

BROKERS_ENDPOINT_TYPE = 1


@handles(ApiKey.METADATA, "0-12")
async def metadata(ctx: RequestContext, request: MetadataRequest, version: int) -> MetadataResponse:
    services = ctx.services
    cache = services.metadata_cache
    listener = ctx.listener
    response = MetadataResponse(
        brokers=cache.brokers_metadata(listener),
        cluster_id=services.cluster_id or None,
        controller_id=cache.controller_id,
    )
    if version >= 8 and version <= 10 and request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = ctx.authorized_operations(ResourceType.CLUSTER)
    topic_ops = request.include_topic_authorized_operations

    def describable(name: str) -> bool:
        return ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    # Topics the principal may not describe: left out of "all topics", refused when named.
    refused: set[str] = set()
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        names = [n for n in cache.topics() if describable(n)]
        unknown_ids: list[MetadataResponseTopic] = []
    else:
        names, unknown_ids = _requested_names(ctx, request)
        refused = {n for n in names if not describable(n)}
    allow_create = (version < 4 or request.allow_auto_topic_creation) and (
        services.config.auto_create_topics_enable
    )
    missing = [n for n in names if n not in refused and not cache.contains_topic(n)]
    if allow_create and missing and not ctx.authorized(AclOperation.CREATE):
        refused.update(
            n for n in missing if not ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, n)
        )
        missing = [n for n in missing if n not in refused]
    errors: dict[str, int] = dict.fromkeys(refused, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    creatable = []
    for name in missing:
        try:
            validate_topic_name(name)
        except InvalidTopicError:
            errors[name] = ErrorCode.INVALID_TOPIC_EXCEPTION
            continue
        if allow_create:
            creatable.append(name)
        else:
            errors[name] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if creatable:
        errors.update(await services.topic_creator.auto_create(creatable))

    for name in names:
        partitions = cache.partitions_metadata(
            name,
            listener,
            error_unavailable_endpoints=version == 0,
            error_unavailable_listeners=version >= 6,
        )
        if partitions is None or name in refused:
            response.topics.append(
                MetadataResponseTopic(
                    error_code=errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    name=name,
                    is_internal=is_internal(name),
                    topic_authorized_operations=ctx.authorized_operations(
                        ResourceType.TOPIC, name, topic_ops and name not in refused
                    ),
                )
            )
        else:
            response.topics.append(
                MetadataResponseTopic(
                    name=name,
                    topic_id=cache.topic_id(name),
                    is_internal=is_internal(name),
                    partitions=partitions,
                    topic_authorized_operations=ctx.authorized_operations(
                        ResourceType.TOPIC, name, topic_ops
                    ),
                )
            )
    response.topics.extend(unknown_ids)
    return response


def _requested_names(
    ctx: RequestContext, request: MetadataRequest
) -> tuple[list[str], list[MetadataResponseTopic]]:
    """The names asked for (ids resolved), and the answers for ids nobody knows."""
    names: list[str] = []
    unknown: list[MetadataResponseTopic] = []
    for topic in request.topics or ():
        if topic.name is not None:
            if topic.name not in names:
                names.append(topic.name)
            continue
        name = ctx.services.metadata_cache.topic_name(topic.topic_id)
        if name is None or topic.topic_id == ZERO_UUID:
            unknown.append(
                MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic.topic_id
                )
            )
        elif name not in names:
            names.append(name)
    return names, unknown


@handles(ApiKey.DESCRIBE_CLUSTER, "0-1")
async def describe_cluster(
    ctx: RequestContext, request: DescribeClusterRequest, version: int
) -> DescribeClusterResponse:
    if version >= 1 and request.endpoint_type != BROKERS_ENDPOINT_TYPE:
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="this ZooKeeper-mode cluster has no controller endpoints to describe",
            endpoint_type=request.endpoint_type,
        )
    cache = ctx.services.metadata_cache
    return DescribeClusterResponse(
        cluster_id=ctx.services.cluster_id,
        controller_id=cache.controller_id,
        brokers=[
            DescribeClusterBroker(node.id, node.host, node.port, node.rack)
            for node in cache.alive_nodes(ctx.listener)
        ],
        cluster_authorized_operations=ctx.authorized_operations(
            ResourceType.CLUSTER, requested=request.include_cluster_authorized_operations
        ),
    )
