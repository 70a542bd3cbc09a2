"""The KIP-848 consumer group APIs: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Each turns the request into a call of the group coordinator's `consumer` rules
(`coordinator.group.consumer_heartbeats`), with the cluster's topics (names, ids and
partition counts) from the metadata cache, and its answer into the response.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from gregor.broker.apis import RequestContext, handles
from gregor.broker.authorization import AclOperation, ResourceType
from gregor.broker.coordinator.group.consumer_group import Assignment, as_assignment
from gregor.broker.coordinator.group.consumer_heartbeats import Heartbeat
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.consumer_group_describe import (
    Assignment as DescribedAssignment,
)
from gregor.protocol.apis.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedGroup,
    Member,
)
from gregor.protocol.apis.consumer_group_describe import (
    TopicPartitions as DescribedTopicPartitions,
)
from gregor.protocol.apis.consumer_group_heartbeat import (
    Assignment as HeartbeatAssignment,
)
from gregor.protocol.apis.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from gregor.protocol.errors import ErrorCode


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, "0-1")
async def consumer_group_heartbeat(
    ctx: RequestContext, request: ConsumerGroupHeartbeatRequest, version: int
) -> ConsumerGroupHeartbeatResponse:
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ConsumerGroupHeartbeatResponse(
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            error_message="Group authorization failed.",
        )
    owned = (
        None
        if request.topic_partitions is None
        else as_assignment((t.topic_id, t.partitions) for t in request.topic_partitions)
    )
    heartbeat = Heartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        client_id=ctx.client_id,
        client_host=f"/{ctx.client_host}",
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=None
        if request.subscribed_topic_names is None
        else tuple(request.subscribed_topic_names),
        subscribed_topic_regex=request.subscribed_topic_regex,
        server_assignor=request.server_assignor,
        owned=owned,
    )
    result = await ctx.services.group_coordinator.consumer.heartbeat(
        heartbeat, ctx.services.metadata_cache.topic_sizes()
    )
    return ConsumerGroupHeartbeatResponse(
        error_code=result.error,
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=None
        if result.assignment is None
        else HeartbeatAssignment(
            [TopicPartitions(t, sorted(ps)) for t, ps in sorted(result.assignment.items())]
        ),
    )


def _described(assignment: Assignment, names: Mapping[uuid.UUID, str]) -> DescribedAssignment:
    return DescribedAssignment(
        [
            DescribedTopicPartitions(t, names.get(t, ""), sorted(ps))
            for t, ps in sorted(assignment.items())
        ]
    )


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, "0")
async def consumer_group_describe(
    ctx: RequestContext, request: ConsumerGroupDescribeRequest, version: int
) -> ConsumerGroupDescribeResponse:
    coordinator = ctx.services.group_coordinator
    names = {t: name for name, (t, _) in ctx.services.metadata_cache.topic_sizes().items()}
    described = []
    for group_id in request.group_ids:
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
            described.append(DescribedGroup(refused, "Group authorization failed.", group_id))
            continue
        error, message, group = coordinator.consumer.describe(group_id)
        if group is None:
            described.append(DescribedGroup(error, message, group_id))
            continue
        described.append(
            DescribedGroup(
                group_id=group_id,
                group_state=group.state,
                group_epoch=group.group_epoch,
                assignment_epoch=group.target_epoch,
                assignor_name=group.assignor_name,
                members=[
                    Member(
                        member_id=m.member_id,
                        instance_id=m.instance_id,
                        rack_id=m.rack_id,
                        member_epoch=m.member_epoch,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=list(m.subscribed_topic_names),
                        subscribed_topic_regex=m.subscribed_topic_regex,
                        assignment=_described(m.assigned, names),
                        target_assignment=_described(group.target.get(m.member_id, {}), names),
                    )
                    for m in group.members.values()
                ],
                authorized_operations=ctx.authorized_operations(
                    ResourceType.GROUP,
                    group_id,
                    request.include_authorized_operations and error == ErrorCode.NONE,
                ),
            )
        )
    return ConsumerGroupDescribeResponse(groups=described)
