"""Metadata and DescribeCluster: answered from the metadata cache.

Metadata as Kafka answers it: all topics for a null list (an empty one in v0), topics by id
from v10 on, unknown topics auto-created when both the request (v4+) and
`auto.create.topics.enable` allow it (reported LEADER_NOT_AVAILABLE until they have
leaders), the brokers that have an endpoint on the listener the request came in on.
"""

from __future__ import annotations

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import CLUSTER_AUTHORIZED, NOT_REQUESTED, TOPIC_AUTHORIZED
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
        response.cluster_authorized_operations = CLUSTER_AUTHORIZED
    topic_ops = TOPIC_AUTHORIZED if request.include_topic_authorized_operations else NOT_REQUESTED

    requested = request.topics
    if requested is None or (version == 0 and not requested):
        names = cache.topics()
        unknown_ids: list[MetadataResponseTopic] = []
    else:
        names, unknown_ids = _requested_names(ctx, request)
    allow_create = (version < 4 or request.allow_auto_topic_creation) and (
        services.config.auto_create_topics_enable
    )
    missing = [n for n in names if not cache.contains_topic(n)]
    errors: dict[str, int] = {}
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
        if partitions is None:
            response.topics.append(
                MetadataResponseTopic(
                    error_code=errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    name=name,
                    is_internal=is_internal(name),
                    topic_authorized_operations=topic_ops,
                )
            )
        else:
            response.topics.append(
                MetadataResponseTopic(
                    name=name,
                    topic_id=cache.topic_id(name),
                    is_internal=is_internal(name),
                    partitions=partitions,
                    topic_authorized_operations=topic_ops,
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
        cluster_authorized_operations=(
            CLUSTER_AUTHORIZED if request.include_cluster_authorized_operations else NOT_REQUESTED
        ),
    )
